"""Issue 34: today's secure product against an earlier revision's, same machine, same run, interleaved (CPU time).

Usage::

    python benchmarks/secure_products.py --against 773e389 --large --repeats 3 \
        --out docs/data/secure_products_speedup.json

The earlier revision is unpacked from git (``git archive``) into a temporary directory and its C loops are built
there (``setup.py build_ext --inplace``). Every measurement is a child process -- ``PYTHONPATH`` set to one tree or the
other, checked by the child -- that loads the same 2048-bit key, runs one forest-shape product as per-key warm-up (the
fixed-base tables a party caches per key) and then times the shape with ``vfl_cpu_run`` of benchmarks/secure_products.py
(stream header, chunks through their wire form and validation, response, decryption; one worker each; CPU =
getrusage self + children), checking the product exact against numpy's integers. Children of the two trees alternate,
``repeats`` times per shape, so both see the same machine load; the ratio is baseline median / current median.
The current tree builds its larger fixed-base table (issue 34) inside the timed run of a large shape (the warm-up's
forest product needs only a small one): a conservative comparison, since a party keeps it across products.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

SHAPES = {"forest 517 x 13 x 14": (517, 13, 14, 5), "10^4 x 10 x 10": (10_000, 10, 10, 1),
          "10^5 x 10 x 10": (100_000, 10, 10, 1)}
"""shape -> rows, key holder's columns, responder's columns, timed runs per child (median)."""


def unpack_revision(rev: str, into: Path) -> tuple[Path, str]:
    """``rev`` of this repository unpacked into ``into`` with its C loops built: (tree, full commit)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=into, check=True,
                   capture_output=True)
    return into, commit


def run_child(tree: Path, key_file: Path, shape: str, seed: int) -> dict[str, Any]:
    """One child process on ``tree``: warm-up, then the timed runs of ``shape``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("VFL_PURE_PYTHON", None)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(tree), str(key_file), shape,
                          str(seed)], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def child_main(tree: str, key_file: str, shape: str, seed: int) -> int:
    """In the child: refuse to run on another tree's ``vfl``; print the runs as one JSON line."""
    import numpy as np
    from phe import paillier

    import vfl
    from vfl.secure import native

    if not Path(vfl.__file__).resolve().is_relative_to(Path(tree).resolve()):
        print(f"vfl was imported from {vfl.__file__}, not from {tree}", file=sys.stderr)
        return 2
    # this benchmark's driver; it uses only the public product API of both trees
    import secure_products as sp

    key = json.loads(Path(key_file).read_text(encoding="utf-8"))
    pk = paillier.PaillierPublicKey(key["n"])
    keypair = (pk, paillier.PaillierPrivateKey(pk, key["p"], key["q"]))
    rng = np.random.default_rng(2025)
    sp.vfl_cpu_run(rng.uniform(-1, 1, (517, 13)), rng.uniform(-1, 1, (517, 14)), keypair)   # per-key warm-up
    rows, d_a, d_b, runs = SHAPES[shape]
    rng = np.random.default_rng(seed)
    A, B = rng.uniform(-1, 1, (rows, d_a)), rng.uniform(-1, 1, (rows, d_b))
    done = [sp.vfl_cpu_run(A, B, keypair) for _ in range(runs)]
    print(json.dumps({"cpu_s": statistics.median(r["cpu_s"] for r in done), "exact": all(r["exact"] for r in done),
                      "inner_loops": native.IMPLEMENTATION}))
    return 0


def compare(rev: str, shapes: list[str], repeats: int, key_bits: int = 2048) -> dict[str, Any]:
    """Interleaved children of the baseline ``rev`` and of this tree; per shape the CPU seconds of every child, the
    medians, µs per row and baseline / current."""
    from vfl.secure import generate_keypair

    pk, sk = generate_keypair(key_bits, allow_insecure=key_bits < 2048)
    out: dict[str, Any] = {"baseline_rev": rev, "shapes": []}
    with tempfile.TemporaryDirectory(prefix="vfl-baseline-") as tmp:
        key_file = Path(tmp) / "key.json"
        key_file.write_text(json.dumps({"n": pk.n, "p": sk.p, "q": sk.q}), encoding="utf-8")
        tree = Path(tmp) / "tree"
        tree.mkdir()
        _, out["baseline_commit"] = unpack_revision(rev, tree)
        trees = {"baseline": tree, "current": ROOT}
        for shape in shapes:
            runs: dict[str, list[dict]] = {"baseline": [], "current": []}
            for rep in range(repeats):
                order = ["baseline", "current"] if rep % 2 == 0 else ["current", "baseline"]
                for name in order:
                    runs[name].append(run_child(trees[name], key_file, shape, 34 + rep))
                    print(f"#   {shape} {name}: {runs[name][-1]['cpu_s']:.3f} CPU s (load "
                          f"{os.getloadavg()[0]:.2f})", flush=True)
            n = SHAPES[shape][0]
            med = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
            out["shapes"].append({
                "shape": shape, "n": n, **{f"{k}_cpu_s": [round(r["cpu_s"], 3) for r in v] for k, v in runs.items()},
                **{f"{k}_us_per_row": round(med[k] * 1e6 / n, 1) for k in med},
                "speedup": round(med["baseline"] / med["current"], 2),
                "exact": all(r["exact"] for v in runs.values() for r in v),
                "inner_loops": {k: v[0]["inner_loops"] for k, v in runs.items()}})
    return out


def markdown_speedup(rep: dict[str, Any]) -> str:
    """The table of docs/secure_products.md's issue-34 speed-up section, from the JSON."""
    lines = [f"| shape | baseline {rep['baseline_commit'][:7]} µs/row | now µs/row | baseline / now | exact |",
             "|---|---:|---:|---:|---|"]
    lines += [f"| {r['shape']} | {r['baseline_us_per_row']:.1f} | {r['current_us_per_row']:.1f} | {r['speedup']:.2f} | "
              f"{'yes' if r['exact'] else 'NO'} |" for r in rep["shapes"]]
    return "\n".join(lines)


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "--child":
    sys.path.insert(1, str(Path(__file__).resolve().parent))
    raise SystemExit(child_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
