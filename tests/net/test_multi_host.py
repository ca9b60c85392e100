"""Issue 32: vfl across hosts -- every role in its own Linux network namespace, with its own address and folder.

The namespaces (``ip netns``) are joined by veth pairs to a bridge that lives in a namespace of its own, so the
test touches no interface of the machine it runs on; all are removed at the end, also on failure. Each host has
its own folder (its working directory, its ``$VFL_LEDGER``) and sees only the key files docs/deployment.md says it
gets: the files reach it by the guide's own ``scp`` lines, which the test carries out as copies between the folders
(all namespaces share one file system; the folders are what separate them).

* :func:`test_the_deployment_guide_runs_across_hosts` runs the ``# host: NAME`` blocks of docs/deployment.md as
  written, in order: each organisation makes its own keys (``vfl keys --add``) and sends only public files, the
  coordinator binds ``tcp://0.0.0.0:5555`` with CURVE, ``vfl check`` passes on every machine, three parties with
  signing identities align their rows by PSI (``--id``) and train, the model is copied to the parties and the hub,
  every party runs ``vfl serve`` and a client in a fourth namespace queries ``vfl score --http``; the scores equal
  the model applied to the joined table. The only changes to the commands: 1024-bit test keys, the namespaces'
  addresses for the ``*.example`` names, and bob's and carol's copy of alice's key block.
* :func:`test_a_cut_link_ends_the_run_within_the_timeout_without_a_model`: a party's link is cut (``ip link set
  down``) mid-run; the coordinator ends the run with exit 3, naming the party, within ``--timeout``, and writes no
  model; the other parties are told.

Skipped, with the reason, only where network namespaces cannot be created (not root, no iproute2). Run by its own
step of ``.ci/run``: ``.venv/bin/python -m pytest -q -m slow tests/net/test_multi_host.py``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.net.conftest import Procs

#: slow-marked (about 2.5 minutes on a loaded 2-core machine) so the default suite stays under 10 minutes; .ci/run
#: runs this file in a step of its own
pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "deployment.md"
#: host -> last octet of its address in 10.77.0.0/24
HOSTS = {"coordinator": 1, "alice": 2, "bob": 3, "carol": 4, "hub": 5, "client": 6, "dask-carol": 7,
         "worker-carol": 8}
PARTIES = ("alice", "bob", "carol")
#: long-running roles the guide starts (the test starts them in the background and waits for what it needs)
BACKGROUND = ("coordinator", "party", "serve", "score")
GENEROUS = 600.0


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=60)


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be created here, or None."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    probe = f"vflprobe{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


class Lab:
    """One namespace per host (``eth0`` at 10.77.0.N/24, loopback up) on a bridge in a switch namespace."""

    def __init__(self, root: Path) -> None:
        self.tag = f"vfl{secrets.token_hex(3)}"
        self.switch = f"{self.tag}-sw"
        self.ns = {h: f"{self.tag}-{h}" for h in HOSTS}
        self.addr = {h: f"10.77.0.{n}" for h, n in HOSTS.items()}
        self.root = root
        self.made: list[str] = []

    def _must(self, *args: str) -> None:
        r = _ip(*args)
        assert r.returncode == 0, f"ip {' '.join(args)}: {r.stderr}"

    def up(self) -> None:
        self._must("netns", "add", self.switch)
        self.made.append(self.switch)
        self._must("-n", self.switch, "link", "add", "br0", "type", "bridge")
        self._must("-n", self.switch, "link", "set", "br0", "up")
        for host, n in HOSTS.items():
            ns = self.ns[host]
            self._must("netns", "add", ns)
            self.made.append(ns)
            self._must("-n", self.switch, "link", "add", f"p{n}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._must("-n", self.switch, "link", "set", f"p{n}", "master", "br0", "up")
            self._must("-n", ns, "addr", "add", f"{self.addr[host]}/24", "dev", "eth0")
            self._must("-n", ns, "link", "set", "eth0", "up")
            self._must("-n", ns, "link", "set", "lo", "up")

    def down(self) -> None:
        for ns in reversed(self.made):
            _ip("netns", "del", ns)
        self.made.clear()

    def cut(self, host: str) -> None:
        self._must("-n", self.ns[host], "link", "set", "eth0", "down")

    def argv(self, host: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[host], *argv]

    def env(self, folder: Path) -> dict[str, str]:
        return dict(os.environ, VFL_LEDGER=str(folder / "ledgers"), PYTHONUNBUFFERED="1")


@pytest.fixture
def lab(tmp_path):
    reason = netns_unavailable()
    if reason:
        pytest.skip(f"network namespaces cannot be created here: {reason}")
    lab = Lab(tmp_path)
    try:
        lab.up()
        yield lab
    finally:
        lab.down()
        leftover = _ip("netns", "list").stdout
        assert lab.tag not in leftover, leftover


def _start(procs: Procs, lab: Lab, host: str, folder: Path, argv: list[str]) -> subprocess.Popen:
    p = subprocess.Popen(lab.argv(host, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=folder, env=lab.env(folder))
    procs.items.append(p)
    return p


def _vfl(*args: str) -> list[str]:
    return [sys.executable, "-m", "vfl.cli", *args]


# ------------------------------------------------------------------------------------------------ the guide
def guide_blocks() -> list[tuple[str, list[str]]]:
    """(host, commands) of every ``bash`` block of docs/deployment.md that starts with ``# host: NAME``."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.S | re.M):
        first, _, rest = block.partition("\n")
        m = re.fullmatch(r"# host: ([\w-]+)", first.strip())
        if m:
            joined = re.sub(r"\\\n\s*", " ", rest)
            out.append((m.group(1), [ln.strip() for ln in joined.splitlines() if ln.strip()]))
    return out


def _swap(command: str, a: str, b: str) -> str:
    """``command`` as organisation ``b`` runs it when the guide shows ``a``'s (the two names exchanged)."""
    return re.sub(rf"\b({a}|{b})\b", lambda m: b if m.group(1) == a else a, command)


def _write_tables(lab: Lab, n: int, seed: int, folders: dict[str, Path], must_hold: tuple[str, ...] = ()):
    """Each party's own table (95 % of the IDs, shuffled) and bounds file; the joined table for the reference."""
    rng = np.random.default_rng(seed)
    ids = [f"u{i:04d}" for i in range(n)]
    X = rng.uniform(0, 1, (n, 5))
    y = np.clip(0.5 + 0.3 * X[:, 0] - 0.2 * X[:, 2] + 0.1 * X[:, 4] + rng.normal(0, 0.05, n), 0, 1)
    columns = {"alice": (["x1", "x2", "y"], np.column_stack([X[:, :2], y])), "bob": (["x3"], X[:, 2:3]),
               "carol": (["x4", "x5"], X[:, 3:])}
    held = {}
    for party, (names, values) in columns.items():
        keep = set(rng.permutation(n)[: int(0.95 * n)].tolist()) | {ids.index(i) for i in must_hold}
        rows = rng.permutation(sorted(keep))
        held[party] = {ids[i] for i in rows}
        with open(folders[party] / f"{party}.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", *names])
            for i in rows:
                w.writerow([ids[i], *[repr(float(v)) for v in values[i]]])
        (folders[party] / "bounds.toml").write_text("[bounds]\n" + "".join(f"{c} = [0, 1]\n" for c in names))
    return ids, X, held


def _carry_out(procs: Procs, lab: Lab, host: str, command: str, folders: dict[str, Path], running: dict) -> str:
    """One guide command on ``host``: ``scp`` as a copy between the hosts' folders, ``vfl ...`` (long-running roles
    in the background), ``curl`` in the host's namespace. Returns the foreground output."""
    argv = shlex.split(command)
    if argv[0] == "scp":
        src, dest = argv[-2], argv[-1]
        m = re.fullmatch(r"([\w-]+)\.example:(.+)", dest)
        assert m, command
        if running["training"]:   # the model exists only once the run is over
            for p in running["training"]:
                code, out, err = procs.finish(p, timeout=GENEROUS)
                assert code == 0, f"{p.args[4:7]} exited {code}: {err[-3000:]}"
                running["finished"].append((p, out, err))
            running["training"] = []
        target = folders[m.group(1)] / m.group(2)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folders[host] / src, target)
        return ""
    argv = [re.sub(r"([\w-]+)\.example", lambda m: lab.addr[m.group(1)], a) for a in argv]
    if argv[0] == "vfl":
        args = argv[1:]
        if args[0] == "coordinator":
            args += ["--key-bits", "1024", "--insecure-test-keys"]
        elif args[0] == "party":
            args += ["--insecure-test-keys", "--no-progress"]
        if args[0] in BACKGROUND:
            p = _start(procs, lab, host, folders[host], _vfl(*args))
            running["training" if args[0] in ("coordinator", "party") else "serving"].append(p)
            running["by_host"].setdefault(host, []).append(p)
            return ""
        argv = _vfl(*args)
    elif argv[0] == "dask":   # a party's Dask scheduler or worker: long-running
        p = _start(procs, lab, host, folders[host], [str(Path(sys.executable).with_name("dask")), *argv[1:]])
        running["other"].append(p)
        return ""
    elif argv[0] != "curl":
        raise AssertionError(f"docs/deployment.md: the test does not know how to run {command!r}")
    deadline = time.monotonic() + GENEROUS
    while True:
        r = subprocess.run(lab.argv(host, argv), capture_output=True, text=True, cwd=folders[host],
                           env=lab.env(folders[host]), timeout=GENEROUS)
        if "/readyz" not in command:
            assert r.returncode == 0, f"{command}: {r.stdout[-2000:]} {r.stderr[-2000:]}"
            return r.stdout
        if r.returncode == 0 and json.loads(r.stdout or "{}").get("ready"):
            return r.stdout   # a readiness probe is repeated until the service listens and is ready
        dead = [p for p in running["serving"] if p.poll() is not None]
        assert not dead, f"{dead[0].args[4:7]} exited {dead[0].returncode}: {procs.finish(dead[0])[2][-2000:]}"
        assert time.monotonic() < deadline, f"the scoring service never became ready: {r.stdout}"
        time.sleep(0.5)


#: what carol's Dask scheduler ran: its workers' addresses and how many tasks it has seen (run from carol's machine)
DASK_PROBE = """
import json, sys
from dask.distributed import Client
with Client(sys.argv[1], timeout=120) as c:
    info = c.run_on_scheduler(lambda dask_scheduler: (sorted(dask_scheduler.workers),
                                                      sum(sum(p.state_counts.values())
                                                          for p in dask_scheduler.task_prefixes.values())))
print(json.dumps(info))
"""


def _secrets_of(folder: Path) -> set[str]:
    return {p.name for p in folder.rglob("*") if p.name.endswith((".key_secret", ".sign.secret"))}


def test_the_deployment_guide_runs_across_hosts(lab, procs, tmp_path):
    t0 = time.monotonic()
    folders = {h: tmp_path / h for h in HOSTS}
    for f in folders.values():
        f.mkdir()
    ids, X, held = _write_tables(lab, 300, seed=32, folders=folders, must_hold=("u0007", "u0042"))
    running: dict = {"training": [], "serving": [], "other": [], "finished": [], "by_host": {}}
    outputs: list[tuple[str, str, str]] = []
    blocks = guide_blocks()
    assert {h for h, _ in blocks} == set(HOSTS), "every host of the guide runs something"
    for host, commands in blocks:
        hosts_commands = [(host, commands)]
        if host == "alice" and commands[0].startswith("vfl keys"):   # "the same lines at bob and carol"
            hosts_commands += [(other, [_swap(c, "alice", other) for c in commands]) for other in ("bob", "carol")]
        for h, cmds in hosts_commands:
            for command in cmds:
                outputs.append((h, command, _carry_out(procs, lab, h, command, folders, running)))
        if host == "coordinator" and any(c.startswith("scp model.json") for c in commands):
            # every host now holds exactly the secrets the guide gives it
            assert _secrets_of(folders["coordinator"]) == {"coordinator.key_secret"}
            for p in PARTIES:
                assert _secrets_of(folders[p]) == {f"{p}.key_secret", f"{p}.sign.secret"}
            assert _secrets_of(folders["hub"]) == {"coordinator.key_secret"}
            for other in ("client", "dask-carol", "worker-carol"):
                assert _secrets_of(folders[other]) == set()
    trained = time.monotonic() - t0
    checks = [out for h, c, out in outputs if c.startswith("vfl check")]
    assert len(checks) == 7 and all(out.rstrip().endswith("checks passed") for out in checks), checks
    assert all("FAIL" not in out for out in checks)
    assert sum("signed by every party of its roster under this party's pinned keys" in out for out in checks) == 3
    coordinator_out = next(out for p, out, _ in running["finished"] if "coordinator" in p.args)
    assert "Privacy report: gaussian-fm" in coordinator_out and "formal DP guarantee: yes" in coordinator_out
    for p, out, _ in running["finished"]:
        if "party" in p.args:
            assert "every identity pinned and every signature valid" in out
            assert "row IDs are common to all parties" in out

    # carol's secure products ran on her Dask worker, in another namespace
    assert all(p.poll() is None for p in running["other"]), "carol's Dask scheduler and worker are still up"
    probe = subprocess.run(lab.argv("carol", [sys.executable, "-c", DASK_PROBE, f"tcp://{lab.addr['dask-carol']}:8786"]),
                           capture_output=True, text=True, timeout=GENEROUS)
    assert probe.returncode == 0, probe.stderr[-2000:]
    workers, tasks = json.loads(probe.stdout)
    assert [w.split(":")[1] for w in workers] == [f"//{lab.addr['worker-carol']}"] and tasks > 0, probe.stdout

    # the client's answer: the model applied to the joined table, for every ID all three parties hold
    from vfl.models.modelio import load_model
    from vfl.models.predict import read_rows

    model = load_model(folders["coordinator"] / "model.json")
    answer = json.loads(outputs[-1][2])
    assert answer["ids"] == ["u0007", "u0042"] and answer["status"] == ["scored", "scored"], answer
    with open(tmp_path / "joined.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", *(f"x{j + 1}" for j in range(5))])
        w.writerows([i, *map(repr, map(float, X[k]))] for k, i in enumerate(ids))
    rows, joined_ids = read_rows(model, tmp_path / "joined.csv", "id")
    reference = dict(zip(joined_ids, model.predict(rows), strict=True))
    for i, score in zip(answer["ids"], answer["scores"], strict=True):
        assert abs(score - reference[i]) <= 1e-6 * max(1.0, abs(score)), (i, score, reference[i])
    hub = running["serving"][0]
    hub.send_signal(signal.SIGTERM)
    assert procs.finish(hub, timeout=GENEROUS)[0] == 130
    for p in running["serving"][1:]:
        code, _, err = procs.finish(p, timeout=GENEROUS)
        assert code == 0, err[-2000:]
    print(f"\nmulti-host guide: trained in {trained:.1f} s, whole flow {time.monotonic() - t0:.1f} s")


# --------------------------------------------------------------------------------------------- a cut link
def test_a_cut_link_ends_the_run_within_the_timeout_without_a_model(lab, procs, tmp_path):
    timeout = 20
    keyroom = tmp_path / "keyroom"
    made = subprocess.run(_vfl("keys", "--out", str(keyroom), "--names", ",".join(PARTIES), "--bundle",
                               ",".join((*PARTIES, "coordinator"))), capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    folders = {h: tmp_path / h for h in ("coordinator", *PARTIES)}
    for host, folder in folders.items():
        shutil.copytree(keyroom / f"bundle-{host}", folder / "keys")
    _write_tables(lab, 3000, seed=33, folders=folders)
    url = f"tcp://{lab.addr['coordinator']}:5555"
    c = _start(procs, lab, "coordinator", folders["coordinator"], _vfl(
        "coordinator", "--parties", "3", "--epsilon", "1", "--bind", f"tcp://{lab.addr['coordinator']}:5555",
        "--curve-dir", "keys", "--timeout", str(timeout), "--out", "model.json", "--key-bits", "1024",
        "--insecure-test-keys"))
    features = {"alice": ["--features", "x1,x2", "--label", "y"], "bob": ["--features", "x3"],
                "carol": ["--features", "x4,x5"]}
    parties = {p: _start(procs, lab, p, folders[p], _vfl(
        "party", "--name", p, "--connect", url, "--curve-dir", "keys", "--identity-dir", "keys", "--data", f"{p}.csv",
        *features[p], "--id", "id", "--bounds", "bounds.toml", "--timeout", str(timeout), "--insecure-test-keys",
        "--no-progress")) for p in PARTIES}
    procs.wait_for_line(parties["bob"], "reserved epsilon", timeout=GENEROUS)   # the plan is accepted: mid-run
    lab.cut("bob")
    cut_at = time.monotonic()
    code, out, err = procs.finish(c, timeout=GENEROUS)
    elapsed = time.monotonic() - cut_at
    assert code == 3, err[-3000:]
    assert "party bob" in err and ("sent nothing" in err or "unreachable" in err), err[-3000:]
    assert elapsed <= timeout + 60, elapsed     # the silence limit, plus scheduling on a loaded machine
    assert not (folders["coordinator"] / "model.json").exists()
    assert [p.name for p in folders["coordinator"].iterdir() if p.name.startswith(".model.json")] == []
    for p in ("alice", "carol"):
        pcode, _, perr = procs.finish(parties[p], timeout=GENEROUS)
        assert pcode == 3 and "the coordinator aborted the run: party bob" in perr, perr[-2000:]
    bcode, _, berr = procs.finish(parties["bob"], timeout=GENEROUS)
    assert bcode == 3, berr[-2000:]
    print(f"\ncut link: the coordinator ended the run {elapsed:.1f} s after the cut (--timeout {timeout})")
