"""Exact discrete Laplace / Gaussian samplers (Canonne, Kamath & Steinke 2020) against their pmfs."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from vfl.exceptions import PrivacyParameterError
from vfl.secure.discrete_noise import (
    bernoulli_exp,
    discrete_gaussian,
    discrete_gaussian_array,
    discrete_laplace,
    discrete_laplace_array,
    uniform_below,
)


def chi_square_pvalue(draws, pmf, support):
    """Chi-square goodness of fit on ``support`` plus one tail bin."""
    draws = np.asarray(draws)
    observed = [np.sum(draws == k) for k in support] + [np.sum(~np.isin(draws, support))]
    probs = np.array([pmf(k) for k in support])
    expected = np.append(probs, max(1 - probs.sum(), 0)) * len(draws)
    keep = expected > 5
    return stats.chisquare(np.array(observed)[keep], expected[keep] * np.sum(np.array(observed)[keep])
                           / expected[keep].sum()).pvalue


def test_uniform_below_handles_big_moduli():
    rng = np.random.default_rng(0)
    m = 3 * 2**100 + 1
    xs = [uniform_below(rng, m) for _ in range(2000)]
    assert all(0 <= x < m for x in xs)
    assert abs(np.mean([x / m for x in xs]) - 0.5) < 0.03
    assert {uniform_below(rng, 3) for _ in range(100)} == {0, 1, 2}


@pytest.mark.parametrize("gamma", [Fraction(1, 2), Fraction(1), Fraction(2), Fraction(5, 2)])
def test_bernoulli_exp_frequency(gamma):
    """Fractional and integer gamma (the floor(gamma) loop of CKS Alg. 1 and its boundary gamma = 1)."""
    rng = np.random.default_rng(1)
    n = 6000
    hits = sum(bernoulli_exp(rng, gamma) for _ in range(n))
    p = math.exp(-float(gamma))
    assert abs(hits / n - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_bernoulli_exp_of_zero_is_always_one():
    rng = np.random.default_rng(0)
    assert all(bernoulli_exp(rng, Fraction(0)) for _ in range(200))
    with pytest.raises(ValueError):
        bernoulli_exp(rng, Fraction(-1, 3))


def test_discrete_laplace_matches_its_pmf():
    rng = np.random.default_rng(2)
    s, t = 2, 3  # scale t/s = 1.5
    draws = [discrete_laplace(rng, s, t) for _ in range(5000)]
    q = math.exp(-s / t)
    pmf = lambda k: (1 - q) / (1 + q) * q ** abs(k)  # noqa: E731
    assert chi_square_pvalue(draws, pmf, range(-6, 7)) > 1e-3


def test_discrete_gaussian_matches_its_pmf_and_variance():
    rng = np.random.default_rng(3)
    sigma2 = Fraction(9, 4)
    draws = np.array([discrete_gaussian(rng, sigma2) for _ in range(5000)])
    Z = sum(math.exp(-k * k / 4.5) for k in range(-40, 41))
    assert chi_square_pvalue(draws, lambda k: math.exp(-k * k / 4.5) / Z, range(-5, 6)) > 1e-3
    var = sum(k * k * math.exp(-k * k / 4.5) for k in range(-40, 41)) / Z  # <= sigma^2 (CKS Prop. 19)
    assert abs(draws.var() - var) < 5 * var * math.sqrt(2 / len(draws))
    assert abs(draws.mean()) < 5 * math.sqrt(var / len(draws))


def test_fixed_point_noise_arrays_have_the_requested_real_scale():
    rng = np.random.default_rng(4)
    g = discrete_gaussian_array(2.0, (400,), rng, scale_bits=48).astype(float) / 2.0**48
    assert abs(g.std() - 2.0) < 0.25 and abs(g.mean()) < 0.4
    lap = discrete_laplace_array(0.5, (400,), rng, scale_bits=20).astype(float) / 2.0**20
    assert abs(np.mean(np.abs(lap)) - 0.5) < 0.1  # E|Lap(b)| = b
    a = discrete_gaussian_array(1.0, (3, 2), np.random.default_rng(5), scale_bits=8)
    b = discrete_gaussian_array(1.0, (3, 2), np.random.default_rng(5), scale_bits=8)
    assert a.shape == (3, 2) and a.tolist() == b.tolist()  # reproducible only through the injected rng


def test_invalid_noise_parameters_raise():
    rng = np.random.default_rng(6)
    with pytest.raises(PrivacyParameterError):
        discrete_gaussian_array(0.0, (1,), rng)
    with pytest.raises(PrivacyParameterError):
        discrete_laplace_array(float("inf"), (1,), rng)
    with pytest.raises(ValueError):
        discrete_laplace(rng, 0, 1)
