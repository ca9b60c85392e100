"""Garment productivity benchmark (de Jong et al. 2022, Sec. 3.3; issue 5): DP-BCD vs Laplace/Gaussian FM.

    python examples/garment.py --quick            # smoke run, 30 repetitions
    python examples/garment.py --repetitions 1000 --out out/garment

Party A (label owner): quarter, team, targeted_productivity, smv, over_time, incentive, day dummies (11);
party B: idle_time, idle_men, no_of_style_change, no_of_workers, department dummies (6).
Writes results.json, results.md, r2_vs_epsilon.png and coefficients_eps*.png to --out.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import parse_args, run_benchmark  # noqa: E402

from vfl.data.datasets import garment  # noqa: E402


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "out/garment")
    results = run_benchmark(garment(args.data), args)
    print(f"OLS R^2 {results['ols_r2']:.6f}, 5-round BCD R^2 {results['bcd5_r2']:.13f}")
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
