"""Worst-case statistical audit of Gaussian FM: the release run many times on a neighbouring pair that reaches the
declared sensitivities, tested against coefficients recomputed with numpy (docs/audit.md, "Worst-case audit").

Pairs (:mod:`vfl.privacy.worst_pair`): ``"order-1"`` attains Delta_1 (||Delta alpha|| = 4/N linear, 1/N logistic),
``"order-2"`` attains Delta_2 (||Delta M||_F = sqrt(2)/N, /8 logistic), ``"worst"`` maximises the pair's whitened
distance mu_pair = ||(m1 - m0)/s|| over the continuous l2 domain (no row attains Delta_1 and Delta_2 together, so
mu_pair < mu*; 25/32 of mu*^2 for the equal split).

Statistic: the log-likelihood ratio T(o) = log p_D'(o)/p_D(o) of the declared noise, centred on the numpy
coefficients of D and D' (never on the library's own). Observations: the library's own release path (its block
values plus its noise sampler, or ``release="loop"``: ``n_runs`` calls of
:func:`vfl.models.estimators.release_objective`).

Two lower bounds, each with confidence 1 - alpha (one-sided Clopper-Pearson bounds at alpha/2 on FPR and FNR of a
threshold chosen on the first half of the runs and evaluated on the second):

* ``epsilon_lower_bound``: assumption-free, eps >= log((1 - delta - FNR)/FPR) (Kairouz, Oh & Viswanath 2015). At
  delta = 1e-5 it needs tail events and stays well below eps.
* ``mu_lower_bound``: a mu-GDP mechanism has FNR >= Phi(Phi^-1(1 - FPR) - mu) for every test (Dong, Roth & Su 2022,
  trade-off function G_mu), so mu >= Phi^-1(1 - FPR) - Phi^-1(FNR) = -Phi^-1(FPR) - Phi^-1(FNR) (Nasr et al. 2023's
  Gaussian-DP auditing). The analytic calibration claims exactly mu*(eps, delta) (Balle & Wang 2018), so
  mu_lower_bound > mu* refutes the calibration; ``epsilon_gdp_lower_bound`` = epsilon_of(mu_lower_bound, delta) is
  the eps(delta) of that Gaussian mechanism. Middle thresholds suffice, so it comes within a few percent of mu_pair.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from vfl.exceptions import ConfigurationError
from vfl.privacy.audit import (
    NeighbouringPair,
    audit_statistics,
    clopper_pearson_upper,
    likelihood_ratio_statistic,
    neighbouring_pair,
    observed_releases,
    release_noise_specs,
)
from vfl.privacy.calibration import calibrate_mu, epsilon_of
from vfl.privacy.mechanisms import GaussianFM
from vfl.privacy.worst_pair import WorstRows, gaussian_worst_rows, released_coefficients, sensitivity_rows
from vfl.rng import RandomState, make_rng

__all__ = ["WorstCaseAudit", "PAIR_KINDS", "gdp_mu_lower_bound", "gdp_bound_power", "audit_pair_rows", "pair_from_rows",
           "coefficient_differences", "worst_case_audit"]

PAIR_KINDS = ("worst", "order-1", "order-2")


@dataclass(frozen=True)
class WorstCaseAudit:
    """One worst-case audit: the pair, its exact mu and epsilon, and the two lower bounds (confidence 1 - alpha)."""

    model: str
    n_features: int
    n_samples: int
    pair: str
    epsilon_claimed: float
    delta: float
    budget_shares: dict
    n_runs: int
    alpha: float
    delta_alpha: float          # ||alpha(D') - alpha(D)||_2 of the pair (numpy, average form)
    delta_m: float              # ||M(D') - M(D)||_F of the pair (numpy, average form, full matrix)
    mu_claimed: float           # mu*(eps, delta): what the calibration claims for the whole release
    mu_pair: float              # exact mu of this pair under the declared noise
    mu_lower_bound: float       # Gaussian-DP audit
    epsilon_pair: float         # epsilon_of(mu_pair, delta)
    epsilon_gdp_lower_bound: float
    epsilon_lower_bound: float  # assumption-free threshold test

    def to_dict(self) -> dict:
        return asdict(self)


def gdp_mu_lower_bound(s0: np.ndarray, s1: np.ndarray, *, alpha: float = 0.05, selection_level: float = 1e-3,
                       n_candidates: int = 199) -> float:
    """Lower bound on mu from statistics on D (``s0``) and D' (``s1``), large meaning D': the threshold is chosen
    among quantiles of the first halves (maximising the bound with Clopper-Pearson at ``selection_level``) and
    evaluated on the second halves, mu_lb = -Phi^-1(FPR_ub) - Phi^-1(FNR_ub) with FPR_ub, FNR_ub at alpha/2 each.
    Holds with confidence >= 1 - alpha whenever the release is mu-GDP for some mu (module docstring)."""
    if not 0.0 < alpha < 1.0:
        raise ConfigurationError(f"alpha must lie in (0, 1), got {alpha}")
    s0, s1 = np.asarray(s0, float), np.asarray(s1, float)
    if min(s0.size, s1.size) < 4:
        raise ConfigurationError("need at least 4 runs per dataset")
    h0, h1 = s0.size // 2, s1.size // 2

    def bound(a: np.ndarray, b: np.ndarray, t: np.ndarray, level: float) -> np.ndarray:
        a, b = np.sort(a), np.sort(b)
        fpr = clopper_pearson_upper(a.size - np.searchsorted(a, t, side="right"), a.size, level)
        fnr = clopper_pearson_upper(np.searchsorted(b, t, side="right"), b.size, level)
        return -stats.norm.ppf(fpr) - stats.norm.ppf(fnr)

    pooled = np.concatenate([s0[:h0], s1[:h1]])
    t = np.quantile(pooled, np.linspace(0.0, 1.0, n_candidates + 2)[1:-1])
    best = float(t[int(np.argmax(bound(s0[:h0], s1[:h1], t, selection_level)))])
    return float(bound(s0[h0:], s1[h1:], np.array([best]), alpha / 2)[0])


def gdp_bound_power(mu: float, n_runs: int, *, alpha: float = 0.05) -> tuple[float, float]:
    """Normal approximation of the mean and standard deviation of :func:`gdp_mu_lower_bound` on an exact mu-GDP
    pair (T ~ N(-+mu^2/2, mu^2)) with ``n_runs`` statistics per dataset: the middle threshold has FPR = FNR =
    p = Phi(-mu/2), each estimated on m = n_runs/2 held-out runs with standard error s = sqrt(p(1 - p)/m); the
    Clopper-Pearson bounds at alpha/2 add z = Phi^-1(1 - alpha/2) standard errors, so

        mean = -2 Phi^-1(p + z s),    sd = sqrt(2) s / phi(Phi^-1(p))   (delta method, two independent halves).

    This is the audit's power: a test may ask the bound to come within a few ``sd`` of ``mean``, never closer to
    mu than ``mu - mean``. The threshold chosen on the first halves is not the second halves' best: in simulation
    (tests/privacy/test_worst_audit.py) it lowers the mean by about 0.3 ``sd`` and adds about 20 % to ``sd``."""
    if not (mu > 0 and n_runs >= 4 and 0.0 < alpha < 1.0):
        raise ConfigurationError(f"need mu > 0, n_runs >= 4 and alpha in (0, 1), got {mu}, {n_runs}, {alpha}")
    p = float(stats.norm.cdf(-mu / 2))
    s = math.sqrt(p * (1 - p) / (n_runs // 2))
    z = float(stats.norm.ppf(1 - alpha / 2))
    mean = -2.0 * float(stats.norm.ppf(min(p + z * s, 1.0 - 1e-12)))
    return mean, math.sqrt(2.0) * s / float(stats.norm.pdf(stats.norm.ppf(p)))


def audit_pair_rows(mechanism: GaussianFM, kind: str, *, random_state: RandomState = 0) -> WorstRows:
    """The changed row of the audited pair: ``"order-1"``/``"order-2"`` attain Delta_1/Delta_2, ``"worst"`` is the
    search of :func:`vfl.privacy.worst_pair.gaussian_worst_rows` for the mechanism's declared noise."""
    plan = mechanism.plan
    if kind == "worst":
        scales = np.array([s.scale for s in release_noise_specs(mechanism)])   # one party: row_coefficients order
        weights = 1.0 / (mechanism.n_samples * scales) ** 2
        return gaussian_worst_rows(plan.model, plan.n_features, weights, release_beta=plan.release_beta,
                                   random_state=random_state)
    if kind in ("order-1", "order-2"):
        return sensitivity_rows(plan.model, plan.n_features, int(kind[-1]))
    raise ConfigurationError(f"pair must be one of {', '.join(PAIR_KINDS)}, got {kind!r}")


def pair_from_rows(rows: WorstRows, n_samples: int, model: str, *, random_state: RandomState = 0) -> NeighbouringPair:
    """D and D': N - 1 shared background rows and row 0 = (x, y) vs (x', y')."""
    return neighbouring_pair(n_samples, rows.x0.size, model, x0=rows.x0.tolist(), y0=rows.y0, x1=rows.x1.tolist(),
                             y1=rows.y1, random_state=random_state)


def coefficient_differences(plan, pair: NeighbouringPair) -> tuple[float, float]:
    """(||Delta alpha||_2, ||Delta M||_F) between the pair's numpy coefficients (average form, full matrix)."""
    d = plan.n_features
    diff = released_coefficients(plan, pair.X1, pair.y1) - released_coefficients(plan, pair.X0, pair.y0)
    start = int(plan.release_beta and plan.model == "linear")
    da, dm = diff[start:start + d], diff[start + d:]
    iu = np.triu_indices(d)
    weight = np.where(iu[0] == iu[1], 1.0, 2.0)     # off-diagonal entries appear twice in the full matrix
    return float(np.linalg.norm(da)), float(math.sqrt(weight @ (dm * dm)))


def worst_case_audit(mechanism: GaussianFM, n_runs: int = 1_000_000, *, pair: str = "worst", alpha: float = 0.05,
                     release: str = "batched", random_state: RandomState = 0) -> WorstCaseAudit:
    """Audit ``mechanism`` (one-party Gaussian FM) on the pair ``pair`` (module docstring)."""
    if not isinstance(mechanism, GaussianFM):
        raise ConfigurationError("the worst-case audit covers gaussian-fm")
    if mechanism.plan.n_parties != 1:
        raise ConfigurationError("the worst-case audit covers the centralized (one-party) release; the vertical "
                                 "release has the same distribution (docs/privacy.md)")
    plan = mechanism.plan
    rows = audit_pair_rows(mechanism, pair, random_state=random_state)
    data = pair_from_rows(rows, mechanism.n_samples, plan.model, random_state=random_state)
    m0 = released_coefficients(plan, data.X0, data.y0)
    m1 = released_coefficients(plan, data.X1, data.y1)
    specs = release_noise_specs(mechanism)
    scales = np.array([s.scale for s in specs])
    rng = make_rng(random_state)
    s0 = likelihood_ratio_statistic(observed_releases(mechanism, data.X0, data.y0, n_runs, rng, release), m0, m1, specs)
    s1 = likelihood_ratio_statistic(observed_releases(mechanism, data.X1, data.y1, n_runs, rng, release), m0, m1, specs)
    delta = mechanism.delta
    mu_lb = gdp_mu_lower_bound(s0, s1, alpha=alpha)
    mu_pair = float(np.linalg.norm((m1 - m0) / scales))
    da, dm = coefficient_differences(plan, data)
    return WorstCaseAudit(
        plan.model, plan.n_features, mechanism.n_samples, pair, mechanism.epsilon, delta, dict(mechanism.shares),
        n_runs, alpha, da, dm, calibrate_mu(mechanism.epsilon, delta), mu_pair, mu_lb, epsilon_of(mu_pair, delta),
        epsilon_of(mu_lb, delta) if mu_lb > 0 else 0.0,
        audit_statistics(s0, s1, delta=delta, alpha=alpha).epsilon_lower_bound)
