"""FM objective polynomials: coefficient form == exact / Taylor objective (spec §1.1, 'How to test' (i))."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import DataValidationError
from vfl.fm.objective import (
    QuadraticObjective,
    fm_objective,
    linear_loss,
    linear_objective,
    logistic_loss,
    logistic_objective,
    logistic_taylor_loss,
    validate_labels,
    validate_model,
    validate_xy,
)


def _data(seed: int, n: int = 200, d: int = 6, logistic: bool = False):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    y = rng.integers(0, 2, size=n).astype(float) if logistic else rng.uniform(-1, 1, size=n)
    return X, y


@pytest.mark.parametrize("seed", range(5))
def test_linear_coefficient_form_equals_exact_objective(seed: int) -> None:
    X, y = _data(seed)
    obj = linear_objective(X, y)
    rng = np.random.default_rng(100 + seed)
    for _ in range(10):
        w = rng.normal(size=X.shape[1]) * 3
        assert obj.value(w) == pytest.approx(linear_loss(X, y, w), rel=1e-12, abs=1e-12)
    # explicit formulas of spec §1.1
    n = X.shape[0]
    assert obj.beta == pytest.approx(y @ y / n, rel=1e-14)
    np.testing.assert_allclose(obj.alpha, -2.0 / n * X.T @ y, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(obj.M, X.T @ X / n, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("seed", range(5))
def test_logistic_coefficient_form_equals_taylor_objective(seed: int) -> None:
    X, y = _data(seed, logistic=True)
    obj = logistic_objective(X, y)
    assert obj.beta == pytest.approx(np.log(2.0), abs=0)
    rng = np.random.default_rng(200 + seed)
    for _ in range(10):
        w = rng.normal(size=X.shape[1]) * 3
        assert obj.value(w) == pytest.approx(logistic_taylor_loss(X, y, w), rel=1e-12, abs=1e-12)


def test_taylor_is_order_two_accurate_near_zero() -> None:
    X, y = _data(7, logistic=True)
    obj = logistic_objective(X, y)
    w = np.random.default_rng(0).normal(size=X.shape[1])
    errs = [abs(obj.value(t * w) - logistic_loss(X, y, t * w)) for t in (0.1, 0.05, 0.025)]
    # the remainder is O(z^4) (the cubic Taylor term of log(1+e^z) vanishes): halving t divides it by ~16
    assert errs[0] / errs[1] == pytest.approx(16, rel=0.15)
    assert errs[1] / errs[2] == pytest.approx(16, rel=0.15)


def test_sum_form_is_n_times_average_form() -> None:
    for model, logistic in (("linear", False), ("logistic", True)):
        X, y = _data(3, logistic=logistic)
        avg = fm_objective(X, y, model)
        tot = fm_objective(X, y, model, form="sum")
        n = X.shape[0]
        assert tot.beta == pytest.approx(n * avg.beta, rel=1e-12)
        np.testing.assert_allclose(tot.alpha, n * avg.alpha, rtol=1e-12)
        np.testing.assert_allclose(tot.M, n * avg.M, rtol=1e-12)
        sc = avg.scaled(n)
        np.testing.assert_allclose(sc.M, tot.M, rtol=1e-12)


def test_minimiser_of_linear_objective_is_ols() -> None:
    X, y = _data(11)
    obj = linear_objective(X, y)
    w = -0.5 * np.linalg.solve(obj.M, obj.alpha)
    ols = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(w, ols, rtol=0, atol=1e-12)


def test_coefficient_form_round_trip_dict() -> None:
    obj = QuadraticObjective(0.5, [1.0, 2.0], [[1.0, 0.0], [0.0, 2.0]])
    d = obj.to_dict()
    assert d == {"beta": 0.5, "alpha": [1.0, 2.0], "M": [[1.0, 0.0], [0.0, 2.0]]}
    assert obj.n_features == 2
    with pytest.raises(DataValidationError, match="alpha must be"):
        QuadraticObjective(0.0, [1.0, 2.0], np.eye(3))


def test_logistic_rejects_pm1_labels() -> None:
    X, _ = _data(0)
    y = np.where(np.arange(X.shape[0]) % 2 == 0, 1.0, -1.0)
    with pytest.raises(DataValidationError, match=r"labels in \{0, 1\}"):
        logistic_objective(X, y)
    with pytest.raises(DataValidationError, match=r"\{0, 1\}"):
        validate_labels(np.array([0.0, 0.5, 1.0]), "logistic")
    validate_labels(np.array([-3.0, 2.0]), "linear")  # linear: any real label


@pytest.mark.parametrize(
    "X,y,match",
    [
        (np.array([[1.0, np.nan], [0.0, 1.0]]), np.zeros(2), "NaN"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), np.zeros(2), "NaN or infinite"),
        (np.ones((3, 2)), np.array([0.0, np.nan, 1.0]), "y contains NaN"),
        (np.ones(3), np.zeros(3), "2-D"),
        (np.ones((3, 2)), np.zeros(4), "3 rows but y has 4"),
        (np.ones((3, 2)), np.zeros((3, 2)), "1-D"),
        (np.ones((0, 2)), np.zeros(0), "at least one row"),
        ([["a", "b"]], [0.0], "only numbers"),
    ],
)
def test_bad_input(X, y, match: str) -> None:
    with pytest.raises(DataValidationError, match=match):
        validate_xy(X, y)
    with pytest.raises(DataValidationError):
        linear_objective(X, y)


def test_column_vector_labels_accepted_and_bad_model_and_form() -> None:
    X, y = _data(0, n=5)
    X2, y2 = validate_xy(X, y[:, None])
    assert y2.shape == (5,)
    with pytest.raises(DataValidationError, match="model"):
        validate_model("poisson")
    with pytest.raises(DataValidationError, match="form"):
        linear_objective(X, y, form="mean")
