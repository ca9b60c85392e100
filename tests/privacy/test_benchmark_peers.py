"""The private regression peers of benchmarks/peers.py (issue 33): each checked against an independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.docs_tables import load_benchmark

from vfl.models.baselines import AdaSSP, NoisyGradientDescent

peers = load_benchmark("peers")


def _unit_data(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw features in [-1, 1]^(d-1), a linear label in [-1, 1], and their unit-domain rows (scaled, intercept
    column 1/sqrt(d) last), as AdaSSP prepares them."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d - 1))
    y = np.clip(0.3 * X[:, 0] - 0.2 * X[:, 1] + 0.4 + 0.1 * rng.standard_normal(n), -1, 1)
    U = np.hstack([X / math.sqrt(d), np.full((n, 1), 1 / math.sqrt(d))])
    return X, y, U


def test_adassp_is_the_package_adassp_for_the_same_draws() -> None:
    X, y, U = _unit_data(500, 5, 1)
    est = AdaSSP(epsilon=1.0, delta=1e-5, bounds=[(-1.0, 1.0)] * 4, y_bounds=(-1.0, 1.0), random_state=7).fit(X, y)
    w = peers.adassp(U, y, 1.0, 1e-5, np.random.default_rng(7))
    np.testing.assert_allclose(w, est.coef_unit_, rtol=1e-10, atol=1e-12)


def test_noisy_gd_is_the_package_noisy_gd_for_the_same_draws() -> None:
    X, y, U = _unit_data(400, 5, 8)
    y = np.clip(3 * y, -1, 1)   # larger residuals: the per-row clip C = 1 binds on many rows
    est = NoisyGradientDescent(model="linear", epsilon=1.0, delta=1e-5, bounds=[(-1.0, 1.0)] * 4, y_bounds=(-1.0, 1.0),
                               random_state=9).fit(X, y)
    w = peers.noisy_gd_linear(U, y, 1.0, 1e-5, np.random.default_rng(9))
    np.testing.assert_allclose(w, est.coef_unit_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("peer", ["adassp", "adassp_free", "ssp_ridge", "objpert"])
def test_every_peer_tends_to_least_squares_as_epsilon_grows(peer: str) -> None:
    """The noise and the ridges scale as 1/epsilon (mu* grows with epsilon): at epsilon = 1e4 every peer is least
    squares on the unit domain to 1e-2; at epsilon = 1 it is not (the noise is real)."""
    _, y, U = _unit_data(2000, 5, 2)
    ols = np.linalg.lstsq(U, y, rcond=None)[0]
    assert np.linalg.norm(ols) < 2.0   # inside objective perturbation's public radius R = 2

    def fit(eps: float) -> np.ndarray:
        rng = np.random.default_rng(3)
        if peer == "adassp":
            return peers.adassp(U, y, eps, 1e-5, rng)
        if peer == "adassp_free":
            return peers.adassp(U, y, eps, 1e-5, rng, free=4)
        if peer == "ssp_ridge":
            return peers.ssp_ridge(U, y, eps, 1e-5, rng)
        return peers.objective_perturbation_linear(U, y, eps, 1e-5, rng)

    assert np.linalg.norm(fit(1e4) - ols) < 1e-2 * np.linalg.norm(ols)
    assert np.linalg.norm(fit(1.0) - ols) > 1e-2 * np.linalg.norm(ols)


def test_objective_perturbation_noise_has_the_stated_scale() -> None:
    """b ~ N(0, zeta^2 (8 log(2/delta) + 4 eps)/eps^2 I), zeta = R + 1 (Kifer et al. 2012, Thm. 2): with rows that
    are the unit vectors repeated k times and y = 0, X^T X = k I, so w = -b / (k + Delta), Delta = 2/eps, inside the
    radius R = 2 for large k; w's spread shows sigma."""
    eps, delta, d, k = 2.0, 1e-5, 4, 10_000
    U, y = np.tile(np.eye(d), (k, 1)), np.zeros(d * k)
    draws = np.array([peers.objective_perturbation_linear(U, y, eps, delta, np.random.default_rng(s))
                      for s in range(2000)])
    assert float(np.max(np.linalg.norm(draws, axis=1))) < 2.0
    sigma = 3.0 * math.sqrt(8 * math.log(2 / delta) + 4 * eps) / eps
    # the sample sd of 8000 normal draws is within 3 % of sigma with probability > 1 - 1e-6
    assert abs(float(np.std(draws * (k + 2.0 / eps))) / sigma - 1.0) < 0.03


def test_adassp_free_intercept_is_not_shrunk() -> None:
    """n = 500, epsilon = 0.5: the adaptive ridge is about half the intercept's curvature n/d, so the penalised
    intercept is pulled towards 0 (the middle of the label range); the unpenalised one is not. Averaged over 200
    draws (standard errors about 0.005 and 0.012): the penalised mean prediction is about 0.18 below the label mean
    0.40, the unpenalised one within half that distance."""
    _, y, U = _unit_data(500, 5, 4)
    pen = np.mean([np.mean(U @ peers.adassp(U, y, 0.5, 1e-5, np.random.default_rng(s))) for s in range(200)])
    free = np.mean([np.mean(U @ peers.adassp(U, y, 0.5, 1e-5, np.random.default_rng(s), free=4)) for s in range(200)])
    assert float(np.mean(y)) - pen > 0.1
    assert abs(free - float(np.mean(y))) < 0.5 * abs(pen - float(np.mean(y)))


@pytest.mark.parametrize("radius", [0.05, 0.5, 50.0])
def test_trust_region_solve_is_the_constrained_minimiser(radius: float) -> None:
    """Against projected gradient descent run to convergence (an independent solver)."""
    rng = np.random.default_rng(6)
    B = rng.standard_normal((6, 4))
    A, g = B.T @ B + 0.1 * np.eye(4), rng.standard_normal(4)
    w = peers.trust_region_solve(A, g, radius)
    v = np.zeros(4)
    step = 1.0 / float(np.linalg.eigvalsh(A)[-1])
    for _ in range(20000):
        v = v - step * (A @ v - g)
        v *= min(1.0, radius / max(float(np.linalg.norm(v)), 1e-300))
    np.testing.assert_allclose(w, v, atol=1e-8)
    assert np.linalg.norm(w) <= radius * (1 + 1e-9)
