"""Utility cost of two-sided cross-block noise (issue 20): Gaussian FM with one-sided vs two-sided noise.

    python benchmarks/two_sided_noise.py --out docs/data/two_sided_noise.json     # the committed numbers
    python benchmarks/two_sided_noise.py --quick --out /tmp/two_sided.json        # 20 splits, about 2 s

In the vertical FM release (Xu, Yuan & Wu 2021's dissection) each cross-party block used to carry one calibrated
noise draw, made by its responder, who therefore knew it. With two-sided noise both parties of the block add an
independent full draw (distributed noise with m = 2 contributors tolerating t = 1), so no single participant knows
the total; the released cross blocks then carry twice the calibrated variance. This benchmark measures what that
costs in test MSE and R^2.

Setting, for every data set and epsilon in {0.5, 1, 2} (delta = 1e-5), with intercept (the label owner carries the
public constant column, as in a networked run), over ``--splits`` random train/test splits (median and quartiles):

* synthetic: the shape of docs/benchmarks_synthetic.md (de Jong et al. 2022, Sec. 3.2: D = 20, x ~ N(0, I),
  population R^2 = 0.5, features declared in [-3, 3] and clipped, y in +-3 population sd), one sample of 20 000
  rows (seed), each split 10 000 train / 10 000 test rows; parties: A = x0..x9 + label, B = x10..x19;
* forest fires (517 rows) and garment (1197 rows) with the parties of parties/ (A holds the label) and the
  declared bounds of vfl.data.datasets.public_bounds; each split 80 % train / 20 % test.

Each split draws the noise once per block; the two-sided variant adds a second independent draw to every cross
block (paired comparison: the first draw is shared). Release, projection and solve are those of a networked run
in floating point (vfl.privacy.mechanisms block noise, the default public eigenvalue floor of the calibrated noise,
``fallback="ridge"`` where every eigenvalue is floored; the networked release's exact fixed-point rounding and
discrete noise change nothing at this scale). Writes JSON and prints the Markdown table docs/privacy.md quotes
(checked by tests/docs/test_docs_two_sided_noise.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from run_record import data_finder, parse_split_args, split_parser, write_run

from vfl.data.datasets import Dataset, forest_fires, garment, public_bounds, synthetic
from vfl.fm.dissection import DissectionPlan
from vfl.fm.domain import from_unit_interval_coefficients, prepare_labels, prepare_party_block, resolve_bounds
from vfl.fm.solver import solve_details
from vfl.privacy.mechanisms import make_mechanism

EPSILONS = (0.5, 1.0, 2.0)
DELTA = 1e-5
SYNTHETIC_ROWS, SYNTHETIC_D, SYNTHETIC_R2 = 20_000, 20, 0.5
FEATURE_BOUND, Y_BOUND_SDS = 3.0, 3.0


@dataclass
class Table:
    """A data set with its vertical split (party A holds the label) and declared bounds."""

    name: str
    X: np.ndarray
    y: np.ndarray
    party_a: list[int]
    party_b: list[int]
    bounds: list[tuple[float, float]]
    y_bounds: tuple[float, float]
    n_train: int | None = None     # None: 80 % of the rows


def synthetic_table(seed: int) -> Table:
    data = synthetic(SYNTHETIC_ROWS, SYNTHETIC_D, r2=SYNTHETIC_R2, random_state=seed)
    assert data.coef is not None
    s_y = math.sqrt(float(data.coef @ data.coef) / SYNTHETIC_R2)
    a, b = data.party_blocks()
    return Table("synthetic", data.X, data.y, list(range(a.shape[1])), list(range(a.shape[1], data.X.shape[1])),
                 [(-FEATURE_BOUND, FEATURE_BOUND)] * data.X.shape[1], (-Y_BOUND_SDS * s_y, Y_BOUND_SDS * s_y),
                 n_train=SYNTHETIC_ROWS // 2)


def real_table(data: Dataset) -> Table:
    bounds = public_bounds(data.name, dataset=data)
    cols = list(data.party_columns.values())
    return Table(data.name, data.X, data.y, data.column_indices(cols[0]), data.column_indices(cols[1]),
                 [bounds[f] for f in data.feature_names], bounds[data.target_name])


class VerticalFM:
    """Exact FM statistics of one training set, prepared as a networked run does (columns mapped by the declared
    bounds into the l2 domain, party A = its columns + the constant column 1/sqrt(d), then party B)."""

    def __init__(self, table: Table, train: np.ndarray) -> None:
        X, y = table.X[train], table.y[train]
        self.n, p = X.shape
        d = p + 1
        self.bounds = resolve_bounds(list(table.bounds), X)
        U, self.col_scale = prepare_party_block(X, bounds=self.bounds, domain="l2", n_features_total=d,
                                                row_norm="scale", out_of_bounds="clip")
        self.icpt = 1.0 / math.sqrt(d)
        y_unit, yb = prepare_labels(y, "linear", y_bounds=table.y_bounds, out_of_bounds="clip")
        self.y_lo, self.y_hi = float(yb.lower[0]), float(yb.upper[0])
        part_a = np.hstack([U[:, table.party_a], np.full((self.n, 1), self.icpt)])
        self.order = table.party_a + table.party_b           # feature order of w (without the constant)
        self.plan = DissectionPlan([len(table.party_a) + 1, len(table.party_b)], 0, model="linear")
        self.exact = {b.name: self.plan.block_value(b, [part_a, U[:, table.party_b]], y_unit)
                      for b in self.plan.blocks}
        self.p_a = len(table.party_a)

    def fit(self, epsilon: float | None, rng: np.random.Generator, extra: np.random.Generator | None = None):
        """(coef, intercept, fallback used) in original units. ``epsilon=None``: no noise (the non-private fit,
        floor 0); ``extra``: the generator of the second draw of every cross block (two-sided noise)."""
        if epsilon is None:
            mech = make_mechanism("none", plan=self.plan, n_samples=self.n, domain="l2")
        else:
            mech = make_mechanism("gaussian-fm", plan=self.plan, n_samples=self.n, epsilon=epsilon, delta=DELTA,
                                  domain="l2", seeded=True, noise_sharing="two-sided" if extra else "one-sided",
                                  budget_split="equal")   # the split of the committed numbers (before issue 24)
        values = {}
        for b in self.plan.blocks:
            noise = mech.block_noise(b, rng)
            if extra is not None and b.cross:
                noise = noise + mech.block_noise(b, extra)
            values[b.name] = self.exact[b.name] + noise
        result = solve_details(self.plan.assemble(values), lambda_floor=mech.lambda_floor, fallback="ridge")
        w = result.w
        w_x = np.empty(len(self.order))
        w_x[self.order] = np.concatenate([w[: self.p_a], w[self.p_a + 1:]])
        coef, icpt = from_unit_interval_coefficients(w_x, self.bounds, self.col_scale)
        icpt += float(w[self.p_a] * self.icpt)
        half = (self.y_hi - self.y_lo) / 2.0
        return half * coef, self.y_lo + half * (1.0 + icpt), result.fallback_used


def scores(table: Table, test: np.ndarray, fitted) -> tuple[float, float]:
    coef, icpt, _ = fitted
    y = table.y[test]
    mse = float(np.mean((table.X[test] @ coef + icpt - y) ** 2))
    return mse, 1.0 - mse / float(np.var(y))


def summary(values: Sequence[float]) -> dict:
    q = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return {"median": float(q[1]), "q25": float(q[0]), "q75": float(q[2])}


def run_table(table: Table, splits: int, seed: int) -> list[dict]:
    """Every epsilon of one data set: medians over ``splits`` random splits, one noise draw per split."""
    n = table.X.shape[0]
    n_train = table.n_train or int(round(0.8 * n))
    master = np.random.SeedSequence([seed, sum(map(ord, table.name))])
    cells: dict[tuple[float, str], list[tuple[float, float]]] = {}
    fallbacks: dict[tuple[float, str], int] = {}
    for child in master.spawn(splits):
        split_seed, *noise_seeds = child.spawn(1 + 2 * len(EPSILONS))
        perm = np.random.default_rng(split_seed).permutation(n)
        train, test = perm[:n_train], perm[n_train:]
        fm = VerticalFM(table, train)
        cells.setdefault((0.0, "none"), []).append(scores(table, test, fm.fit(None, np.random.default_rng(0))))
        for i, eps in enumerate(EPSILONS):
            first, second = noise_seeds[2 * i], noise_seeds[2 * i + 1]
            for variant, extra in (("one_sided", None), ("two_sided", np.random.default_rng(second))):
                # paired: both variants share the first draw of every block (same seed), two-sided adds a second
                fitted = fm.fit(eps, np.random.default_rng(first), extra)
                cells.setdefault((eps, variant), []).append(scores(table, test, fitted))
                fallbacks[(eps, variant)] = fallbacks.get((eps, variant), 0) + int(fitted[2])
    none = cells[(0.0, "none")]
    rows = []
    for eps in EPSILONS:
        row = {"dataset": table.name, "epsilon": eps, "splits": splits, "n_train": n_train, "n_test": n - n_train,
               "party_columns": [len(table.party_a), len(table.party_b)],
               "none": {"mse": summary([m for m, _ in none]), "r2": summary([r for _, r in none])}}
        for variant in ("one_sided", "two_sided"):
            vals = cells[(eps, variant)]
            row[variant] = {"mse": summary([m for m, _ in vals]), "r2": summary([r for _, r in vals]),
                            "fallbacks": fallbacks[(eps, variant)]}
        row["mse_ratio"] = row["two_sided"]["mse"]["median"] / row["one_sided"]["mse"]["median"]
        rows.append(row)
    return rows




def markdown(doc: dict) -> str:
    """The table docs/privacy.md quotes (median test MSE and R^2 over the splits)."""
    lines = ["| data set, ε | non-private MSE | one-sided MSE | two-sided MSE | MSE ratio | non-private R² | "
             "one-sided R² | two-sided R² |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        m, q = (lambda v: f"{v:.4g}"), (lambda v: f"{v:.4f}")
        lines.append(f"| {r['dataset']}, {r['epsilon']:g} | {m(r['none']['mse']['median'])} | "
                     f"{m(r['one_sided']['mse']['median'])} | {m(r['two_sided']['mse']['median'])} | "
                     f"{r['mse_ratio']:.3f} | {q(r['none']['r2']['median'])} | {q(r['one_sided']['r2']['median'])} | "
                     f"{q(r['two_sided']['r2']['median'])} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = split_parser(__doc__, splits=500, quick_splits=20, quick_help="(a smoke run)",
                          split_help="random train/test splits per data set (>= 50)",
                          data_help="folder with the raw forest fires/garment CSVs")
    args = parse_split_args(parser, argv)
    start, find = time.perf_counter(), data_finder(args)
    tables = [synthetic_table(args.seed), real_table(forest_fires(find("forestfires.csv"))),
              real_table(garment(find("garments_worker_productivity.csv")))]
    rows = [row for t in tables for row in run_table(t, args.splits, args.seed)]
    write_run("two_sided_noise.py", argv, args, start, {"delta": DELTA, "epsilons": list(EPSILONS), "rows": rows},
              markdown)

if __name__ == "__main__":
    main()
