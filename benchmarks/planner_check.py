"""The epsilon planner's predicted error against the utility benchmark's measured error (issue 31), one invocation.

    python benchmarks/planner_check.py --splits 20 --out docs/data/planner_check.json   # the committed numbers
    python benchmarks/planner_check.py --quick --out /tmp/planner_check.json   # n = 10^3 only, 5 splits

Measured: the synthetic cells of benchmarks/utility.py (de Jong et al. 2022's data, d = 10 split 5 + 5, features
declared at +-3 sd, the label at +-3 population sd, n = 10^3, 10^4, 10^5 training rows, epsilon 0.5 ... 8, delta
1e-5) with the same splits and noise seeds (utility.split_draws): per split the test R^2 of least squares minus that
of the default Gaussian FM (two-sided noise, risk split, adaptive solve); the median over the splits of ``--tables``
independently drawn tables (table k from seed + 100003 k; k = 0 is utility.py's own table), with its two-stage
bootstrap standard error (1000 resamples: tables, then splits within each). The planner predicts the loss expected
over data sets, so one table's draw is part of the measurement's error (with one table, the run at commit 37ccfe1
missed the cell n = 10^4, epsilon = 2: 0.00827, s.e. 0.0012 over its splits only, against a prediction of 0.0106).
Predicted: vfl.plan_epsilon with the same public facts (n, columns [5, 5], bounds, label bounds, epsilon, delta) and
its defaults for the data (columns and label filling their bounds at +-3 sd, R^2 = 0.5): the median R^2 lost, with
the standard deviation of that prediction over five further planner runs of independent seeds.

A cell meets the issue's target when the prediction lies within +-25 % of the measurement; where the measured loss is
below 4 combined standard errors it cannot be resolved at this number of splits and is reported as such (the
prediction then only has to agree within 2 combined standard errors).

Logistic regression, for information: the planner's median accuracy lost (``--logit-sd 4``, the benchmark's score
standard deviation; n = 10^4, columns [5, 5], bounds +-3) next to the committed docs/data/logistic_utility.json's
synthetic cells (median accuracy of the Taylor objective without noise minus that of Gaussian FM over its splits; that
file records no standard error of this difference, so no verdict is drawn).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from run_record import parse_split_args, split_parser, write_run
from utility import DELTA, EPSILONS, FEATURE_BOUND, SYNTHETIC_SIZES, VerticalFM, r2, split_draws, synthetic_table

from vfl.models.planner import plan_epsilon

LOGISTIC_JSON = Path(__file__).resolve().parents[1] / "docs" / "data" / "logistic_utility.json"

BOOTSTRAP = 1000
TOLERANCE = 0.25
REPLICATES = 400


TABLE_STRIDE = 100003


def _median_se(values: np.ndarray, rng: np.random.Generator) -> float:
    """Two-stage bootstrap s.e. of the median of ``values`` (tables, splits): resample tables, then splits."""
    k, s = values.shape
    tables = rng.integers(0, k, size=(BOOTSTRAP, k))
    splits = rng.integers(0, s, size=(BOOTSTRAP, k, s))
    return float(np.std(np.median(values[tables[:, :, None], splits].reshape(BOOTSTRAP, -1), axis=1), ddof=1))


def measured(n: int, splits: int, seed: int, tables: int = 1) -> dict[float, np.ndarray]:
    """Per epsilon: the per-split R^2 lost by the default Gaussian FM against least squares, (tables, splits)."""
    losses: dict[float, list[list[float]]] = {eps: [] for eps in EPSILONS}
    for k in range(tables):
        table_seed = seed + TABLE_STRIDE * k
        table = synthetic_table(n, table_seed)
        for eps in EPSILONS:
            losses[eps].append([])
        for train, test, draws in split_draws(table, splits, table_seed):
            fm = VerticalFM(table, train)
            ols = r2(table, test, *fm.fit(None, None))
            for eps, (pair, _) in zip(EPSILONS, draws, strict=True):
                losses[eps][-1].append(ols - r2(table, test, *fm.fit(eps, pair, regularization="adaptive")))
    return {eps: np.asarray(v) for eps, v in losses.items()}


def predicted(n: int, y_bounds: tuple[float, float], seed: int) -> list[dict]:
    """The planner's rows for the cell, with the bootstrap s.e. of its median R^2 lost."""
    plan = plan_epsilon(n, [5, 5], epsilons=EPSILONS, delta=DELTA, bounds=[(-FEATURE_BOUND, FEATURE_BOUND)] * 10,
                        label_bounds=y_bounds, replicates=REPLICATES, random_state=seed)
    return [{"median": r.relative_excess_median, "mean_excess_mse": r.excess_error_mean} for r in plan.rows]


def run(sizes: Sequence[int], splits: int, seed: int, tables: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        y_bounds = synthetic_table(n, seed).y_bounds
        meas = measured(n, splits, seed, tables)
        pred = predicted(n, y_bounds, seed + n)
        pred_se = _planner_se(n, y_bounds, seed)
        for eps, p, p_se in zip(EPSILONS, pred, pred_se, strict=True):
            m, m_se = float(np.median(meas[eps])), _median_se(meas[eps], rng)
            se = math.hypot(m_se, p_se)
            resolvable = m > 4 * se
            within = abs(p["median"] - m) <= TOLERANCE * m if resolvable else abs(p["median"] - m) <= 2 * se
            rows.append({"n_train": n, "epsilon": eps, "splits": splits, "tables": tables, "measured_r2_lost": m,
                         "measured_se": m_se,
                         "predicted_r2_lost": p["median"], "predicted_se": p_se,
                         "ratio": p["median"] / m if m > 0 else None, "resolvable": resolvable, "met": within})
    return rows


def _planner_se(n: int, y_bounds: tuple[float, float], seed: int) -> list[float]:
    """Monte Carlo error of one planner run's median: the standard deviation of the prediction over 5 runs with
    independent seeds (what a user's single run may be off by)."""
    runs = np.array([[r["median"] for r in predicted(n, y_bounds, seed + 7919 * (k + 1))] for k in range(5)])
    return np.std(runs, axis=0, ddof=1).tolist()


def logistic_rows(seed: int) -> list[dict]:
    """The planner's accuracy lost against the committed logistic benchmark's synthetic cells."""
    measured_rows = [r for r in json.loads(LOGISTIC_JSON.read_text(encoding="utf-8"))["rows"]
                     if r["data"] == "synthetic"]
    eps = [r["epsilon"] for r in measured_rows]
    plan = plan_epsilon(measured_rows[0]["n_train"], [5, 5], model="logistic", epsilons=eps, delta=DELTA,
                        bounds=[(-FEATURE_BOUND, FEATURE_BOUND)] * 10, logit_sd=4.0, replicates=REPLICATES,
                        random_state=seed)
    return [{"n_train": m["n_train"], "epsilon": m["epsilon"], "measured_accuracy_lost": m["taylor"] - m["gfm"],
             "predicted_accuracy_lost": p.accuracy_loss_median} for m, p in zip(measured_rows, plan.rows, strict=True)]


def markdown(doc: dict) -> str:
    lines = ["| n, ε | measured R² lost | s.e. | predicted R² lost | s.e. | predicted / measured | resolvable | met |",
             "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['n_train']}, {r['epsilon']:g} | {r['measured_r2_lost']:.3g} | {r['measured_se']:.2g} | "
                     f"{r['predicted_r2_lost']:.3g} | {r['predicted_se']:.2g} | {ratio} | "
                     f"{'yes' if r['resolvable'] else 'no'} | {'yes' if r['met'] else 'no'} |")
    met = sum(r["met"] for r in doc["rows"])
    missed = [f"n = {r['n_train']}, ε = {r['epsilon']:g} (predicted / measured "
              f"{'—' if r['ratio'] is None else format(r['ratio'], '.2f')})" for r in doc["rows"] if not r["met"]]
    lines += ["", f"{met} of {len(doc['rows'])} cells met; within ±25 % in {doc['within_25']} of "
              f"{doc['resolvable']} resolvable cells" + (f"; missed: {'; '.join(missed)}." if missed else ".")]
    if doc.get("logistic"):
        lines += ["", "| logistic, n, ε | measured accuracy lost (logistic_utility.json) | predicted accuracy lost |",
                  "|---|---|---|"]
        lines += [f"| {r['n_train']}, {r['epsilon']:g} | {r['measured_accuracy_lost']:.4f} | "
                  f"{r['predicted_accuracy_lost']:.4f} |" for r in doc["logistic"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = split_parser(__doc__, splits=50, quick_splits=5, quick_help="n = 10^3 only (a smoke run)",
                          split_help="random 80/20 splits per cell (as benchmarks/utility.py)", data_help=None)
    parser.add_argument("--tables", type=int, default=5,
                        help="independently drawn synthetic tables per cell, --splits splits each (default 5)")
    args = parse_split_args(parser, argv)
    if args.tables < 1:
        parser.error("--tables must be >= 1")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # seeded noise and the fallback ridge warn per fit
        rows = run(SYNTHETIC_SIZES[:1] if args.quick else SYNTHETIC_SIZES, args.splits, args.seed, args.tables)
        logistic = [] if args.quick else logistic_rows(args.seed)
    resolvable = [r for r in rows if r["resolvable"]]
    write_run("planner_check.py", argv, args, start,
              {"delta": DELTA, "epsilons": list(EPSILONS), "tolerance": TOLERANCE, "planner_replicates": REPLICATES,
               "tables": args.tables,
               "rows": rows, "resolvable": len(resolvable), "within_25": sum(r["met"] for r in resolvable),
               "logistic": logistic},
              markdown)


if __name__ == "__main__":
    main()
