"""Gaussian/Laplace calibration primitives against the spec's reference values (spec §0.5-0.6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from vfl.exceptions import PrivacyParameterError
from vfl.privacy.calibration import (
    calibrate_mu,
    classical_mu,
    classical_sigma,
    delta_gaussian,
    epsilon_of,
    gaussian_sigma,
    laplace_scale,
    validate_delta,
    validate_epsilon,
)

# spec §0.5: Delta = 1, delta = 1e-5 -> analytic sigma / classical sigma
ANALYTIC = {0.1: 30.750, 0.5: 7.032, 1.0: 3.7306, 2.0: 1.9938, 5.0: 0.8919}
CLASSICAL = {0.1: 48.448, 0.5: 9.690}


@pytest.mark.parametrize("eps,sigma", sorted(ANALYTIC.items()))
def test_analytic_reference_values(eps: float, sigma: float) -> None:
    assert gaussian_sigma(eps, 1e-5) == pytest.approx(sigma, abs=1e-3)
    assert 1.0 / calibrate_mu(eps, 1e-5) == pytest.approx(sigma, abs=1e-3)


@pytest.mark.parametrize("eps,sigma", sorted(CLASSICAL.items()))
def test_classical_reference_values(eps: float, sigma: float) -> None:
    assert classical_sigma(eps, 1e-5) == pytest.approx(sigma, abs=1e-3)
    assert gaussian_sigma(eps, 1e-5, calibration="classical") == pytest.approx(sigma, abs=1e-3)
    assert classical_mu(eps, 1e-5) == pytest.approx(1.0 / sigma, rel=1e-4)


def test_classical_eps1_reference_is_the_limit() -> None:
    # eps = 1 itself is not allowed (proof only for eps < 1), the spec's 4.8448 is the limit eps -> 1
    assert classical_sigma(1.0 - 1e-12, 1e-5) == pytest.approx(4.8448, abs=1e-4)


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-8, 1e-5, 1e-3, 0.1])
def test_calibrate_mu_is_the_supremum(eps: float, delta: float) -> None:
    mu = calibrate_mu(eps, delta)
    assert mu > 0
    assert delta_gaussian(eps, mu) <= delta
    assert delta_gaussian(eps, mu * (1 + 1e-9)) > delta


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 3.0, 8.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-2])
def test_round_trip(eps: float, delta: float) -> None:
    mu = calibrate_mu(eps, delta)
    eps_back = epsilon_of(mu, delta)
    assert eps_back == pytest.approx(eps, rel=1e-8)
    # epsilon_of returns the upper end: the guarantee at eps_back holds
    assert delta_gaussian(eps_back, mu) <= delta
    # and mu -> eps -> mu
    assert calibrate_mu(epsilon_of(0.7, delta), delta) == pytest.approx(0.7, rel=1e-8)


def test_monotonicity() -> None:
    mus = np.linspace(0.05, 6.0, 60)
    for eps in (0.1, 1.0, 4.0):
        ds = [delta_gaussian(eps, m) for m in mus]
        assert all(b > a for a, b in zip(ds, ds[1:], strict=False)), "delta_G must increase in mu"
    epss = np.linspace(0.0, 8.0, 60)
    for mu in (0.3, 1.0, 3.0):
        ds = [delta_gaussian(e, mu) for e in epss]
        assert all(b < a for a, b in zip(ds, ds[1:], strict=False)), "delta_G must decrease in eps"
    # calibrate_mu increases in eps and in delta; epsilon_of increases in mu, decreases in delta
    assert calibrate_mu(0.5, 1e-5) < calibrate_mu(1.0, 1e-5) < calibrate_mu(2.0, 1e-5)
    assert calibrate_mu(1.0, 1e-8) < calibrate_mu(1.0, 1e-5) < calibrate_mu(1.0, 1e-2)
    assert epsilon_of(0.5, 1e-5) < epsilon_of(1.0, 1e-5) < epsilon_of(2.0, 1e-5)
    assert epsilon_of(1.0, 1e-2) < epsilon_of(1.0, 1e-5)


def _delta_by_quadrature(eps: float, mu: float) -> float:
    """E[(1 - e^{eps - L})_+], L ~ N(mu^2/2, mu^2): the privacy-loss definition of delta (Balle & Wang 2018)."""
    m, s = mu * mu / 2.0, mu

    def integrand(z: float) -> float:
        return -math.expm1(eps - z) * stats.norm.pdf(z, loc=m, scale=s)

    val, _ = integrate.quad(integrand, eps, m + 40 * s, epsabs=0.0, epsrel=1e-13, limit=500)
    return val


@pytest.mark.parametrize("eps,mu", [(0.1, 0.5), (0.5, 1.0), (1.0, 0.2681), (1.0, 2.0), (2.0, 3.0), (3.0, 1.0)])
def test_delta_matches_numerical_integration(eps: float, mu: float) -> None:
    exact = delta_gaussian(eps, mu)
    quad = _delta_by_quadrature(eps, mu)
    assert exact == pytest.approx(quad, rel=1e-10, abs=0)


def test_delta_tiny_values_stay_accurate() -> None:
    # eps = 10, mu = 1: delta ~ 1e-20; naive Phi(a) - e^eps Phi(b) cancels catastrophically
    exact = delta_gaussian(10.0, 1.0)
    assert 0 < exact < 1e-15
    assert exact == pytest.approx(_delta_by_quadrature(10.0, 1.0), rel=1e-8)


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.3, 0.5, 0.9, 0.999])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-2])
def test_classical_noise_is_never_smaller_than_analytic(eps: float, delta: float) -> None:
    assert classical_sigma(eps, delta) >= gaussian_sigma(eps, delta)
    # and the classical calibration is indeed (eps, delta)-DP for eps < 1
    assert delta_gaussian(eps, classical_mu(eps, delta)) <= delta


def test_classical_fails_for_large_eps_as_spec_says() -> None:
    # spec §0.5: eps = 10, delta = 1e-5 with the classical formula has true delta = 2.3e-5
    mu = 10.0 / math.sqrt(2 * math.log(1.25 / 1e-5))
    assert delta_gaussian(10.0, mu) == pytest.approx(2.3e-5, rel=0.05)


@pytest.mark.parametrize("eps", [1.0, 1.5, 10.0])
def test_classical_raises_for_eps_at_least_one(eps: float) -> None:
    with pytest.raises(PrivacyParameterError, match="epsilon < 1"):
        classical_sigma(eps, 1e-5)
    with pytest.raises(PrivacyParameterError, match="epsilon < 1"):
        gaussian_sigma(eps, 1e-5, calibration="classical")


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "abc", None])
def test_bad_epsilon(bad) -> None:
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        validate_epsilon(bad)
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        calibrate_mu(bad, 1e-5)


@pytest.mark.parametrize("bad", [0, 1, -1e-5, 1.5, float("nan"), "x"])
def test_bad_delta(bad) -> None:
    with pytest.raises(PrivacyParameterError, match="delta"):
        validate_delta(bad)
    with pytest.raises(PrivacyParameterError, match="delta"):
        calibrate_mu(1.0, bad)
    with pytest.raises(PrivacyParameterError, match="delta"):
        epsilon_of(1.0, bad)


def test_bad_calibration_name_and_mu() -> None:
    with pytest.raises(PrivacyParameterError, match="calibration"):
        gaussian_sigma(1.0, 1e-5, calibration="tasnim")
    with pytest.raises(PrivacyParameterError, match="mu"):
        epsilon_of(-1.0, 1e-5)
    assert epsilon_of(0.0, 1e-5) == 0.0
    assert delta_gaussian(1.0, 0.0) == 0.0


def test_laplace_scale() -> None:
    assert laplace_scale(0.5, 3.0) == pytest.approx(6.0)
    with pytest.raises(PrivacyParameterError):
        laplace_scale(0.0, 1.0)
    with pytest.raises(PrivacyParameterError, match="sensitivity"):
        laplace_scale(1.0, -1.0)


@pytest.mark.parametrize("eps", [50.0, 1e3, 1e6])
def test_large_epsilon_does_not_overflow(eps: float) -> None:
    """Regression: delta_gaussian used exp(eps) * Phi(b) on its rounding branch, OverflowError for eps ~ 1e3+."""
    mu = calibrate_mu(eps, 1e-5)
    assert delta_gaussian(eps, mu) <= 1e-5 < delta_gaussian(eps, mu * (1 + 1e-9))
    assert epsilon_of(mu, 1e-5) == pytest.approx(eps, rel=1e-8)


@pytest.mark.parametrize("delta", [0.1, 1e-5, 1e-9])
def test_epsilon_of_a_huge_mu_is_a_finite_upper_bound_continuous_with_the_bisection(delta):
    """mu ~ 1e10 raised a bare OverflowError; now the closed-form bound mu^2/2 + mu z_{1-delta} (delta_G <= Phi(a))
    takes over at LARGE_MU, where it is within 1e-9 of the exact bisection, and is never below mu^2/2."""
    from scipy.special import ndtri

    from vfl.privacy.calibration import LARGE_MU, epsilon_of

    mu = LARGE_MU * (1 - 1e-9)   # just below: the exact bisection, against the bound at the same mu
    bisected, bound = epsilon_of(mu, delta), mu * mu / 2 - mu * float(ndtri(delta))
    assert bound == pytest.approx(bisected, rel=1e-9) and bound >= bisected * (1 - 1e-12)
    assert epsilon_of(LARGE_MU, delta) == pytest.approx(bisected, rel=1e-8)
    for mu in (1e10, 1e15, 1e100):
        eps = epsilon_of(mu, delta)
        assert math.isfinite(eps) and eps == mu * mu / 2 - mu * float(ndtri(delta)) and eps >= mu * mu / 2
