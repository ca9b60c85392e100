"""PSD projection with a public eigenvalue floor and the closed-form minimiser (spec §2.5)."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, DegenerateNoisyObjective
from vfl.fm.objective import QuadraticObjective, linear_objective
from vfl.fm.solver import Intercept, predict_linear, predict_logistic_proba, project_psd, solve, solve_details


def _noisy_sym(rng, d, scale):
    E = rng.normal(scale=scale, size=(d, d))
    return (E + E.T) / 2


@pytest.mark.parametrize("seed", range(6))
def test_projection_respects_floor_and_solution_minimises(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = 6
    X = rng.uniform(-1, 1, size=(40, d))
    M = X.T @ X / 40 + _noisy_sym(rng, d, 0.3)
    alpha = rng.normal(size=d)
    floor = 0.05
    Mp = project_psd(M, floor)
    assert np.linalg.eigvalsh(Mp).min() >= floor - 1e-12
    np.testing.assert_allclose(Mp, Mp.T, atol=0)
    res = solve_details(QuadraticObjective(0.0, alpha, M), lambda_floor=floor)
    # w minimises alpha.w + w M_+ w: gradient alpha + 2 M_+ w = 0
    np.testing.assert_allclose(alpha + 2 * Mp @ res.w, 0, atol=1e-10)
    assert res.n_floored == int((np.linalg.eigvalsh(M) < floor).sum())
    proj = QuadraticObjective(0.0, alpha, Mp)
    for _ in range(20):
        assert proj.value(res.w) <= proj.value(res.w + rng.normal(scale=0.1, size=d)) + 1e-12
    # eigenvalues above the floor are untouched
    s = np.linalg.eigvalsh(M)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(Mp)), np.sort(np.maximum(s, floor)), atol=1e-12)


def test_floor_zero_no_noise_gives_nonprivate_minimiser() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(100, 5))
    y = X @ rng.normal(size=5) + 0.1 * rng.normal(size=100)
    obj = linear_objective(X, y)
    w = solve(obj, lambda_floor=0.0)
    np.testing.assert_allclose(w, np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-12)


def test_spec_counterexample_diag10_alpha01() -> None:
    """M = diag(1, 0), alpha = (0, 1): clipping at 0 leaves w^T M w + alpha^T w unbounded below."""
    M = np.diag([1.0, 0.0])
    alpha = np.array([0.0, 1.0])
    obj = QuadraticObjective(0.0, alpha, M)
    t = np.array([0.0, -1e6])
    assert obj.value(t) < -1e5                      # unbounded below along -e2
    floor = 0.1
    w = solve(obj, lambda_floor=floor)
    np.testing.assert_allclose(w, [0.0, -0.5 / floor], atol=1e-15)
    Mp = project_psd(M, floor)
    np.testing.assert_allclose(Mp, np.diag([1.0, floor]), atol=1e-15)
    # projected objective is bounded: its value at w is its global minimum -alpha M+^-1 alpha / 4
    proj = QuadraticObjective(0.0, alpha, Mp)
    assert proj.value(w) == pytest.approx(-0.25 / floor)
    # floor 0 on this noise-free example drops the null space (minimum-norm solution), it does not diverge
    np.testing.assert_allclose(solve(obj, lambda_floor=0.0), [0.0, 0.0], atol=0)


def test_degenerate_objective_raises_readable_error() -> None:
    obj = QuadraticObjective(0.0, np.ones(3), -np.eye(3))
    with pytest.raises(DegenerateNoisyObjective, match=r"only 0 eigenvalue\(s\) .* exceed the floor") as ei:
        solve(obj, lambda_floor=0.01)
    assert "\n" not in str(ei.value)
    with pytest.raises(DegenerateNoisyObjective, match="no positive curvature"):
        solve(obj, lambda_floor=0.0)
    with pytest.raises(DegenerateNoisyObjective, match="need 2"):
        solve(QuadraticObjective(0.0, np.ones(3), np.diag([1.0, -1.0, -1.0])), lambda_floor=0.01, min_pos=2)


def test_ridge_fallback() -> None:
    alpha = np.array([1.0, -2.0, 0.5])
    obj = QuadraticObjective(0.0, alpha, -np.eye(3))
    res = solve_details(obj, lambda_floor=0.2, fallback="ridge")
    assert res.fallback_used
    np.testing.assert_allclose(res.w, -0.5 * alpha / 0.2)
    np.testing.assert_allclose(alpha + 2 * 0.2 * res.w, 0, atol=1e-14)


def test_bad_arguments() -> None:
    obj = QuadraticObjective(0.0, np.ones(2), np.eye(2))
    with pytest.raises(ConfigurationError, match="lambda_floor"):
        solve(obj, lambda_floor=-1.0)
    with pytest.raises(ConfigurationError, match="lambda_floor"):
        solve(obj, lambda_floor=float("nan"))
    with pytest.raises(ConfigurationError, match="fallback"):
        solve(obj, lambda_floor=0.1, fallback="clip")
    with pytest.raises(ConfigurationError, match="symmetric"):
        solve(QuadraticObjective(0.0, np.ones(2), np.array([[1.0, 0.5], [0.0, 1.0]])), lambda_floor=0.1)
    with pytest.raises(ConfigurationError, match="square"):
        project_psd(np.ones((2, 3)), 0.1)


def test_predictions() -> None:
    X = np.array([[1.0, 2.0], [-1.0, 0.5]])
    w = np.array([0.5, -1.0])
    np.testing.assert_allclose(predict_linear(X, w), X @ w)
    z = X @ w
    np.testing.assert_allclose(predict_logistic_proba(X, w), 1 / (1 + np.exp(-z)), rtol=1e-14)
    assert predict_logistic_proba(np.array([[1000.0]]), np.array([1.0]))[0] == 1.0
    assert predict_logistic_proba(np.array([[-1000.0]]), np.array([1.0]))[0] == 0.0


# ------------------------------------------------------------------ adaptive regularisation (issue 24)
def test_adaptive_shrinks_each_eigendirection_by_its_wiener_factor() -> None:
    """w = -1/2 Q diag(1/max(s, floor)) f * (Q^T alpha), f_i = p_i^2 / (p_i^2 + v_i), v_i = sum_a Q_ai^2 v_a."""
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(60, 5))
    M = X.T @ X / 60 + _noisy_sym(rng, 5, 0.05)
    alpha = rng.normal(scale=0.3, size=5)
    var = rng.uniform(0.01, 0.2, size=5)
    floor = 0.05
    w = solve(QuadraticObjective(0.0, alpha, M), lambda_floor=floor, regularization="adaptive", alpha_noise_var=var)
    s, Q = np.linalg.eigh(M)
    p = Q.T @ alpha
    v = (Q ** 2).T @ var
    expected = -0.5 * Q @ (p * p ** 2 / (p ** 2 + v) / np.maximum(s, floor))
    np.testing.assert_allclose(w, expected, rtol=1e-12, atol=1e-14)
    # a direction at the noise level loses half of its coefficient; the floor-only solve keeps it all
    w_floor = solve(QuadraticObjective(0.0, alpha, M), lambda_floor=floor)
    assert np.linalg.norm(w) < np.linalg.norm(w_floor)


def test_adaptive_without_noise_is_the_floor_solve() -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(80, 4))
    obj = linear_objective(X, X @ rng.normal(size=4))
    for floor in (0.0, 0.1):
        np.testing.assert_array_equal(
            solve(obj, lambda_floor=floor, regularization="adaptive", alpha_noise_var=np.zeros(4)),
            solve(obj, lambda_floor=floor))


def test_adaptive_needs_the_public_alpha_variances() -> None:
    obj = QuadraticObjective(0.0, np.ones(3), np.eye(3))
    with pytest.raises(ConfigurationError, match="alpha_noise_var"):
        solve(obj, lambda_floor=0.1, regularization="adaptive")
    with pytest.raises(ConfigurationError, match="alpha_noise_var"):
        solve(obj, lambda_floor=0.1, regularization="adaptive", alpha_noise_var=np.array([1.0, -1.0, 1.0]))
    with pytest.raises(ConfigurationError, match="regularization"):
        solve(obj, lambda_floor=0.1, regularization="ridge")


# ------------------------------------------------------------------ unpenalised intercept (Schur complement)
def _with_constant(rng, n=200, p=3, c=0.5):
    U = np.hstack([rng.uniform(-0.3, 0.3, size=(n, p)), np.full((n, 1), c)])
    y = 0.6 + U[:, :p] @ rng.normal(size=p) + 0.05 * rng.normal(size=n)
    return U, y, Intercept(p, c * c)


def test_unpenalised_intercept_without_floor_is_least_squares() -> None:
    U, y, icpt = _with_constant(np.random.default_rng(6))
    obj = linear_objective(U, y)
    np.testing.assert_allclose(solve(obj, lambda_floor=0.0, intercept=icpt), np.linalg.lstsq(U, y, rcond=None)[0],
                               atol=1e-10)


def test_unpenalised_intercept_with_a_huge_floor_predicts_the_noisy_mean() -> None:
    """The floor shrinks the slopes only: the prediction converges to -alpha_k / (2c) times c = the released mean of
    y (noisy alpha_k included), not to 0 (the middle of the label range), which the plain floor solve gives."""
    rng = np.random.default_rng(7)
    U, y, icpt = _with_constant(rng)
    obj = linear_objective(U, y)
    noisy = QuadraticObjective(0.0, obj.alpha + rng.normal(scale=0.01, size=4), obj.M + _noisy_sym(rng, 4, 0.01))
    c = U[0, -1]
    released_mean = -noisy.alpha[-1] / (2 * c)
    w = solve(noisy, lambda_floor=1e9, intercept=icpt, fallback="ridge")
    np.testing.assert_allclose(U @ w, released_mean, atol=1e-6)
    assert abs(released_mean - y.mean()) < 0.1
    plain = solve(noisy, lambda_floor=1e9, fallback="ridge")
    np.testing.assert_allclose(U @ plain, 0.0, atol=1e-6)


def test_unpenalised_intercept_minimises_the_floored_centred_objective() -> None:
    """w_k solves d/dw_k = 0 of the noisy objective exactly; the rest is the floored solve of M', alpha'."""
    rng = np.random.default_rng(8)
    U, y, icpt = _with_constant(rng)
    obj = linear_objective(U, y)
    M = obj.M + _noisy_sym(rng, 4, 0.02)
    M[3, 3] = icpt.curvature   # the public entry
    noisy = QuadraticObjective(0.0, obj.alpha + rng.normal(scale=0.02, size=4), M)
    w = solve(noisy, lambda_floor=0.01, intercept=icpt, fallback="ridge")
    grad = noisy.alpha + 2 * noisy.M @ w
    assert abs(grad[3]) < 1e-12
    Mp = M[:3, :3] - np.outer(M[:3, 3], M[:3, 3]) / M[3, 3]
    ap = noisy.alpha[:3] - noisy.alpha[3] * M[:3, 3] / M[3, 3]
    np.testing.assert_allclose(w[:3], solve(QuadraticObjective(0.0, ap, Mp), lambda_floor=0.01, fallback="ridge"),
                               atol=1e-12)
