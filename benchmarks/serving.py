"""Federated scoring: latency and throughput of the online service vs `vfl predict` on a joined table (issue 22).

    python benchmarks/serving.py [--rows 100000] [--parties 2 3] [--latency-requests 300] [--out FILE.json]

For each number of parties K: one `vfl score --http` hub and K `vfl serve` processes on loopback, CURVE on and
signed identities, each party holding 3 features of ``--rows`` IDs (shuffled, 1 % of the IDs missing at each party).
Measured through HTTP from this process (one client, sequential requests):

* single-ID latency: ``--latency-requests`` POST /score of one random ID -> p50, p99 (ms);
* batch throughput: POST /score of 10^3, 10^4, 10^5 IDs (best of 3) -> scores/s;
* next to it, in the same invocation: `vfl predict` (a process, start-up included) on the joined table of all
  ``--rows`` rows, and the in-process :func:`vfl.models.predict.predict_file` on the same file (rows/s).

Prints one JSON document (and writes it to ``--out``). Targets on the 2-core machine: p99 <= 50 ms for one ID,
>= 20,000 scores/s for a 10^5-ID batch.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VFL = [sys.executable, "-m", "vfl.cli"]
NAMES = ["alice", "bob", "carol"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, ids: list[str]) -> dict:
    req = urllib.request.Request(url, data=json.dumps({"ids": ids}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def _signed_roster(identities: Path, run: str, cols: dict[str, list[str]]) -> dict:
    """The signed roster a training coordinator records in the model (`vfl serve` checks its own entry in it):
    each party's signed registration and ROSTER_ENTRY (vfl.protocols.roster), collected by a RosterCoordinator."""
    from vfl.net.messages import decode, encode, message_of
    from vfl.protocols.roster import Roster, RosterCoordinator, sign_registration
    from vfl.secure.identity import load_party_identity

    names = list(cols)
    plan = {"parties": [{"name": n, "features": cols[n]} for n in names], "benchmark": True}
    regs, rosters = [], []
    for n in names:
        identity, pinned = load_party_identity(identities, n)
        reg = sign_registration(identity, {"name": n, "n_rows": 0, "features": cols[n], "label_owner": False,
                                           "row_ids": True})
        regs.append(reg)
        rosters.append(Roster(name=n, run=run, plan_body=plan, registration=reg, identity=identity, pinned=pinned))
    coordinator = RosterCoordinator(names, run, [plan] * len(names), regs)
    for i, r in enumerate(rosters):
        coordinator.handle(i, decode(encode(message_of(r.entry()))))
    return coordinator.record()


def _write_data(folder: Path, k: int, rows: int, rng: np.random.Generator):
    from vfl.models.modelio import FittedModel, PartyColumns

    ids = [f"c{i:07d}" for i in range(rows)]
    cols = {n: [f"{n}_{j}" for j in range(3)] for n in NAMES[:k]}
    X = {n: rng.uniform(0, 1, size=(rows, 3)) for n in cols}
    parties = [PartyColumns(n, cols[n], [[0.0, 1.0]] * 3, 0.5, i == 0, intercept=(i == 0))
               for i, n in enumerate(cols)]
    run = "be" * 16
    model = FittedModel("logistic", "gaussian-fm", parties, rng.normal(size=3 * k + 1), None, run_id=run,
                        label_name="y", roster=_signed_roster(folder / "ids", run, cols))
    from vfl.secure.identity import load_identity

    # every party's signature over the model file, as its parties give it at the end of a run (issue 29)
    model.signatures = {n: load_identity(folder / "ids", n).sign(model.document_digest()) for n in cols}
    model.to_json(folder / "model.json")
    with open(folder / "joined.csv", "w") as fh:
        fh.write("id," + ",".join(c for n in cols for c in cols[n]) + "\n")
        joined = np.hstack([X[n] for n in cols])
        for i in range(rows):
            fh.write(ids[i] + "," + ",".join(f"{v:.17g}" for v in joined[i]) + "\n")
    for n in cols:
        keep = rng.permutation(rows)[: int(0.99 * rows)]
        with open(folder / f"{n}.csv", "w") as fh:
            fh.write("id," + ",".join(cols[n]) + "\n")
            for i in keep:
                fh.write(ids[i] + "," + ",".join(f"{v:.17g}" for v in X[n][i]) + "\n")
    return ids


def _wait_ready(base: str, hub: subprocess.Popen, limit: float = 300.0) -> None:
    deadline = time.monotonic() + limit
    while True:
        if hub.poll() is not None:
            raise SystemExit(f"the hub exited: {hub.stderr.read() if hub.stderr else ''}")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the scoring service did not become ready")
        time.sleep(0.2)


def run(k: int, rows: int, n_latency: int, rng: np.random.Generator) -> dict:
    from vfl.net.transport import write_certificates
    from vfl.secure.identity import write_identities

    with tempfile.TemporaryDirectory(prefix="vfl-serving-") as tmp:
        folder = Path(tmp)
        names = NAMES[:k]
        write_identities(folder / "ids", names)   # before the model: its roster is signed with them
        ids = _write_data(folder, k, rows, rng)
        write_certificates(folder / "curve", names)
        endpoint, port = f"tcp://127.0.0.1:{_port()}", _port()
        base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        procs = [subprocess.Popen([*VFL, "score", "--model", str(folder / "model.json"), "--bind", endpoint,
                                   "--http", f"127.0.0.1:{port}", "--curve-dir", str(folder / "curve"),
                                   "--max-query-ids", str(max(rows, 100_000)), "--timeout", "120", "-q",
                                   # one client measuring: the per-client limiter runs but never throttles it
                                   "--http-rate", "100000", "--http-burst", "100000"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
        procs += [subprocess.Popen([*VFL, "serve", "--model", str(folder / "model.json"), "--connect", endpoint,
                                    "--name", n, "--data", str(folder / f"{n}.csv"), "--id", "id",
                                    "--curve-dir", str(folder / "curve"), "--identity-dir", str(folder / "ids"),
                                    "--max-query-ids", str(max(rows, 100_000))],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in names]
        try:
            _wait_ready(base, procs[0])
            for _ in range(20):                               # warm-up
                _post(base + "/score", [ids[int(rng.integers(rows))]])
            lat = []
            for _ in range(n_latency):
                one = [ids[int(rng.integers(rows))]]
                t0 = time.perf_counter()
                _post(base + "/score", one)
                lat.append(1e3 * (time.perf_counter() - t0))
            batches = {}
            for size in (10**3, 10**4, 10**5):
                if size > rows:
                    continue
                best = float("inf")
                for _ in range(3):
                    q = [ids[int(i)] for i in rng.choice(rows, size=size, replace=False)]
                    t0 = time.perf_counter()
                    doc = _post(base + "/score", q)
                    best = min(best, time.perf_counter() - t0)
                    assert len(doc["scores"]) == size
                batches[str(size)] = {"seconds": round(best, 4), "scores_per_s": round(size / best)}
        finally:
            procs[0].terminate()
            for p in procs:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
        t0 = time.perf_counter()
        out = subprocess.run([*VFL, "predict", "--model", str(folder / "model.json"), "--data",
                              str(folder / "joined.csv"), "--id", "id", "--proba", "--out", str(folder / "p.csv")],
                             env=env, capture_output=True, text=True)
        cli_s = time.perf_counter() - t0
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        from vfl.models.modelio import load_model
        from vfl.models.predict import predict_file

        t0 = time.perf_counter()
        predict_file(load_model(folder / "model.json"), folder / "joined.csv", id_column="id", proba=True)
        inproc_s = time.perf_counter() - t0
    lat_a = np.array(lat)
    return {"parties": k, "rows": rows, "curve": True, "identities": True,
            "latency_one_id_ms": {"p50": round(float(np.percentile(lat_a, 50)), 2),
                                  "p99": round(float(np.percentile(lat_a, 99)), 2), "requests": n_latency},
            "batch": batches,
            "vfl_predict_joined": {"cli_seconds": round(cli_s, 3), "cli_rows_per_s": round(rows / cli_s),
                                   "in_process_seconds": round(inproc_s, 3),
                                   "in_process_rows_per_s": round(rows / inproc_s)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--parties", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--latency-requests", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    results = {"benchmark": "serving", "cpus": os.cpu_count(),
               "runs": [run(k, args.rows, args.latency_requests, rng) for k in args.parties]}
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
