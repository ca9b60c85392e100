"""The noisy-gradient release with the label term released once (``label_release="once"``, issue 33): its two
sensitivities, its calibration (mu of both parts = mu*(eps, delta)), that the model is post-processing of the
released vectors, and the rule's noisy-gradient zone."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vfl
from vfl.exceptions import ConfigurationError
from vfl.fm.objective import fm_objective
from vfl.privacy.calibration import calibrate_mu, epsilon_of
from vfl.privacy.gradient_release import (
    GradientRelease,
    default_label_share,
    label_sensitivity,
    matrix_round_sensitivity,
    replay_label_once,
    round_sensitivity,
)
from vfl.privacy.release_choice import AUTO_GD_STEPS, choose_release


def _unit_ball(rng: np.random.Generator, d: int) -> np.ndarray:
    v = rng.normal(size=d)
    return v / np.linalg.norm(v) * rng.uniform() ** (1 / d)


def _parts(model: str, x: np.ndarray, y: float, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """N * (alpha, 2 M w) of a one-row data set, from the FM objective (no formula copied)."""
    obj = fm_objective(x[None, :], np.array([y]), model)
    return obj.alpha, 2.0 * obj.M @ w


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_no_pair_of_rows_exceeds_either_sensitivity(model: str) -> None:
    rng = np.random.default_rng(11)
    d, radius = 4, 1.5
    worst_a = worst_m = 0.0
    for _ in range(3000):
        w = _unit_ball(rng, d) * radius
        x, x2 = _unit_ball(rng, d), _unit_ball(rng, d)
        y, y2 = rng.uniform(-1, 1, size=2) if model == "linear" else rng.integers(0, 2, size=2)
        (a, m), (a2, m2) = _parts(model, x, y, w), _parts(model, x2, y2, w)
        worst_a, worst_m = max(worst_a, float(np.linalg.norm(a - a2))), max(worst_m, float(np.linalg.norm(m - m2)))
    assert worst_a <= label_sensitivity(model, 1) and worst_m <= matrix_round_sensitivity(model, radius, 1)
    # both bounds are reached: x = x' = e1 with opposite labels; x, x' orthogonal with w along x (x x^T w = R x)
    e1, e2 = np.eye(d)[0], np.eye(d)[1]
    ys = (1.0, -1.0) if model == "linear" else (0.0, 1.0)
    hit_a = float(np.linalg.norm(_parts(model, e1, ys[0], e1)[0] - _parts(model, e1, ys[1], e1)[0]))
    hit_m = float(np.linalg.norm(_parts(model, e1, 0, radius * e1)[1] - _parts(model, e2, 0, radius * e1)[1]))
    assert hit_a == pytest.approx(label_sensitivity(model, 1), rel=1e-12)
    assert hit_m == pytest.approx(matrix_round_sensitivity(model, radius, 1), rel=1e-12)
    # the two parts add up to the every-round bound
    assert label_sensitivity(model, 1) + matrix_round_sensitivity(model, radius, 1) == \
        pytest.approx(round_sensitivity(model, radius, 1))


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize(("eps", "steps", "share"), [(0.5, 200, None), (1.0, 25, 0.3), (4.0, 100, 0.9)])
def test_both_parts_compose_to_the_requested_budget(model: str, eps: float, steps: int, share: float | None) -> None:
    n = 1000
    rel = GradientRelease(model, n, 11, eps, 1e-5, steps=steps, radius=1.0, label_release="once", label_share=share)
    mu_star = calibrate_mu(eps, 1e-5)
    f = default_label_share(model, 1.0) if share is None else share
    mu_a = label_sensitivity(model, n) / rel.label_sigma
    mu_rounds = math.sqrt(steps) * matrix_round_sensitivity(model, 1.0, n) / rel.sigma
    assert mu_a**2 == pytest.approx(f * mu_star**2, rel=1e-12)
    assert mu_rounds**2 == pytest.approx((1 - f) * mu_star**2, rel=1e-12)
    assert math.hypot(mu_a, mu_rounds) == pytest.approx(mu_star, rel=1e-12) and rel.mu == pytest.approx(mu_star)
    report = rel.privacy_report()
    assert report.epsilon == pytest.approx(eps, rel=1e-9) and epsilon_of(rel.mu, 1e-5) == pytest.approx(eps)
    assert report.extra["label_release"] == "once" and "mu^2 = (Delta_a/sigma_a)^2 + T" in report.calibration


def test_default_share_is_never_noisier_than_the_every_round_release() -> None:
    """With f = Delta_a / (Delta_a + Delta_M): sigma^2 + T sigma_a^2 equals the every-round per-round variance."""
    for model in ("linear", "logistic"):
        once = GradientRelease(model, 500, 8, 1.0, 1e-5, steps=40, label_release="once")
        every = GradientRelease(model, 500, 8, 1.0, 1e-5, steps=40)
        assert once.sigma**2 + 40 * once.label_sigma**2 == pytest.approx(every.sigma**2, rel=1e-12)
    assert default_label_share("linear", 1.0) == pytest.approx(2 / 3)
    assert default_label_share("logistic", 1.0) == pytest.approx(4 / 5)


@pytest.mark.parametrize("averaging", ["all", "last-half"])
def test_the_model_is_post_processing_of_the_released_vectors(averaging: str) -> None:
    rng = np.random.default_rng(5)
    U = np.array([_unit_ball(rng, 6) for _ in range(300)])
    y = np.clip(U @ rng.normal(size=6) + 0.1 * rng.normal(size=300), -1, 1)
    rel = GradientRelease("linear", 300, 6, 1.0, 1e-5, steps=30, label_release="once", averaging=averaging)
    transcript: list[np.ndarray] = []
    obj = fm_objective(U, y, "linear")
    w = rel.run_objective(obj, np.random.default_rng(9), transcript)
    assert len(transcript) == 31
    np.testing.assert_array_equal(replay_label_once(transcript, eta=rel.eta, radius=rel.radius, window=rel.window), w)
    # the first released vector is alpha + N(0, sigma_a^2): the same generator's first d draws
    noise = np.random.default_rng(9).normal(0.0, rel.label_sigma, size=6)
    np.testing.assert_allclose(transcript[0], obj.alpha + noise, rtol=0, atol=1e-15)


def test_label_once_refuses_a_networked_calibration_and_bad_options() -> None:
    with pytest.raises(ConfigurationError, match="networked"):
        GradientRelease("linear", 100, 4, 1.0, 1e-5, label_release="once", party_radii=(0.5, 0.5))
    with pytest.raises(ConfigurationError, match="label_release"):
        GradientRelease("linear", 100, 4, 1.0, 1e-5, label_release="twice")
    with pytest.raises(ConfigurationError, match="label_share"):
        GradientRelease("linear", 100, 4, 1.0, 1e-5, label_release="once", label_share=1.0)
    with pytest.raises(ConfigurationError, match="averaging"):
        GradientRelease("linear", 100, 4, 1.0, 1e-5, averaging="best")
    with pytest.raises(ConfigurationError, match="run_objective"):
        GradientRelease("linear", 100, 4, 1.0, 1e-5, label_release="once").run(lambda w: w, np.random.default_rng())


def test_auto_gradient_zone_releases_the_label_once() -> None:
    rng = np.random.default_rng(3)
    n, p = 1000, 10
    choice = choose_release("linear", n, p + 1, 1.0, 1e-5)
    assert choice.mechanism == "noisy-gd" and choice.label_release == "once" and choice.steps == AUTO_GD_STEPS
    logistic = choose_release("logistic", 414, 28, 1.0, 1e-5)   # the forest-fires shape: logistic keeps every round
    assert logistic.mechanism == "noisy-gd" and logistic.label_release == "every-round" and logistic.steps == 25
    X = rng.uniform(-1, 1, size=(n, p))
    y = np.clip(X @ rng.normal(size=p) / 3, -1, 1)
    est = vfl.LinearRegression(mechanism="auto", epsilon=1.0, bounds=(-1, 1), y_bounds=(-1, 1),
                               random_state=1).fit(X, y)
    rep = est.privacy_report_
    assert rep.extra["label_release"] == "once" and rep.extra["steps"] == AUTO_GD_STEPS
    assert rep.epsilon == pytest.approx(1.0, rel=1e-9)
    # the explicit mechanism keeps the every-round release unless asked
    est2 = vfl.LinearRegression(mechanism="noisy-gd", row_norm="clip", epsilon=1.0, bounds=(-1, 1), y_bounds=(-1, 1),
                                random_state=1).fit(X, y)
    assert est2.privacy_report_.extra["label_release"] == "every-round"
    # the same release asked for explicitly gives the same model as auto (same noise)
    est3 = vfl.LinearRegression(mechanism="noisy-gd", row_norm="clip", epsilon=1.0, bounds=(-1, 1), y_bounds=(-1, 1),
                                steps=AUTO_GD_STEPS, label_release="once", random_state=1).fit(X, y)
    np.testing.assert_array_equal(est3.coef_, est.coef_)


def test_the_estimator_refuses_label_release_for_a_matrix_release() -> None:
    X = np.random.default_rng(0).uniform(-1, 1, size=(50, 3))
    with pytest.raises(ConfigurationError, match="label_release"):
        vfl.LinearRegression(label_release="once", bounds=(-1, 1), y_bounds=(-1, 1)).fit(X, X[:, 0])


def test_a_bad_label_release_is_refused_at_every_size_and_auto_says_when_it_ignored_one() -> None:
    """Review of issue 33: with mechanism='auto' a bad value passed silently where the rule chose the matrix release
    (large n) and raised where it chose noisy gradients (small n); an unused valid value was dropped without a word."""
    rng = np.random.default_rng(4)
    for n in (1000, 20000):   # the rule picks noisy gradients at n = 1000, the matrix release at n = 20000 (d = 11)
        X = rng.uniform(-1, 1, size=(n, 10))
        with pytest.raises(ConfigurationError, match="label_release must be one of"):
            vfl.LinearRegression(mechanism="auto", label_release="bogus", bounds=(-1, 1), y_bounds=(-1, 1)).fit(
                X, X[:, 0] / 2)
    est = vfl.LinearRegression(mechanism="auto", label_release="once", bounds=(-1, 1), y_bounds=(-1, 1),
                               random_state=2).fit(X, X[:, 0] / 2)
    assert est.mechanism_ != "noisy-gd"
    assert any("label_release='once' was not used" in note for note in est.privacy_report_.notes)
