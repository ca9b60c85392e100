"""Worst-case audit (issue 24, audit items): pairs that reach the declared sensitivities, coefficients recomputed with
numpy, a Gaussian-DP lower bound that comes close to the pair's exact mu and catches a mis-calibrated mechanism, and
the continuous sensitivity maxima searched with scipy.optimize against the declared values."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, PrivacyLeakWarning
from vfl.fm.dissection import DissectionPlan
from vfl.models.estimators import release_objective
from vfl.privacy.audit import observed_releases, release_mean
from vfl.privacy.calibration import calibrate_mu, epsilon_of
from vfl.privacy.mechanisms import make_mechanism
from vfl.privacy.sensitivity import laplace_sensitivity_sum
from vfl.privacy.worst_audit import (
    audit_pair_rows,
    coefficient_differences,
    gdp_bound_power,
    gdp_mu_lower_bound,
    pair_from_rows,
    worst_case_audit,
)
from vfl.privacy.worst_pair import gaussian_worst_rows, laplace_continuous_maximum, released_coefficients

N, DELTA = 50, 1e-5


def _gaussian(model="linear", d=2, eps=1.0, split="equal", **kw):
    plan = DissectionPlan([d], 0, model=model, release_beta=kw.pop("release_beta", False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        return make_mechanism("gaussian-fm", plan=plan, n_samples=kw.pop("n", N), epsilon=eps, delta=DELTA,
                              budget_split=split, **kw)


# ------------------------------------------------------------------------------ pairs and coefficients
@pytest.mark.parametrize("model,beta", [("linear", True), ("linear", False), ("logistic", False)])
def test_numpy_coefficients_equal_the_library_release_mean(model, beta) -> None:
    """The audit's clean coefficients are numpy's own; they agree with the library's (a cross-check, not a source)."""
    plan = DissectionPlan([2, 1, 2], 1, model=model, release_beta=beta)
    rng = np.random.default_rng(1)
    X = rng.uniform(-0.4, 0.4, (40, 5))
    y = rng.uniform(-1, 1, 40) if model == "linear" else rng.integers(0, 2, 40).astype(float)
    np.testing.assert_allclose(released_coefficients(plan, X, y), release_mean(plan, X, y), rtol=0, atol=1e-15)


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("d", [2, 3])
def test_order_pairs_attain_the_declared_sensitivities(model, d) -> None:
    """||alpha(D') - alpha(D)|| = Delta_1 and ||M(D') - M(D)||_F = Delta_2 exactly, from numpy on D and D'."""
    mech = _gaussian(model, d)
    one = pair_from_rows(audit_pair_rows(mech, "order-1"), N, model)
    two = pair_from_rows(audit_pair_rows(mech, "order-2"), N, model)
    assert coefficient_differences(mech.plan, one)[0] == pytest.approx(mech.sens["alpha"], rel=1e-14)
    assert coefficient_differences(mech.plan, two)[1] == pytest.approx(mech.sens["M"], rel=1e-14)
    assert mech.sens["alpha"] == (4.0 if model == "linear" else 1.0) / N
    assert mech.sens["M"] == pytest.approx(math.sqrt(2) / (N if model == "linear" else 8 * N), rel=1e-15)


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("share", [0.2, 0.5, 0.66, 0.9])
def test_worst_pair_reaches_the_closed_form_and_never_mu_star(model, share) -> None:
    """Rows on the sphere at cos theta = s/(4(1 - s)): mu_pair^2/mu*^2 = s(1 + c)/2 + (1 - s)(1 - c^2), 25/32 for
    the equal split; the search over the continuous ball finds that value (and nothing above mu*)."""
    mech = _gaussian(model, 3, split=share)
    rows = audit_pair_rows(mech, "worst")
    pair = pair_from_rows(rows, N, model)
    scales = np.array([mech.entry_noise(b).scale for b in mech.plan.blocks])   # alpha, off-diagonal M
    diff = released_coefficients(mech.plan, pair.X1, pair.y1) - released_coefficients(mech.plan, pair.X0, pair.y0)
    iu = np.triu_indices(3)
    s = np.concatenate([np.full(3, scales[0]), np.where(iu[0] == iu[1], math.sqrt(2), 1.0) * scales[1]])
    mu_pair = float(np.linalg.norm(diff / s))
    c = min(share / (4 * (1 - share)), 1.0)
    expected = share * (1 + c) / 2 + (1 - share) * (1 - c * c)
    mu_star = calibrate_mu(1.0, DELTA)
    assert mu_pair ** 2 / mu_star ** 2 == pytest.approx(expected, rel=1e-6)
    assert mu_pair ** 2 == pytest.approx(rows.value, rel=1e-9)
    assert mu_pair < mu_star
    if share == 0.5:
        assert expected == 25 / 32


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_gaussian_continuous_maxima_equal_the_declared_sensitivities(model) -> None:
    """scipy.optimize over the unit ball (13 constructed and 16 random starts): max ||Delta alpha|| and
    ||Delta M||_F per row (sum form) reach Delta_1 N and Delta_2 N and never exceed them."""
    d = 3
    n_alpha, iu = d, np.triu_indices(d)
    m_weights = np.where(iu[0] == iu[1], 1.0, 2.0) * (1.0 if model == "linear" else 64.0)   # undo /8 for logistic
    alpha_w = np.concatenate([np.ones(n_alpha), np.zeros(iu[0].size)])
    m_w = np.concatenate([np.zeros(n_alpha), m_weights])
    declared = _gaussian(model, d, n=1).sens
    best_alpha = math.sqrt(gaussian_worst_rows(model, d, alpha_w).value)
    best_m = math.sqrt(gaussian_worst_rows(model, d, m_w).value)
    scale_m = 1.0 if model == "linear" else 8.0
    assert best_alpha <= declared["alpha"] + 1e-9 and best_alpha == pytest.approx(declared["alpha"], rel=1e-6)
    assert best_m <= declared["M"] * scale_m + 1e-9 and best_m == pytest.approx(declared["M"] * scale_m, rel=1e-6)


# issue 24's quoted continuous maxima (beta released, the box [-1, 1]^d); the search must reach them
QUOTED = {("linear", 2): 25 / 3, ("linear", 3): 13.50, ("linear", 4): 19.55, ("logistic", 4): 4.03}


@pytest.mark.parametrize("model,d", [("linear", 1), ("linear", 2), ("linear", 3), ("linear", 4), ("logistic", 1),
                                     ("logistic", 2), ("logistic", 3), ("logistic", 4)])
def test_laplace_continuous_maxima_stay_below_every_declared_sensitivity(model, d) -> None:
    """The box domain searched with L-BFGS-B + Powell from many starts: the largest neighbour L1 difference found is
    at most every declared Laplace sensitivity (tight, paper, xu, zhang), and reaches issue 24's numbers (linear:
    exactly the construction 2d + 2d/(d + 1) + d(d + 1)/2)."""
    found = laplace_continuous_maximum(model, d, n_starts=8).value
    for variant in ("tight", "paper", "xu", "zhang"):
        assert found <= laplace_sensitivity_sum(model, d, variant=variant, release_beta=True) + 1e-9
    if model == "linear":
        assert found == pytest.approx(2 * d + 2 * d / (d + 1) + d * (d + 1) / 2, rel=1e-9)
    if (model, d) in QUOTED:
        assert found >= QUOTED[model, d] - 1e-9


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("d", [2, 4])
def test_laplace_continuous_maxima_on_the_l2_ball_stay_below_its_declared_column(model, d) -> None:
    found = laplace_continuous_maximum(model, d, n_starts=12, domain="l2").value
    declared = laplace_sensitivity_sum(model, d, variant="tight", domain="l2", release_beta=True)
    assert 0.5 * declared < found <= declared + 1e-9


# ------------------------------------------------------------------------------ the Gaussian-DP bound
def test_gdp_bound_on_an_exact_gaussian_shift() -> None:
    """T ~ N(-+mu^2/2, mu^2) is exactly a mu-GDP pair: the bound stays below mu and within 5 % of it."""
    rng = np.random.default_rng(7)
    mu, n = 0.8, 400_000
    lb = gdp_mu_lower_bound(rng.normal(-mu * mu / 2, mu, n), rng.normal(mu * mu / 2, mu, n))
    assert 0.95 * mu < lb <= mu
    assert gdp_mu_lower_bound(rng.normal(size=n), rng.normal(size=n)) < 0.02
    with pytest.raises(ConfigurationError):
        gdp_mu_lower_bound(np.zeros(10), np.ones(10), alpha=0.0)


# ------------------------------------------------------------------------------ the audit
@pytest.mark.parametrize("seed", [20261127, 5])
def test_the_power_formula_matches_a_simulation_of_the_bound(seed) -> None:
    """gdp_bound_power against 120 simulated exact mu-GDP audits (40,000 runs each), on two seeds: the threshold
    selection only lowers the mean, by less than one formula sd (about 0.3 in simulation), and the simulated sd is
    within [0.8, 1.5] of the formula's (about 1.2). The audit test below allows for both."""
    rng = np.random.default_rng(seed)
    mu, n, reps = 0.45, 40_000, 120
    sims = np.array([gdp_mu_lower_bound(rng.normal(-mu * mu / 2, mu, n), rng.normal(mu * mu / 2, mu, n))
                     for _ in range(reps)])
    mean, sd = gdp_bound_power(mu, n)
    standard_error = sims.std(ddof=1) / math.sqrt(reps)
    assert mean - SELECTION_BIAS_SD * sd - 4 * standard_error < sims.mean() < mean + 4 * standard_error
    assert 0.8 < sims.std(ddof=1) / sd < SELECTION_INFLATION
    assert mean < mu


# the audit's false-failure rate: the bound must reach mean - (SELECTION_BIAS_SD + K_SD * SELECTION_INFLATION) sd of
# gdp_bound_power, the bias and the sd inflation being the upper ends the simulation test allows:
# P(Z < -K_SD) = 1e-9 per audit
K_SD, SELECTION_BIAS_SD, SELECTION_INFLATION = 6.0, 1.0, 1.5


@pytest.mark.parametrize("model,split", [("linear", "equal"), ("linear", "risk"), ("logistic", "risk")])
def test_sound_mechanism_audit_comes_close_and_stays_below(model, split) -> None:
    """The bound stays below the pair's exact mu (soundness, confidence 95 %) and comes as close to it as the
    audit's power allows: above the power floor of gdp_bound_power at 800,000 runs, which is within 8.5 % of
    mu_pair here; so epsilon_gdp_lower_bound is at least the epsilon of that floor. The thresholds follow from
    n_runs and alpha, not from a seed."""
    n_runs = 800_000
    mech = _gaussian(model, 3, eps=2.0, split=split)
    r = worst_case_audit(mech, n_runs, random_state=3)
    assert r.mu_lower_bound <= r.mu_pair < r.mu_claimed
    assert r.mu_pair > 0.86 * r.mu_claimed                         # the pair is near the worst case of the claim
    mean, sd = gdp_bound_power(r.mu_pair, n_runs, alpha=r.alpha)
    floor = mean - (SELECTION_BIAS_SD + K_SD * SELECTION_INFLATION) * sd
    assert floor > 0.9 * r.mu_pair                                 # 800,000 runs give the audit this much power
    assert r.mu_lower_bound > floor                                # the test has the power it should
    assert r.epsilon_lower_bound <= r.epsilon_gdp_lower_bound <= r.epsilon_pair < 2.0
    assert r.epsilon_gdp_lower_bound > epsilon_of(floor, DELTA)


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_a_halved_tau_is_caught(eps) -> None:
    """A calibration bug that halves every tau while the claim stays eps: both bounds exceed the claim."""
    mech = _gaussian("linear", 2, eps=eps)
    mech.taus = {k: v / 2 for k, v in mech.taus.items()}
    r = worst_case_audit(mech, 200_000, random_state=1)
    assert r.mu_lower_bound > 1.5 * r.mu_claimed
    assert r.epsilon_gdp_lower_bound > eps and r.epsilon_lower_bound > eps


def test_a_mild_miscalibration_is_caught_by_the_gdp_bound() -> None:
    """tau x 0.8 (mu 25 % too large): the worst pair reaches 0.884/0.8 = 1.105 mu*, the GDP bound sees it."""
    mech = _gaussian("linear", 2, eps=1.0)
    mech.taus = {k: 0.8 * v for k, v in mech.taus.items()}
    r = worst_case_audit(mech, 400_000, random_state=2)
    assert r.mu_lower_bound > r.mu_claimed and r.epsilon_gdp_lower_bound > 1.0


class _DoubledAlphaPlan(DissectionPlan):
    """A coefficient bug for the test: the released alpha block is twice the formula (so is its sensitivity)."""

    def block_value(self, block, parts, y):
        value = super().block_value(block, parts, y)
        return 2.0 * value if block.kind == "alpha" else value


def test_a_coefficient_bug_is_caught() -> None:
    """The library's coefficients are not trusted: with alpha doubled by a bug the releases separate more than the
    numpy coefficients allow (bound above mu_pair) and more than the calibration claims (above mu*)."""
    plan = _DoubledAlphaPlan([2], 0, model="linear")
    mech = make_mechanism("gaussian-fm", plan=plan, n_samples=N, epsilon=1.0, delta=DELTA, budget_split="equal")
    r = worst_case_audit(mech, 200_000, random_state=6)
    assert r.mu_lower_bound > r.mu_claimed > r.mu_pair


def test_the_paper_calibration_is_caught_at_small_delta() -> None:
    """Tasnim et al.'s per-block calibration at claimed (1, 1e-5) (true eps 1.61): the threshold test cannot see it
    (docs/audit.md), the GDP bound on the worst pair can."""
    r = worst_case_audit(_gaussian("linear", 2, eps=1.0, calibration="paper", release_beta=True), 200_000)
    assert r.mu_lower_bound > r.mu_claimed and r.epsilon_gdp_lower_bound > 1.0
    assert r.epsilon_lower_bound < 1.0


def test_the_loop_release_is_the_estimators_release_and_is_audited_the_same() -> None:
    """The one-at-a-time releases are bit-identical to the estimators' release_objective with the same generator,
    and give the same verdict."""
    mech = _gaussian("linear", 3, eps=2.0, release_beta=True)
    rng = np.random.default_rng(12)
    X, y = rng.uniform(-0.5, 0.5, (N, 3)), rng.uniform(-1, 1, N)
    loop = observed_releases(mech, X, y, 5, np.random.default_rng(3), release="loop")
    gen = np.random.default_rng(3)
    for row in loop:
        obj = release_objective(mech.plan, mech, [X], y, gen)
        iu = np.triu_indices(3)
        assert np.array_equal(row, np.concatenate([[obj.beta], obj.alpha, obj.M[iu]]))
    mech = _gaussian("linear", 2, eps=2.0)
    r = worst_case_audit(mech, 20_000, release="loop", random_state=4)
    assert 0.7 * r.mu_pair < r.mu_lower_bound <= r.mu_pair


def test_refusals() -> None:
    with pytest.raises(ConfigurationError):
        worst_case_audit(_gaussian(), 100, pair="corner")
    with pytest.raises(ConfigurationError):
        worst_case_audit(make_mechanism("laplace-fm", plan=DissectionPlan([2], 0), n_samples=N, epsilon=1.0), 100)
    two = make_mechanism("gaussian-fm", plan=DissectionPlan([1, 1], 0), n_samples=N, epsilon=1.0, delta=DELTA)
    with pytest.raises(ConfigurationError):
        worst_case_audit(two, 100)
    with pytest.raises(ConfigurationError):
        worst_case_audit(_gaussian(), 100, release="sometimes")


# ------------------------------------------------------------------------------ slow
@pytest.mark.slow
def test_coverage_of_the_gdp_bound_over_seeds() -> None:
    """20 independent audits of a sound mechanism: the 95 % bound exceeds the pair's exact mu at most twice."""
    mech = _gaussian("linear", 2, eps=1.0)
    exceed = sum(worst_case_audit(mech, 200_000, random_state=s).mu_lower_bound > 0.8838834764831843
                 * mech.true_mu() + 1e-12 for s in range(20))
    assert exceed <= 2


@pytest.mark.slow
def test_one_million_runs_come_within_three_percent() -> None:
    r = worst_case_audit(_gaussian("logistic", 3, eps=2.0), 1_000_000, random_state=5)
    assert 0.97 * r.mu_pair < r.mu_lower_bound <= r.mu_pair
