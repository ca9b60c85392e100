"""Coverage of the spectrum-matched bootstrap world (issue 31) beside the deflated one, on the same fits.

    python benchmarks/inference_spectrum.py --out /tmp/spectrum.json                 # the six failing cells, 200 sets
    python benchmarks/inference_spectrum.py --quick --out /tmp/spectrum.json         # one small cell

The cells, the known models, the truth and the seeds are those of benchmarks/inference_coverage.py (data set s uses
data seed ``seed + s`` and noise seed ``seed + s + 10^6``; ``--confirm`` runs disjoint seeds ``seed + 10^7 + s``).
Every data set is fitted once; from the same release the benchmark computes the interval of the deflated world
(``est.inference(spectrum="deflated").conf_int()``: M_0's eigenvalues sqrt(s^2 - v) floored at the solver's floor)
and of the spectrum-matched world (``spectrum="matched"``, vfl.models.inference.matched_second_moments), and the
non-private OLS interval on the same data. Per cell: the mean, min and max coverage of the 11
coefficients' nominal 95 % intervals, their median width (mean over the coefficients) and that width over the OLS
width. Writes JSON and prints the Markdown table docs/inference.md quotes (checked by
tests/docs/test_docs_inference.py).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from inference_coverage import DELTA, INTERCEPT, Z975, cell_label, draw, ols, truth
from run_record import parse_split_args, split_parser, write_run

from vfl.models.estimators import LinearRegression, LogisticRegression

#: the cells where the deflated world's interval misses the target [0.93, 0.975] (docs/inference.md)
FAILING = (("linear", 1000, 0.5), ("linear", 1000, 4.0), ("logistic", 1000, 0.5), ("logistic", 1000, 1.0),
           ("logistic", 1000, 4.0), ("logistic", 10000, 0.5))
KEYS = ("deflated", "matched", "ols")


def fit(model: str, n: int, epsilon: float, data_seed: int, noise_seed: int) -> dict[str, np.ndarray]:
    """The deflated-world, the matched-world and the OLS interval of one data set (one fit)."""
    X, y = draw(model, n, np.random.default_rng(data_seed))
    if model == "linear":
        est: Any = LinearRegression(epsilon=epsilon, delta=DELTA, bounds=(-1.0, 1.0),
                                    y_bounds=(INTERCEPT - 2.0, INTERCEPT + 2.0), release_beta=True,
                                    random_state=noise_seed)
    else:
        est = LogisticRegression(epsilon=epsilon, delta=DELTA, bounds=(-1.0, 1.0), random_state=noise_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        out = {k: est.inference(spectrum=k).conf_int() for k in ("deflated", "matched")}
    b, se = ols(model, X, y)
    out["ols"] = np.column_stack([b - Z975 * se, b + Z975 * se])
    return out


def run_cell(model: str, n: int, epsilon: float, sets: int, seed: int) -> dict[str, Any]:
    start = time.perf_counter()
    target = truth(model)
    hits: dict[str, list[np.ndarray]] = {k: [] for k in KEYS}
    widths: dict[str, list[np.ndarray]] = {k: [] for k in KEYS}
    for s in range(sets):
        for key, ci in fit(model, n, epsilon, seed + s, seed + s + 10**6).items():
            hits[key].append((ci[:, 0] <= target) & (target <= ci[:, 1]))
            widths[key].append(ci[:, 1] - ci[:, 0])
    row: dict[str, Any] = {"model": model, "n": n, "epsilon": epsilon, "sets": sets, "first_seed": seed,
                           "binomial_sd": round(math.sqrt(0.95 * 0.05 / sets), 4)}
    ols_width = float(np.median(widths["ols"], axis=0).mean())
    for key in KEYS:
        cover = np.mean(hits[key], axis=0)
        width = float(np.median(widths[key], axis=0).mean())
        row[key] = {"coverage": cover.round(4).tolist(), "coverage_mean": round(float(cover.mean()), 4),
                    "coverage_min": round(float(cover.min()), 4), "coverage_max": round(float(cover.max()), 4),
                    "median_width_mean": round(width, 5), "width_ratio_to_ols": round(width / ols_width, 2)}
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def in_target(row: dict, key: str) -> bool:
    """The issue's target: mean coverage of the nominal 95 % intervals within [0.93, 0.975]."""
    return 0.93 <= row[key]["coverage_mean"] <= 0.975


def markdown(doc: dict) -> str:
    """The table of docs/inference.md: main run, then the confirmation run on disjoint seeds."""
    lines = ["| cell | data sets | deflated coverage (mean, min-max) | deflated width / OLS | matched coverage "
             "(mean, min-max) | matched width / OLS | OLS coverage (mean) |",
             "|---|---|---|---|---|---|---|"]
    for key, mark in (("rows", ""), ("confirm", " (confirm)")):
        for r in doc.get(key, []):
            cells = [f"{r[k]['coverage_mean']:.3f}, {r[k]['coverage_min']:.3f}-{r[k]['coverage_max']:.3f} | "
                     f"{r[k]['width_ratio_to_ols']:.2f}" for k in ("deflated", "matched")]
            lines.append(f"| {cell_label(r)}{mark} | {r['sets']} | {cells[0]} | {cells[1]} | "
                         f"{r['ols']['coverage_mean']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    parser = split_parser(__doc__, splits=200, quick_splits=20, quick_help="logistic N=1000, eps=0.5 only",
                          split_help="independent data sets per cell", data_help=None)
    parser.add_argument("--confirm", type=int, default=0,
                        help="also run this many data sets per cell on disjoint seeds (--seed + 10^7; default 0)")
    parser.add_argument("--cells", default="failing",
                        help="'failing' (the six cells where the default misses the target; default) or a "
                             "comma-separated list of model:N:eps, e.g. linear:100000:1")
    args = parse_split_args(parser, argv)
    try:
        cells = (list(FAILING) if args.cells == "failing" else
                 [(m, int(n), float(e)) for m, n, e in (c.split(":") for c in args.cells.split(","))])
    except ValueError:
        parser.error(f"--cells: expected 'failing' or model:N:eps,..., got {args.cells!r}")
    if args.quick:
        cells = [("logistic", 1000, 0.5)]
    if any(m not in ("linear", "logistic") for m, _, _ in cells):
        parser.error("--cells: the model must be linear or logistic")
    start = time.perf_counter()
    rows, confirm = [], []
    for model, n, eps in cells:
        rows.append(run_cell(model, n, eps, args.splits, args.seed))
        print(markdown({"rows": rows[-1:]}).splitlines()[-1], flush=True)
        if args.confirm:
            confirm.append(run_cell(model, n, eps, args.confirm, args.seed + 10**7))
            print(markdown({"confirm": confirm[-1:]}).splitlines()[-1], flush=True)
    write_run("inference_spectrum.py", argv, args, start, {"delta": DELTA, "rows": rows, "confirm": confirm}, markdown)


if __name__ == "__main__":
    main()
