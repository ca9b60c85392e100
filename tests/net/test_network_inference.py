"""Inference from the release over the real protocol (threads + loopback ZeroMQ + Paillier, issue 31): the
coordinator computes the model file's ``inference`` record from the released objective; with the same release (no
noise: the fixed-point release equals the in-process one to 2^-40) and the same public bootstrap seed it equals the
in-process estimator's, and it survives the model file.

1024-bit keys (allow_insecure_keys=True) are INSECURE and used only to keep these tests fast.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from vfl.api import Party, fit
from vfl.models.estimators import LinearRegression, LogisticRegression
from vfl.models.modelio import load_model

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner
FAST = {"key_bits": 1024, "allow_insecure_keys": True, "timeout": 30}


def _data(seed: int, n: int = 400):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n, 4))
    w = np.array([0.4, -0.3, 0.2, 0.1])
    y = np.clip(0.2 + X @ w + rng.uniform(-0.5, 0.5, n), -2.0, 2.0)
    y01 = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ (3 * w))))).astype(float)
    return X, y, y01


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_networked_inference_equals_in_process_for_the_same_release(model: str, tmp_path) -> None:
    X, y, y01 = _data(1)
    label = y if model == "linear" else y01
    lab = {"label_bounds": (-2.0, 2.0)} if model == "linear" else {}
    # the label owner (with the constant column) last: the prepared columns in the in-process estimator's order, so
    # the bootstrap's draws meet the same columns
    fitted = fit([Party("a", X[:, :2], bounds=(-1.0, 1.0)), Party("b", X[:, 2:], label, bounds=(-1.0, 1.0), **lab)],
                 model=model, mechanism="none", precision_bits=40, **FAST)
    if model == "linear":
        est = LinearRegression(mechanism="none", bounds=(-1.0, 1.0), y_bounds=(-2.0, 2.0))
    else:
        est = LogisticRegression(mechanism="none", bounds=(-1.0, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, label)
        ours = est.inference_
    record = fitted.inference
    assert record is not None and record["names"][-1] == "intercept" and len(record["names"]) == 5
    np.testing.assert_allclose(record["coef"], np.append(est.coef_, est.intercept_), atol=1e-6)
    np.testing.assert_allclose(fitted.conf_int(), ours.conf_int(), atol=1e-6)
    np.testing.assert_allclose(fitted.bse, ours.bse, atol=1e-6)
    np.testing.assert_allclose(fitted.pvalues, ours.pvalues, atol=1e-6)
    path = tmp_path / "model.json"
    fitted.to_json(path)
    back = load_model(path)
    np.testing.assert_array_equal(back.conf_int(), fitted.conf_int())
    assert "P>|z|" in back.summary()


def test_networked_gaussian_inference_is_a_function_of_the_release_and_wider_for_smaller_epsilon() -> None:
    X, y, _ = _data(2, n=2000)
    parties = [Party("a", X[:, :2], y, bounds=(-1.0, 1.0), label_bounds=(-2.0, 2.0)),
               Party("b", X[:, 2:], bounds=(-1.0, 1.0))]
    first = fit(parties, mechanism="gaussian-fm", epsilon=1.0, random_state=5, **FAST)
    again = fit(parties, mechanism="gaussian-fm", epsilon=1.0, random_state=5, **FAST)
    assert first.inference == again.inference                       # same noise seed: same release, same record
    wide = fit(parties, mechanism="gaussian-fm", epsilon=0.25, random_state=5, **FAST)
    width = [np.median(np.diff(m.conf_int(), axis=1)) for m in (first, wide)]
    assert width[0] < width[1]
    assert first.inference["n_bootstrap"] >= 200 and len(first.inference["conf_int"]) == 5


def test_networked_release_of_yty_gives_the_in_process_fit_measures(tmp_path) -> None:
    """``release_beta=True``: the label owner releases beta = (1/N) y'y as a block of the plan; with the same
    release (no noise) the networked record's R^2 and MSE (with intervals) are the in-process estimator's, and the
    MSE is the released model's in-sample MSE computed with numpy in original units."""
    X, y, _ = _data(3)
    fitted = fit([Party("a", X[:, :2], bounds=(-1.0, 1.0)),
                  Party("b", X[:, 2:], y, bounds=(-1.0, 1.0), label_bounds=(-2.0, 2.0))],
                 mechanism="none", precision_bits=40, release_beta=True, **FAST)
    est = LinearRegression(mechanism="none", bounds=(-1.0, 1.0), y_bounds=(-2.0, 2.0), release_beta=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    ours, theirs = est.inference_.fit, fitted.inference["fit"]
    # every party re-derived the model, beta block included, from the release and the settings, and signed it
    assert fitted.signatures is not None and set(fitted.signatures) == {"a", "b"}
    for key in ("mse", "r2", "mse_gain_over_mean"):
        assert theirs[key] is not None
        np.testing.assert_allclose(theirs[key], ours[key], rtol=1e-6, atol=1e-9)
    for key in ("mse_conf_int", "r2_conf_int"):
        np.testing.assert_allclose(theirs[key], ours[key], rtol=1e-6, atol=1e-9)
    pred = X @ fitted.coef_ + fitted.intercept_
    np.testing.assert_allclose(theirs["mse"], np.mean((y - pred) ** 2), rtol=1e-6)
    np.testing.assert_allclose(theirs["r2"], 1.0 - np.mean((y - pred) ** 2) / np.var(y), rtol=1e-6)
    path = tmp_path / "model.json"
    fitted.to_json(path)
    assert load_model(path).inference["fit"]["r2_conf_int"] == theirs["r2_conf_int"]


def test_networked_yty_release_is_accounted_as_in_process() -> None:
    """Same epsilon, one more block sharing it: the networked plan's noise per block (tau_beta, tau_alpha, tau_M)
    and the label owner's epsilon equal the in-process estimator's with release_beta=True; alpha and M get
    sqrt(3/2) x the noise of a run without beta (equal shares over J' = 3 instead of 2 blocks; 'risk' split keeps
    alpha:M); the other party's data do not enter beta, so its epsilon drops; the record carries R^2 / MSE."""
    X, y, _ = _data(4, n=1000)
    parties = [Party("a", X[:, :2], bounds=(-1.0, 1.0)),
               Party("b", X[:, 2:], y, bounds=(-1.0, 1.0), label_bounds=(-2.0, 2.0))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = fit(parties, mechanism="gaussian-fm", epsilon=1.0, random_state=5, **FAST)
        net = fit(parties, mechanism="gaussian-fm", epsilon=1.0, random_state=5, release_beta=True, **FAST)
        est = LinearRegression(mechanism="gaussian-fm", epsilon=1.0, bounds=(-1.0, 1.0), y_bounds=(-2.0, 2.0),
                               release_beta=True).fit(X, y)
    local = est.privacy_report_.to_dict()
    rep = net.privacy_report
    assert set(rep["noise_scales"]) == {"tau_beta", "tau_alpha", "tau_M"} == set(local["noise_scales"])
    for key, tau in local["noise_scales"].items():
        np.testing.assert_allclose(rep["noise_scales"][key], tau, rtol=1e-12)
    np.testing.assert_allclose(rep["sensitivities"]["beta"], 1.0 / len(y), rtol=1e-12)  # y'y/N, y in [-1, 1]
    for key in ("tau_alpha", "tau_M"):
        np.testing.assert_allclose(rep["noise_scales"][key] / plain.privacy_report["noise_scales"][key],
                                   np.sqrt(1.5), rtol=1e-9)
    assert rep["epsilon"] == plain.privacy_report["epsilon"] == 1.0
    owner = {p["name"]: p for p in rep["parties"]}
    assert owner["b"]["epsilon"] == pytest.approx(1.0)
    assert owner["a"]["epsilon"] < {p["name"]: p for p in plain.privacy_report["parties"]}["a"]["epsilon"]
    fit_ = net.inference["fit"]
    assert fit_["mse"] is not None and len(fit_["mse_conf_int"]) == 2 and len(fit_["r2_conf_int"]) == 2
    assert plain.inference["fit"]["mse"] is None   # without the release: only the gain over the mean


def test_release_beta_is_refused_where_there_is_no_beta() -> None:
    from vfl.exceptions import ConfigurationError
    from vfl.protocols.settings import RunSettings

    for model, mechanism in (("logistic", "gaussian-fm"), ("linear", "dp-bcd")):
        with pytest.raises(ConfigurationError, match="release-beta"):
            RunSettings(n_parties=2, model=model, mechanism=mechanism, release_beta=True).validate()
