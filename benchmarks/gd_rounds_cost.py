"""Cost of the networked noisy-gradient release (vfl.protocols.gd_rounds): CPU per role, messages and bytes.

Both parties and the coordinator run in this process through the real wire encoding (vfl.net.messages encode and
decode, so every byte counted is a byte a transport would carry; sockets themselves are not timed) with real
Paillier keys, the big-number work in the calling thread (``workers=1``: CPU = what one core spends; the parties
can spread it over local workers as the matrix release does). Linear model, two parties (the label owner second),
T rounds at the iterate radius R = 1.

* forest-fires shape (517 rows, 13 + 14 columns): the whole run of T rounds;
* 10^5 x (10 + 10): ``--big-rounds`` rounds (default 1), reported per round and times T (the rounds are identical
  in cost: one encrypted column per party, one masked response, two shares per product).

    python benchmarks/gd_rounds_cost.py --out docs/data/gd_rounds_cost.json

``--quick``: small shapes and 1024-bit keys (the docs test's smoke run); never quoted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vfl.net.messages import decode, encode, message_of
from vfl.privacy.gradient_release import DEFAULT_STEPS, GradientRelease
from vfl.protocols.contracts import Out
from vfl.protocols.gd_rounds import GDCoordinator, GDParams, GDParty
from vfl.secure.keys import generate_keypair

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_record import git_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"forest-fires shape": (517, 13, 14), "10^5 x (10 + 10)": (100_000, 10, 10)}
QUICK_SHAPES = {"forest-fires shape": (517, 13, 14), "10^5 x (10 + 10)": (2_000, 10, 10)}


def _blocks(n: int, widths: tuple[int, int], seed: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray, tuple]:
    """Synthetic rows in the public l2 domain: party k's block within r_k = sqrt(d_k / d); y in [-1, 1]."""
    rng = np.random.default_rng(seed)
    d = sum(widths)
    radii = tuple(float(np.sqrt(w / d)) for w in widths)
    blocks = []
    for r, w in zip(radii, widths, strict=True):
        Z = rng.uniform(-1, 1, size=(n, w))
        blocks.append(r * Z / np.sqrt(w))
    X = np.hstack(blocks)
    z = X @ rng.normal(size=d)
    return (blocks[0], blocks[1]), np.clip(z / np.abs(z).max(), -1, 1), radii


def measure(n: int, widths: tuple[int, int], *, steps: int, rounds: int, key_bits: int, seed: int) -> dict[str, Any]:
    """Run ``rounds`` of a ``steps``-round plan; CPU seconds per role, messages and bytes on the wire."""
    blocks, y, radii = _blocks(n, widths, seed)
    rel = GradientRelease("linear", n, sum(widths), 1.0, 1e-5, steps=steps, party_radii=radii)  # type: ignore[arg-type]
    params = GDParams(release=rel, party_radii=radii, widths=widths, key_bits=key_bits)  # type: ignore[arg-type]
    t0 = time.process_time()
    keys = tuple(generate_keypair(key_bits, allow_insecure=key_bits < 2048) for _ in range(2))
    keygen = time.process_time() - t0
    rngs = (np.random.default_rng(seed + 1), np.random.default_rng(seed + 2))
    parties = (GDParty(0, blocks[0], None, params, keypair=keys[0], rng=rngs[0], workers=1),
               GDParty(1, blocks[1], y, params, keypair=keys[1], rng=rngs[1], workers=1))
    coord = GDCoordinator(params)
    cpu = {"coordinator": 0.0, "party A": 0.0, "party B (label)": 0.0}
    names = ("party A", "party B (label)")
    traffic: dict[str, list[int]] = {}

    def wire(out: Out):
        frames = encode(message_of(out))
        count = traffic.setdefault(str(out.type), [0, 0])
        count[0] += 1
        count[1] += sum(len(f) for f in frames)
        return decode(frames)

    wall = time.perf_counter()
    t0 = time.process_time()
    queue = coord.round_messages()
    cpu["coordinator"] += time.process_time() - t0
    while queue and coord.t < rounds:
        out = queue.pop(0)
        t0 = time.process_time()
        answers = parties[out.to].handle(wire(out))  # type: ignore[index]
        cpu[names[out.to]] += time.process_time() - t0  # type: ignore[index]
        for a in answers:
            t0 = time.process_time()
            queue.extend(coord.handle(out.to, wire(a)))  # type: ignore[arg-type]
            cpu["coordinator"] += time.process_time() - t0
    wall = time.perf_counter() - wall
    done = coord.t
    per_round = {k: v / done for k, v in cpu.items()}
    messages = sum(c[0] for c in traffic.values())
    nbytes = sum(c[1] for c in traffic.values())
    return {
        "n_rows": n, "widths": list(widths), "key_bits": key_bits, "steps": steps, "rounds_measured": done,
        "keygen_cpu_seconds": round(keygen, 3), "wall_seconds": round(wall, 3),
        "cpu_seconds_per_round": {k: round(v, 4) for k, v in per_round.items()},
        "cpu_seconds_run": {k: round(v * steps, 3) for k, v in per_round.items()},
        "messages_per_round": messages / done, "bytes_per_round": round(nbytes / done),
        "bytes_run": round(nbytes / done * steps),
        "by_type": {k: {"messages": c[0] / done, "bytes": round(c[1] / done)} for k, c in sorted(traffic.items())},
    }


def markdown(doc: dict) -> str:
    """The table docs/performance.md shows (section "Noisy-gradient rounds across parties")."""
    lines = ["| shape | key bits | rounds measured | CPU s / round (coordinator, A, B) | CPU s, T rounds "
             "(A + B) | messages / round | MB / round | MB, T rounds |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in doc["rows"].items():
        c = r["cpu_seconds_per_round"]
        run = r["cpu_seconds_run"]
        lines.append(f"| {name} | {r['key_bits']} | {r['rounds_measured']} | {c['coordinator']:.3f}, "
                     f"{c['party A']:.3f}, {c['party B (label)']:.3f} | "
                     f"{run['party A'] + run['party B (label)']:.1f} | {r['messages_per_round']:.0f} | "
                     f"{r['bytes_per_round'] / 1e6:.2f} | {r['bytes_run'] / 1e6:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "data" / "gd_rounds_cost.json",
                        help="JSON file to write (default docs/data/gd_rounds_cost.json)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="planned rounds T (default %(default)s)")
    parser.add_argument("--big-rounds", type=int, default=1,
                        help="rounds measured at 10^5 rows (default %(default)s; the forest shape runs all T)")
    parser.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus bits (default %(default)s)")
    parser.add_argument("--seed", type=int, default=2024, help="data and noise seed (default %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 2,000 instead of 10^5 rows, 1024-bit keys, 3 rounds (never quoted)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.big_rounds < 1 or args.big_rounds > args.steps:
        parser.error("need 1 <= --big-rounds <= --steps")
    start = time.perf_counter()
    shapes, key_bits, steps = (QUICK_SHAPES, 1024, 3) if args.quick else (SHAPES, args.key_bits, args.steps)
    rows = {}
    for name, (n, d_a, d_b) in shapes.items():
        rounds = steps if n < 10_000 else min(args.big_rounds, steps)
        rows[name] = measure(n, (d_a, d_b), steps=steps, rounds=rounds, key_bits=key_bits, seed=args.seed)
        print(f"{name}: {rows[name]['rounds_measured']} rounds in {rows[name]['wall_seconds']} s", flush=True)
    doc = {"command": "python benchmarks/gd_rounds_cost.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "vfl_commit": git_commit(), "quick": bool(args.quick), "seconds": round(time.perf_counter() - start, 1),
           "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(markdown(doc))
    return doc


if __name__ == "__main__":
    main()
