"""Budget split under the adaptive solve (issue 24): the default Gaussian FM with other shares of the alpha block.

    python benchmarks/utility_shares.py --out docs/data/utility_shares.json     # the committed numbers (50 splits)
    python benchmarks/utility_shares.py --quick --out /tmp/shares.json          # 5 splits, a smoke run

The risk split (``budget_split="risk"``, docs/privacy.md "Budget split between the blocks") was derived for the
floor-only solve. This benchmark asks whether another public rule for the alpha share s serves the adaptive solve
(``regularization="adaptive"``, the linear default) better. Cells, splits, bounds, two-sided noise and common random
numbers are exactly those of benchmarks/utility.py (``split_draws``): the "default" column equals its
``gfm_adaptive`` column. Rules, each the same release but for s (the joint calibration is exact for every s):

* fixed shares s (``--shares``, default 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95);
* ``wiener``: the risk rule's reference problem (M = I/d, ||w||^2 = 4d/(3d + 1), floor sqrt(d) tau_M as a ridge)
  with the alpha-noise term d tau_alpha^2 / 4 replaced by what an oracle Wiener shrinkage of each eigen-coordinate
  p_i of alpha leaves, d (v p^2 / (p^2 + v)) / 4 with v = tau_alpha^2 and p^2 = 4 ||w||^2 / d^3 (p = -2 M w spread
  evenly over the d directions): the risk rule re-derived for the adaptive solve.

Per cell: the median test R^2 of every rule, its difference to the default and the paired bootstrap standard error
of that difference (as in benchmarks/utility.py). A rule qualifies as a new default only if it meets both garment
targets and no cell is worse than the default beyond 2 standard errors; the JSON says which (``verdicts``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence

import numpy as np
import utility  # benchmarks/utility.py: the same cells, splits and noise
from run_record import parse_split_args, split_parser, write_run

from vfl.data.datasets import forest_fires, garment
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.mechanisms import risk_alpha_share

BOOTSTRAP, DELTA, EPSILONS, TARGETS = utility.BOOTSTRAP, utility.DELTA, utility.EPSILONS, utility.TARGETS
Table, VerticalFM, split_draws = utility.Table, utility.VerticalFM, utility.split_draws

SHARES = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
_GRID = np.linspace(0.001, 0.999, 999)


def wiener_alpha_share(n_features: int, n_samples: int, mu: float) -> float:
    """The alpha share minimising the risk rule's reference excess risk with the alpha-noise term replaced by the
    oracle Wiener residual v p^2/(p^2 + v) per eigen-coordinate (module docstring); grid step 0.001 in (0, 1)."""
    d, n = float(n_features), float(n_samples)
    p2 = 4.0 * (4.0 * d / (3.0 * d + 1.0)) / d ** 3
    tau_a2 = (4.0 / n) ** 2 / (mu * mu * _GRID)
    tau_m2 = (math.sqrt(2.0) / n) ** 2 / (mu * mu * (1.0 - _GRID))
    risk = (2.0 * tau_m2 + tau_a2 * p2 / (p2 + tau_a2) / 4.0) / (1.0 / d + np.sqrt(d * tau_m2)) ** 2
    return round(float(_GRID[int(np.argmin(risk))]), 3)


def rule_shares(table: Table, n_train: int, shares: Sequence[float]) -> dict[float, dict[str, float]]:
    """epsilon -> rule name -> the alpha share it picks on this cell (d counts the intercept column)."""
    d = table.X.shape[1] + 1
    out = {}
    for eps in EPSILONS:
        mu = calibrate_mu(eps, DELTA)
        out[eps] = {"default": risk_alpha_share(d, n_train, mu), "wiener": wiener_alpha_share(d, n_train, mu),
                    **{f"{s:g}": float(s) for s in shares}}
    return out


def run_table(table: Table, splits: int, seed: int, shares: Sequence[float]) -> list[dict]:
    n_train = int(round(0.8 * table.X.shape[0]))
    picks = rule_shares(table, n_train, shares)
    scores: list[dict[tuple[str, float], float]] = []
    for train, test, draws in split_draws(table, splits, seed):
        fm = VerticalFM(table, train)
        scores.append({(rule, eps): utility.r2(table, test, *fm.fit(eps, pair, s if rule != "default" else "risk",
                                                             regularization="adaptive"))
                       for eps, (pair, _) in zip(EPSILONS, draws, strict=True) for rule, s in picks[eps].items()})
    boot = np.random.default_rng(seed).integers(0, splits, size=(BOOTSTRAP, splits))
    rows = []
    for eps in EPSILONS:
        base = np.array([sc[("default", eps)] for sc in scores])
        row: dict = {"dataset": table.name, "epsilon": eps, "splits": splits, "shares": picks[eps], "rules": {}}
        for rule in picks[eps]:
            vals = np.array([sc[(rule, eps)] for sc in scores])
            diffs = np.median(vals[boot], axis=1) - np.median(base[boot], axis=1)
            diff, se = float(np.median(vals) - np.median(base)), float(np.std(diffs, ddof=1))
            row["rules"][rule] = {"median": float(np.median(vals)), "minus_default": diff, "mc_se": se,
                                  "worse_beyond_mc_error": bool(diff < -2.0 * se)}
        rows.append(row)
    return rows


def verdicts(rows: list[dict]) -> dict[str, dict]:
    """Per rule: the garment target cells' medians, whether both are met, and the cells worse than the default beyond
    2 MC standard errors; ``qualifies`` = both garment targets met and no such cell."""
    out = {}
    for rule in rows[0]["rules"]:
        garment_cells = {f"eps={e:g}": r["rules"][rule]["median"] for r in rows for (name, e) in TARGETS
                         if name == "garment" == r["dataset"] and r["epsilon"] == e}
        met = all(r["rules"][rule]["median"] >= TARGETS[(r["dataset"], r["epsilon"])] for r in rows
                  if (r["dataset"], r["epsilon"]) in TARGETS and r["dataset"] == "garment")
        worse = [f"{r['dataset']}, eps={r['epsilon']:g}" for r in rows if r["rules"][rule]["worse_beyond_mc_error"]]
        out[rule] = {"garment": garment_cells, "garment_targets_met": met, "worse_cells": worse,
                     "qualifies": met and not worse}
    return out


def markdown(doc: dict) -> str:
    """Median test R^2 per cell and rule; '↓' marks a cell worse than the default beyond 2 MC standard errors, '↑'
    one better beyond 2; then the verdict per rule."""
    rules = list(doc["rows"][0]["rules"])
    lines = ["| data set, ε | risk share | " + " | ".join(
        "default (risk)" if r == "default" else ("Wiener rule" if r == "wiener" else f"s = {r}") for r in rules)
        + " | Wiener share |", "|" + "---|" * (len(rules) + 3)]
    for row in doc["rows"]:
        cells = []
        for rule in rules:
            c = row["rules"][rule]
            mark = "↓" if c["worse_beyond_mc_error"] else ("↑" if c["minus_default"] > 2.0 * c["mc_se"] else "")
            cells.append(f"{c['median']:.4f}{mark}")
        lines.append(f"| {row['dataset']}, {row['epsilon']:g} | {row['shares']['default']:.3f} | "
                     + " | ".join(cells) + f" | {row['shares']['wiener']:.3f} |")
    lines += ["", "| rule | garment ε = 0.5 | garment ε = 1 | both garment targets | cells worse beyond 2 MC s.e. "
              "| qualifies |", "|---|---|---|---|---|---|"]
    for rule, v in doc["verdicts"].items():
        lines.append(f"| {rule} | {v['garment']['eps=0.5']:.4f} | {v['garment']['eps=1']:.4f} | "
                     f"{'yes' if v['garment_targets_met'] else 'no'} | {len(v['worse_cells'])} | "
                     f"{'yes' if v['qualifies'] else 'no'} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = split_parser(__doc__, splits=50, quick_splits=5, quick_help="synthetic n = 10^3 only (a smoke run)",
                          split_help="random 80/20 splits per cell", data_help=None)
    parser.add_argument("--shares", type=str, default=",".join(f"{s:g}" for s in SHARES),
                        help="comma-separated fixed alpha shares in (0, 1)")
    args = parse_split_args(parser, argv)
    try:
        shares = [float(s) for s in args.shares.split(",")]
    except ValueError:
        parser.error(f"--shares must be numbers in (0, 1), got {args.shares!r}")
    if not all(0.0 < s < 1.0 for s in shares):
        parser.error("every share must lie in (0, 1)")
    start = time.perf_counter()
    sizes = utility.SYNTHETIC_SIZES[:1] if args.quick else utility.SYNTHETIC_SIZES
    tables = [utility.real_table(garment()), utility.real_table(forest_fires())] + [
        utility.synthetic_table(n, args.seed) for n in sizes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # seeded noise and the fallback ridge warn per fit
        rows = [row for t in tables for row in run_table(t, args.splits, args.seed, shares)]
    write_run("utility_shares.py", argv, args, start, {"delta": DELTA, "rows": rows, "verdicts": verdicts(rows)},
              markdown)

if __name__ == "__main__":
    main()
