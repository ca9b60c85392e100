"""Noisy-gradient release of the FM objective (issue 33): sensitivity, calibration, convergence, the estimator option
``mechanism="noisy-gd"`` and the public-facts rule ``mechanism="auto"``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vfl
from vfl.exceptions import ConfigurationError
from vfl.fm.objective import QuadraticObjective, fm_objective
from vfl.privacy.calibration import epsilon_of
from vfl.privacy.gradient_release import (
    GradientRelease,
    objective_gradient,
    round_sensitivity,
    run_noisy_gradient,
)
from vfl.privacy.release_choice import (
    CLIP_THRESHOLD,
    GRADIENT_THRESHOLD,
    NOISE_THRESHOLD,
    choose_release,
    floor_ratio,
)


def _row_gradient(model: str, x: np.ndarray, y: float, w: np.ndarray) -> np.ndarray:
    """N * (the row's share of alpha + 2 M w), from the FM objective of a one-row data set (no formula copied)."""
    obj = fm_objective(x[None, :], np.array([y]), model)
    return obj.alpha + 2.0 * obj.M @ w


def _unit_ball(rng: np.random.Generator, d: int) -> np.ndarray:
    v = rng.normal(size=d)
    return v / np.linalg.norm(v) * rng.uniform() ** (1 / d)


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("radius", [0.5, 1.0, 3.0])
def test_no_pair_of_rows_exceeds_the_round_sensitivity(model: str, radius: float) -> None:
    rng = np.random.default_rng(7)
    d, bound = 4, round_sensitivity(model, radius, 1)
    worst = 0.0
    for _ in range(3000):
        w = _unit_ball(rng, d) * radius
        x, x2 = _unit_ball(rng, d), _unit_ball(rng, d)
        if model == "linear":
            y, y2 = rng.uniform(-1, 1, size=2)
        else:
            y, y2 = rng.integers(0, 2, size=2)
        worst = max(worst, float(np.linalg.norm(_row_gradient(model, x, y, w) - _row_gradient(model, x2, y2, w))))
    assert worst <= bound
    # a constructed pair comes close to the bound (it is not loose by a large factor): x, x' orthogonal unit vectors,
    # w along x - x' (linear: y = -1, y' = 1 gives 2R + 2 sqrt(2); logistic: y = 0, y' = 1 gives R/4 + sqrt(2)/2)
    e1, e2 = np.eye(d)[0], np.eye(d)[1]
    w = radius * (e1 - e2) / math.sqrt(2)
    ys = (-1.0, 1.0) if model == "linear" else (0.0, 1.0)
    hit = float(np.linalg.norm(_row_gradient(model, e1, ys[0], w) - _row_gradient(model, e2, ys[1], w)))
    assert hit <= bound + 1e-12
    assert hit >= (2 * radius + 2 * math.sqrt(2) if model == "linear" else radius / 4 + math.sqrt(2) / 2) - 1e-12


def test_report_spends_exactly_the_requested_budget() -> None:
    rel = GradientRelease("linear", 1000, 11, epsilon=1.0, delta=1e-5, steps=25, radius=1.0)
    mu = math.sqrt(25) * rel.sensitivity / rel.sigma
    assert epsilon_of(mu, 1e-5) == pytest.approx(1.0, rel=1e-9)
    report = rel.privacy_report()
    assert report.epsilon == pytest.approx(1.0, rel=1e-9) and report.mechanism == "noisy-gd"
    assert rel.sensitivity == pytest.approx(6.0 / 1000)


def test_noise_has_the_calibrated_std() -> None:
    """One round from w_0 = 0 with a zero gradient: w_1 = -eta * noise, so its sample std estimates eta * sigma
    (chi-square interval for 40,000 draws at 6 standard errors)."""
    rel = GradientRelease("linear", 500, 40_000, epsilon=2.0, delta=1e-5, steps=1, radius=1e9)
    w, _ = run_noisy_gradient(lambda v: np.zeros_like(v), 40_000, steps=1, eta=rel.eta, radius=1e9,
                              sigma=rel.sigma, rng=np.random.default_rng(3))
    se = 1.0 / math.sqrt(2 * 40_000)
    assert abs(float(np.std(w)) / (rel.eta * rel.sigma) - 1.0) < 6 * se


def test_without_noise_the_iterates_reach_the_minimiser() -> None:
    rng = np.random.default_rng(1)
    A = rng.normal(size=(5, 5))
    M = A @ A.T / 25 + 0.05 * np.eye(5)
    obj = QuadraticObjective(0.0, rng.normal(size=5) * 0.1, M)
    w_star = np.linalg.solve(2 * M, -obj.alpha)
    _, last = run_noisy_gradient(objective_gradient(obj), 5, steps=4000, eta=0.5 / np.linalg.eigvalsh(M)[-1],
                                 radius=10.0, sigma=0.0, rng=rng)
    np.testing.assert_allclose(last, w_star, atol=1e-9)
    _, clipped = run_noisy_gradient(objective_gradient(obj), 5, steps=4000, eta=0.5 / np.linalg.eigvalsh(M)[-1],
                                    radius=0.5 * np.linalg.norm(w_star), sigma=0.0, rng=rng)
    assert np.linalg.norm(clipped) <= 0.5 * np.linalg.norm(w_star) + 1e-12


def _synthetic(seed: int, n: int = 1250):
    rng = np.random.default_rng(seed)
    X = np.clip(rng.normal(size=(n, 6)), -3, 3)
    b = rng.normal(size=6)
    s = math.sqrt(2 * float(b @ b))
    y = np.clip(X @ b + rng.normal(size=n) * math.sqrt(float(b @ b)), -3 * s, 3 * s)
    return X, y, s


@pytest.mark.parametrize("row_norm", ["scale", "clip"])
def test_estimator_noisy_gd_predicts_its_released_iterate(row_norm: str) -> None:
    X, y, s = _synthetic(0)
    est = vfl.LinearRegression(mechanism="noisy-gd", row_norm=row_norm, epsilon=1.0, bounds=(-3, 3),
                               y_bounds=(-3 * s, 3 * s), random_state=0).fit(X, y)
    assert est.objective_ is None and est.privacy_report_.epsilon == pytest.approx(1.0, rel=1e-9)
    d = X.shape[1] + 1
    U = 2 * (X + 3) / 6 - 1
    if row_norm == "clip":
        U = U * np.minimum(1.0, math.sqrt(6 / d) / np.linalg.norm(U, axis=1))[:, None]
    else:
        U = U / math.sqrt(d)
    z = U @ est.coef_unit_[:-1] + est.coef_unit_[-1] / math.sqrt(d)
    np.testing.assert_allclose(est.predict(X), -3 * s + 3 * s * (1 + z), rtol=0, atol=1e-10)


def test_noisy_gd_refuses_the_linf_domain() -> None:
    X, y, s = _synthetic(1, 100)
    with pytest.raises(ConfigurationError, match="l2 domain"):
        vfl.LinearRegression(mechanism="noisy-gd", domain="linf", bounds=(-3, 3), y_bounds=(-3 * s, 3 * s)).fit(X, y)


def test_logistic_noisy_gd_learns_the_sign() -> None:
    """Accuracy against the constant predictor on 2 disjoint seeds: the threshold is the majority rate plus 5
    standard errors of a test accuracy on 250 rows (the model's signal, R^2 = 0.5, gives far more)."""
    for seed in (2, 3):
        X, y, _ = _synthetic(seed)
        labels = (y > 0).astype(int)
        est = vfl.LogisticRegression(mechanism="noisy-gd", epsilon=2.0, bounds=(-3, 3), random_state=seed)
        est.fit(X[:1000], labels[:1000])
        majority = max(labels[1000:].mean(), 1 - labels[1000:].mean())
        assert est.score(X[1000:], labels[1000:]) > majority + 5 * math.sqrt(0.25 / 250)


def test_auto_reads_only_public_facts_and_records_its_choice() -> None:
    X, y, s = _synthetic(4, 1000)
    fits = [vfl.LinearRegression(mechanism="auto", epsilon=eps, bounds=(-3, 3), y_bounds=(-3 * s, 3 * s),
                                 random_state=4).fit(X_, y) for eps in (0.5, 8.0) for X_ in (X, -X)]
    choices = [f.privacy_report_.extra["release_choice"] for f in fits]
    assert choices[0] == choices[1] and choices[2] == choices[3]   # the data (X or -X) do not matter
    for f, c in zip(fits, choices, strict=True):
        expected = choose_release("linear", 1000, 7, f.epsilon, 1e-5)
        assert c == expected.to_dict() and f.mechanism_ == expected.mechanism and f.row_norm_ == expected.row_norm
        q = floor_ratio("linear", 1000, 7, f.epsilon, 1e-5)
        assert (c["mechanism"] == "noisy-gd") == (GRADIENT_THRESHOLD <= q < NOISE_THRESHOLD)
        assert (c["row_norm"] == "clip") == (CLIP_THRESHOLD <= q < NOISE_THRESHOLD)
        assert f.privacy_report_.epsilon == pytest.approx(f.epsilon, rel=1e-6)


@pytest.mark.parametrize("n,eps,zone", [(100_000, 1.0, "gaussian-fm/scale"), (10_000, 1.0, "gaussian-fm/clip"),
                                        (1_000, 1.0, "noisy-gd/clip"), (400, 0.5, "gaussian-fm/scale")])
def test_the_zones_of_the_rule(n: int, eps: float, zone: str) -> None:
    c = choose_release("linear", n, 11, eps, 1e-5)
    assert f"{c.mechanism}/{c.row_norm}" == zone


@pytest.mark.parametrize("n", [1000, 10_000])
def test_auto_is_exactly_the_chosen_release(n: int) -> None:
    """auto adds no step of its own: the same seed gives the same model as the chosen mechanism and row_norm."""
    X, y, s = _synthetic(5, n)
    kw = {"epsilon": 1.0, "bounds": (-3, 3), "y_bounds": (-3 * s, 3 * s), "random_state": 5}
    auto = vfl.LinearRegression(mechanism="auto", **kw).fit(X, y)
    same = vfl.LinearRegression(mechanism=auto.mechanism_, row_norm=auto.row_norm_, **kw).fit(X, y)
    np.testing.assert_array_equal(auto.coef_, same.coef_)
    np.testing.assert_array_equal(auto.predict(X), same.predict(X))


def test_noisy_gd_has_no_inference_from_a_released_objective() -> None:
    X, y, s = _synthetic(6, 300)
    est = vfl.LinearRegression(mechanism="noisy-gd", bounds=(-3, 3), y_bounds=(-3 * s, 3 * s)).fit(X, y)
    with pytest.raises(ConfigurationError, match="releases gradients only"):
        est.inference_  # noqa: B018 (the property raises)
