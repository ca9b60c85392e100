"""The epsilon planner: what a private fit will cost in accuracy, from public facts only, before any budget is spent.

A user who must pick epsilon and the number of rows N gives what is public anyway -- N, the columns of each party,
the model, the mechanism, delta, and optionally the declared bounds -- and gets, for every epsilon of a grid:

* the **noise per released block**, from the library's own calibration (:func:`vfl.privacy.mechanisms.make_mechanism`
  on the run's :class:`~vfl.fm.dissection.DissectionPlan`, two-sided noise on cross blocks as a networked run adds
  it), and the public eigenvalue floor of the solve;
* the **expected excess error** of the released model over the non-private fit on the same rows: test MSE for linear
  regression (and the R^2 it costs, excess MSE / Var(y)), test log-loss and accuracy for logistic regression;
* the **expected interval width per coefficient**: 2 z_{1-a/2} RMSE(w_j), with RMSE(w_j) the root-mean-square error
  of the released coefficient about the true one over the sampling of N rows and the mechanism's noise together:
  the width an interval centred at the estimate must span to cover the truth at level 1 - a when that error is
  near normal (for an unbiased estimator, 2 z sd(w_j); the floor's shrinkage adds its bias, so at small epsilon the
  width is not the estimate's spread). Intervals computed from a release (e.g. the parametric bootstrap of
  Ferrando, Wang & Sheldon 2022) cannot be narrower than this and cover;
* the share of runs whose noisy objective has no eigenvalue above the floor (a networked run then writes no model).

``mechanism="noisy-gd"`` (:mod:`vfl.privacy.gradient_release`, Bassily, Smith & Thakurta 2014) releases T noisy
gradients instead of the matrix: the noise row is then the per-round sigma per gradient coordinate (networked,
``noise_sharing="two-sided"``: each of the two parties draws sigma, calibrated against a hostile co-party as
:func:`vfl.protocols.gd_phase.gd_params` does, so the gradient carries sqrt(2) sigma; ``"central"``: one draw of the
in-process estimator's sigma), no floor, and each replicate runs the same T projected steps from w_0 = 0 on the
replicate's exact FM objective plus that noise (:func:`vfl.privacy.gradient_release.run_noisy_gradient`, the average
iterate as the model).

How. The noise law of the functional mechanism (Zhang et al. 2012; Gaussian FM, Tasnim et al. 2023) depends on
public facts only, but the error it causes depends on the data, which the planner has not seen. It therefore
simulates the release on a **reference data set drawn within the bounds** (the assumption is printed with the
result): independent columns, each normal around the middle of its declared bounds with standard deviation
``spread`` x its half-range, clipped to the bounds (the default spread 1/3 puts the bounds at +-3 sd, as
benchmarks/utility.py declares them); a linear label y = x . b + e that fills its declared bounds the same way
(sd ``spread`` x half-range, clipped), with population R^2 = ``r2`` and every column explaining the same share; or
a logistic label with P(y = 1 | x) = sigmoid(x . b), the
log-odds having standard deviation ``logit_sd``. Each replicate draws the exact block statistics of N rows -- for N
above :data:`SAMPLE_ROWS` by the central-limit rescaling s_N = s_pop + (s_n - s_pop) sqrt(n / N) of a sample of n
rows, so the cost does not grow with N -- adds the mechanism's noise block by block (``Mechanism.block_noise``, the
same draws an in-process fit makes), solves with the library's solve (:func:`vfl.fm.solver.solve_details`, the public
floor of :func:`vfl.privacy.floor_selection.release_floor`, the model's default regularisation) and maps the
coefficients back to the declared units (:func:`vfl.fm.domain.from_unit_interval_coefficients`). The non-private fit
of the same statistics (floor 0) is the reference of the excess error, evaluated on :data:`TEST_ROWS` reference
rows. Everything is in-process numpy: the planner never opens a socket and reads no private data.

The planner is as good as its reference data: real columns that fill less of their bounds, or a weaker signal, make
the real error larger (the release's noise is fixed by the bounds, the signal is not). tests/models/test_planner.py
checks the prediction against fits of independent data sets through :class:`vfl.models.estimators.LinearRegression`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DegenerateNoisyObjective
from vfl.fm.dissection import DissectionPlan
from vfl.fm.domain import ColumnBounds, from_unit_interval_coefficients, to_unit_interval
from vfl.fm.solver import DEFAULT_REGULARIZATION, REGULARIZATIONS, solve_details
from vfl.models.base import sigmoid
from vfl.privacy.floor_selection import release_floor
from vfl.privacy.gradient_release import (
    DEFAULT_RADIUS,
    DEFAULT_STEPS,
    GD_MECHANISMS,
    GradientRelease,
    objective_gradient,
    run_noisy_gradient,
)
from vfl.privacy.mechanisms import DEFAULT_DOMAIN, MECHANISMS, Mechanism, make_mechanism
from vfl.rng import RandomState, make_rng

__all__ = ["plan_epsilon", "EpsilonPlan", "PlanRow", "BlockNoise", "DEFAULT_EPSILONS", "SAMPLE_ROWS", "TEST_ROWS"]

DEFAULT_EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
SAMPLE_ROWS = 4_000        # rows drawn per replicate; above it the statistics are rescaled to N (module docstring)
POPULATION_ROWS = 200_000  # rows of the reference population's statistics (the centre of the rescaling)
TEST_ROWS = 20_000         # reference rows the excess error is measured on


@dataclass(frozen=True)
class BlockNoise:
    """The noise of one released block: per-entry standard deviation of one calibrated draw (average-form
    coefficient units; a diagonal M block's off-diagonal entries), the number of independent draws it carries, and
    their combined standard deviation."""

    block: str
    kind: str
    parties: tuple[int, ...]
    entry_std: float
    draws: int
    total_std: float


@dataclass
class PlanRow:
    """The prediction at one epsilon (``excess_*`` over the non-private fit of the same rows; means and medians
    over the replicates, with the Monte Carlo standard error of the mean)."""

    epsilon: float
    true_epsilon: float | None
    noise: list[BlockNoise]
    lambda_floor: float
    excess_error_mean: float
    excess_error_mean_se: float
    excess_error_median: float
    relative_excess_median: float
    coef_rmse: list[float]
    interval_width: list[float]
    no_model_share: float
    accuracy_loss_median: float | None = None


@dataclass
class EpsilonPlan:
    """The planner's answer: the settings and assumptions it used and one :class:`PlanRow` per epsilon."""

    settings: dict[str, Any]
    assumptions: list[str]
    names: list[str]
    error_measure: str
    rows: list[PlanRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "assumptions": self.assumptions, "names": self.names,
                "error_measure": self.error_measure, "rows": [asdict(r) for r in self.rows]}

    def text(self) -> str:
        """A table to read: one line per epsilon, then the interval widths and the noise per block."""
        s = self.settings
        relative = "R^2 lost" if s["model"] == "linear" else "accuracy lost"
        out = [f"epsilon planner: {s['model']} regression, {s['mechanism']}, N = {s['n_rows']}, columns per party "
               f"{s['party_columns']}" + (" + intercept" if s["fit_intercept"] else "") + f", delta = {s['delta']:g}",
               "assumed (public facts are exact, the data are not): " + "; ".join(self.assumptions), "",
               f"{'epsilon':>8} {'excess ' + self.error_measure + ' (median)':>26} {relative + ' (median)':>22} "
               f"{'mean +- s.e.':>22} {'no model':>9}  95% interval width (median over coefficients)"]
        for r in self.rows:
            lost = r.relative_excess_median if s["model"] == "linear" else r.accuracy_loss_median
            out.append(f"{r.epsilon:>8g} {r.excess_error_median:>26.4g} {lost if lost is not None else 0.0:>22.4f} "
                       f"{r.excess_error_mean:>12.4g} +- {r.excess_error_mean_se:<7.2g} {r.no_model_share:>8.0%}  "
                       f"{float(np.median(r.interval_width)):.4g}")
        out += ["", "expected 95% interval width per coefficient (declared units):",
                f"{'epsilon':>8} " + " ".join(f"{n[:12]:>12}" for n in self.names)]
        for r in self.rows:
            out.append(f"{r.epsilon:>8g} " + " ".join(f"{w:>12.4g}" for w in r.interval_width))
        out += ["", "noise per released block (std per entry, average-form coefficients; x draws = total):"]
        for r in self.rows:
            out.append(f"{r.epsilon:>8g} " + ", ".join(
                f"{b.block} {b.entry_std:.3g}" + (f" x{b.draws} = {b.total_std:.3g}" if b.draws > 1 else "")
                for b in r.noise) + f"; floor {r.lambda_floor:.3g}"
                + (f"; true epsilon {r.true_epsilon:.4g}" if r.true_epsilon is not None else ""))
        return "\n".join(out)


class _Reference:
    """The reference data of the module docstring: raw columns within the declared bounds and a label."""

    def __init__(self, model: str, bounds: ColumnBounds, label_bounds: tuple[float, float] | None, spread: float,
                 r2: float, logit_sd: float) -> None:
        self.model, self.bounds, self.spread = model, bounds, spread
        p = len(bounds)
        self.mid = (bounds.lower + bounds.upper) / 2.0
        self.sd = spread * (bounds.upper - bounds.lower) / 2.0
        # every column explains the same share: b_j sd_j = const, Var(x . b) = p const^2 (clipping ignored)
        if model == "linear":
            lo, hi = label_bounds if label_bounds is not None else (-1.0, 1.0)
            self.label_bounds = (float(lo), float(hi))
            self.y_mid, y_sd = (lo + hi) / 2.0, spread * (hi - lo) / 2.0   # the label fills its bounds as a column
            self.beta = np.full(p, math.sqrt(r2) * y_sd) / self.sd / math.sqrt(p)   # Var(x . b) = R^2 Var(y)
            self.noise_sd = math.sqrt(1.0 - r2) * y_sd
        else:
            self.beta = np.full(p, logit_sd) / self.sd / math.sqrt(p)      # sd of the log-odds = logit_sd
            self.noise_sd, self.label_bounds = 0.0, (0.0, 1.0)

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        X = np.clip(self.mid + self.sd * rng.standard_normal((n, len(self.bounds))), self.bounds.lower,
                    self.bounds.upper)
        z = (X - self.mid) @ self.beta
        if self.model == "linear":
            lo, hi = self.label_bounds
            return X, np.clip(self.y_mid + z + self.noise_sd * rng.standard_normal(n), lo, hi)
        return X, (rng.random(n) < sigmoid(z)).astype(float)


class _Release:
    """The statistics of a run: the columns of the plan's parties in the public domain (the label owner's carrying
    the public constant column), the exact blocks of a table, the noisy release and its solve."""

    def __init__(self, plan: DissectionPlan, order: list[int], ref: _Reference, domain: str, fit_intercept: bool,
                 mech: Mechanism, regularization: str) -> None:
        self.plan, self.order, self.ref, self.domain, self.mech = plan, order, ref, domain, mech
        self.fit_intercept, self.regularization = fit_intercept, regularization
        d = plan.n_features
        self.scale = 1.0 / math.sqrt(d) if domain == "l2" else 1.0
        self.icpt_value = self.scale   # l2: 1/sqrt(d) (its radius), linf: 1 (vfl.models.estimators)

    def blocks(self, X: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        U = to_unit_interval(X, self.ref.bounds, symmetric=not self.fit_intercept) * self.scale
        if self.ref.model == "linear":
            lo, hi = self.ref.label_bounds
            y = (2.0 * (y - lo) / (hi - lo) - 1.0) if self.fit_intercept else y / max(abs(lo), abs(hi))
        parts, start = [], 0
        L = self.plan.label_owner
        for k, dk in enumerate(self.plan.feature_counts):
            own = dk - (1 if (k == L and self.fit_intercept) else 0)
            cols = U[:, self.order[start:start + own]]
            start += own
            if k == L and self.fit_intercept:
                cols = np.hstack([cols, np.full((U.shape[0], 1), self.icpt_value)])
            parts.append(cols)
        return {b.name: self.plan.block_value(b, parts, y) for b in self.plan.blocks}

    def solve(self, values: dict[str, np.ndarray], noisy: bool, rng: np.random.Generator
              ) -> tuple[np.ndarray, float, bool]:
        """(coef, intercept) in declared units and whether the solve fell back to a ridge (no model in a run)."""
        if noisy:
            values = {b.name: values[b.name] + self._noise(b, rng) for b in self.plan.blocks}
        objective = self.plan.assemble(values)
        floor = release_floor(objective, self.mech) if noisy else 0.0
        try:
            res = solve_details(objective, lambda_floor=floor, fallback="ridge" if noisy else "raise",
                                regularization=self.regularization if noisy else "floor",
                                alpha_noise_var=self.mech.alpha_noise_variance() if noisy else None)
        except DegenerateNoisyObjective:
            res = solve_details(objective, lambda_floor=1e-12, fallback="ridge")
        coef, icpt = self.declared(res.w)
        return coef, icpt, res.fallback_used

    def declared(self, w: np.ndarray) -> tuple[np.ndarray, float]:
        """(coef, intercept) in declared units of the unit-domain coefficients ``w``."""
        w_x = np.empty(len(self.order))
        L, start, pos = self.plan.label_owner, 0, 0
        icpt_w = 0.0
        for k, dk in enumerate(self.plan.feature_counts):
            own = dk - (1 if (k == L and self.fit_intercept) else 0)
            w_x[self.order[pos:pos + own]] = w[start:start + own]
            if k == L and self.fit_intercept:
                icpt_w = float(w[start + own])
            start, pos = start + dk, pos + own
        coef, icpt = from_unit_interval_coefficients(w_x, self.ref.bounds, self.scale,
                                                     symmetric=not self.fit_intercept)
        icpt += icpt_w * self.icpt_value
        if self.ref.model == "linear":
            lo, hi = self.ref.label_bounds
            if not self.fit_intercept:
                return max(abs(lo), abs(hi)) * coef, 0.0
            half = (hi - lo) / 2.0
            return half * coef, lo + half * (1.0 + icpt)
        return coef, icpt

    def describe(self) -> tuple[float | None, list[BlockNoise], float]:
        """(true epsilon, the noise per released block, the public floor) of this release."""
        m = self.mech
        draws = {b.name: m.cross_block_draws if b.cross else 1 for b in self.plan.blocks}
        noise = [BlockNoise(b.name, b.kind, tuple(b.parties), m.entry_noise(b).std, draws[b.name],
                            m.entry_noise(b).std * math.sqrt(draws[b.name])) for b in self.plan.blocks]
        return m.privacy_report().epsilon, noise, float(m.lambda_floor)

    def _noise(self, block: Any, rng: np.random.Generator) -> np.ndarray:
        noise = self.mech.block_noise(block, rng)
        for _ in range(self.mech.cross_block_draws - 1 if block.cross else 0):
            noise = noise + self.mech.block_noise(block, rng)
        return noise


class _GradientRun(_Release):
    """A noisy-gd run (module docstring): the same statistics and units; the noisy fit is T noisy projected
    gradient steps on the exact objective, each gradient carrying ``draws`` independent draws of sigma."""

    def __init__(self, plan: DissectionPlan, order: list[int], ref: _Reference, fit_intercept: bool,
                 release: GradientRelease, draws: int) -> None:
        super().__init__(plan, order, ref, "l2", fit_intercept, None, "floor")  # type: ignore[arg-type]
        self.release, self.draws = release, draws

    def solve(self, values: dict[str, np.ndarray], noisy: bool, rng: np.random.Generator
              ) -> tuple[np.ndarray, float, bool]:
        if not noisy:
            return super().solve(values, False, rng)
        rel = self.release
        w, _ = run_noisy_gradient(objective_gradient(self.plan.assemble(values)), self.plan.n_features,
                                  steps=int(rel.steps), eta=rel.eta, radius=float(rel.radius),
                                  sigma=rel.sigma * math.sqrt(self.draws), rng=rng)
        coef, icpt = self.declared(w)
        return coef, icpt, False

    def describe(self) -> tuple[float | None, list[BlockNoise], float]:
        rel = self.release
        name = f"gradient per round (T = {rel.steps})"
        noise = [BlockNoise(name, "d-vector", tuple(range(len(self.plan.feature_counts))), rel.sigma, self.draws,
                            rel.sigma * math.sqrt(self.draws))]
        return rel.privacy_report().epsilon, noise, 0.0


def _gradient_run(plan: DissectionPlan, ref: _Reference, fit_intercept: bool, n_rows: int, eps: float, delta: float,
                  noise_sharing: str) -> _GradientRun:
    """The release a noisy-gd run of this plan makes: networked (two parties, two-sided, sigma calibrated against a
    hostile co-party with r_k = sqrt(d_k / d), as vfl.protocols.gd_phase.gd_params) or central (in-process)."""
    d, counts, owner = plan.n_features, plan.feature_counts, plan.label_owner
    radii = None
    if noise_sharing == "two-sided":
        if len(counts) != 2:
            raise ConfigurationError("a networked noisy-gd run has exactly two parties (use central noise for an "
                                     "in-process fit)")
        radii = (math.sqrt(counts[1 - owner] / d), math.sqrt(counts[owner] / d))
    release = GradientRelease(ref.model, n_rows, d, eps, delta, steps=DEFAULT_STEPS, radius=DEFAULT_RADIUS,
                              party_radii=radii)
    return _GradientRun(plan, list(range(len(ref.bounds))), ref, fit_intercept, release,
                        2 if noise_sharing == "two-sided" else 1)


def _check(n_rows: int, party_columns: Sequence[int], model: str, mechanism: str, epsilons: Sequence[float],
           replicates: int, spread: float, r2: float, alpha: float) -> list[int]:
    counts = [int(c) for c in party_columns]
    if isinstance(n_rows, bool) or int(n_rows) != n_rows or n_rows < 2:
        raise ConfigurationError(f"the number of rows N must be an integer >= 2, got {n_rows!r}")
    if not counts or any(c < 0 for c in counts) or sum(counts) == 0:
        raise ConfigurationError(f"columns per party must be >= 0 with at least one column, got {list(party_columns)}")
    if model not in ("linear", "logistic"):
        raise ConfigurationError(f"model must be linear or logistic, got {model!r}")
    if mechanism not in MECHANISMS + GD_MECHANISMS:
        raise ConfigurationError(f"mechanism must be one of {', '.join(MECHANISMS + GD_MECHANISMS)}, got "
                                 f"{mechanism!r}")
    if not epsilons or any(not (isinstance(e, (int, float)) and math.isfinite(e) and e > 0) for e in epsilons):
        raise ConfigurationError(f"every epsilon must be a positive number, got {list(epsilons)}")
    if replicates < 20:
        raise ConfigurationError(f"replicates must be >= 20 (the spread of a coefficient needs them), got {replicates}")
    if not 0.0 < spread <= 1.0:
        raise ConfigurationError(f"spread (a column's sd as a share of its half-range) must lie in (0, 1], got "
                                 f"{spread}")
    if not 0.0 < r2 < 1.0:
        raise ConfigurationError(f"r2 must lie in (0, 1), got {r2}")
    if not 0.0 < alpha < 1.0:
        raise ConfigurationError(f"alpha must lie in (0, 1), got {alpha}")
    return counts


def plan_epsilon(n_rows: int, party_columns: Sequence[int], *, model: str = "linear",
                 mechanism: str = "gaussian-fm", epsilons: Sequence[float] = DEFAULT_EPSILONS, delta: float = 1e-5,
                 label_owner: int = 0, fit_intercept: bool = True,
                 bounds: Sequence[tuple[float, float]] | None = None,
                 label_bounds: tuple[float, float] | None = None, names: Sequence[str] | None = None,
                 spread: float = 1.0 / 3.0, r2: float = 0.5, logit_sd: float = 1.0,
                 noise_sharing: str = "two-sided", regularization: str | None = None,
                 budget_split: str | float = "risk",
                 replicates: int = 200, alpha: float = 0.05, random_state: RandomState = None) -> EpsilonPlan:
    """Predict, for every epsilon of ``epsilons``, the noise per block, the excess error and the interval width per
    coefficient of a fit of N = ``n_rows`` rows whose parties hold ``party_columns`` columns (global order: party
    0's first; ``label_owner`` holds the label and, with ``fit_intercept``, the public constant column).

    ``bounds``: the declared (lo, hi) of every column in that order, ``label_bounds`` the label's (linear); default
    (-1, 1) for each: the result is then per unit of a half-range. ``spread``,
    ``r2``, ``logit_sd``: the reference data (module docstring). ``noise_sharing``: "two-sided" (a networked run:
    both parties of a cross block add a draw) or "central" (the in-process estimators). ``replicates``: simulated
    runs per epsilon. Public inputs only: no data is read and no budget is spent.
    """
    counts = _check(n_rows, party_columns, model, mechanism, epsilons, replicates, spread, r2, alpha)
    if regularization is not None and regularization not in REGULARIZATIONS:
        raise ConfigurationError(f"regularization must be one of {', '.join(REGULARIZATIONS)}, got {regularization!r}")
    p = sum(counts)
    given = [(-1.0, 1.0)] * p if bounds is None else [tuple(map(float, b)) for b in bounds]
    if len(given) != p:
        raise ConfigurationError(f"bounds: {len(given)} pairs for {p} columns")
    col_bounds = ColumnBounds(np.array([b[0] for b in given]), np.array([b[1] for b in given]))
    col_names = list(names) if names is not None else [f"x{j}" for j in range(p)]
    if len(col_names) != p:
        raise ConfigurationError(f"names: {len(col_names)} names for {p} columns")
    if not 0 <= label_owner < len(counts):
        raise ConfigurationError(f"label owner {label_owner} is not one of the {len(counts)} parties")
    ref = _Reference(model, col_bounds, label_bounds, spread, r2, logit_sd)
    plan_counts = [c + (1 if (k == label_owner and fit_intercept) else 0) for k, c in enumerate(counts)]
    plan = DissectionPlan(plan_counts, label_owner, model=model)  # type: ignore[arg-type]
    domain = DEFAULT_DOMAIN.get(mechanism, "l2")   # noisy-gd: the l2 domain its sensitivity needs
    regularization = regularization or DEFAULT_REGULARIZATION[model]
    rng = make_rng(random_state)
    X_pop, y_pop = ref.draw(POPULATION_ROWS, rng)
    X_test, y_test = ref.draw(TEST_ROWS, rng)
    z = norm_ppf(1.0 - alpha / 2.0)
    result = EpsilonPlan(
        settings={"n_rows": int(n_rows), "party_columns": counts, "label_owner": label_owner, "model": model,
                  "mechanism": mechanism, "delta": delta, "fit_intercept": fit_intercept, "domain": domain,
                  "noise_sharing": noise_sharing, "regularization": regularization, "budget_split": budget_split,
                  "replicates": replicates, "alpha": alpha, "bounds": [list(b) for b in given],
                  "label_bounds": list(ref.label_bounds), "spread": spread,
                  **({"r2": r2} if model == "linear" else {"logit_sd": logit_sd})},
        assumptions=_assumptions(model, spread, r2, logit_sd, bounds is None, label_bounds is None),
        names=col_names + (["intercept"] if fit_intercept else []),
        error_measure="MSE" if model == "linear" else "log-loss")
    for eps in epsilons:
        rel: _Release
        if mechanism in GD_MECHANISMS:
            rel = _gradient_run(plan, ref, fit_intercept, int(n_rows), float(eps), delta, noise_sharing)
        else:
            options = {"budget_split": budget_split} if mechanism == "gaussian-fm" else {}
            mech = make_mechanism(mechanism, plan=plan, n_samples=int(n_rows), epsilon=float(eps), delta=delta,
                                  domain=domain, noise_sharing=noise_sharing, **options)
            rel = _Release(plan, list(range(p)), ref, domain, fit_intercept, mech, regularization)
        pop = rel.blocks(X_pop, y_pop)
        result.rows.append(_simulate(rel, pop, int(n_rows), float(eps), replicates, rng, X_test, y_test, z))
    return result


def _simulate(rel: _Release, pop: dict[str, np.ndarray], n: int, eps: float, replicates: int,
              rng: np.random.Generator, X_test: np.ndarray, y_test: np.ndarray, z: float) -> PlanRow:
    """``replicates`` simulated runs at one epsilon (module docstring); the true coefficients are those of the
    non-private fit of the reference population."""
    c_pop, i_pop, _ = rel.solve(pop, False, rng)
    truth = np.append(c_pop, i_pop) if rel.fit_intercept else c_pop
    rows = min(n, SAMPLE_ROWS)
    shrink = math.sqrt(rows / n)
    excess, acc_loss, coefs, fallbacks = [], [], [], 0
    for _ in range(replicates):
        X, y = rel.ref.draw(rows, rng)
        sample = rel.blocks(X, y)
        values = {k: pop[k] + (sample[k] - pop[k]) * shrink for k in pop} if rows < n else sample
        c0, i0, _ = rel.solve(values, False, rng)
        c1, i1, fell_back = rel.solve(values, True, rng)
        fallbacks += fell_back
        z0, z1 = X_test @ c0 + i0, X_test @ c1 + i1
        if rel.ref.model == "linear":
            excess.append(float(np.mean((z1 - y_test) ** 2) - np.mean((z0 - y_test) ** 2)))
        else:
            excess.append(_log_loss(y_test, z1) - _log_loss(y_test, z0))
            acc_loss.append(float(np.mean((z0 >= 0) == y_test) - np.mean((z1 >= 0) == y_test)))
        coefs.append(np.append(c1, i1) if rel.fit_intercept else c1)
    e = np.asarray(excess)
    rmse = np.sqrt(np.mean((np.asarray(coefs) - truth) ** 2, axis=0))
    true_epsilon, noise, floor = rel.describe()
    var_y = float(np.var(y_test))
    return PlanRow(epsilon=eps, true_epsilon=true_epsilon, noise=noise,
                   lambda_floor=floor, excess_error_mean=float(e.mean()),
                   excess_error_mean_se=float(e.std(ddof=1) / math.sqrt(e.size)),
                   excess_error_median=float(np.median(e)),
                   relative_excess_median=float(np.median(e) / var_y) if rel.ref.model == "linear" else float("nan"),
                   coef_rmse=rmse.tolist(), interval_width=(2.0 * z * rmse).tolist(),
                   no_model_share=fallbacks / replicates,
                   accuracy_loss_median=float(np.median(acc_loss)) if acc_loss else None)


def _log_loss(y: np.ndarray, z: np.ndarray) -> float:
    """Mean -log P(y | z) of a logistic model with log-odds z (logaddexp: no overflow)."""
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def norm_ppf(q: float) -> float:
    """The standard normal quantile (scipy's, imported here only)."""
    from scipy.stats import norm

    return float(norm.ppf(q))


def _assumptions(model: str, spread: float, r2: float, logit_sd: float, default_bounds: bool,
                 default_label: bool) -> list[str]:
    out = [f"each column{' and the label' if model == 'linear' else ''} normal around the middle of its bounds with "
           f"sd {spread:.3g} x its half-range, clipped; columns independent",
           (f"label = linear in the columns + noise, population R^2 = {r2:g}, every column explaining the same share"
            if model == "linear" else
            f"P(label = 1) = sigmoid(log-odds linear in the columns), sd of the log-odds {logit_sd:g}, base rate 1/2")]
    if default_bounds:
        out.append("no bounds given: every column declared in (-1, 1), so coefficients and widths are per unit of a "
                   "column's half-range")
    if default_label and model == "linear":
        out.append("no label bounds given: the label declared in (-1, 1)")
    return out
