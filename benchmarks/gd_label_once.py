"""The label term released once against every round, and the rule's T, step and averaging (issue 33).

    python benchmarks/gd_label_once.py --seed 2024 --data-dir ../shared/data --out docs/data/gd_label_once.json
    python benchmarks/gd_label_once.py --seed 7331 --data-dir ../shared/data --out docs/data/gd_label_once_confirm.json

On the linear cells where ``mechanism="auto"`` lost to the best peer before (garment epsilon 1, 2, 4; synthetic
n = 10^3 epsilon 0.5 ... 4; n = 10^4 epsilon 0.5, 1), with the splits, bounds and unit domain of
benchmarks/utility_peers.py (rows clipped to their public radius, intercept column 1/sqrt(d)), every variant of
:class:`vfl.privacy.gradient_release.GradientRelease` below is run on the exact FM objective of the training rows
(R = 1 unless named, delta = 1e-5), and its median excess test MSE over OLS is divided by that of the best of the
ten peers of utility_peers.py (the smallest median excess, picked on the test results); ``ols_norm`` is the median
norm of the least-squares solution on the same unit domain (what the ball ||w|| <= R has to cover):

* ``every_T25``: today's ``mechanism="noisy-gd"`` (alpha + 2 M w_t every round, T = 25, eta = 1/L, mean of all);
* ``every_T200``: the same with T = 200;
* ``once_T25``, ``once_T200``: the label term released once (default share f), T = 25 resp. 200, mean of all;
* ``once_T200_tail``: ``once_T200`` averaging the last half of the iterates;
* ``once_T100_eta2``: the label term once, T = 100 and twice the step (eta = 2/L);
* ``once_T200_R2``: ``once_T200`` with the iterate radius R = 2 (a wider ball, a larger round sensitivity 2R/N).

The rule's gradient zone (vfl.privacy.release_choice) takes the variant with the smallest geometric mean of the
ratios on seed 2024; seed 7331 confirms it. Writes JSON and prints the table docs/benchmarks_utility.md quotes
(tests/docs/test_docs_gd_label_once.py checks it).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence

import numpy as np
import utility_peers as up
from run_record import data_finder, parse_split_args, split_parser, write_run
from threadpoolctl import threadpool_limits
from utility import DELTA, EPSILONS, Table, real_table, split_draws, synthetic_table

import vfl
from vfl.data.datasets import garment
from vfl.fm.objective import fm_objective
from vfl.privacy.gradient_release import GradientRelease, step_size

CELLS = (("garment", (1.0, 2.0, 4.0)), (1000, (0.5, 1.0, 2.0, 4.0)), (10000, (0.5, 1.0)))
VARIANTS = {"every_T25": {"steps": 25}, "every_T200": {"steps": 200},
            "once_T25": {"steps": 25, "label_release": "once"}, "once_T200": {"steps": 200, "label_release": "once"},
            "once_T200_tail": {"steps": 200, "label_release": "once", "averaging": "last-half"},
            "once_T100_eta2": {"steps": 100, "label_release": "once", "learning_rate": 2.0 * step_size("linear")},
            "once_T200_R2": {"steps": 200, "label_release": "once", "radius": 2.0}}


def cell_excess(table: Table, epsilons: Sequence[float], splits: int, seed: int) -> dict[tuple[str, float], list]:
    """Excess test MSE over OLS of every peer and variant, per (method, epsilon), one entry per split."""
    out: dict[tuple[str, float], list] = {}
    X = np.clip(table.X, [b[0] for b in table.bounds], [b[1] for b in table.bounds])
    kw = {"bounds": table.bounds, "y_bounds": table.y_bounds, "out_of_bounds": "clip"}
    for train, test, draws in split_draws(table, splits, seed):
        unit = up.UnitSplit(table, X, train, test)

        def excess(pred: np.ndarray, ols: float, test: np.ndarray = test) -> float:
            return float(np.mean((pred - table.y[test]) ** 2)) - ols

        ols = float(np.mean((vfl.LinearRegression(mechanism="none", domain="l2", **kw).fit(X[train], table.y[train])
                             .predict(X[test]) - table.y[test]) ** 2))
        U = unit.U["c"][0]
        objective = fm_objective(U, unit.y, "linear")
        out.setdefault(("ols_norm", 0.0), []).append(float(np.linalg.norm(np.linalg.lstsq(U, unit.y, rcond=None)[0])))
        for k, eps in enumerate(EPSILONS):
            if eps not in epsilons:
                continue
            noise_seed = int(draws[k][1].generate_state(1)[0])
            for j, peer in enumerate(up.PEERS):
                name, dom = peer.rsplit("_", 1)
                w = up._peer(unit, name, dom, eps, np.random.default_rng([noise_seed, j]))
                out.setdefault((peer, eps), []).append(excess(unit.predict(dom, w), ols))
            for j, (name, opts) in enumerate(VARIANTS.items()):
                rel = GradientRelease("linear", U.shape[0], U.shape[1], eps, DELTA, **{"radius": 1.0, **opts})
                w = rel.run_objective(objective, np.random.default_rng([noise_seed, 100 + j]))
                out.setdefault((name, eps), []).append(excess(unit.predict("c", w), ols))
    return out


def markdown(doc: dict) -> str:
    """Per cell the best peer and each variant's median excess MSE over the best peer's; the geometric means."""
    names = list(VARIANTS)
    lines = ["| data set, ε | best peer | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 2)]
    lines += [f"| {r['dataset']}, {r['epsilon']:g} | {r['best_peer']} | "
              + " | ".join(f"{r['ratio_' + v]:.2f}" for v in names) + " |" for r in doc["rows"]]
    lines.append("| geometric mean | | " + " | ".join(f"{doc['geomean'][v]:.3f}" for v in names) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = split_parser(__doc__, splits=20, quick_splits=2, quick_help="the same cells (a smoke run)",
                          split_help="random 80/20 splits per cell", data_help="folder with the raw garment CSV")
    args = parse_split_args(parser, argv)
    start, find = time.perf_counter(), data_finder(args)
    rows = []
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        for cell, epsilons in CELLS:
            table = real_table(garment(find("garments_worker_productivity.csv"))) if cell == "garment" \
                else synthetic_table(int(cell), args.seed)
            res = cell_excess(table, epsilons, args.splits, args.seed)
            for eps in epsilons:
                med = {m: float(np.median(res[(m, eps)])) for m in (*up.PEERS, *VARIANTS)}
                best = min(up.PEERS, key=lambda p: med[p])
                rows.append({"dataset": table.name, "epsilon": eps, "splits": args.splits, "best_peer": best,
                             "ols_norm": float(np.median(res[("ols_norm", 0.0)])),
                             "best_peer_excess": med[best], **{f"ratio_{v}": med[v] / med[best] for v in VARIANTS}})
            print(f"{table.name}: done ({time.perf_counter() - start:.0f} s)", flush=True)
    geomean = {v: math.exp(float(np.mean([math.log(r[f"ratio_{v}"]) for r in rows]))) for v in VARIANTS}
    write_run("gd_label_once.py", argv, args, start, {"delta": DELTA, "rows": rows, "geomean": geomean,
                                                      "best_variant": min(geomean, key=geomean.__getitem__)},
              markdown)


if __name__ == "__main__":
    main()
