"""A ``row_norm="clip"`` fit predicts on the clipped rows it was fitted on (issue 33: predict ignored the clip).

The reference is computed here from the fit's own solve ``solve_result_.w`` on rows mapped and clipped with numpy
(no vfl code on the reference side beyond the released w): z_unit = [clip(u(x)), 1/sqrt(d)] . w, and for linear
regression y = lo + (hi - lo)(1 + z_unit)/2. Before the fix predict used the raw row, which differs by far more
than 1e-12 whenever a row is clipped (checked below: the data are built so that most rows are).
"""

from __future__ import annotations

import numpy as np
import pytest

import vfl


def _unit_clipped(X: np.ndarray, lo: float, hi: float, d_total: int, symmetric: bool = False) -> np.ndarray:
    U = X / max(abs(lo), abs(hi)) if symmetric else 2.0 * (X - lo) / (hi - lo) - 1.0
    r = np.sqrt(X.shape[1] / d_total)
    norms = np.linalg.norm(U, axis=1)
    return U * np.minimum(1.0, r / norms)[:, None]


def _data(seed: int, n: int = 400, d: int = 6):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    y = np.clip(X @ rng.normal(size=d) * 0.3 + 0.2 * rng.normal(size=n), -4.0, 4.0)
    return X, y


@pytest.mark.parametrize("mechanism", ["none", "gaussian-fm"])
@pytest.mark.parametrize("seed", [0, 1])
def test_linear_clip_fit_predicts_the_solve_on_clipped_rows(mechanism: str, seed: int) -> None:
    X, y = _data(seed)
    est = vfl.LinearRegression(mechanism=mechanism, epsilon=4.0, domain="l2", row_norm="clip", bounds=(-2.0, 2.0),
                               y_bounds=(-4.0, 4.0), random_state=seed).fit(X, y)
    d = X.shape[1] + 1
    Uc = _unit_clipped(X, -2.0, 2.0, d)
    assert np.mean(np.linalg.norm(Uc, axis=1) < np.linalg.norm(2 * (X + 2) / 4 - 1, axis=1) - 1e-9) > 0.5
    z = np.hstack([Uc, np.full((X.shape[0], 1), 1 / np.sqrt(d))]) @ est.solve_result_.w
    expected = -4.0 + 8.0 * (1.0 + z) / 2.0
    np.testing.assert_allclose(est.predict(X), expected, rtol=0, atol=1e-12)
    # the linear model in raw units is not the fitted model once rows are clipped (what predict used to do)
    assert np.max(np.abs(X @ est.coef_ + est.intercept_ - expected)) > 1e-3


def test_no_intercept_clip_fit_predicts_on_clipped_rows() -> None:
    X, y = _data(2)
    est = vfl.LinearRegression(mechanism="none", domain="l2", row_norm="clip", bounds=(-2.0, 2.0),
                               y_bounds=(-4.0, 4.0), fit_intercept=False).fit(X, y)
    Uc = _unit_clipped(X, -2.0, 2.0, X.shape[1], symmetric=True)
    np.testing.assert_allclose(est.predict(X), 4.0 * (Uc @ est.solve_result_.w), rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [3, 4])
def test_logistic_clip_fit_scores_clipped_rows(seed: int) -> None:
    X, y_lin = _data(seed)
    y = (y_lin > 0).astype(int)
    est = vfl.LogisticRegression(mechanism="gaussian-fm", epsilon=4.0, domain="l2", row_norm="clip",
                                 bounds=(-2.0, 2.0), random_state=seed).fit(X, y)
    d = X.shape[1] + 1
    Uc = _unit_clipped(X, -2.0, 2.0, d)
    z = np.hstack([Uc, np.full((X.shape[0], 1), 1 / np.sqrt(d))]) @ est.solve_result_.w
    np.testing.assert_allclose(est.decision_function(X), z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.predict_proba(X)[:, 1], 1 / (1 + np.exp(-z)), rtol=0, atol=1e-12)


def test_clip_predict_applies_box_clip_as_the_fit_did() -> None:
    X, y = _data(5)
    est = vfl.LinearRegression(mechanism="none", domain="l2", row_norm="clip", bounds=(-2.0, 2.0),
                               y_bounds=(-4.0, 4.0), out_of_bounds="clip").fit(X, y)
    X_out = X[:5] * 3.0          # outside the declared box: the fit would have clipped these values to it
    np.testing.assert_allclose(est.predict(X_out), est.predict(np.clip(X_out, -2.0, 2.0)), rtol=0, atol=1e-12)


def test_scale_fit_stays_linear_in_the_raw_row() -> None:
    X, y = _data(6)
    est = vfl.LinearRegression(mechanism="gaussian-fm", domain="l2", bounds=(-2.0, 2.0), y_bounds=(-4.0, 4.0),
                               random_state=6).fit(X, y)
    np.testing.assert_allclose(est.predict(X), X @ est.coef_ + est.intercept_, rtol=0, atol=1e-12)
