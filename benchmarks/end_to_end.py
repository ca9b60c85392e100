"""End-to-end wall time of a networked Gaussian-FM fit on forest fires vs the in-process secure products.

    python benchmarks/end_to_end.py [--key-bits 2048] [--repeats 1]

Three numbers, same data (forest fires, de Jong et al.'s split: alice 23 columns + label, bob 4),
same key size:

* ``in-process``: Paillier key generation + every cross block of the dissection plan through
  :func:`vfl.secure.products.run_secure_product` (encrypt, respond with noise, decrypt) in one process;
* ``vfl.fit``: the full protocol over loopback ZeroMQ with coordinator and parties as threads;
* ``CLI``: `vfl coordinator` + two `vfl party --config parties/forestfires/*.toml` processes, from
  launch to exit (includes three Python start-ups and the data loading).

The target (issue 4) is networked / in-process <= 1.5.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _prepared_blocks():
    from vfl.data.datasets import forest_fires, public_bounds
    from vfl.fm.domain import prepare_labels, prepare_party_block, resolve_bounds

    data = forest_fires()
    bounds = public_bounds("forestfires", dataset=data)
    names = list(data.party_columns.values())
    d = sum(len(c) for c in names)
    parts = []
    for cols in names:
        X = data.X[:, data.column_indices(cols)]
        cb = resolve_bounds({c: bounds[c] for c in cols}, X, cols)
        parts.append(prepare_party_block(X, bounds=cb, domain="l2", n_features_total=d, feature_names=cols)[0])
    y, _ = prepare_labels(data.y, "linear", y_bounds=bounds[data.target_name])
    return data, bounds, names, parts, y


def in_process_seconds(key_bits: int) -> float:
    from vfl.fm.dissection import DissectionPlan
    from vfl.secure.keys import generate_keypair
    from vfl.secure.products import run_secure_product

    _, _, names, parts, y = _prepared_blocks()
    plan = DissectionPlan([len(c) for c in names], 0, model="linear")
    start = time.perf_counter()
    keys = {}
    for block in plan.cross_blocks():
        enc = block.encryptor
        if enc not in keys:
            keys[enc] = generate_keypair(key_bits, allow_insecure=key_bits < 2048)
        a = parts[enc]
        b = y.reshape(-1, 1) if block.kind == "alpha" else parts[block.responder]
        run_secure_product(a, b, keypair=keys[enc], encryptor="a", allow_insecure=key_bits < 2048,
                           noise_sigma=1e-3)
    return time.perf_counter() - start


def api_seconds(key_bits: int) -> float:
    from vfl.api import Party, fit

    data, bounds, names, _, _ = _prepared_blocks()
    parties = []
    for i, (name, cols) in enumerate(zip(["alice", "bob"], names, strict=True)):
        X = data.X[:, data.column_indices(cols)]
        parties.append(Party(name, X, data.y if i == 0 else None, feature_names=cols,
                             bounds={c: bounds[c] for c in cols},
                             label_bounds=bounds[data.target_name] if i == 0 else None))
    start = time.perf_counter()
    fit(parties, mechanism="gaussian-fm", epsilon=1.0, delta=1e-5, key_bits=key_bits,
        allow_insecure_keys=key_bits < 2048)
    return time.perf_counter() - start


def cli_seconds(key_bits: int) -> float:
    from vfl.demo import free_port

    url = f"tcp://127.0.0.1:{free_port()}"
    vfl = [sys.executable, "-m", "vfl.cli"]
    insecure = ["--insecure-test-keys"] if key_bits < 2048 else []
    with tempfile.TemporaryDirectory() as tmp:
        from vfl.secure.identity import write_identities

        write_identities(tmp, ["alice", "bob"])   # throwaway signing identities, pinned by both parties
        start = time.perf_counter()
        procs = [subprocess.Popen([*vfl, "coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon",
                                   "1", "--bind", url, "--out", str(Path(tmp) / "m.json"), "--key-bits",
                                   str(key_bits), "-q", *insecure], stdout=subprocess.DEVNULL)]
        for name in ("alice", "bob"):
            config = str(ROOT / "parties" / "forestfires" / f"{name}.toml")
            procs.append(subprocess.Popen([*vfl, "party", "--config", config, "--connect", url, "--no-progress",
                                           "--identity-dir", tmp, *insecure], stdout=subprocess.DEVNULL,
                                          env={**os.environ, "VFL_LEDGER": tmp}))   # a throwaway ledger
        codes = [p.wait(timeout=600) for p in procs]
        elapsed = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"CLI run failed: exit codes {codes}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    rows = {"in-process secure products": [], "vfl.fit (threads, loopback ZeroMQ)": [],
            "CLI (3 processes, loopback ZeroMQ)": []}
    for _ in range(args.repeats):
        rows["in-process secure products"].append(in_process_seconds(args.key_bits))
        rows["vfl.fit (threads, loopback ZeroMQ)"].append(api_seconds(args.key_bits))
        rows["CLI (3 processes, loopback ZeroMQ)"].append(cli_seconds(args.key_bits))
    base = float(np.median(rows["in-process secure products"]))
    print(f"forest fires (n=517, 23 + 4 columns), gaussian-fm, {args.key_bits}-bit keys, median of {args.repeats}")
    print(f"| {'run':<36} | {'seconds':>8} | {'ratio':>6} |")
    print(f"|{'-' * 38}|{'-' * 10}|{'-' * 8}|")
    for name, values in rows.items():
        med = float(np.median(values))
        print(f"| {name:<36} | {med:8.2f} | {med / base:6.2f} |")


if __name__ == "__main__":
    main()
