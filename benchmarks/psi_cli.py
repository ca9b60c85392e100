"""Row alignment through the CLI (issue 34): CPU, wall and peak RSS of every process while the PSI ring runs.

    nice -n 10 python benchmarks/psi_cli.py --ids 100000,1000000 --json docs/data/psi_cli.json
    python benchmarks/psi_cli.py --ids "" --json docs/data/psi_cli.json          # the table from the JSON

One ``vfl coordinator`` and two ``vfl party --id id`` processes on loopback ZeroMQ, with signing identities (the
ring's signed counts, docs/psi.md); each party holds ``n`` random IDs (``--overlap`` of them common, each file
shuffled) and one feature column (alice also the label), ``--mechanism none``. Measured from the OS, per process:
CPU seconds and peak RSS (VmHWM) **when the PSI phase ended** (the moment both parties printed their ``row
alignment:`` line; the CPU then is the process's own, sampled from /proc every 0.2 s, the peak its kernel
high-water mark so far), and the same at the end of the whole run (CPU from ``os.wait4``, including pool workers).
The secure products after the alignment are on ``n * overlap`` rows and one column per party, so they are a small
part of the whole.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import scale  # noqa: E402  (RSS sampling, /proc CPU, git describe)

ROLES = ("coordinator", "alice", "bob")


def write_data(folder: Path, n: int, overlap: float, seed: int = 0) -> dict[str, Path]:
    """alice.csv (id, a0, y) and bob.csv (id, b0): n IDs each, ``overlap * n`` common, rows shuffled per file."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    paths = {"alice": folder / "alice.csv", "bob": folder / "bob.csv", "bounds": folder / "bounds.toml"}
    if (folder / "complete").exists():
        return paths
    rng = np.random.default_rng(seed)
    common = int(round(overlap * n))
    pool = rng.choice(2**62, size=2 * n - common, replace=False)
    ids = {"alice": pool[:n], "bob": np.concatenate([pool[:common], pool[n:]])}
    for party, column in (("alice", "a0"), ("bob", "b0")):
        own = rng.permutation(ids[party])
        x = rng.uniform(-1, 1, n)
        with open(paths[party], "w") as fh:
            fh.write(f"id,{column}" + (",y\n" if party == "alice" else "\n"))
            if party == "alice":
                fh.writelines(f"u{i:x},{v:.6f},{v / 2:.6f}\n" for i, v in zip(own, x, strict=True))
            else:
                fh.writelines(f"u{i:x},{v:.6f}\n" for i, v in zip(own, x, strict=True))
    paths["bounds"].write_text("[bounds]\na0 = [-1.0, 1.0]\nb0 = [-1.0, 1.0]\ny = [-1.0, 1.0]\n")
    (folder / "complete").write_text(f"{n} {overlap}\n")
    return paths


def _aligned(log: Path) -> bool:
    try:
        return "row alignment:" in log.read_text(errors="replace")
    except FileNotFoundError:
        return False


def _kill_unreaped(procs: dict[str, subprocess.Popen]) -> None:
    """SIGKILL every role not yet reaped, without reaping it (``Popen.kill`` polls first and so may reap a role
    that just exited, after which its ``os.wait4`` raised ChildProcessError): an unreaped pid is never reused."""
    for p in procs.values():
        if p.returncode is None:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:   # pragma: no cover - not possible while unreaped
                pass


def _last_line(log: Path) -> str:
    """The last non-empty line of a role's log (its one-line error), bounded."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][:500] if lines else "nothing printed"


def run_once(n: int, overlap: float, workdir: Path, *, key_bits: int, timeout: float,
             until_aligned: bool = False) -> dict:
    from vfl.demo import free_port
    from vfl.secure.identity import write_identities

    paths = write_data(workdir / f"n{n}", n, overlap)
    identities = workdir / "identities"
    if not (identities / "alice.sign.secret").exists():
        write_identities(identities, ["alice", "bob"])
    url = f"tcp://127.0.0.1:{free_port()}"
    (workdir / f"m_{n}.json").unlink(missing_ok=True)
    vfl = [sys.executable, "-m", "vfl.cli"]
    common = ["--connect", url, "--id", "id", "--bounds", str(paths["bounds"]), "--identity-dir", str(identities),
              "--no-progress", "--timeout", str(timeout), "--allow-mechanisms", "none"]
    argv = {"coordinator": [*vfl, "coordinator", "--parties", "2", "--bind", url, "--out", str(workdir / f"m_{n}.json"),
                            "--key-bits", str(key_bits), "--mechanism", "none", "--timeout", str(timeout)],
            "alice": [*vfl, "party", "--name", "alice", "--data", str(paths["alice"]), "--features", "a0", "--label",
                      "y", *common],
            "bob": [*vfl, "party", "--name", "bob", "--data", str(paths["bob"]), "--features", "b0", *common]}
    logs = {r: workdir / f"{r}_{n}.log" for r in ROLES}
    env = {**os.environ, "VFL_LEDGER": str(workdir / "ledgers"), "PYTHONUNBUFFERED": "1"}
    load_start = os.getloadavg()[0]
    code, niceness = scale.code_version(), (f"nice -n {os.nice(0)} " if os.nice(0) else "")   # the tree measured
    start = time.perf_counter()
    procs = {r: subprocess.Popen(argv[r], stdout=open(logs[r], "w"), stderr=subprocess.STDOUT, env=env)
             for r in ROLES}
    sampler = scale.RssSampler(procs)
    cpu: dict[str, float] = {}
    at_alignment: dict | None = None
    failed = ""   # the first role that exited non-zero
    while len(cpu) < len(procs):
        sampler.sample()
        if at_alignment is None and all(_aligned(logs[p]) for p in ("alice", "bob")):
            at_alignment = {"wall_s": time.perf_counter() - start, "cpu_s": dict(sampler.own_cpu),
                            "peak_rss_mb": {k: v / 2**20 for k, v in sampler.peak.items()}}
            if until_aligned:   # measured what this run is for: end it (the secure products are not timed)
                for p in procs.values():
                    p.terminate()
                for p in procs.values():
                    p.wait()
                break
        for r, p in procs.items():
            if r not in cpu:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid == p.pid:
                    p.returncode = os.waitstatus_to_exitcode(status)
                    cpu[r] = usage.ru_utime + usage.ru_stime
                    if p.returncode != 0:   # one role failed: the others would wait out their --timeout
                        failed = failed or r
                        _kill_unreaped(procs)
        time.sleep(0.2)
    codes = {r: p.returncode for r, p in procs.items()}
    if until_aligned and at_alignment is not None:
        codes = {r: 0 for r in procs}   # ended by the benchmark after the alignment (SIGTERM)
    if any(codes.values()) or at_alignment is None:
        why = f"{failed} exited {codes[failed]} ({_last_line(logs[failed])}); " if failed else ""
        raise SystemExit(f"psi_cli.py: the run at n={n} failed: {why}exit codes {codes} (logs in {workdir})")
    said = re.search(r"row alignment \(private set intersection\): (\d+) row IDs common",
                     logs["coordinator"].read_text())
    if said is None or int(said.group(1)) != int(round(overlap * n)):
        raise SystemExit(f"psi_cli.py: the coordinator found {said and said.group(1)} common IDs, not "
                         f"{int(round(overlap * n))}")
    return {"ids_per_party": n, "overlap": overlap, "common": int(round(overlap * n)), "code": code,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_1min_start_end": [load_start, os.getloadavg()[0]], "key_bits": key_bits,
            "command": niceness + "python " + " ".join(sys.argv), "at_alignment": at_alignment,
            "whole_run": None if until_aligned else {"wall_s": time.perf_counter() - start, "cpu_s": cpu,
                                                     "peak_rss_mb": {k: v / 2**20 for k, v in sampler.peak.items()}}}


def markdown(runs: list[dict]) -> str:
    lines = ["| IDs per party | common | load (1 min) | PSI wall (s) | PSI CPU s coordinator / alice / bob | PSI CPU µs"
             " per ID per party | peak RSS MB at alignment coordinator / alice / bob | whole run: wall (s), peak"
             " RSS MB coordinator / alice / bob |",
             "|---:|---:|---:|---:|---|---:|---|---|"]
    for r in runs:
        a, w = r["at_alignment"], r["whole_run"]
        per_id = 1e6 * sum(a["cpu_s"].values()) / (2 * r["ids_per_party"])
        load = "-".join(f"{v:.0f}" for v in r["load_1min_start_end"])
        lines.append(f"| {r['ids_per_party']:,} | {r['common']:,} | {load} | {a['wall_s']:.1f} | "
                     + " / ".join(f"{a['cpu_s'][k]:.1f}" for k in ROLES) + f" | {per_id:.0f} | "
                     + " / ".join(f"{a['peak_rss_mb'][k]:.0f}" for k in ROLES) + " | "
                     + ("ended after the alignment" if w is None else f"{w['wall_s']:.1f}, "
                        + " / ".join(f"{w['peak_rss_mb'][k]:.0f}" for k in ROLES)) + " |")
    return "\n".join(lines)


def scaling_text(runs: list[dict], target_ids: int = 10**7) -> str:
    """Per-ID slopes between the two largest runs and the linear extrapolation to ``target_ids`` per party (an
    estimate, labelled as such: today's ring sends each list as one message, so it was not run there)."""
    lo, hi = sorted(runs, key=lambda r: r["ids_per_party"])[-2:]
    dn = (hi["ids_per_party"] - lo["ids_per_party"]) / 1e6
    peak = [max(r["at_alignment"]["peak_rss_mb"].values()) for r in (lo, hi)]
    slope = (peak[1] - peak[0]) / dn
    cpu = [max(r["at_alignment"]["cpu_s"].values()) for r in (lo, hi)]
    cpu_slope = (cpu[1] - cpu[0]) / dn
    scale = (target_ids - hi["ids_per_party"]) / 1e6
    return (f"Between {lo['ids_per_party']:,} and {hi['ids_per_party']:,} IDs per party the largest process's peak "
            f"RSS at alignment grows by {slope:.0f} MB per million IDs and the busiest process's CPU by "
            f"{cpu_slope:.0f} CPU-s per million IDs; extrapolated linearly (an estimate, not a run) to "
            f"{target_ids:,} IDs per party: {peak[1] + scale * slope:,.0f} MB peak RSS and "
            f"{cpu[1] + scale * cpu_slope:,.0f} CPU-s in the busiest process.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", default="100000,1000000", help="comma-separated IDs per party; empty: only the table")
    ap.add_argument("--overlap", type=float, default=0.5, help="fraction of each party's IDs held by both")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/vfl-psi-cli"))
    ap.add_argument("--json", type=Path, help="write the runs here (runs of other sizes already in it are kept)")
    ap.add_argument("--until-aligned", action="store_true",
                    help="end each run once the alignment is done (the secure products after it are not measured)")
    args = ap.parse_args()
    sizes = [int(v) for v in args.ids.split(",") if v.strip()]
    if not sizes:
        if args.json is None or not args.json.exists():
            sys.exit("psi_cli.py: --ids '' prints the table of an existing --json file")
        runs = json.loads(args.json.read_text())["runs"]
        print(markdown(runs) + ("\n\n" + scaling_text(runs) if len(runs) > 1 else ""))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    for n in sizes:
        runs.append(run_once(n, args.overlap, args.workdir, key_bits=args.key_bits, timeout=args.timeout,
                             until_aligned=args.until_aligned))
        print(markdown(runs[-1:]).splitlines()[-1], flush=True)
        if args.json is not None:   # after every size: a long run that fails later keeps what it measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            tmp = args.json.with_suffix(f".{os.getpid()}.tmp")
            # read at write time: a run of another size writing the same file meanwhile is kept
            kept = json.loads(args.json.read_text())["runs"] if args.json.exists() else []
            done = {r["ids_per_party"] for r in runs}
            every = sorted([r for r in kept if r["ids_per_party"] not in done] + runs,
                           key=lambda r: r["ids_per_party"])
            tmp.write_text(json.dumps({"runs": every}, indent=1) + "\n")
            tmp.replace(args.json)
    print(markdown(runs))


if __name__ == "__main__":
    main()
