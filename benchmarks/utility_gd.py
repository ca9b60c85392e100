"""Matrix release, noisy gradients and the public-facts rule against their peers (issue 33): test R^2 and excess MSE.

    python benchmarks/utility_gd.py --splits 20 --seed 2024 --out docs/data/utility_gd.json        # rule fixed here
    python benchmarks/utility_gd.py --splits 20 --seed 7331 --out docs/data/utility_gd_confirm.json  # second set

Extends benchmarks/utility.py (its cells, its random 80/20 splits of a seed, its declared bounds and clipping, an
intercept, delta = 1e-5) with the releases of issue 33, every vfl one fitted in-process by ``vfl.LinearRegression``
(one-party plan, central noise):

* ``gfm`` (Gaussian FM, the library default: scaled rows, floor + adaptive shrinkage), ``gfm_clip`` (rows clipped to
  their public radius), ``ngd`` / ``ngd_clip`` (``mechanism="noisy-gd"``, T = 25, R = 1, the label term released
  every round), ``ngd_once_clip`` (the rule's gradient release: rows clipped, the label term released once,
  T = 200; vfl.privacy.gradient_release), ``auto`` (the rule of
  vfl.privacy.release_choice), ``relaxed_floor`` / ``relaxed_adaptive`` (relaxed FM with the floor alone and with
  the adaptive solve, its default);
* peers: ``adassp`` (Wang 2018, vfl.models.baselines.AdaSSP) and ``ngd_peer`` (per-row clipped noisy gradient descent,
  Song et al. 2013, vfl.models.baselines.NoisyGradientDescent, T = 100, C = 1), both centralised;
* ``ols`` (noise-free least squares on the clipped rows) and ``constant`` (the training mean).

Per cell: median test R^2 over the splits, and the excess test MSE over OLS of ``auto`` divided by that of the best
peer (the peer with the smallest median excess), with an 80 % bootstrap interval over the splits (paired). Writes JSON
and prints the tables docs/benchmarks_utility.md quotes (tests/docs/test_docs_utility_gd.py checks them).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence

import numpy as np
from run_record import data_finder, parse_split_args, split_parser, write_run
from utility import DELTA, EPSILONS, SYNTHETIC_SIZES, Table, real_table, split_draws, synthetic_table

import vfl
from vfl.data.datasets import forest_fires, garment
from vfl.models.baselines import AdaSSP, NoisyGradientDescent
from vfl.privacy.release_choice import AUTO_GD_LABEL_RELEASE, AUTO_GD_STEPS, choose_release, floor_ratio

VFL = {"gfm": {}, "gfm_clip": {"row_norm": "clip"}, "ngd": {"mechanism": "noisy-gd"},
       "ngd_clip": {"mechanism": "noisy-gd", "row_norm": "clip"},
       "ngd_once_clip": {"mechanism": "noisy-gd", "row_norm": "clip", "steps": AUTO_GD_STEPS,
                         "label_release": AUTO_GD_LABEL_RELEASE}, "auto": {"mechanism": "auto"},
       "relaxed_floor": {"mechanism": "relaxed-fm", "regularization": "floor"},
       "relaxed_adaptive": {"mechanism": "relaxed-fm", "regularization": "adaptive"}}
PEERS = ("adassp", "ngd_peer")
METHODS = ("ols", "constant", *VFL, *PEERS)
BOOTSTRAP = 1000


def _mse(table: Table, test: np.ndarray, pred: np.ndarray) -> float:
    return float(np.mean((pred - table.y[test]) ** 2))


def split_mse(table: Table, train: np.ndarray, test: np.ndarray, seeds: list[int]) -> dict[tuple[str, float], float]:
    """Test MSE of every method and epsilon on one split (``seeds``: one noise seed per epsilon)."""
    lo, hi = np.array([b[0] for b in table.bounds]), np.array([b[1] for b in table.bounds])
    X = np.clip(table.X, lo, hi)
    kw = {"bounds": table.bounds, "y_bounds": table.y_bounds, "out_of_bounds": "clip"}
    out = {("ols", 0.0): _mse(table, test, vfl.LinearRegression(mechanism="none", domain="l2", **kw)
                              .fit(X[train], table.y[train]).predict(X[test])),
           ("constant", 0.0): _mse(table, test, np.full(test.size, float(np.mean(table.y[train]))))}
    for eps, seed in zip(EPSILONS, seeds, strict=True):
        for name, opts in VFL.items():
            est = vfl.LinearRegression(epsilon=eps, delta=DELTA, random_state=seed, fallback="ridge", **kw, **opts)
            out[(name, eps)] = _mse(table, test, est.fit(X[train], table.y[train]).predict(X[test]))
        ada = AdaSSP(epsilon=eps, delta=DELTA, random_state=seed, **kw).fit(X[train], table.y[train])
        out[("adassp", eps)] = _mse(table, test, ada.predict(X[test]))
        peer = NoisyGradientDescent(model="linear", epsilon=eps, delta=DELTA, random_state=seed, **kw)
        out[("ngd_peer", eps)] = _mse(table, test, peer.fit(X[train], table.y[train]).predict(X[test]))
    return out


def _ratio(mse: dict[str, np.ndarray], method: str, peer: str, boot: np.ndarray) -> tuple[float, float, float]:
    """(median excess of ``method`` / median excess of ``peer``, 80 % bootstrap interval) over paired splits."""
    a, b = mse[method] - mse["ols"], mse[peer] - mse["ols"]
    ra = np.median(a[boot], axis=1) / np.median(b[boot], axis=1)
    return float(np.median(a) / np.median(b)), float(np.quantile(ra, 0.1)), float(np.quantile(ra, 0.9))


def run_table(table: Table, splits: int, seed: int) -> list[dict]:
    n, d = table.X.shape[0], table.X.shape[1] + 1
    n_train = int(round(0.8 * n))
    scores = []
    for train, test, draws in split_draws(table, splits, seed):
        seeds = [int(ada.generate_state(1)[0]) for _, ada in draws]
        scores.append(split_mse(table, train, test, seeds))
    boot = np.random.default_rng(seed).integers(0, splits, size=(BOOTSTRAP, splits))
    rows = []
    for eps in EPSILONS:
        mse = {m: np.array([s[(m, 0.0 if m in ("ols", "constant") else eps)] for s in scores]) for m in METHODS}
        var = [float(np.var(table.y[test])) for _, test, _ in split_draws(table, splits, seed)]
        r2 = {m: float(np.median(1.0 - mse[m] / np.array(var))) for m in METHODS}
        best = min(PEERS, key=lambda p: float(np.median(mse[p] - mse["ols"])))
        ratio, low, high = _ratio(mse, "auto", best, boot)
        choice = choose_release("linear", n_train, d, eps, DELTA)
        rows.append({"dataset": table.name, "epsilon": eps, "splits": splits, "n_train": n_train, "d": d,
                     "floor_ratio": floor_ratio("linear", n_train, d, eps, DELTA), "auto_choice":
                     f"{choice.mechanism}/{choice.row_norm}", **{f"r2_{m}": r2[m] for m in METHODS},
                     "best_peer": best, "auto_over_best_peer": ratio, "ratio_low80": low, "ratio_high80": high})
    return rows


R2_COLUMNS = ("ols", "constant", "gfm", "gfm_clip", "ngd", "ngd_clip", "ngd_once_clip", "auto", "adassp",
              "ngd_peer")


def markdown(doc: dict) -> str:
    """Median test R^2 of every method, the rule's choice, and auto's excess MSE over the best peer's."""
    head = ("| data set, ε | q = d·floor | rule | OLS | constant | GFM (scale) | GFM (clip) | noisy GD (scale) | "
            "noisy GD (clip) | noisy GD, label once (clip) | auto | AdaSSP | noisy GD peer | "
            "auto / best peer excess MSE (80 % interval) |")
    lines = [head, "|" + "---|" * 15]
    for r in doc["rows"]:
        lines.append(f"| {r['dataset']}, {r['epsilon']:g} | {r['floor_ratio']:.3f} | {r['auto_choice']} | "
                     + " | ".join(f"{r['r2_' + m]:.4f}" for m in R2_COLUMNS)
                     + f" | {r['auto_over_best_peer']:.2f} ({r['ratio_low80']:.2f}–{r['ratio_high80']:.2f}, "
                     f"{r['best_peer']}) |")
    lines += ["", "| data set, ε | relaxed FM, floor | relaxed FM, adaptive (default) |", "|---|---|---|"]
    lines += [f"| {r['dataset']}, {r['epsilon']:g} | {r['r2_relaxed_floor']:.4f} | {r['r2_relaxed_adaptive']:.4f} |"
              for r in doc["rows"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = split_parser(__doc__, splits=20, quick_splits=3, quick_help="synthetic n = 10^3 only (a smoke run)",
                          split_help="random 80/20 splits per cell",
                          data_help="folder with the raw forest fires/garment CSVs")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SYNTHETIC_SIZES),
                        help="synthetic training sizes (default 1000 10000 100000)")
    args = parse_split_args(parser, argv)
    start, find = time.perf_counter(), data_finder(args)
    sizes = args.sizes[:1] if args.quick else args.sizes
    tables = [real_table(garment(find("garments_worker_productivity.csv"))),
              real_table(forest_fires(find("forestfires.csv")))] + [synthetic_table(n, args.seed) for n in sizes]
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # seeded noise, the fallback ridge and repeated fits warn per fit
        for t in tables:
            rows += run_table(t, args.splits, args.seed)
            print(f"{t.name}: done ({time.perf_counter() - start:.0f} s)", flush=True)
    write_run("utility_gd.py", argv, args, start, {"delta": DELTA, "epsilons": list(EPSILONS), "rows": rows},
              markdown)


if __name__ == "__main__":
    main()
