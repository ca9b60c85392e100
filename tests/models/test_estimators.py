"""Centralized estimators: sklearn conventions, mechanism='none' == numpy lstsq, bad input (issue 2, item 8)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import vfl
from vfl.exceptions import (
    ConfigurationError,
    DataBoundsWarning,
    DataValidationError,
    NotFittedError,
    PrivacyParameterError,
)


def _linear_data(seed: int = 0, n: int = 300, d: int = 4, lo: float = -3.0, hi: float = 5.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(lo, hi, size=(n, d))
    w = rng.normal(size=d)
    y = X @ w + 0.7 + 0.3 * rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("seed", range(3))
def test_none_equals_lstsq_with_intercept(seed: int) -> None:
    X, y = _linear_data(seed)
    ylo, yhi = float(y.min()) - 1, float(y.max()) + 1
    est = vfl.LinearRegression(mechanism="none", bounds=(-3.0, 5.0), y_bounds=(ylo, yhi))
    assert est.fit(X, y) is est
    A = np.hstack([X, np.ones((X.shape[0], 1))])
    ref = np.linalg.lstsq(A, y, rcond=None)[0]
    np.testing.assert_allclose(est.coef_, ref[:-1], rtol=0, atol=1e-10)
    assert est.intercept_ == pytest.approx(ref[-1], abs=1e-10)
    np.testing.assert_allclose(est.predict(X), A @ ref, atol=1e-9)
    assert est.score(X, y) == pytest.approx(1 - np.sum((y - A @ ref) ** 2) / np.sum((y - y.mean()) ** 2), abs=1e-12)
    assert est.privacy_report_.epsilon is None and not est.privacy_report_.formal_dp


@pytest.mark.parametrize("domain", ["linf", "l2"])
def test_none_equals_lstsq_without_intercept_symmetric_bounds(domain: str) -> None:
    # without intercept the unit map x -> 2(x - lo)/(hi - lo) - 1 is linear only for symmetric bounds
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, size=(200, 3))
    y = X @ np.array([0.5, -1.0, 0.25]) + 0.1 * rng.normal(size=200)
    est = vfl.LinearRegression(mechanism="none", bounds=(-2.0, 2.0), y_bounds=(-10.0, 10.0), fit_intercept=False,
                               domain=domain).fit(X, y)
    ref = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(est.coef_, ref, atol=1e-10)
    assert est.intercept_ == pytest.approx(0.0, abs=1e-12)


def test_none_logistic_minimises_taylor_objective() -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(400, 3))
    y = (X @ np.array([2.0, -1.0, 0.5]) + rng.logistic(size=400) > 0).astype(float)
    est = vfl.LogisticRegression(mechanism="none", bounds=(-1.0, 1.0)).fit(X, y)
    # Taylor minimiser in closed form on [X, 1]: w = -(1/2) M^-1 alpha, M = A^T A/(8N), alpha = A^T(1/2 - y)/N
    A = np.hstack([X, np.ones((400, 1))])
    w = -0.5 * np.linalg.solve(A.T @ A / (8 * 400), A.T @ (0.5 - y) / 400)
    np.testing.assert_allclose(est.coef_, w[:-1], atol=1e-10)
    assert est.intercept_ == pytest.approx(w[-1], abs=1e-10)
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(np.unique(est.predict(X))) <= {0, 1}
    assert est.score(X, y) == pytest.approx(np.mean(est.predict(X) == y))
    assert est.score(X, y) > 0.7
    assert list(est.classes_) == [0, 1]


def test_sklearn_conventions_get_set_params_and_reproducibility() -> None:
    X, y = _linear_data(1)
    kw = {"mechanism": "gaussian-fm", "epsilon": 1.0, "bounds": (-3.0, 5.0), "y_bounds": (-30.0, 30.0)}
    est = vfl.LinearRegression(**kw, random_state=7)
    params = est.get_params()
    assert params["y_bounds"] == (-30.0, 30.0) and params["random_state"] == 7 and params["epsilon"] == 1.0
    assert "kwargs" not in params
    clone = type(est)(**params)
    assert clone.get_params() == params
    assert est.set_params(epsilon=2.0) is est and est.epsilon == 2.0
    with pytest.raises(ConfigurationError, match="unknown parameter"):
        est.set_params(eps=1.0)
    est.set_params(epsilon=1.0)
    a = est.fit(X, y).coef_.copy()
    b = vfl.LinearRegression(**kw, random_state=7).fit(X, y).coef_
    np.testing.assert_array_equal(a, b)
    c = vfl.LinearRegression(**kw).fit(X, y).coef_
    d = vfl.LinearRegression(**kw).fit(X, y).coef_
    assert not np.array_equal(c, d), "without random_state every fit must draw fresh noise"
    assert not np.array_equal(a, c)
    assert est.privacy_report_.seeded and not vfl.LinearRegression(**kw).fit(X, y).privacy_report_.seeded
    lp = vfl.LogisticRegression(epsilon=0.5).get_params()
    assert lp["epsilon"] == 0.5 and "y_bounds" not in lp


def test_report_attached_and_dp_for_each_mechanism() -> None:
    X, y = _linear_data(2, n=2000)
    for mech in ("laplace-fm", "gaussian-fm", "relaxed-fm"):
        est = vfl.LinearRegression(mechanism=mech, epsilon=1.0, bounds=(-3.0, 5.0), y_bounds=(-30.0, 30.0),
                                   random_state=0, fallback="ridge").fit(X, y)
        rep = est.privacy_report_
        assert rep.mechanism == mech and rep.epsilon is not None and rep.epsilon <= 1.0 + 1e-9
        assert est.coef_.shape == (4,) and np.isfinite(est.coef_).all()


def test_l2_domain_rows_within_unit_ball_with_clip_and_intercept() -> None:
    """Regression test for the intercept column: with row_norm='clip' it must be 1/sqrt(d), not 1."""
    X, y = _linear_data(3, n=100)
    est = vfl.LinearRegression(mechanism="none", bounds=(-3.0, 5.0), y_bounds=(-40.0, 40.0), domain="l2",
                               row_norm="clip").fit(X, y)
    # reconstruct the released M: its trace is the mean squared row norm, which must be <= 1
    assert np.trace(est.objective_.M) <= 1.0 + 1e-12
    A = np.hstack([X, np.ones((100, 1))])
    ref = np.linalg.lstsq(A, y, rcond=None)[0]
    assert abs(est.intercept_ - ref[-1]) < 1.0  # clipping distorts the fit, but the intercept is not rescaled


def test_bounds_warnings_and_errors() -> None:
    X, y = _linear_data(0, n=50)
    with pytest.warns(DataBoundsWarning, match="taken from the private data"):
        vfl.LinearRegression(mechanism="none", y_bounds=(-40.0, 40.0)).fit(X, y)
    with pytest.warns(DataBoundsWarning, match="label"):
        vfl.LinearRegression(mechanism="none", bounds=(-3.0, 5.0)).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataBoundsWarning)
        vfl.LinearRegression(mechanism="none", bounds=(-3.0, 5.0), y_bounds=(-40.0, 40.0)).fit(X, y)
    with pytest.raises(DataValidationError, match=r"outside its declared bounds \[-1, 1\]"):
        vfl.LinearRegression(mechanism="none", bounds=(-1.0, 1.0), y_bounds=(-40.0, 40.0)).fit(X, y)
    with pytest.raises(DataValidationError, match="label"):
        vfl.LinearRegression(mechanism="none", bounds=(-3.0, 5.0), y_bounds=(0.0, 1.0)).fit(X, y)
    names = ["a", "b", "c", "d"]
    with pytest.raises(DataValidationError, match="no bounds declared for column.*: d"):
        vfl.LinearRegression(mechanism="none", bounds={"a": (-3, 5), "b": (-3, 5), "c": (-3, 5)},
                             y_bounds=(-40.0, 40.0)).fit(X, y, feature_names=names)
    est = vfl.LinearRegression(mechanism="none", bounds={n: (-3, 5) for n in names}, y_bounds=(-40.0, 40.0))
    est.fit(X, y, feature_names=names)
    with pytest.raises(DataValidationError, match="pairs"):
        vfl.LinearRegression(mechanism="none", bounds=[(-3, 5)] * 3, y_bounds=(-40.0, 40.0)).fit(X, y)
    with pytest.raises(DataValidationError, match="degenerate"):
        vfl.LinearRegression(mechanism="none", bounds=(5.0, -3.0), y_bounds=(-40.0, 40.0)).fit(X, y)
    # clipping to declared bounds instead of raising
    est = vfl.LinearRegression(mechanism="none", bounds=(-1.0, 1.0), y_bounds=(-40.0, 40.0),
                               out_of_bounds="clip").fit(X, y)
    assert np.isfinite(est.coef_).all()


def test_bad_input() -> None:
    X, y = _linear_data(0, n=30)
    kw = {"mechanism": "gaussian-fm", "bounds": (-3.0, 5.0), "y_bounds": (-40.0, 40.0)}
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(DataValidationError, match="NaN"):
        vfl.LinearRegression(**kw).fit(Xn, y)
    with pytest.raises(DataValidationError, match="rows"):
        vfl.LinearRegression(**kw).fit(X, y[:-1])
    with pytest.raises(DataValidationError, match="2-D"):
        vfl.LinearRegression(**kw).fit(X[:, 0], y)
    with pytest.raises(DataValidationError, match="binary: found 3 classes"):
        vfl.LogisticRegression(bounds=(-3.0, 5.0)).fit(X, np.arange(30) % 3)
    with pytest.raises(DataValidationError, match="Unknown label type: continuous"):
        vfl.LogisticRegression(bounds=(-3.0, 5.0)).fit(X, y)
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        vfl.LinearRegression(**kw, epsilon=0.0).fit(X, y)
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        vfl.LinearRegression(**kw, epsilon=-1.0).fit(X, y)
    with pytest.raises(PrivacyParameterError, match="delta"):
        vfl.LinearRegression(**kw, delta=1.0).fit(X, y)
    with pytest.raises(PrivacyParameterError, match="delta"):
        vfl.LinearRegression(**kw, delta=0.0).fit(X, y)
    with pytest.raises(PrivacyParameterError, match="epsilon < 1"):
        vfl.LinearRegression(**kw, epsilon=1.0, calibration="classical").fit(X, y)
    with pytest.raises(NotFittedError, match="not fitted"):
        vfl.LinearRegression(**kw).predict(X)
    est = vfl.LinearRegression(**kw, random_state=0, fallback="ridge").fit(X, y)   # 30 rows: noise may swamp M
    with pytest.raises(DataValidationError, match="columns"):
        est.predict(X[:, :2])


def test_out_of_bounds_option_validated_even_when_data_in_bounds() -> None:
    """Regression: a typo in out_of_bounds was accepted silently until some value fell outside the bounds."""
    X, y = _linear_data(0, n=20)
    with pytest.raises(DataValidationError, match="out_of_bounds"):
        vfl.LinearRegression(mechanism="none", bounds=(-3.0, 5.0), y_bounds=(-40.0, 40.0),
                             out_of_bounds="clamp").fit(X, y)


def test_bounds_from_data_void_formal_dp_in_every_report():
    """Spec pitfall 2: inferred bounds warn AND the report drops its formal guarantee."""
    import warnings

    from vfl.models.baselines import NoisyGradientDescent

    rng = np.random.default_rng(3)
    X, y = rng.uniform(-1, 1, (200, 3)), rng.uniform(-1, 1, 200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataBoundsWarning)
        inferred = vfl.LinearRegression(mechanism="gaussian-fm", random_state=0).fit(X, y)
        gd = NoisyGradientDescent(model="linear", steps=5, random_state=0).fit(X, y)
    declared = vfl.LinearRegression(mechanism="gaussian-fm", bounds=(-1, 1), y_bounds=(-1, 1)).fit(X, y)
    assert not inferred.privacy_report_.formal_dp and not gd.privacy_report_.formal_dp
    assert any("NOT differentially private" in n for n in inferred.privacy_report_.notes)
    assert declared.privacy_report_.formal_dp


# ------------------------------------------------------------------ issue 13 item 1: fit_intercept=False
def _asymmetric_data(seed: int, n: int = 2000, d: int = 20):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 3.0, size=(n, d))            # asymmetric: the affine unit map has an offset
    w = rng.normal(size=d)
    y_lin = X @ w + 0.2 * rng.normal(size=n) + 1.5      # a true intercept the model must NOT absorb
    z = X @ (w / 4) - 0.2 * np.sum(w)
    y_log = (z + rng.logistic(size=n) > 0).astype(int)
    return X, y_lin, y_log


@pytest.mark.parametrize("bounds", [None, (-1.0, 3.0)], ids=["data-bounds", "declared-asymmetric"])
@pytest.mark.parametrize("domain", ["linf", "l2"])
def test_no_intercept_linear_equals_lstsq_through_origin(bounds, domain: str) -> None:
    """Regression (issue 13): the affine unit map re-introduced an intercept (0.056 off, intercept_ -0.0115)."""
    X, y, _ = _asymmetric_data(0)
    y_bounds = None if bounds is None else (float(y.min()) - 1.0, float(y.max()) + 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataBoundsWarning)
        est = vfl.LinearRegression(mechanism="none", fit_intercept=False, bounds=bounds, y_bounds=y_bounds,
                                   domain=domain).fit(X, y)
    ref = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(est.coef_, ref, rtol=0, atol=1e-6)
    assert est.intercept_ == 0.0
    np.testing.assert_allclose(est.predict(X), X @ ref, atol=1e-6)


@pytest.mark.parametrize("bounds", [None, (-1.0, 3.0)], ids=["data-bounds", "declared-asymmetric"])
def test_no_intercept_logistic_equals_taylor_minimiser_through_origin(bounds) -> None:
    X, _, y = _asymmetric_data(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataBoundsWarning)
        est = vfl.LogisticRegression(mechanism="none", fit_intercept=False, bounds=bounds).fit(X, y)
    n = X.shape[0]
    ref = -0.5 * np.linalg.solve(X.T @ X / (8 * n), X.T @ (0.5 - y) / n)   # Taylor FM minimiser on raw X
    np.testing.assert_allclose(est.coef_, ref, rtol=0, atol=1e-6)
    assert est.intercept_ == 0.0


def test_no_intercept_baselines_have_zero_intercept() -> None:
    from vfl.models.baselines import NoisyGradientDescent, ObjectivePerturbation

    X, y_lin, y_log = _asymmetric_data(2, n=300, d=4)
    for est, y in [(NoisyGradientDescent(model="linear", steps=5, bounds=(-1.0, 3.0), y_bounds=(-40.0, 40.0),
                                         fit_intercept=False), y_lin),
                   (ObjectivePerturbation(bounds=(-1.0, 3.0), fit_intercept=False), y_log)]:
        est.fit(X, y)
        assert est.intercept_ == 0.0
        np.testing.assert_allclose(est.predict(X) if est._model == "linear" else est._decision(X), X @ est.coef_)


def test_no_intercept_out_of_bounds_still_checked_against_declared_bounds() -> None:
    X, y, _ = _asymmetric_data(3, n=50, d=3)
    with pytest.raises(DataValidationError, match=r"outside its declared bounds \[-1, 2\]"):
        vfl.LinearRegression(mechanism="none", fit_intercept=False, bounds=(-1.0, 2.0),
                             y_bounds=(-100.0, 100.0)).fit(X, y)
