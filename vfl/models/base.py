"""Shared base of every linear model (the scikit-learn ``LinearModel`` analogue), written once.

* parameters: explicit keyword arguments of each ``__init__`` (no ``**kwargs``); :meth:`get_params` /
  :meth:`set_params` read them from the signature, so ``sklearn.base.clone`` works;
* input validation with scikit-learn's messages (``n_features_in_``, ``feature_names_in_``, sparse, complex,
  non-numeric, empty, column-vector y) so the estimators pass ``sklearn.utils.estimator_checks``;
* the model ``z = X coef_ + intercept_``: linear ``predict = z`` scored by R^2; logistic
  ``P(y = classes_[1] | x) = sigmoid(z)``, ``predict`` the class, scored by accuracy.

scikit-learn itself is not needed at run time (only ``__sklearn_tags__`` imports it, and only sklearn calls it).
"""

from __future__ import annotations

import inspect
import sys
import warnings
from typing import Any

import numpy as np

from vfl.exceptions import (
    ConfigurationError,
    DataConversionWarning,
    DataTypeError,
    DataValidationError,
    NotFittedError,
)
from vfl.fm.objective import validate_xy

__all__ = ["LinearModelBase", "sigmoid", "r2_score", "check_features", "check_target", "encode_binary_labels"]


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-z), computed as (1 + tanh(z/2)) / 2 (no overflow for large |z|)."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=float)))


def r2_score(y: np.ndarray, y_hat: np.ndarray) -> float:
    """R^2 = 1 - RSS/TSS; scikit-learn's convention when var(y) = 0: 1.0 for a perfect fit, else 0.0."""
    y, y_hat = np.asarray(y, dtype=float), np.asarray(y_hat, dtype=float)
    rss = float(np.sum((y - y_hat) ** 2))
    tss = float(np.sum((y - y.mean()) ** 2))
    if tss == 0.0:
        return 1.0 if rss == 0.0 else 0.0
    return 1.0 - rss / tss


def check_features(X: Any) -> np.ndarray:
    """X as a finite 2-D float array, with scikit-learn's error types and messages for bad input."""
    if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
        raise DataTypeError("sparse input is not supported: pass a dense array (X.toarray())")
    arr = np.asarray(X) if not hasattr(X, "columns") else np.asarray(X)
    if np.iscomplexobj(arr):
        raise DataValidationError("Complex data not supported: X must hold real numbers")
    if arr.dtype == object:
        try:
            arr = arr.astype(float)
        except (TypeError, ValueError) as exc:
            raise DataTypeError(f"X must contain only numbers ({exc})") from None
    if arr.ndim == 1:
        raise DataValidationError(f"X must be a 2-D array (rows x features), got shape {arr.shape}. Reshape your data "
                                  "either using array.reshape(-1, 1) if your data has a single feature or "
                                  "array.reshape(1, -1) if it contains a single sample.")
    if arr.ndim == 2 and arr.shape[1] == 0:
        raise DataValidationError(f"0 feature(s) (shape={arr.shape}) while a minimum of 1 is required.")
    if arr.ndim == 2 and arr.shape[0] == 0:
        raise DataValidationError(f"0 sample(s) (shape={arr.shape}) while a minimum of 1 is required.")
    X_checked, _ = validate_xy(arr)
    return X_checked


def check_target(y: Any, n_rows: int, *, numeric: bool = True) -> np.ndarray:
    """y as 1-D (a column vector is raveled with a :class:`DataConversionWarning`), one value per row."""
    if y is None:
        raise DataValidationError("this estimator requires y to be passed, but the target y is None")
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        warnings.warn("A column-vector y was passed when a 1d array was expected: raveled to shape (n_samples,)",
                      DataConversionWarning, stacklevel=3)
        y = y[:, 0]
    if y.ndim != 1:
        raise DataValidationError(f"y should be a 1d array, got shape {y.shape}")
    if y.shape[0] != n_rows:
        raise DataValidationError(f"X has {n_rows} rows but y has {y.shape[0]}")
    if numeric:
        if np.iscomplexobj(y):
            raise DataValidationError("Complex data not supported: y must hold real numbers")
        try:
            y = y.astype(float)
        except (TypeError, ValueError) as exc:
            raise DataTypeError(f"y must contain only numbers ({exc})") from None
        if not np.isfinite(y).all():
            first = int(np.argmin(np.isfinite(y)))
            raise DataValidationError(f"y contains NaN or infinite values (first at row {first})")
    return y


def encode_binary_labels(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(classes_, y01): the two sorted classes and y as 0/1 floats (y01 = 1 for classes_[1]).

    Logistic FM needs y in {0, 1} (spec pitfall 5): any two labels are encoded here, so {-1, +1} never reaches
    the Taylor objective. Continuous targets, one class or more than two classes raise.
    """
    if y.dtype.kind in "fc" or y.dtype == object:
        try:
            yf = y.astype(float)
        except (TypeError, ValueError):
            yf = None
        if yf is not None:
            if not np.isfinite(yf).all():
                raise DataValidationError("y contains NaN or infinite values")
            if np.any(yf != np.round(yf)):
                raise DataValidationError("Unknown label type: continuous. Logistic regression needs two classes "
                                          "(e.g. 0/1), not a continuous target")
            y = yf
    try:
        classes = np.unique(y)
    except TypeError:
        raise DataValidationError("Unknown label type: labels of mixed types cannot be ordered") from None
    if classes.size < 2:
        raise DataValidationError(f"logistic regression needs samples of 2 classes, but the data contain only one "
                                  f"class: {classes.tolist()}")
    if classes.size > 2:
        raise DataValidationError(f"Only binary classification is supported. Logistic regression here is binary: "
                                  f"found {classes.size} classes {classes[:5].tolist()}")
    return classes, (y == classes[1]).astype(float)


class LinearModelBase:
    """get/set_params, validation, decision function, predict/score for linear and logistic models.

    Subclasses set ``_model`` ("linear" or "logistic") or have a ``model`` parameter, and fitted ``coef_``,
    ``intercept_`` (and ``classes_`` for logistic).
    """

    _model = "linear"

    # -------------------------------------------------------------- parameters
    @classmethod
    def _get_param_names(cls) -> list[str]:
        params = inspect.signature(cls.__init__).parameters.values()
        bad = [p.name for p in params if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        if bad:
            raise TypeError(f"{cls.__name__}.__init__ must list its parameters explicitly, not *{bad[0]}")
        return sorted(p.name for p in params if p.name != "self")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters (scikit-learn convention)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> LinearModelBase:
        valid = self._get_param_names()
        for key, value in params.items():
            if key not in valid:
                raise ConfigurationError(f"unknown parameter {key!r} for {type(self).__name__}; valid: "
                                         + ", ".join(valid))
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = []
        for k, v in self.get_params().items():
            d = defaults.get(k, inspect.Parameter.empty)
            same = d is v or (type(d) is type(v) and isinstance(v, (str, int, float, bool, type(None))) and d == v)
            if not same:
                changed.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"

    def _model_kind(self) -> str:
        model = getattr(self, "model", None)
        return model if model in ("linear", "logistic") else self._model

    def _is_classifier(self) -> bool:
        return self._model_kind() == "logistic"

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags

        classifier = self._is_classifier()
        return Tags(estimator_type="classifier" if classifier else "regressor",
                    target_tags=TargetTags(required=True),
                    transformer_tags=None,
                    classifier_tags=ClassifierTags(multi_class=False) if classifier else None,
                    regressor_tags=None if classifier else RegressorTags(),
                    input_tags=InputTags())

    # -------------------------------------------------------------- validation
    def _validate_fit_input(self, X: Any, y: Any, feature_names: Any = None) -> tuple[np.ndarray, np.ndarray,
                                                                                         list[str] | None]:
        """(X, y, feature names); sets n_features_in_ and (for string column names) feature_names_in_."""
        names = _column_names(X)
        if hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        X = check_features(X)
        if X.shape[0] < 2:
            raise DataValidationError(f"at least 2 samples are needed to fit, got n_samples = {X.shape[0]}")
        self.n_features_in_ = X.shape[1]
        if self._is_classifier():
            y = check_target(y, X.shape[0], numeric=False)
            self.classes_, y = encode_binary_labels(y)
        else:
            y = check_target(y, X.shape[0])
        if feature_names is None and names is not None:
            feature_names = names
        return X, y, (None if feature_names is None else [str(f) for f in feature_names])

    def _check_is_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise _not_fitted_error(f"this {type(self).__name__} instance is not fitted yet: call fit(X, y) first")

    def _validate_predict_input(self, X: Any) -> np.ndarray:
        self._check_is_fitted()
        _check_feature_names(self, _column_names(X))
        X = check_features(X)
        if X.shape[1] != self.n_features_in_:
            raise DataValidationError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                                      f"{self.n_features_in_} features as input (the model was fitted on "
                                      f"{self.n_features_in_} columns)")
        return X

    # -------------------------------------------------------------- the model
    def _decision(self, X: Any) -> np.ndarray:
        """z = X coef_ + intercept_ in original units."""
        return self._validate_predict_input(X) @ self.coef_ + self.intercept_

    @property
    def decision_function(self) -> Any:
        """Logistic only: z = X coef_ + intercept_, the log-odds of classes_[1] (linear models use predict)."""
        if not self._is_classifier():
            raise AttributeError(f"{type(self).__name__} with a linear model has no decision_function: use predict")
        return self._decision

    def predict(self, X: Any) -> np.ndarray:
        """Linear: z. Logistic: classes_[1] where z >= 0 (P >= 1/2), else classes_[0]."""
        z = self._decision(X)
        if self._is_classifier():
            return self.classes_[(z >= 0.0).astype(int)]
        return z

    @property
    def predict_proba(self) -> Any:
        """Logistic only: columns P(classes_[0]), P(classes_[1]) = sigmoid(z) (absent for linear models)."""
        if not self._is_classifier():
            raise AttributeError(f"{type(self).__name__} with a linear model has no predict_proba")
        return self._predict_proba

    def _predict_proba(self, X: Any) -> np.ndarray:
        p1 = sigmoid(self._decision(X))
        return np.column_stack([1.0 - p1, p1])

    def score(self, X: Any, y: Any) -> float:
        """Linear: R^2 (:func:`r2_score`). Logistic: mean accuracy."""
        y_hat = self.predict(X)
        if self._is_classifier():
            y = np.asarray(y)
            if y.ndim == 2 and y.shape[1] == 1:
                y = y[:, 0]
            return float(np.mean(y_hat == y))
        return r2_score(check_target(y, y_hat.shape[0]), y_hat)


_SKLEARN_NOT_FITTED: dict[type, type] = {}


def _not_fitted_error(message: str) -> NotFittedError:
    """Our NotFittedError; when scikit-learn is loaded, also an instance of sklearn's (its tools catch that)."""
    sk = sys.modules.get("sklearn.exceptions")
    if sk is None:
        return NotFittedError(message)
    base = sk.NotFittedError
    if base not in _SKLEARN_NOT_FITTED:
        _SKLEARN_NOT_FITTED[base] = type("NotFittedError", (NotFittedError, base), {"__module__": __name__})
    return _SKLEARN_NOT_FITTED[base](message)


def _column_names(X: Any) -> list[str] | None:
    """String column names of a DataFrame (scikit-learn stores them only when every name is a string)."""
    cols = getattr(X, "columns", None)
    if cols is None or not hasattr(X, "iloc"):
        return None
    names = list(cols)
    return [str(c) for c in names] if names and all(isinstance(c, str) for c in names) else None


def _check_feature_names(est: LinearModelBase, names: list[str] | None) -> None:
    """scikit-learn's feature-name checks at predict time (same messages)."""
    fitted = getattr(est, "feature_names_in_", None)
    if fitted is None and names is None:
        return
    cls = type(est).__name__
    if fitted is not None and names is None:
        warnings.warn(f"X does not have valid feature names, but {cls} was fitted with feature names", UserWarning,
                      stacklevel=4)
        return
    if fitted is None:
        warnings.warn(f"X has feature names, but {cls} was fitted without feature names", UserWarning, stacklevel=4)
        return
    fitted_list = [str(f) for f in fitted]
    if fitted_list == names:
        return
    message = "The feature names should match those that were passed during fit.\n"
    unseen = sorted(set(names) - set(fitted_list))
    missing = sorted(set(fitted_list) - set(names))
    if unseen or missing:
        if unseen:
            message += "Feature names unseen at fit time:\n" + "".join(f"- {n}\n" for n in unseen[:5])
        if missing:
            message += "Feature names seen at fit time, yet now missing:\n" + "".join(f"- {n}\n" for n in missing[:5])
    else:
        message += "Feature names must be in the same order as they were in fit.\n"
    raise DataValidationError(message)
