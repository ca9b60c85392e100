"""Forest fires benchmark (de Jong et al. 2022, Sec. 3.3; issue 5): DP-BCD vs Laplace/Gaussian FM.

    python examples/forest_fires.py --quick            # smoke run, 30 repetitions
    python examples/forest_fires.py --repetitions 1000 --out out/forest_fires

Party A (label owner): X, Y, month/day dummies, temp, RH, wind, rain (23); party B: FFMC, DMC, DC, ISI (4).
Writes results.json, results.md, r2_vs_epsilon.png and coefficients_eps*.png to --out.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import parse_args, run_benchmark  # noqa: E402

from vfl.data.datasets import forest_fires  # noqa: E402


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "out/forest_fires")
    results = run_benchmark(forest_fires(args.data), args)
    print(f"OLS R^2 {results['ols_r2']:.6f}, 5-round BCD R^2 {results['bcd5_r2']:.13f}")
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
