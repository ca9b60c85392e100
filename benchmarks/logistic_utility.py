"""Utility of private logistic regression (issue 24): median test accuracy over random 80/20 splits, one invocation.

    python benchmarks/logistic_utility.py --out docs/data/logistic_utility.json      # the committed numbers
    python benchmarks/logistic_utility.py --quick --out /tmp/logistic_utility.json   # 5 splits, a smoke run

Data (``synthetic``, the setting of the outside study as far as it is known: logistic model, n = 10^4 training rows,
d = 10, non-private accuracy about 0.87): one sample of 12,500 rows, x ~ N(0, I_10), a true direction with
coordinates N(2, 1.5^2) (de Jong et al. 2022's coefficient law) scaled to ||w*|| = 4 (the Bayes accuracy of a
logistic model with x.w* ~ N(0, 16) is 0.871), no intercept, y ~ Bernoulli(sigmoid(x.w*)); every feature is declared
in [-3, 3] and clipped to it. ``synthetic-aniso`` (a robustness cell, not the study's): features 6-10 have standard
deviation 0.3 and the signs of w* are random, with w* scaled so that the scores x.w* again have standard deviation 4
(the second-moment matrix is far from isotropic, where a large ridge bends the direction). ``forestfires (area > 0)``
(real data): the 517 forest fires with the label "the fire burned a measurable area" (area > 0, 52 % of the rows),
the parties of parties/ (A: 23 columns and the label, B: 4) and the declared bounds of
vfl.data.datasets.public_bounds; 414 training rows, so every private method is near chance at small epsilon.

Every method sees the same splits, bounds and clipping, with an intercept (the public constant column 1/sqrt(d) of
the l2 domain), delta = 1e-5:

* ``nonprivate``: the exact logistic-loss minimiser on the clipped training data (Newton, ridge 1e-10);
* ``taylor``: the order-2 Taylor FM objective without noise (floor 0): the ceiling of any quadratic FM;
* ``objpert``: objective perturbation (Chaudhuri et al. 2011, Alg. 2; vfl.models.baselines.ObjectivePerturbation,
  pure epsilon-DP, regularisation 1e-3);
* ``noisygd``: noisy gradient descent (vfl.models.baselines.NoisyGradientDescent, 100 steps, exact accounting);
* ``gfm_before``: Gaussian FM as released before (eigenvalue floor lambda_0 = sqrt(d) tau_M);
* ``gfm``: Gaussian FM as released now (the floor selected from the release, vfl.privacy.floor_selection).

Both FM columns are released as a networked run releases them: the vertical plan of two parties (synthetic:
A: features 1-5, the constant column and the label; B: features 6-10), two-sided noise (both parties of every
cross block add a full calibrated draw), equal budget split, ``fallback="ridge"``; paired (the same standard
normal draws).

Budget split (the alpha block's share of the joint budget; logistic keeps the equal split): ``gfm`` again with the
alpha shares 0.2 and 0.7, same draws. The decomposition (``--quick`` too) separates the sources of the gap on the
same draws: Taylor bias (nonprivate - taylor), noise on alpha only and on M only (floor lambda_0), both, and the
floor (gfm - gfm_before). Writes JSON
(every median, the target of issue 24 with pass/miss) and prints the Markdown tables that
docs/benchmarks_logistic.md quotes (checked by tests/docs/test_docs_logistic.py).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from run_record import parse_split_args, split_parser, write_run
from threadpoolctl import threadpool_limits

from vfl.data.datasets import forest_fires, public_bounds
from vfl.fm.dissection import DissectionPlan
from vfl.fm.domain import ColumnBounds, prepare_party_block
from vfl.fm.solver import solve_details
from vfl.models.base import sigmoid
from vfl.models.baselines import NoisyGradientDescent, ObjectivePerturbation
from vfl.privacy.floor_selection import release_floor
from vfl.privacy.mechanisms import make_mechanism

EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-5
N_TRAIN, D, FEATURE_BOUND, SCORE_SD = 10_000, 10, 3.0, 4.0
PARTY_A = 5   # features of party A (the label owner, also holding the constant column)
FOREST_FIRES = "forestfires (area > 0)"
METHODS = ("nonprivate", "taylor", "objpert", "noisygd", "gfm_before", "gfm")
DECOMPOSITION = ("alpha_noise_only", "m_noise_only", "both_floor0", "both_selected")
SPLITS = (0.2, 0.7)   # other budget splits (the alpha block's share), selected floor: measured, not the default
SPLIT_COLUMNS = tuple(f"gfm_alpha_share_{s:g}" for s in SPLITS)
#: issue 24: logistic epsilon = 1 within 1 accuracy point of objective perturbation (the issue's cell); the same
#: criterion is reported at epsilon 0.25 and 0.5 (the slice: epsilon <= 1)
TARGET_EPSILONS, TARGET_GAP = (0.25, 0.5, 1.0), 0.01


@dataclass
class Cell:
    """A data set with party A's columns first (``p_a`` of them; A also holds the label and the constant column),
    party B's after, and the declared public bounds (lo, hi) of every column."""

    X: np.ndarray
    y: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    p_a: int

    def clipped(self) -> np.ndarray:
        return np.clip(self.X, self.lo, self.hi)


def forest_fires_cell(data_dir: Path | None) -> Cell:
    """Forest fires (517 rows) with the label "the fire burned a measurable area" (area > 0, 52 % of the rows), the
    parties of parties/ and the declared bounds of vfl.data.datasets.public_bounds."""
    data = forest_fires(data_dir / "forestfires.csv" if data_dir else None)
    bounds = public_bounds(data.name, dataset=data)
    cols = [data.column_indices(c) for c in data.party_columns.values()]
    order = cols[0] + cols[1]
    names = [data.feature_names[j] for j in order]
    return Cell(data.X[:, order], (data.y > 0).astype(float), np.array([bounds[f][0] for f in names]),
                np.array([bounds[f][1] for f in names]), len(cols[0]))


def make_data(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One sample of N_TRAIN / 0.8 rows of the synthetic cell ``kind`` (module docstring)."""
    rng = np.random.default_rng([seed, sum(map(ord, kind))])
    n = int(round(N_TRAIN / 0.8))
    sd = np.ones(D) if kind == "synthetic" else np.array([1.0] * PARTY_A + [0.3] * (D - PARTY_A))
    X = rng.standard_normal((n, D)) * sd
    w = rng.normal(2.0, 1.5, size=D)
    if kind != "synthetic":
        w = w * rng.choice([-1.0, 1.0], size=D) / sd
    w *= SCORE_SD / np.linalg.norm(w * sd)
    y = (rng.random(n) < sigmoid(X @ w)).astype(float)
    return X, y


def make_cell(kind: str, seed: int, data_dir: Path | None = None) -> Cell:
    if kind == FOREST_FIRES:
        return forest_fires_cell(data_dir)
    X, y = make_data(kind, seed)
    return Cell(X, y, np.full(D, -FEATURE_BOUND), np.full(D, FEATURE_BOUND), PARTY_A)


class PreparedSplit:
    """One split prepared as a networked run prepares it: columns mapped by the declared bounds into the l2 domain
    (clipped), party A = its columns + the constant column 1/sqrt(d), party B = the rest; exact FM blocks."""

    def __init__(self, cell: Cell, train: np.ndarray, test: np.ndarray) -> None:
        X, y, p_a = cell.X, cell.y, cell.p_a
        self.bounds = ColumnBounds(cell.lo, cell.hi)
        d = X.shape[1] + 1
        self.n = train.size
        prep = [np.hstack([u[:, :p_a], np.full((u.shape[0], 1), 1.0 / math.sqrt(d)), u[:, p_a:]])
                for u in (prepare_party_block(X[idx], bounds=self.bounds, domain="l2", n_features_total=d,
                                              row_norm="scale", out_of_bounds="clip")[0] for idx in (train, test))]
        self.U, self.U_test = prep
        self.y, self.y_test = y[train], y[test]
        self.X_clip = cell.clipped()
        self.train, self.test = train, test
        self.plan = DissectionPlan([p_a + 1, X.shape[1] - p_a], 0, model="logistic")
        parts = [self.U[:, : p_a + 1], self.U[:, p_a + 1:]]
        self.exact = {b.name: self.plan.block_value(b, parts, self.y) for b in self.plan.blocks}

    def accuracy(self, w: np.ndarray) -> float:
        return float(np.mean((self.U_test @ w > 0) == (self.y_test == 1.0)))

    def nonprivate(self) -> np.ndarray:
        """Exact logistic-loss minimiser (Newton; ridge 1e-10 only to keep the Hessian invertible)."""
        w = np.zeros(self.U.shape[1])
        for _ in range(100):
            p = sigmoid(self.U @ w)
            grad = self.U.T @ (p - self.y) / self.n + 1e-10 * w
            if np.linalg.norm(grad) < 1e-12:
                break
            hess = (self.U.T * (p * (1 - p))) @ self.U / self.n + 1e-10 * np.eye(w.size)
            w = w - np.linalg.solve(hess, grad)
        return w

    def fm(self, epsilon: float | None, seeds: Sequence[np.random.SeedSequence] = (), *, noise_on: str = "both",
           floor: str = "selected", split: str | float = "risk") -> np.ndarray:
        """Gaussian FM with two-sided noise on ``noise_on`` ("alpha", "M" or "both"); ``floor``: "selected" (the
        library's rule) or "before" (lambda_0); ``split``: the budget split (default: the library's, equal for
        logistic). ``epsilon=None``: the noise-free Taylor objective, floor 0."""
        if epsilon is None:
            return solve_details(self.plan.assemble(self.exact), lambda_floor=0.0).w
        mech = make_mechanism("gaussian-fm", plan=self.plan, n_samples=self.n, epsilon=epsilon, delta=DELTA,
                              domain="l2", seeded=True, noise_sharing="two-sided", budget_split=split)
        first, second = (np.random.default_rng(s) for s in seeds)
        values = {}
        for b in self.plan.blocks:
            noise = mech.block_noise(b, first)
            if b.cross:
                noise = noise + mech.block_noise(b, second)
            values[b.name] = self.exact[b.name] + (noise if noise_on in ("both", b.kind) else 0.0)
        objective = self.plan.assemble(values)
        lam = release_floor(objective, mech) if floor == "selected" else mech.lambda_floor
        return solve_details(objective, lambda_floor=lam, fallback="ridge").w

    def baseline(self, cls: type, epsilon: float, seed: np.random.SeedSequence) -> float:
        """Accuracy of a library baseline fitted on the raw clipped columns with the same declared bounds."""
        kw = {"delta": DELTA} if cls is NoisyGradientDescent else {}
        est = cls(epsilon=epsilon, bounds=self.bounds, out_of_bounds="clip",
                  random_state=int(seed.generate_state(1)[0]), **kw).fit(self.X_clip[self.train], self.y)
        z = self.X_clip[self.test] @ est.coef_ + est.intercept_
        return float(np.mean((z > 0) == (self.y_test == 1.0)))


def split_scores(split: PreparedSplit, seeds: list[np.random.SeedSequence]) -> dict[tuple[str, float], float]:
    """Test accuracy of every method, decomposition step and epsilon on one split."""
    out = {("nonprivate", 0.0): split.accuracy(split.nonprivate()), ("taylor", 0.0): split.accuracy(split.fm(None))}
    for eps, seed in zip(EPSILONS, seeds, strict=True):
        noise_seed, op_seed, gd_seed = seed.spawn(3)
        pair = noise_seed.spawn(2)   # spawned once: every FM fit below reuses the same two seeds
        out[("gfm", eps)] = split.accuracy(split.fm(eps, pair))
        out[("gfm_before", eps)] = split.accuracy(split.fm(eps, pair, floor="before"))
        out[("alpha_noise_only", eps)] = split.accuracy(split.fm(eps, pair, noise_on="alpha", floor="before"))
        out[("m_noise_only", eps)] = split.accuracy(split.fm(eps, pair, noise_on="M", floor="before"))
        out[("both_floor0", eps)] = out[("gfm_before", eps)]
        out[("both_selected", eps)] = out[("gfm", eps)]
        for share, column in zip(SPLITS, SPLIT_COLUMNS, strict=True):
            out[(column, eps)] = split.accuracy(split.fm(eps, pair, split=share))
        out[("objpert", eps)] = split.baseline(ObjectivePerturbation, eps, op_seed)
        out[("noisygd", eps)] = split.baseline(NoisyGradientDescent, eps, gd_seed)
    return out


def run_cell(kind: str, splits: int, seed: int, data_dir: Path | None = None) -> list[dict]:
    cell = make_cell(kind, seed, data_dir)
    n = cell.X.shape[0]
    n_train = int(round(0.8 * n))
    master = np.random.SeedSequence([seed, sum(map(ord, kind)), 1])
    scores = []
    for child in master.spawn(splits):
        split_seed, *eps_seeds = child.spawn(1 + len(EPSILONS))
        perm = np.random.default_rng(split_seed).permutation(n)
        scores.append(split_scores(PreparedSplit(cell, perm[:n_train], perm[n_train:]), eps_seeds))
    rows = []
    for eps in EPSILONS:
        row: dict = {"data": kind, "epsilon": eps, "splits": splits, "n_train": n_train, "n_test": n - n_train}
        for m in METHODS + DECOMPOSITION + SPLIT_COLUMNS:
            row[m] = float(np.median([s[(m, 0.0 if m in ("nonprivate", "taylor") else eps)] for s in scores]))
        diff = np.array([s[("gfm", eps)] - s[("gfm_before", eps)] for s in scores])
        row["gfm_minus_before_mean"] = float(diff.mean())
        row["gfm_minus_before_se"] = float(diff.std(ddof=1) / math.sqrt(splits))
        rows.append(row)
    return rows


def targets(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        if r["data"] == "synthetic" and r["epsilon"] in TARGET_EPSILONS:
            gap = r["objpert"] - r["gfm"]
            ok = gap <= TARGET_GAP
            out.append({"cell": f"{r['data']}, eps={r['epsilon']:g}",
                        "target": "Gaussian FM within 1 accuracy point of objective perturbation"
                                  + (" (issue 24)" if r["epsilon"] == 1.0 else " (ε ≤ 1)"),
                        "value": gap, "met": ok,
                        "reason": None if ok else (
                            f"{gap - TARGET_GAP:.4f} beyond the allowed gap: the noise on M (accuracy with noise on "
                            f"M only {r['m_noise_only']:.4f}, on alpha only {r['alpha_noise_only']:.4f}); the "
                            f"selected floor recovers {r['gfm'] - r['gfm_before']:.4f} of it; alpha shares "
                        + ", ".join(f"{s:g}: {r[c]:.4f}" for s, c in zip(SPLITS, SPLIT_COLUMNS, strict=True))
                        + " (equal split: the default)")})
    return out




def markdown(doc: dict) -> str:
    """The tables docs/benchmarks_logistic.md quotes: accuracies, the decomposition, then the target."""
    head = ["| data, ε | non-private | Taylor, no noise | objective perturbation | noisy GD | Gaussian FM before "
            "(floor λ₀) | Gaussian FM (selected floor, default) | FM − before (mean ± s.e.) |",
            "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        head.append(f"| {r['data']}, {r['epsilon']:g} | " + " | ".join(f"{r[m]:.4f}" for m in METHODS)
                    + f" | {r['gfm_minus_before_mean']:+.4f} ± {r['gfm_minus_before_se']:.4f} |")
    head += ["", "| data, ε | Taylor bias (non-private − Taylor) | noise on α only | noise on M only | both, floor λ₀ "
             "| both, selected floor |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        head.append(f"| {r['data']}, {r['epsilon']:g} | {r['nonprivate'] - r['taylor']:.4f} | "
                    + " | ".join(f"{r[m]:.4f}" for m in DECOMPOSITION) + " |")
    head += ["", "| data, ε | equal split (default) | " + " | ".join(f"α share {s:g}" for s in SPLITS) + " |",
             "|---|---|" + "---|" * len(SPLITS)]
    for r in doc["rows"]:
        head.append(f"| {r['data']}, {r['epsilon']:g} | {r['gfm']:.4f} | "
                    + " | ".join(f"{r[c]:.4f}" for c in SPLIT_COLUMNS) + " |")
    head += ["", "| target cell | target | objective perturbation − Gaussian FM | met | reason |",
             "|---|---|---|---|---|"]
    for t in doc["targets"]:
        head.append(f"| {t['cell']} | {t['target']} | {t['value']:.4f} | {'yes' if t['met'] else 'no'} | "
                    f"{t['reason'] or ''} |")
    return "\n".join(head)


def main(argv: Sequence[str] | None = None) -> None:
    parser = split_parser(__doc__, splits=50, quick_splits=5, quick_help="the synthetic cell only (a smoke run)",
                          split_help="random 80/20 splits per cell", data_help="folder with the raw forest fires CSV")
    args = parse_split_args(parser, argv)
    start = time.perf_counter()
    cells = ("synthetic",) if args.quick else ("synthetic", "synthetic-aniso", FOREST_FIRES)
    # thousands of tiny eigendecompositions: a multi-threaded BLAS on the shared cores spent ~30 ms on each instead
    # of well under 1 ms (measured); one BLAS thread (speed only)
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")   # seeded noise and repeated fits warn per fit; the JSON says so
        rows = [row for kind in cells for row in run_cell(kind, args.splits, args.seed, args.data_dir)]
    write_run("logistic_utility.py", argv, args, start, {"delta": DELTA, "epsilons": list(EPSILONS), "rows": rows,
                                                         "targets": targets(rows)}, markdown)

if __name__ == "__main__":
    main()
