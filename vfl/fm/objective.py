"""Functional-mechanism objective polynomials (Zhang et al. 2012, §4-5; spec §1.1).

Every objective is a quadratic ``f(w) = beta + alpha^T w + w^T M w`` with symmetric M.
Average form (default, spec §0.3): coefficients are sums over rows divided by N.

* linear regression, f_D(w) = (1/N) sum_i (y_i - x_i^T w)^2:
  beta = (1/N) sum y_i^2, alpha = -(2/N) X^T y, M = (1/N) X^T X;
* logistic regression, order-2 Taylor expansion of log(1 + e^z) - y z at z = 0
  (Zhang et al. 2012, eq. 12): f~_D(w) = ln 2 + alpha^T w + w^T M w with
  alpha = (1/N) X^T (1/2 - y), M = (1/(8N)) X^T X; beta = ln 2 is data-independent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from vfl.exceptions import DataValidationError

Model = Literal["linear", "logistic"]
Form = Literal["average", "sum"]

__all__ = [
    "QuadraticObjective",
    "linear_objective",
    "logistic_objective",
    "fm_objective",
    "linear_loss",
    "logistic_loss",
    "logistic_taylor_loss",
    "validate_model",
    "validate_xy",
    "validate_labels",
]


@dataclass(frozen=True)
class QuadraticObjective:
    """The coefficient form ``f(w) = beta + alpha^T w + w^T M w`` (spec §0.4)."""

    beta: float
    alpha: np.ndarray
    M: np.ndarray

    def __post_init__(self) -> None:
        alpha = np.asarray(self.alpha, dtype=float)
        M = np.asarray(self.M, dtype=float)
        if alpha.ndim != 1 or M.shape != (alpha.size, alpha.size):
            raise DataValidationError(f"alpha must be (d,) and M (d, d); got {alpha.shape} and {M.shape}")
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "M", M)

    @property
    def n_features(self) -> int:
        return int(self.alpha.size)

    def value(self, w: np.ndarray) -> float:
        """f(w) = beta + alpha^T w + w^T M w."""
        w = np.asarray(w, dtype=float)
        return float(self.beta + self.alpha @ w + w @ self.M @ w)

    def scaled(self, factor: float) -> QuadraticObjective:
        """Multiply every coefficient by ``factor`` (sum form = N x average form)."""
        return QuadraticObjective(self.beta * factor, self.alpha * factor, self.M * factor)

    def to_dict(self) -> dict:
        return {"beta": self.beta, "alpha": self.alpha.tolist(), "M": self.M.tolist()}


def validate_model(model: str) -> Model:
    if model not in ("linear", "logistic"):
        raise DataValidationError(f"model must be 'linear' or 'logistic', got {model!r}")
    return model  # type: ignore[return-value]


def validate_xy(X: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Return float copies of X (2-D) and y (1-D); raise DataValidationError on NaN/inf, wrong shapes, empty data."""
    try:
        X = np.array(X, dtype=float)
    except (TypeError, ValueError):
        raise DataValidationError("X must contain only numbers") from None
    if X.ndim != 2:
        raise DataValidationError(f"X must be a 2-D array (rows x features), got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise DataValidationError(f"X must have at least one row and one column, got shape {X.shape}")
    bad = ~np.isfinite(X)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataValidationError(f"X contains NaN or infinite values (first at row {r}, column {c})")
    if y is None:
        return X, None
    try:
        y = np.array(y, dtype=float)
    except (TypeError, ValueError):
        raise DataValidationError("y must contain only numbers") from None
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise DataValidationError(f"y must be 1-D, got shape {y.shape}")
    if y.shape[0] != X.shape[0]:
        raise DataValidationError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    if not np.isfinite(y).all():
        raise DataValidationError(f"y contains NaN or infinite values (first at row {int(np.argmin(np.isfinite(y)))})")
    return X, y


def validate_labels(y: np.ndarray, model: Model) -> None:
    """Logistic FM needs y in {0, 1} (spec §0.2, pitfall 5): {-1, +1} would triple Delta_1 silently."""
    if model == "logistic":
        bad = ~np.isin(y, (0.0, 1.0))
        if bad.any():
            vals = np.unique(y[bad])[:5]
            raise DataValidationError(
                f"logistic regression needs labels in {{0, 1}}; found {vals.tolist()} (encode -1/+1 as 0/1)"
            )


def _finish(beta: float, alpha: np.ndarray, M: np.ndarray, n: int, form: Form) -> QuadraticObjective:
    if form == "average":
        return QuadraticObjective(beta / n, alpha / n, M / n)
    if form == "sum":
        return QuadraticObjective(beta, alpha, M)
    raise DataValidationError(f"form must be 'average' or 'sum', got {form!r}")


def linear_objective(X: np.ndarray, y: np.ndarray, *, form: Form = "average") -> QuadraticObjective:
    """Exact coefficients of sum/mean (y_i - x_i^T w)^2 (Zhang et al. 2012, §4.1; spec §1.1)."""
    X, y = validate_xy(X, y)  # type: ignore[assignment]   # y given, so y returned
    return _finish(float(y @ y), -2.0 * (X.T @ y), X.T @ X, X.shape[0], form)


def logistic_objective(X: np.ndarray, y: np.ndarray, *, form: Form = "average") -> QuadraticObjective:
    """Order-2 Taylor coefficients of the logistic loss (Zhang et al. 2012, eq. 12; spec §1.1).

    In sum form the constant is N ln 2; in average form ln 2 (data-independent, never noised).
    """
    X, y = validate_xy(X, y)  # type: ignore[assignment]   # y given, so y returned
    validate_labels(y, "logistic")
    n = X.shape[0]
    return _finish(n * np.log(2.0), X.T @ (0.5 - y), (X.T @ X) / 8.0, n, form)


def fm_objective(X: np.ndarray, y: np.ndarray, model: Model, *, form: Form = "average") -> QuadraticObjective:
    """Dispatch to :func:`linear_objective` or :func:`logistic_objective`."""
    return linear_objective(X, y, form=form) if validate_model(model) == "linear" else logistic_objective(
        X, y, form=form
    )


def linear_loss(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Mean squared error (1/N) sum (y_i - x_i^T w)^2."""
    r = y - X @ w
    return float(r @ r / X.shape[0])


def logistic_loss(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Exact mean logistic loss (1/N) sum [log(1 + e^{x^T w}) - y x^T w], y in {0, 1}."""
    z = X @ w
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def logistic_taylor_loss(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """The order-2 Taylor approximation ln 2 + (1/2 - y) z + z^2/8 averaged over rows, z = x^T w."""
    z = X @ w
    return float(np.mean(np.log(2.0) + (0.5 - y) * z + z * z / 8.0))
