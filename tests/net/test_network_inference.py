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
