"""Noise cost of calibrating the networked noisy-gradient release against a hostile co-party (issue 33).

The networked release (vfl.protocols.gd_rounds) calibrates its per-round sigma to
Delta* = max(Delta_A, Delta_B, Delta / sqrt(2)) (vfl.privacy.gradient_release.party_sensitivity: a co-party may
encrypt any operand inside the plan's layout) instead of the full-row Delta of an honest co-party. This prints sigma
before (Delta) and after (Delta*) and their ratio at the public defaults (epsilon = 1, delta = 1e-5, T = 25, R = 1),
for the forest-fires shape (517 rows, 13 + 14 columns, as benchmarks/gd_rounds_cost.py) and synthetic n = 10^3,
d = 10 (5 + 5 columns, the label owner's intercept column makes its block 6 wide), linear and logistic. Public facts
only: no data is read, nothing is random.

    python benchmarks/gd_hostile_noise.py --out docs/data/gd_hostile_noise.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_record import git_commit  # noqa: E402

from vfl.privacy.gradient_release import DEFAULT_RADIUS, DEFAULT_STEPS, GradientRelease  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"forest-fires shape": (517, 13, 14), "synthetic n = 10^3, d = 10": (1000, 5, 6)}


def row(model: str, n: int, widths: tuple[int, int], epsilon: float, delta: float, steps: int,
        radius: float) -> dict:
    d = sum(widths)
    radii = (float((widths[0] / d) ** 0.5), float((widths[1] / d) ** 0.5))
    old = GradientRelease(model, n, d, epsilon, delta, steps=steps, radius=radius)
    new = GradientRelease(model, n, d, epsilon, delta, steps=steps, radius=radius, party_radii=radii)
    ps = new.party_sensitivities
    assert ps is not None
    return {"model": model, "n_rows": n, "widths": list(widths), "party_radii": list(radii),
            "sensitivity_full_row": old.sensitivity, "sensitivity_against_A": ps[0], "sensitivity_against_B": ps[1],
            "sigma_old": old.sigma, "sigma_new": new.sigma, "sigma_ratio": new.sigma / old.sigma}


def markdown(doc: dict) -> str:
    """The table docs/privacy.md shows (section "Noisy gradients against a hostile co-party")."""
    lines = ["| shape, model | N Delta (honest) | N Delta_A | N Delta_B | sigma before | sigma after | ratio |",
             "|---|---|---|---|---|---|---|"]
    for name, r in doc["rows"].items():
        n = r["n_rows"]
        lines.append(f"| {name} | {n * r['sensitivity_full_row']:.3f} | {n * r['sensitivity_against_A']:.3f} | "
                     f"{n * r['sensitivity_against_B']:.3f} | {r['sigma_old']:.4g} | {r['sigma_new']:.4g} | "
                     f"{r['sigma_ratio']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "data" / "gd_hostile_noise.json",
                        help="JSON file to write (default docs/data/gd_hostile_noise.json)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="target epsilon (default %(default)s)")
    parser.add_argument("--delta", type=float, default=1e-5, help="target delta (default %(default)s)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="rounds T (default %(default)s)")
    parser.add_argument("--radius", type=float, default=DEFAULT_RADIUS, help="iterate radius R (default %(default)s)")
    args = parser.parse_args(argv)
    rows = {f"{name}, {model}": row(model, n, (a, b), args.epsilon, args.delta, args.steps, args.radius)
            for name, (n, a, b) in SHAPES.items() for model in ("linear", "logistic")}
    doc = {"command": "python benchmarks/gd_hostile_noise.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "vfl_commit": git_commit(), "epsilon": args.epsilon, "delta": args.delta, "steps": args.steps,
           "radius": args.radius, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(markdown(doc))
    return doc


if __name__ == "__main__":
    main()
