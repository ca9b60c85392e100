"""vfl's default against the private regression peers of issue 33, linear and logistic, on two disjoint split seeds.

    python benchmarks/utility_peers.py --splits 20 --seed 2024 --out docs/data/utility_peers.json
    python benchmarks/utility_peers.py --splits 20 --seed 7331 --out docs/data/utility_peers_confirm.json

(``--large-splits``, default 6: the synthetic n = 10^5 cell runs fewer splits; there every method is within a few
thousandths of OLS in test R^2, and it costs as much as all other cells together.)

Linear cells: benchmarks/utility.py's (garment, forest fires, synthetic n = 10^3, 10^4, 10^5; its random 80/20
splits of a seed, its declared bounds, clipping and intercept), epsilon 0.5, 1, 2, 4, 8, delta = 1e-5 for every
method. vfl is fitted in-process by ``vfl.LinearRegression``:

* ``default``: the library's defaults (Gaussian FM, scaled rows, floor + adaptive shrinkage);
* ``auto``: ``mechanism="auto"`` (vfl.privacy.release_choice, public N, d, epsilon, delta);
* ``gfm_clip`` (``row_norm="clip"``), ``ngd_clip`` (``mechanism="noisy-gd", row_norm="clip"``: T = 25, the label
  term every round) and ``ngd_once_clip`` (the rule's gradient release: the label term released once, T = 200):
  the other candidates of the rule; ``midrange``: the public middle of the label bounds (w = 0; no data, no budget);
  ``vfl_oracle``: per cell the best median of {default, gfm_clip, ngd_clip, ngd_once_clip, midrange} chosen on the
  test results -- an upper bound for any rule on public facts over these candidates, not a method.

Peers (benchmarks/peers.py, centralised, on the same unit domain, with scaled rows ``_s`` or rows clipped to their
public radius ``_c``): ``adassp`` (Wang 2018, Alg. 2), ``adassp_free`` (its intercept left unpenalised),
``ssp_ridge`` (SSP with the public ridge), ``objpert`` (Kifer, Smith & Thakurta 2012, Thm. 2, R = 2), and
``ngd`` (per-row clipped noisy gradient descent, Song, Chaudhuri & Sarwate 2013, T = 100, C = 1: with scaled rows
it is vfl.models.baselines.NoisyGradientDescent, draw for draw).
Per cell: median test R^2, and the median excess test MSE over OLS (noise-free least squares on the clipped rows) of
a vfl method divided by that of the best peer (the smallest median excess), with an 80 % bootstrap interval over the
splits (paired).

Logistic cells: benchmarks/logistic_utility.py's synthetic cell (n = 10^4 training rows, d = 10) and forest fires
(area > 0), random 80/20 splits; median test accuracy of ``vfl.LogisticRegression`` (default; ``auto``) against
objective perturbation (Chaudhuri, Monteleoni & Sarwate 2011, Alg. 2, vfl.models.baselines.ObjectivePerturbation)
and noisy gradient descent (vfl.models.baselines.NoisyGradientDescent), epsilon 0.5 ... 8.

Writes JSON and prints the tables docs/benchmarks_utility.md quotes (tests/docs/test_docs_utility_peers.py checks them).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import peers
from logistic_utility import FOREST_FIRES, make_cell
from run_record import data_finder, parse_split_args, split_parser, write_run
from threadpoolctl import threadpool_limits
from utility import DELTA, EPSILONS, SYNTHETIC_SIZES, Table, real_table, split_draws, synthetic_table

import vfl
from vfl.data.datasets import forest_fires, garment
from vfl.fm.domain import prepare_labels, prepare_party_block, resolve_bounds
from vfl.models.baselines import NoisyGradientDescent, ObjectivePerturbation
from vfl.privacy.release_choice import AUTO_GD_LABEL_RELEASE, AUTO_GD_STEPS

VFL = {"default": {}, "auto": {"mechanism": "auto"}, "gfm_clip": {"row_norm": "clip"},
       "ngd_clip": {"mechanism": "noisy-gd", "row_norm": "clip"},
       "ngd_once_clip": {"mechanism": "noisy-gd", "row_norm": "clip", "steps": AUTO_GD_STEPS,
                         "label_release": AUTO_GD_LABEL_RELEASE}}
CANDIDATES = ("default", "gfm_clip", "ngd_clip", "ngd_once_clip", "midrange")
NUMPY_PEERS = ("adassp", "adassp_free", "ssp_ridge", "objpert", "ngd")
PEERS = tuple(f"{p}_{dom}" for p in NUMPY_PEERS for dom in ("s", "c"))
METHODS = ("ols", "constant", *VFL, "midrange", *PEERS)
RATIO_OF = ("default", "auto", "vfl_oracle")
LOGISTIC_CELLS = ("synthetic", FOREST_FIRES)
LOGISTIC_METHODS = ("default", "auto", "gfm_clip", "ngd_clip", "ngd_once_clip", "objpert", "noisygd")
BOOTSTRAP = 1000


class UnitSplit:
    """One split on the unit domain of the peers (benchmarks/peers.py): features by the declared bounds, then scaled
    (``"s"``) or clipped to the public radius sqrt(p/d) (``"c"``), the constant column 1/sqrt(d) last; labels in
    [-1, 1] by their declared bounds."""

    def __init__(self, table: Table, X: np.ndarray, train: np.ndarray, test: np.ndarray) -> None:
        p = X.shape[1]
        d = p + 1
        bounds = resolve_bounds(list(table.bounds), X)
        self.U: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for dom, norm in (("s", "scale"), ("c", "clip")):
            U, _ = prepare_party_block(X, bounds=bounds, domain="l2", n_features_total=d, row_norm=norm,
                                       out_of_bounds="clip")
            U = np.hstack([U, np.full((U.shape[0], 1), 1.0 / math.sqrt(d))])
            self.U[dom] = (U[train], U[test])
        self.y, yb = prepare_labels(table.y[train], "linear", y_bounds=table.y_bounds, out_of_bounds="clip")
        assert yb is not None
        self.lo, self.half = float(yb.lower[0]), (float(yb.upper[0]) - float(yb.lower[0])) / 2.0
        self.free = p

    def predict(self, dom: str, w: np.ndarray) -> np.ndarray:
        return self.lo + self.half * (1.0 + self.U[dom][1] @ w)


def _peer(unit: UnitSplit, name: str, dom: str, eps: float, rng: np.random.Generator) -> np.ndarray:
    U = unit.U[dom][0]
    if name == "adassp":
        return peers.adassp(U, unit.y, eps, DELTA, rng)
    if name == "adassp_free":
        return peers.adassp(U, unit.y, eps, DELTA, rng, free=unit.free)
    if name == "ssp_ridge":
        return peers.ssp_ridge(U, unit.y, eps, DELTA, rng)
    if name == "ngd":
        return peers.noisy_gd_linear(U, unit.y, eps, DELTA, rng)
    return peers.objective_perturbation_linear(U, unit.y, eps, DELTA, rng)


def split_mse(table: Table, train: np.ndarray, test: np.ndarray, seeds: list[int]) -> dict[tuple[str, float], float]:
    """Test MSE of every method and epsilon on one split (``seeds``: one noise seed per epsilon)."""
    X = np.clip(table.X, [b[0] for b in table.bounds], [b[1] for b in table.bounds])
    y_test = table.y[test]

    def mse(pred: np.ndarray) -> float:
        return float(np.mean((pred - y_test) ** 2))

    kw: dict[str, Any] = {"bounds": table.bounds, "y_bounds": table.y_bounds, "out_of_bounds": "clip"}
    unit = UnitSplit(table, X, train, test)
    out = {("ols", 0.0): mse(vfl.LinearRegression(mechanism="none", domain="l2", **kw)
                             .fit(X[train], table.y[train]).predict(X[test])),
           ("constant", 0.0): mse(np.full(test.size, float(np.mean(table.y[train])))),
           ("midrange", 0.0): mse(np.full(test.size, unit.lo + unit.half))}
    for eps, seed in zip(EPSILONS, seeds, strict=True):
        for name, opts in VFL.items():
            est = vfl.LinearRegression(epsilon=eps, delta=DELTA, random_state=seed, **kw, **opts)
            out[(name, eps)] = mse(est.fit(X[train], table.y[train]).predict(X[test]))
        for k, peer in enumerate(PEERS):
            name, dom = peer.rsplit("_", 1)
            w = _peer(unit, name, dom, eps, np.random.default_rng([seed, k]))
            out[(peer, eps)] = mse(unit.predict(dom, w))
    return out


def _ratio(excess: dict[str, np.ndarray], method: str, peer: str, boot: np.ndarray) -> tuple[float, float, float]:
    """(median excess of ``method`` / median excess of ``peer``, 80 % bootstrap interval) over paired splits."""
    a, b = excess[method], excess[peer]
    ra = np.median(a[boot], axis=1) / np.median(b[boot], axis=1)
    return float(np.median(a) / np.median(b)), float(np.quantile(ra, 0.1)), float(np.quantile(ra, 0.9))


def run_table(table: Table, splits: int, seed: int) -> list[dict]:
    n_train = int(round(0.8 * table.X.shape[0]))
    scores, var = [], []
    for train, test, draws in split_draws(table, splits, seed):
        scores.append(split_mse(table, train, test, [int(ada.generate_state(1)[0]) for _, ada in draws]))
        var.append(float(np.var(table.y[test])))
    boot = np.random.default_rng(seed).integers(0, splits, size=(BOOTSTRAP, splits))
    rows = []
    for eps in EPSILONS:
        mse = {m: np.array([s[(m, 0.0 if m in ("ols", "constant", "midrange") else eps)] for s in scores])
               for m in METHODS}
        oracle = max(CANDIDATES, key=lambda m: float(np.median(1.0 - mse[m] / np.array(var))))
        mse["vfl_oracle"] = mse[oracle]
        r2 = {m: float(np.median(1.0 - mse[m] / np.array(var))) for m in mse}
        excess = {m: mse[m] - mse["ols"] for m in mse}
        best = min(PEERS, key=lambda p: float(np.median(excess[p])))
        row = {"dataset": table.name, "epsilon": eps, "splits": splits, "n_train": n_train,
               "d": table.X.shape[1] + 1, **{f"r2_{m}": r2[m] for m in r2}, "oracle_choice": oracle,
               "best_peer": best}
        for m in RATIO_OF:
            row[f"{m}_over_peer"], row[f"{m}_low80"], row[f"{m}_high80"] = _ratio(excess, m, best, boot)
        rows.append(row)
    return rows


def logistic_accuracies(kind: str, splits: int, seed: int, data_dir: Path | None) -> list[dict]:
    """Median test accuracy per epsilon of vfl's logistic default, ``auto`` and the two logistic peers."""
    cell = make_cell(kind, seed, data_dir)
    X, y, n = cell.clipped(), cell.y, cell.X.shape[0]
    n_train = int(round(0.8 * n))
    bounds = list(zip(cell.lo.tolist(), cell.hi.tolist(), strict=True))
    acc: dict[tuple[str, float], list[float]] = {}
    for child in np.random.SeedSequence([seed, sum(map(ord, kind)), 33]).spawn(splits):
        split_seed, *eps_seeds = child.spawn(1 + len(EPSILONS))
        perm = np.random.default_rng(split_seed).permutation(n)
        train, test = perm[:n_train], perm[n_train:]
        for eps, s in zip(EPSILONS, eps_seeds, strict=True):
            rs = int(s.generate_state(1)[0])
            common: dict[str, Any] = {"bounds": bounds, "out_of_bounds": "clip", "random_state": rs}
            models: dict[str, Any] = {
                "default": vfl.LogisticRegression(epsilon=eps, delta=DELTA, **common),
                "auto": vfl.LogisticRegression(epsilon=eps, delta=DELTA, mechanism="auto", **common),
                "gfm_clip": vfl.LogisticRegression(epsilon=eps, delta=DELTA, row_norm="clip", **common),
                "ngd_clip": vfl.LogisticRegression(epsilon=eps, delta=DELTA, mechanism="noisy-gd", row_norm="clip",
                                                   **common),
                "ngd_once_clip": vfl.LogisticRegression(epsilon=eps, delta=DELTA, mechanism="noisy-gd", row_norm="clip",
                                                        steps=AUTO_GD_STEPS, label_release=AUTO_GD_LABEL_RELEASE,
                                                        **common),
                "objpert": ObjectivePerturbation(epsilon=eps, **common),
                "noisygd": NoisyGradientDescent(model="logistic", epsilon=eps, delta=DELTA, **common)}
            for name, est in models.items():
                pred = est.fit(X[train], y[train]).predict(X[test])
                acc.setdefault((name, eps), []).append(float(np.mean(pred == y[test])))
    rows = []
    for eps in EPSILONS:
        med = {m: float(np.median(acc[(m, eps)])) for m in LOGISTIC_METHODS}
        best = max(("objpert", "noisygd"), key=lambda m: med[m])
        rows.append({"data": kind, "epsilon": eps, "splits": splits, "n_train": n_train,
                     **{f"acc_{m}": med[m] for m in LOGISTIC_METHODS}, "best_peer": best,
                     "default_gap_points": 100.0 * (med[best] - med["default"]),
                     "within_target": bool(med[best] - med["default"] <= 0.003 + 1e-12),
                     "auto_gap_points": 100.0 * (med[best] - med["auto"]),
                     "auto_within_target": bool(med[best] - med["auto"] <= 0.003 + 1e-12)})
    return rows


def _fmt_ratio(r: dict, m: str) -> str:
    return f"{r[m + '_over_peer']:.2f} ({r[m + '_low80']:.2f}–{r[m + '_high80']:.2f})"


R2_COLUMNS = ("ols", "constant", "default", "auto", "gfm_clip", "ngd_clip", "ngd_once_clip", "midrange", *PEERS)


def markdown(doc: dict) -> str:
    """Median test R^2 per method; the excess-MSE ratios to the best peer; the logistic accuracies."""
    lines = ["| data set, ε | " + " | ".join(R2_COLUMNS) + " |", "|" + "---|" * (len(R2_COLUMNS) + 1)]
    for r in doc["rows"]:
        lines.append(f"| {r['dataset']}, {r['epsilon']:g} | " + " | ".join(f"{r['r2_' + m]:.4f}" for m in R2_COLUMNS)
                     + " |")
    lines += ["", "| data set, ε | best peer | default / best peer (80 % interval) | auto / best peer | "
              "best vfl candidate (oracle) | oracle / best peer |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['dataset']}, {r['epsilon']:g} | {r['best_peer']} | {_fmt_ratio(r, 'default')} | "
              f"{_fmt_ratio(r, 'auto')} | {r['oracle_choice']} | {_fmt_ratio(r, 'vfl_oracle')} |" for r in doc["rows"]]
    lines += ["", "| logistic data, ε | vfl default | auto | GFM (clip) | noisy GD (clip) | "
              "noisy GD, label once (clip) | objective perturbation | noisy GD | best peer − default (points) | "
              "within 0.3 points |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['data']}, {r['epsilon']:g} | {r['acc_default']:.4f} | {r['acc_auto']:.4f} | "
              f"{r['acc_gfm_clip']:.4f} | {r['acc_ngd_clip']:.4f} | {r['acc_ngd_once_clip']:.4f} | "
              f"{r['acc_objpert']:.4f} | {r['acc_noisygd']:.4f} | "
              f"{r['default_gap_points']:.2f} | "
              f"{'yes' if r['within_target'] else 'no'} |" for r in doc["logistic_rows"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = split_parser(__doc__, splits=30, quick_splits=2, quick_help="synthetic n = 10^3 only (a smoke run)",
                          split_help="random 80/20 splits per cell",
                          data_help="folder with the raw forest fires/garment CSVs")
    parser.add_argument("--large-splits", type=int, default=6,
                        help="splits of the synthetic n = 10^5 cell, the slowest and least variable (default 6)")
    args = parse_split_args(parser, argv)
    start, find = time.perf_counter(), data_finder(args)
    sizes = SYNTHETIC_SIZES[:1] if args.quick else SYNTHETIC_SIZES
    tables = [real_table(garment(find("garments_worker_productivity.csv"))),
              real_table(forest_fires(find("forestfires.csv")))] + [synthetic_table(n, args.seed) for n in sizes]
    rows: list[dict] = []
    logistic: list[dict] = []
    with warnings.catch_warnings(), threadpool_limits(1):   # small matrices: BLAS threads only contend
        warnings.simplefilter("ignore")   # seeded noise and repeated fits warn per fit
        for t in tables:
            rows += run_table(t, min(args.splits, args.large_splits) if t.X.shape[0] > 50_000 else args.splits,
                              args.seed)
            print(f"{t.name}: done ({time.perf_counter() - start:.0f} s)", flush=True)
        for kind in LOGISTIC_CELLS:
            logistic += logistic_accuracies(kind, args.splits, args.seed, args.data_dir)
            print(f"logistic {kind}: done ({time.perf_counter() - start:.0f} s)", flush=True)
    write_run("utility_peers.py", argv, args, start, {"delta": DELTA, "epsilons": list(EPSILONS), "rows": rows,
                                                      "logistic_rows": logistic}, markdown)


if __name__ == "__main__":
    main()
