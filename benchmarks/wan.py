"""WAN benchmark (issue 34): the networked fit with every role in its own network namespace, links shaped with tc.

    nice -n 10 python benchmarks/wan.py --rows 10000,100000 --json docs/data/wan.json   # needs root, ip, tc
    python benchmarks/wan.py --rows "" --json docs/data/wan.json                        # the table from the JSON

The same run as benchmarks/scale.py (one ``vfl coordinator``, parties alice with 10 features + the label and bob
with 10 features, 2048-bit Paillier keys, ``--mechanism none`` so the model is checked against numpy least
squares), but across hosts as docs/deployment.md sets them up: CURVE keys from ``vfl keys --bundle``, signing
identities, and each process in its own Linux network namespace (``ip netns``). Each party has a point-to-point
veth link to the coordinator's namespace; every link is shaped in both directions by a ``tbf`` qdisc on each of
its two ends (rate ``R``), so a party's uplink and downlink are ``R`` each and the coordinator's link to each party
is its own. The round-trip time ``RTT`` is added by ``tc ... netem delay RTT/2`` on both ends where the kernel has
``sch_netem``; where it has not (this machine's kernel: "Specified qdisc kind is unknown"), the coordinator's
namespace runs benchmarks/delay_line.py in front of the coordinator, which forwards every byte RTT/2 after it
arrived in each direction (the JSON records which was used, ``delay_by``).

Per run: wall time from launch until all three processes exited; CPU of each role including its process-pool
workers (``os.wait4``); peak RSS (VmHWM); and the **bytes each role sent, from the kernel**: the ``tx_bytes``
counter of the role's veth interface(s) in ``/sys/class/net`` of its namespace (payload plus TCP/IP/Ethernet
headers, CURVE framing, acknowledgements; read before and after the run), also per row. Links: ``unshaped``
(veth at memory speed; what the WAN adds is the difference), ``100mbit-20ms`` and ``1gbit-2ms``.

Fails with one line and exit status 2 unless it runs as root with ``ip`` and ``tc`` and can create a namespace and
a ``tbf`` qdisc; nothing is silently skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import scale  # noqa: E402  (benchmarks/scale.py: data, RSS sampling, exactness)

#: link name -> (rate in Mbit/s or None for unshaped, round-trip time in ms)
LINKS = {"unshaped": (None, 0.0), "100mbit-20ms": (100, 20.0), "1gbit-2ms": (1000, 2.0)}
ROLES = ("coordinator", "alice", "bob")
PARTIES = ("alice", "bob")
PORT = 5555


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _must(argv: list[str]) -> str:
    r = _run(argv)
    if r.returncode != 0:
        raise SystemExit(f"wan.py: `{' '.join(argv)}` failed: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def preflight() -> bool:
    """Exit (status 2, one line) unless namespaces and tbf work here; return whether netem is available."""
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        sys.exit(f"wan.py: needs iproute2's {' and '.join(missing)} (apt-get install iproute2); not found on PATH")
    if os.geteuid() != 0:
        sys.exit("wan.py: needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create network namespaces and qdiscs")
    probe = f"vflwan{secrets.token_hex(3)}"
    made = _run(["ip", "netns", "add", probe])
    if made.returncode != 0:
        sys.exit(f"wan.py: cannot create a network namespace: {made.stderr.strip()}")
    try:
        for argv in (["ip", "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                     ["ip", "-n", probe, "link", "set", "v0", "up"]):
            r = _run(argv)
            if r.returncode != 0:
                sys.exit(f"wan.py: cannot create a veth link: {r.stderr.strip()}")
        tbf = _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "v0", "root", "tbf", "rate",
                    "100mbit", "burst", "64kb", "latency", "100ms"])
        if tbf.returncode != 0:
            sys.exit(f"wan.py: the kernel refuses a tbf qdisc (rate shaping): {tbf.stderr.strip()}")
        netem = _run(["ip", "netns", "exec", probe, "tc", "qdisc", "replace", "dev", "v0", "root", "netem",
                      "delay", "1ms"])
        return netem.returncode == 0
    finally:
        _run(["ip", "netns", "del", probe])


@dataclass
class Topology:
    """Namespaces ``TAG-coordinator``, ``TAG-alice``, ``TAG-bob``; party k's link: 10.79.k.1 (coordinator side,
    interface ``to-NAME``) -- 10.79.k.2 (the party's ``eth0``)."""

    tag: str
    rate_mbit: int | None
    rtt_ms: float
    netem: bool

    def ns(self, role: str) -> str:
        return f"{self.tag}-{role}"

    def address(self, party: str, side: str) -> str:
        return f"10.79.{PARTIES.index(party) + 1}.{1 if side == 'coordinator' else 2}"

    def interfaces(self) -> dict[str, list[tuple[str, str]]]:
        """role -> [(namespace, interface)] whose tx counters are the role's sent bytes."""
        out = {"coordinator": [(self.ns("coordinator"), f"to-{p}") for p in PARTIES]}
        out.update({p: [(self.ns(p), "eth0")] for p in PARTIES})
        return out

    def up(self) -> None:
        for role in ROLES:
            _must(["ip", "netns", "add", self.ns(role)])
            _must(["ip", "-n", self.ns(role), "link", "set", "lo", "up"])
        c = self.ns("coordinator")
        for p in PARTIES:
            _must(["ip", "-n", c, "link", "add", f"to-{p}", "type", "veth", "peer", "name", "eth0", "netns",
                   self.ns(p)])
            for ns, dev, side in ((c, f"to-{p}", "coordinator"), (self.ns(p), "eth0", "party")):
                _must(["ip", "-n", ns, "addr", "add", f"{self.address(p, side)}/30", "dev", dev])
                _must(["ip", "-n", ns, "link", "set", dev, "up"])
                self._shape(ns, dev)

    def _shape(self, ns: str, dev: str) -> None:
        if self.rate_mbit is None:
            return
        rate = f"{self.rate_mbit}mbit"
        # burst: 2 ms of the rate (at least 64 KiB, one GSO segment); queue: 200 ms of the rate
        burst = max(64 * 1024, self.rate_mbit * 1_000_000 // 8 // 500)
        if self.netem:
            _must(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay",
                   f"{self.rtt_ms / 2}ms", "rate", rate, "limit", "100000"])
        else:
            _must(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                   "burst", str(burst), "latency", "200ms"])

    def down(self) -> None:
        for role in ROLES:
            _run(["ip", "netns", "del", self.ns(role)])

    def tx_bytes(self) -> dict[str, int]:
        """Bytes each role's interfaces have sent (the kernel's counters, read inside each namespace)."""
        out = {}
        for role, ifaces in self.interfaces().items():
            out[role] = sum(int(_must(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/statistics/tx_bytes"]))
                            for ns, dev in ifaces)
        return out

    def exec(self, role: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(role), *argv]


def _keys(workdir: Path) -> Path:
    """CURVE certificates and signing identities as docs/deployment.md makes them (one bundle per organisation)."""
    keyroom = workdir / "keyroom"
    if not (keyroom / "bundle-coordinator").exists():
        shutil.rmtree(keyroom, ignore_errors=True)
        _must([sys.executable, "-m", "vfl.cli", "keys", "--out", str(keyroom), "--names", ",".join(PARTIES),
               "--bundle", ",".join((*PARTIES, "coordinator"))])
    return keyroom


def _uses_delay_line(top: Topology) -> bool:
    return not top.netem and top.rtt_ms > 0


def _commands(top: Topology, paths: dict, keyroom: Path, out: Path, timeout: float,
              key_bits: int) -> dict[str, list[str]]:
    vfl = [sys.executable, "-m", "vfl.cli"]
    bind = f"tcp://{'127.0.0.1' if _uses_delay_line(top) else '0.0.0.0'}:{PORT}"   # CURVE on every link
    argv = {"coordinator": [*vfl, "coordinator", "--parties", "2", "--bind", bind, "--out",
                            str(out), "--key-bits", str(key_bits), "--mechanism", "none", "--timeout", str(timeout),
                            "--curve-dir", str(keyroom / "bundle-coordinator")]}
    features = {"alice": ["--features", "a0:a9", "--label", "y"], "bob": ["--features", "b0:b9"]}
    for p in PARTIES:
        bundle = str(keyroom / f"bundle-{p}")
        argv[p] = [*vfl, "party", "--name", p, "--data", str(paths[p]), *features[p], "--connect",
                   f"tcp://{top.address(p, 'coordinator')}:{PORT}", "--curve-dir", bundle, "--identity-dir", bundle,
                   "--bounds", str(paths["bounds"]), "--rows-aligned", "--no-progress", "--timeout", str(timeout),
                   "--allow-mechanisms", "none"]
    return {role: top.exec(role, a) for role, a in argv.items()}


def _start_delay_line(top: Topology, workdir: Path) -> subprocess.Popen | None:
    if not _uses_delay_line(top):
        return None
    listen = [a for p in PARTIES for a in ("--listen", f"{top.address(p, 'coordinator')}:{PORT}")]
    line = subprocess.Popen(top.exec("coordinator", [sys.executable, str(HERE / "delay_line.py"), *listen, "--to",
                                                     f"127.0.0.1:{PORT}", "--delay-ms", str(top.rtt_ms / 2)]),
                            stdout=subprocess.PIPE, stderr=open(workdir / "delay_line.log", "w"), text=True)
    assert line.stdout is not None
    if line.stdout.readline().strip() != "delay line ready":
        raise SystemExit(f"wan.py: the delay line did not start (see {workdir / 'delay_line.log'})")
    return line


def _stop(p: subprocess.Popen) -> float:
    """SIGTERM, reap, and return the process's CPU seconds."""
    p.send_signal(signal.SIGTERM)
    _, _, usage = os.wait4(p.pid, 0)
    return usage.ru_utime + usage.ru_stime


def run_once(n: int, link: str, workdir: Path, *, netem: bool, key_bits: int, timeout: float) -> dict:
    """One fit over one shaped topology (set up and torn down here, also on failure)."""
    paths = scale.write_data(workdir / f"n{n}", n)
    keyroom = _keys(workdir)
    rate, rtt = LINKS[link]
    top = Topology(f"vw{secrets.token_hex(2)}", rate, rtt, netem)
    out = workdir / f"model_{link}_{n}.json"
    out.unlink(missing_ok=True)
    try:
        top.up()
        line = _start_delay_line(top, workdir)
        before = top.tx_bytes()
        logs = {r: open(workdir / f"{r}_{link}_{n}.log", "w") for r in ROLES}
        env = {**os.environ, "VFL_LEDGER": str(workdir / "ledgers")}   # a throwaway ledger, never the user's
        load_start = os.getloadavg()[0]
        start = time.perf_counter()
        procs = {r: subprocess.Popen(a, stdout=logs[r], stderr=subprocess.STDOUT, env=env)
                 for r, a in _commands(top, paths, keyroom, out, timeout, key_bits).items()}
        sampler = scale.RssSampler(procs)
        cpu: dict[str, float] = {}
        while len(cpu) < len(procs):
            sampler.sample()
            for r, p in procs.items():
                if r not in cpu:
                    pid, status, usage = os.wait4(p.pid, os.WNOHANG)   # the role and its reaped pool workers
                    if pid == p.pid:
                        p.returncode = os.waitstatus_to_exitcode(status)
                        cpu[r] = usage.ru_utime + usage.ru_stime
            time.sleep(0.2)
        wall = time.perf_counter() - start
        after = top.tx_bytes()
        line_cpu = _stop(line) if line is not None else 0.0
    finally:
        top.down()
    codes = {r: p.returncode for r, p in procs.items()}
    sent = {r: after[r] - before[r] for r in ROLES}
    result = {"n": n, "link": link, "rate_mbit": rate, "rtt_ms": rtt,
              "delay_by": "netem" if netem else ("delay_line.py" if rtt else "none"),
              "code": scale.code_version(), "key_bits": key_bits,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_1min_start_end": [load_start, os.getloadavg()[0]], "wall_s": wall, "exit_codes": codes,
              "cpu_s": cpu, "cpu_s_total": sum(cpu.values()), "delay_line_cpu_s": line_cpu,
              "peak_rss_mb": {k: v / 2**20 for k, v in sampler.peak.items()},
              "sent_bytes": sent, "sent_bytes_per_row": {r: b / n for r, b in sent.items()}}
    if any(codes.values()):
        raise SystemExit(f"wan.py: the {link} run at n={n} failed: exit codes {codes} (logs in {workdir})")
    result["max_abs_diff_vs_lstsq"] = scale.exactness(paths, out)
    return result


def markdown(runs: list[dict]) -> str:
    """The docs' table: one row per (n, link)."""
    lines = ["| n | link | load (1 min) | wall (s) | CPU s coordinator / alice / bob | sent MB coordinator / alice / "
             "bob | sent bytes per row coordinator / alice / bob | peak RSS MB coordinator / alice / bob | "
             "max abs diff vs lstsq |",
             "|---:|---|---:|---:|---|---|---|---|---:|"]
    for r in runs:
        cpu, sent, per, rss = r["cpu_s"], r["sent_bytes"], r["sent_bytes_per_row"], r["peak_rss_mb"]
        load = "-".join(f"{v:.0f}" for v in r["load_1min_start_end"])
        lines.append(f"| {r['n']:,} | {r['link']} | {load} | {r['wall_s']:.1f} | "
                     + " / ".join(f"{cpu[k]:.1f}" for k in ROLES) + " | "
                     + " / ".join(f"{sent[k] / 1e6:.1f}" for k in ROLES) + " | "
                     + " / ".join(f"{per[k]:,.0f}" for k in ROLES) + " | "
                     + " / ".join(f"{rss[k]:.0f}" for k in ROLES) + f" | {r['max_abs_diff_vs_lstsq']:.1e} |")
    return "\n".join(lines)


#: issue 34's outside measurement (SPU 0.9.5, run by the issue's author on this machine, not by this benchmark):
#: CPU per row between 10^4 and 10^5 rows x (10 + 10) of the whole vertical linear fit, vfl.fit vs SPU CHEETAH
ISSUE_MARGINAL_CPU_US = {"vfl.fit (in one process)": 234.0, "SPU CHEETAH 2PC": 16.0}


def comparison_text(runs: list[dict]) -> str:
    """What the table says against SPU: measured numbers from the runs, the issue's numbers labelled as such."""
    by = {(r["n"], r["link"]): r for r in runs}
    lines = []
    for link in LINKS:
        lo, hi = by.get((10_000, link)), by.get((100_000, link))
        if lo is None or hi is None:
            continue
        marginal = 1e6 * (hi["cpu_s_total"] - lo["cpu_s_total"]) / (hi["n"] - lo["n"])
        per_row = sum(hi["sent_bytes"].values()) / hi["n"]
        lines.append(f"* {link}: CPU per row between 10^4 and 10^5 rows {marginal:.0f} µs (all three processes); "
                     f"{per_row:,.0f} bytes per row sent in all at 10^5 (coordinator "
                     f"{hi['sent_bytes_per_row']['coordinator']:,.0f}, alice {hi['sent_bytes_per_row']['alice']:,.0f}"
                     f", bob {hi['sent_bytes_per_row']['bob']:,.0f})")
    outside = ", ".join(f"{k} {v:.0f} µs" for k, v in ISSUE_MARGINAL_CPU_US.items())
    lines.append(f"* outside measurement (issue 34, not re-run here): CPU per row between 10^4 and 10^5 rows {outside}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="10000,100000", help="comma-separated row counts; empty: only the table")
    ap.add_argument("--links", default=",".join(LINKS), help=f"comma-separated, of {', '.join(LINKS)}")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--timeout", type=float, default=1800.0, help="the roles' --timeout (s)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/vfl-wan"), help="data, keys and logs (not committed)")
    ap.add_argument("--json", type=Path, help="write (or, with --rows '', read) the runs here")
    args = ap.parse_args()
    sizes = [int(v) for v in args.rows.split(",") if v.strip()]
    links = [v for v in args.links.split(",") if v.strip()]
    unknown = sorted(set(links) - set(LINKS))
    if unknown:
        sys.exit(f"wan.py: unknown link {unknown[0]!r}; choose from {', '.join(LINKS)}")
    if not sizes:
        if args.json is None or not args.json.exists():
            sys.exit("wan.py: --rows '' prints the table of an existing --json file")
        runs = json.loads(args.json.read_text())["runs"]
        print(markdown(runs) + "\n\n" + comparison_text(runs))
        return
    netem = preflight()
    print(f"delay by {'netem' if netem else 'benchmarks/delay_line.py (the kernel has no sch_netem)'}; rate by tc",
          flush=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    runs = []
    for n in sizes:
        for link in links:
            runs.append(run_once(n, link, args.workdir, netem=netem, key_bits=args.key_bits, timeout=args.timeout))
            r = runs[-1]
            print(f"n={n:,} {link}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s_total']:.1f} s, sent "
                  f"{sum(r['sent_bytes'].values()) / 1e6:.1f} MB, diff {r['max_abs_diff_vs_lstsq']:.1e}", flush=True)
    print(markdown(runs))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps({"command": "nice -n 10 python " + " ".join(sys.argv), "runs": runs}, indent=1)
                       + "\n")
        tmp.replace(args.json)


if __name__ == "__main__":
    main()
