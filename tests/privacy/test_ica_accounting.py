"""Multi-round accounting of capeDJICA (vfl.privacy.ica_accounting): dp-accounting vs the seed's closed forms.

The seed (Imtiaz et al. 2021) analyses the J-round CAPE release with strong composition, RDP and the moments
accountant. Per round the view of a site is a Gaussian mechanism (privacy loss N(mu_z, 2 mu_z), spec §3.3), so:
RDP(alpha) = alpha rho with rho = sum_j mu_j^2 / 2; classic conversion min_alpha alpha rho + ln(1/delta)/(alpha-1)
= rho + 2 sqrt(rho ln(1/delta)); moments accountant min over integer lambda of lambda(lambda+1) rho/lambda +
ln(1/delta)/lambda. Those closed forms are checked against Google's dp-accounting below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, PrivacyParameterError
from vfl.privacy.calibration import calibrate_mu, epsilon_of
from vfl.privacy.ica_accounting import (
    ACCOUNTANTS,
    calibrate_round_mu,
    compare_accountants,
    gdp_epsilon,
    infomax_sensitivities,
    moments_closed_form_epsilon,
    moments_epsilon,
    pca_sensitivity,
    pld_epsilon,
    rdp_closed_form_epsilon,
    rdp_curve,
    rdp_epsilon,
    strong_composition_epsilon,
)

DELTA = 1e-5


def test_library_rdp_curve_is_the_gaussian_closed_form():
    events = [(0.05, 400), (0.3, 1)]
    rho = 400 * 0.05**2 / 2 + 0.3**2 / 2
    orders = np.array([1.5, 2.0, 3.25, 10.0, 64.0, 256.0])
    np.testing.assert_allclose(rdp_curve(events, orders), orders * rho, rtol=1e-9)


def test_library_rdp_epsilon_at_optimal_order_matches_seed_closed_form():
    """At alpha* = 1 + sqrt(ln(1/delta)/rho) the seed's classic bound is rho + 2 sqrt(rho ln(1/delta)); the library
    applies the improved conversion, which differs by exactly ln(1 - 1/alpha) - ln(alpha)/(alpha - 1)."""
    for mu, J in [(0.05, 400), (0.02, 1000), (0.3, 10)]:
        rho = J * mu * mu / 2
        alpha = 1 + math.sqrt(math.log(1 / DELTA) / rho)
        lib = rdp_epsilon([(mu, J)], DELTA, orders=[alpha])
        seed = rdp_closed_form_epsilon(rho, DELTA)
        assert lib == pytest.approx(seed + math.log1p(-1 / alpha) - math.log(alpha) / (alpha - 1), rel=1e-9)
        assert lib < seed  # the improved conversion is never worse
        assert rdp_epsilon([(mu, J)], DELTA) <= lib + 1e-12 or rdp_epsilon([(mu, J)], DELTA) < seed


def test_moments_accountant_matches_closed_form_and_rdp_at_integer_optimum():
    # rho chosen so that the continuous optimum lambda* = sqrt(ln(1/delta)/rho) is the integer 7
    lam = 7
    rho = math.log(1 / DELTA) / lam**2
    J = 250
    mu = math.sqrt(2 * rho / J)
    ma = moments_epsilon([(mu, J)], DELTA)
    assert ma == pytest.approx(moments_closed_form_epsilon(rho, DELTA), rel=1e-9)
    assert ma == pytest.approx(rdp_closed_form_epsilon(rho, DELTA), rel=1e-9)
    # generic rho: library-based moments accountant == closed form over the same integer lambdas
    for mu2, J2 in [(0.013, 777), (0.2, 3)]:
        rho2 = J2 * mu2**2 / 2
        assert moments_epsilon([(mu2, J2)], DELTA) == pytest.approx(moments_closed_form_epsilon(rho2, DELTA),
                                                                    rel=1e-9)
        assert moments_epsilon([(mu2, J2)], DELTA) >= rdp_closed_form_epsilon(rho2, DELTA) - 1e-12


def test_pld_accountant_matches_exact_gdp():
    events = [(0.3, 1), (0.04, 300)]
    exact = gdp_epsilon(events, DELTA)
    assert exact == pytest.approx(epsilon_of(math.sqrt(0.09 + 300 * 0.04**2), DELTA), rel=1e-12)
    pld = pld_epsilon(events, DELTA)
    assert exact - 1e-6 <= pld <= exact + 0.01


def test_accountant_ordering_and_strong_composition():
    out = compare_accountants([(0.05, 400)], DELTA)
    assert out["gdp"] <= out["pld"] + 1e-9
    assert out["gdp"] < out["rdp"] < out["moments"] < out["strong"]
    assert out["strong"] > 5 * out["gdp"]  # many rounds: strong composition is far worse (the seed's point)
    # one round: strong composition is the single round's exact epsilon
    assert strong_composition_epsilon([(0.4, 1)], DELTA) == pytest.approx(epsilon_of(0.4, DELTA), rel=1e-12)


def test_strong_composition_is_the_drv_formula():
    """Dwork-Rothblum-Vadhan: K rounds of (e0, d0): eps = sqrt(2K ln(1/d')) e0 + K e0 (e^e0 - 1), d = K d0 + d'."""
    mu, K = 0.05, 400

    def drv(f):
        e0 = epsilon_of(mu, (1 - f) * DELTA / K)
        return math.sqrt(2 * K * math.log(1 / (f * DELTA))) * e0 + K * e0 * math.expm1(e0)

    ours = strong_composition_epsilon([(mu, K)], DELTA)
    fine = min(drv(f) for f in np.linspace(0.001, 0.999, 999))
    assert ours <= drv(0.5) + 1e-12
    assert fine - 1e-3 * fine <= ours <= fine * 1.01


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
def test_calibrate_round_mu_hits_the_target(accountant):
    J, eps = 60, 2.0
    prior = [(0.05, 1)]
    mu = calibrate_round_mu(eps, DELTA, J, accountant, fixed_events=prior)
    funcs = {"gdp": gdp_epsilon, "rdp": rdp_epsilon, "moments": moments_epsilon, "strong": strong_composition_epsilon}
    f = funcs[accountant]
    assert f([*prior, (mu, J)], DELTA) <= eps + 1e-9
    assert f([*prior, (mu * (1 + 1e-4), J)], DELTA) > eps
    if accountant == "gdp":
        assert math.sqrt(J * mu * mu + 0.0025) == pytest.approx(calibrate_mu(eps, DELTA), rel=1e-12)


def test_calibration_errors():
    with pytest.raises(ConfigurationError):
        calibrate_round_mu(1.0, DELTA, 0)
    with pytest.raises(ConfigurationError):
        calibrate_round_mu(1.0, DELTA, 10, "pld")
    with pytest.raises(PrivacyParameterError):
        calibrate_round_mu(1.0, DELTA, 10, fixed_events=[(5.0, 1)])
    with pytest.raises(PrivacyParameterError):
        calibrate_round_mu(1.0, DELTA, 10, "rdp", fixed_events=[(5.0, 1)])
    with pytest.raises(PrivacyParameterError):  # feasible for gdp, not for strong composition (delta spread)
        calibrate_round_mu(2.0, DELTA, 60, "strong", fixed_events=[(0.2, 1)])
    assert calibrate_round_mu(2.0, DELTA, 60, "gdp", fixed_events=[(0.2, 1)]) > 0
    with pytest.raises(PrivacyParameterError):
        gdp_epsilon([(-1.0, 2)], DELTA)


def test_pca_sensitivity_is_attained():
    N = 50
    x, xp = np.eye(3)[0], np.eye(3)[1]
    diff = (np.outer(x, x) - np.outer(xp, xp)) / N
    assert np.linalg.norm(diff) == pytest.approx(pca_sensitivity(N), rel=1e-12)
    assert pca_sensitivity(N, unit_size=4) == pytest.approx(4 * math.sqrt(2) / N)


def _update(W, b, X, rho):
    from scipy.special import expit

    Z = W @ X + b[:, None]
    U = 1 - 2 * expit(Z)
    return rho * (np.eye(len(b)) + U @ Z.T / X.shape[1]) @ W, rho * U.mean(axis=1)


def test_infomax_sensitivity_bounds_random_neighbours():
    """Replace one column (adversarially scaled to the radius) many times: the change never exceeds the bound."""
    rng = np.random.default_rng(4)
    R, N, r, rho = 4, 30, 2.5, 0.7
    worst_W = worst_b = 0.0
    for _ in range(300):
        W = rng.normal(size=(R, R)) * rng.uniform(0.2, 3.0)
        b = rng.normal(size=R) * rng.uniform(0.0, 2.0)
        X = rng.normal(size=(R, N))
        X *= r / np.linalg.norm(X, axis=0) * rng.uniform(0.1, 1.0, size=N)
        Xp = X.copy()
        v = rng.normal(size=R)
        Xp[:, 0] = v / np.linalg.norm(v) * r
        v = rng.normal(size=R)
        X[:, 0] = v / np.linalg.norm(v) * r
        dW, db = _update(W, b, X, rho)
        dWp, dbp = _update(W, b, Xp, rho)
        bound_W, bound_b = infomax_sensitivities(W, b, rho, N, r)
        worst_W = max(worst_W, np.linalg.norm(dW - dWp) / bound_W)
        worst_b = max(worst_b, np.linalg.norm(db - dbp) / bound_b)
    assert worst_W <= 1.0 and worst_b <= 1.0
    assert worst_W > 0.05 and worst_b > 0.05  # the bound is not vacuous
