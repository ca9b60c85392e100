"""Where the private intervals miss on real data: bias or width (issue 31, docs/inference.md "Real data").

    python benchmarks/inference_bias_width.py --out docs/data/inference_bias_width.json [--data ../shared/data]

The resamples of ``inference_coverage.py --real`` (the same population, truth, bounds and fit; resample s uses
data seed s + 1 and noise seed s + 1 + 10^6, s < --splits). Per data set, epsilon and coefficient: the bias of the
de-biased centre in units of its standard deviation over the resamples, (mean(centre) - truth) / sd(centre), and
the width ratio median(std err) / sd(centre). A miss by bias has |bias| >> 0 and a ratio near 1; a miss by width a
ratio < 1.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from inference_coverage import DELTA, MIN_LEVEL, REAL_EPSILONS
from run_record import parse_split_args, split_parser, write_run

from vfl.data.datasets import Dataset, forest_fires, garment, public_bounds
from vfl.models.estimators import LinearRegression


def split(data: Dataset, epsilon: float, sets: int) -> dict[str, Any]:
    """Bias (in standard deviations) and width ratio per coefficient over ``sets`` resamples."""
    bounds = public_bounds(data.name, dataset=data)
    binary = np.all((data.X == 0) | (data.X == 1), axis=0)
    ones = data.X.sum(axis=0)
    keep = ~binary | (np.minimum(ones, len(data.X) - ones) >= MIN_LEVEL)
    names = [f for f, k in zip(data.feature_names, keep, strict=True) if k]
    lo, hi = (np.array([bounds[f][k] for f in names]) for k in (0, 1))
    X, y = np.clip(data.X[:, keep], lo, hi), np.clip(data.y, *bounds[data.target_name])
    truth = np.linalg.lstsq(np.column_stack([X, np.ones(len(X))]), y, rcond=None)[0]
    centres, bses = [], []
    for s in range(sets):
        rows = np.random.default_rng(s + 1).integers(0, len(y), len(y))
        est = LinearRegression(epsilon=epsilon, delta=DELTA, bounds=[bounds[f] for f in names],
                               y_bounds=bounds[data.target_name], release_beta=True, random_state=s + 1 + 10**6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X[rows], y[rows])
            inf = est._inference()
        centres.append(inf.center)
        bses.append(inf.bse)
    c, b = np.array(centres), np.array(bses)
    sd = c.std(axis=0, ddof=1)
    bias = np.abs(c.mean(axis=0) - truth) / sd
    ratio = np.median(b, axis=0) / sd
    return {"model": data.name, "epsilon": epsilon, "sets": sets, "abs_bias_sd": bias.round(3).tolist(),
            "abs_bias_sd_median": round(float(np.median(bias)), 2), "abs_bias_sd_max": round(float(bias.max()), 2),
            "width_ratio": ratio.round(3).tolist(), "width_ratio_median": round(float(np.median(ratio)), 2)}


def markdown(doc: dict) -> str:
    lines = ["| data, ε | resamples | bias / sd (median, max over coefficients) | std err / sd (median) |",
             "|---|---|---|---|"]
    lines += [f"| {r['model']}, {r['epsilon']:g} | {r['sets']} | {r['abs_bias_sd_median']:.2f}, "
              f"{r['abs_bias_sd_max']:.2f} | {r['width_ratio_median']:.2f} |" for r in doc["rows"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = split_parser(__doc__, splits=40, quick_splits=5, quick_help="5 resamples",
                          split_help="resamples per data set and epsilon", data_help=None)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"), help="directory of the two CSVs")
    args = parse_split_args(parser, argv)
    start = time.perf_counter()
    paths = [args.data / "garments_worker_productivity.csv", args.data / "forestfires.csv"]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        sys.exit(f"inference_bias_width: no such file: {', '.join(missing)}")
    rows = []
    for data in (garment(paths[0]), forest_fires(paths[1])):
        for eps in REAL_EPSILONS:
            rows.append(split(data, eps, args.splits))
            print(markdown({"rows": rows[-1:]}).splitlines()[-1], flush=True)
    write_run("inference_bias_width.py", argv, args, start, {"epsilons": list(REAL_EPSILONS), "rows": rows}, markdown)


if __name__ == "__main__":
    main()
