"""Baselines of spec §5: noisy gradient descent and objective perturbation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyParameterError
from vfl.models.baselines import (
    NoisyGradientDescent,
    ObjectivePerturbation,
    noisy_gd_sigma_rdp,
    objective_perturbation_budget,
    sample_objective_perturbation_noise,
)
from vfl.privacy.accounting import noisy_gd_epsilon_exact, noisy_gd_epsilon_rdp
from vfl.privacy.calibration import calibrate_mu
from vfl.rng import make_rng


def _logistic_data(seed=0, n=600, d=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    y = (X @ np.linspace(2, -1, d) + 0.3 + rng.logistic(size=n) * 0.5 > 0).astype(float)
    return X, y


def _linear_data(seed=0, n=600, d=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    y = np.clip(X @ np.linspace(0.5, -0.3, d) + 0.1 + 0.1 * rng.normal(size=n), -2, 2)
    return X, y


def _unit_rows(X, fit_intercept=True):
    """The l2-domain design the baselines use: x/sqrt(d) and an intercept column 1/sqrt(d) (bounds (-1, 1))."""
    d = X.shape[1] + int(fit_intercept)
    U = X / math.sqrt(d)
    return np.hstack([U, np.full((X.shape[0], 1), 1 / math.sqrt(d))]) if fit_intercept else U


# ------------------------------------------------------------------------------------ noisy GD
def test_noisy_gd_noise_scale_and_accounting() -> None:
    X, y = _logistic_data()
    est = NoisyGradientDescent(epsilon=1.0, delta=1e-5, steps=50, bounds=(-1, 1), random_state=0).fit(X, y)
    n = X.shape[0]
    assert est.sensitivity_ == pytest.approx(2 / n)
    assert est.noise_std_ == pytest.approx(math.sqrt(50) * (2 / n) / calibrate_mu(1.0, 1e-5), rel=1e-12)
    rep = est.privacy_report_
    assert rep.epsilon == pytest.approx(1.0, rel=1e-8) and rep.delta == 1e-5
    assert rep.extra["epsilon_rdp"] > rep.epsilon
    rdp = NoisyGradientDescent(epsilon=1.0, steps=50, bounds=(-1, 1), accounting="rdp", random_state=0).fit(X, y)
    assert noisy_gd_epsilon_rdp(50, 2 / n, rdp.noise_std_, 1e-5) == pytest.approx(1.0, rel=1e-10)
    assert rdp.noise_std_ > est.noise_std_
    assert rdp.privacy_report_.epsilon == pytest.approx(noisy_gd_epsilon_exact(50, 2 / n, rdp.noise_std_, 1e-5))
    assert noisy_gd_sigma_rdp(1.0, 1e-5, 1000, 1.0) > 0


def test_noisy_gd_one_step_noise_is_declared_gaussian() -> None:
    """T = 1 from w_0 = 0: w_1 = -eta (mean gradient + N(0, tau^2 I)); audit the noise over 2000 seeds."""
    X, y = _logistic_data(n=100, d=2)
    U = _unit_rows(X)
    mean_grad = ((0.5 - y)[:, None] * U).mean(axis=0)   # sigmoid(0) = 1/2
    eta = 0.7
    draws = []
    for seed in range(2000):
        est = NoisyGradientDescent(epsilon=2.0, steps=1, learning_rate=eta, bounds=(-1, 1), random_state=seed)
        est.fit(X, y)
        draws.append(-est.coef_unit_ / eta - mean_grad)
    Z = np.array(draws)
    tau = est.noise_std_
    np.testing.assert_allclose(Z.std(axis=0), tau, rtol=0.05)
    for j in range(Z.shape[1]):
        assert stats.kstest(Z[:, j] / tau, "norm").pvalue > 1e-3


@pytest.mark.parametrize("model", ["logistic", "linear"])
def test_noisy_gd_converges_to_nonprivate_gd_as_eps_grows(model: str) -> None:
    X, y = _logistic_data(1) if model == "logistic" else _linear_data(1)
    kw = {"model": model, "steps": 200, "bounds": (-1, 1), "clip": 1.0}
    if model == "linear":
        kw["y_bounds"] = (-2, 2)
    U = _unit_rows(X)
    y_in = y if model == "logistic" else y / 2
    eta = 4.0 if model == "logistic" else 0.5
    w = np.zeros(U.shape[1])
    probe = NoisyGradientDescent(**kw)
    probe._model = model
    for _ in range(200):
        w = w - eta * probe._per_row_gradients(U, y_in, w).mean(axis=0)
    errors = []
    for eps in (0.5, 5.0, 50.0, 1e6):
        err = np.mean([np.linalg.norm(NoisyGradientDescent(**kw, epsilon=eps, random_state=s).fit(X, y).coef_unit_ - w)
                       for s in range(5)])
        errors.append(err)
    assert all(b < a for a, b in zip(errors, errors[1:], strict=False)), errors
    assert errors[-1] < 5e-3


def test_noisy_gd_linear_clips_gradients() -> None:
    X, y = _linear_data(2)
    est = NoisyGradientDescent(model="linear", clip=0.1, bounds=(-1, 1), y_bounds=(-2, 2))
    est._model = "linear"
    G = est._per_row_gradients(_unit_rows(X), y / 2, np.full(4, 10.0))
    assert np.linalg.norm(G, axis=1).max() <= 0.1 + 1e-15
    est.fit(X, y)
    assert est.sensitivity_ == pytest.approx(0.2 / X.shape[0])
    assert np.isfinite(est.predict(X)).all()


def test_noisy_gd_bad_parameters() -> None:
    X, y = _logistic_data(n=50)
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        NoisyGradientDescent(epsilon=0, bounds=(-1, 1)).fit(X, y)
    with pytest.raises(PrivacyParameterError, match="delta"):
        NoisyGradientDescent(delta=1.0, bounds=(-1, 1)).fit(X, y)
    with pytest.raises(ConfigurationError, match="clip=1.0"):
        NoisyGradientDescent(clip=0.5, bounds=(-1, 1)).fit(X, y)
    with pytest.raises(ConfigurationError, match="accounting"):
        NoisyGradientDescent(accounting="moments", bounds=(-1, 1)).fit(X, y)
    with pytest.raises(ConfigurationError, match="steps"):
        NoisyGradientDescent(steps=0, bounds=(-1, 1)).fit(X, y)
    with pytest.raises(DataValidationError, match="3 classes"):
        NoisyGradientDescent(bounds=(-1, 1)).fit(X, np.arange(len(y)) % 3)
    # {-1, +1} labels are encoded as 0/1 through classes_ (spec pitfall 5): the same model as 0/1 labels
    pm = NoisyGradientDescent(bounds=(-1, 1), random_state=3).fit(X, 2 * y - 1)
    zo = NoisyGradientDescent(bounds=(-1, 1), random_state=3).fit(X, y)
    np.testing.assert_array_equal(pm.coef_, zo.coef_)
    assert list(pm.classes_) == [-1, 1]
    with pytest.raises(DataValidationError, match="model"):
        NoisyGradientDescent(model="poisson", bounds=(-1, 1)).fit(X, y)


# --------------------------------------------------------------------------- objective perturbation
def test_objective_perturbation_budget_cases() -> None:
    # large N Lambda: eps'' = eps - 2 ln(1 + c/(N Lambda)) > 0, no extra ridge
    eps_pp, dr = objective_perturbation_budget(1.0, 1000, 0.01)
    assert eps_pp == pytest.approx(1.0 - 2 * math.log(1 + 0.25 / 10)) and dr == 0.0
    # tiny Lambda: eps'' = eps/2 and Delta_r = c/(N (e^{eps/4} - 1)) - Lambda
    eps_pp, dr = objective_perturbation_budget(0.5, 100, 1e-5)
    assert eps_pp == 0.25 and dr == pytest.approx(0.25 / (100 * (math.exp(0.125) - 1)) - 1e-5)


def test_objective_perturbation_noise_distribution() -> None:
    rng = np.random.default_rng(0)
    d, eps_pp = 4, 0.8
    B = np.array([sample_objective_perturbation_noise(d, eps_pp, rng) for _ in range(3000)])
    norms = np.linalg.norm(B, axis=1)
    assert stats.kstest(norms, "gamma", args=(d, 0, 2 / eps_pp)).pvalue > 1e-3
    # uniform direction: <s, e_1>^2 ~ Beta(1/2, (d-1)/2)
    assert stats.kstest((B[:, 0] / norms) ** 2, "beta", args=(0.5, (d - 1) / 2)).pvalue > 1e-3


def test_objective_perturbation_exact_minimiser_and_label_mapping() -> None:
    X, y = _logistic_data(2)
    est = ObjectivePerturbation(epsilon=1.0, regularization=0.01, bounds=(-1, 1), random_state=3).fit(X, y)
    U = _unit_rows(X)
    n, d = U.shape
    eps_pp, dr = objective_perturbation_budget(1.0, n, 0.01)
    b = sample_objective_perturbation_noise(d, eps_pp, make_rng(3))   # same stream as fit
    y_pm = 2 * y - 1
    w = est.coef_unit_
    grad = -(U.T @ (y_pm / (1 + np.exp(y_pm * (U @ w))))) / n + (0.01 + dr) * w + b / n
    assert np.linalg.norm(grad) <= 1e-10
    rep = est.privacy_report_
    assert rep.epsilon == 1.0 and rep.delta is None and rep.mechanism == "objective-perturbation"
    # {-1, +1} at the API is encoded through classes_ (never fed as-is): same model as {0, 1}
    same = ObjectivePerturbation(bounds=(-1, 1), regularization=0.01, random_state=3).fit(X, y_pm)
    np.testing.assert_array_equal(same.coef_unit_, est.coef_unit_)
    with pytest.raises(DataValidationError, match="continuous"):
        ObjectivePerturbation(bounds=(-1, 1)).fit(X, y_pm * 0.5 + 0.25)


def test_objective_perturbation_converges_to_nonprivate_as_eps_grows() -> None:
    X, y = _logistic_data(4)
    U = _unit_rows(X)
    y_pm = 2 * y - 1
    lam = 0.01

    def f(w):
        return np.mean(np.logaddexp(0, -y_pm * (U @ w))) + lam / 2 * w @ w

    ref = optimize.minimize(f, np.zeros(U.shape[1]), method="BFGS", options={"gtol": 1e-12}).x
    errs = []
    for eps in (0.1, 1.0, 10.0, 1000.0):
        errs.append(np.mean([np.linalg.norm(ObjectivePerturbation(epsilon=eps, regularization=lam, bounds=(-1, 1),
                                                                  random_state=s).fit(X, y).coef_unit_ - ref)
                             for s in range(5)]))
    assert all(b < a for a, b in zip(errs, errs[1:], strict=False)), errs
    assert errs[-1] < 0.02
    est = ObjectivePerturbation(epsilon=1000.0, regularization=lam, bounds=(-1, 1), random_state=0).fit(X, y)
    assert est.score(X, y) > 0.7
    np.testing.assert_allclose(est.predict_proba(X).sum(axis=1), 1.0)
    assert est.get_params()["regularization"] == lam
    with pytest.raises(ConfigurationError, match="regularization"):
        ObjectivePerturbation(regularization=0.0, bounds=(-1, 1)).fit(X, y)
