"""Centralized FM estimators with scikit-learn conventions (the reference the vertical protocol must match).

``LinearRegression`` and ``LogisticRegression`` map the raw columns into the mechanism's public domain
with declared ``bounds`` (diffprivlib style), release noisy FM coefficients block by block (the same
blocks and noise distribution as the vertical protocol, with a one-party plan), solve the projected
objective in closed form, and express the model back in the original units.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.fm.dissection import DissectionPlan
from vfl.fm.domain import (
    BoundsLike,
    ColumnBounds,
    from_unit_interval_coefficients,
    prepare_labels,
    prepare_party_block,
    resolve_bounds,
)
from vfl.fm.objective import QuadraticObjective, validate_labels, validate_xy
from vfl.fm.solver import solve_details
from vfl.privacy.mechanisms import DEFAULT_DOMAIN, Mechanism, make_mechanism
from vfl.rng import RandomState, is_seeded, make_rng

__all__ = ["LinearRegression", "LogisticRegression", "release_objective"]


def release_objective(plan: DissectionPlan, mechanism: Mechanism, parts: Sequence[np.ndarray], y: np.ndarray,
                      rng: np.random.Generator) -> QuadraticObjective:
    """In-process release: every block's exact value plus its mechanism noise, reassembled (no cryptography)."""
    values = {b.name: plan.block_value(b, parts, y) + mechanism.block_noise(b, rng) for b in plan.blocks}
    return plan.assemble(values)


class _FMRegression:
    _model = "linear"

    def __init__(self, *, mechanism: str = "gaussian-fm", epsilon: float = 1.0, delta: float = 1e-5,
                 bounds: BoundsLike | ColumnBounds = None, fit_intercept: bool = True, domain: str | None = None,
                 fm_sensitivity: str = "paper", calibration: str = "analytic", sym: str = "iso",
                 row_norm: str = "scale", out_of_bounds: str = "raise", lambda_floor: float | None = None,
                 fallback: str = "raise", release_beta: bool = False, random_state: RandomState = None) -> None:
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.fit_intercept = fit_intercept
        self.domain = domain
        self.fm_sensitivity = fm_sensitivity
        self.calibration = calibration
        self.sym = sym
        self.row_norm = row_norm
        self.out_of_bounds = out_of_bounds
        self.lambda_floor = lambda_floor
        self.fallback = fallback
        self.release_beta = release_beta
        self.random_state = random_state

    # -------------------------------------------------------------- sklearn plumbing
    def get_params(self, deep: bool = True) -> dict:
        """Constructor parameters of this class and its bases (subclasses forward ``**kwargs`` to the base)."""
        import inspect

        names: list[str] = []
        for cls in type(self).__mro__:
            init = cls.__dict__.get("__init__")
            if init is None:
                continue
            for p in inspect.signature(init).parameters.values():
                if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in names:
                    names.append(p.name)
        return {n: getattr(self, n) for n in names}

    def set_params(self, **params) -> _FMRegression:
        for k, v in params.items():
            if k not in self.get_params():
                raise ConfigurationError(f"unknown parameter {k!r}")
            setattr(self, k, v)
        return self

    def _mechanism_options(self) -> dict:
        if self.mechanism == "laplace-fm":
            return {"fm_sensitivity": self.fm_sensitivity}
        if self.mechanism == "gaussian-fm":
            return {"calibration": self.calibration, "sym": self.sym}
        return {}

    def _prepare_y(self, y: np.ndarray) -> np.ndarray:
        return y

    def fit(self, X: np.ndarray, y: np.ndarray, feature_names: Sequence[str] | None = None):
        """Release a noisy FM objective of (X, y) and minimise it. Returns self."""
        if feature_names is None and hasattr(X, "columns"):   # before validate_xy turns X into an ndarray
            feature_names = [str(c) for c in X.columns]
        X, y = validate_xy(X, y)
        domain = self.domain or DEFAULT_DOMAIN.get(self.mechanism, "linf")
        self.bounds_ = resolve_bounds(self.bounds, X, feature_names)
        d = X.shape[1] + (1 if self.fit_intercept else 0)
        U, col_scale = prepare_party_block(X, bounds=self.bounds_, domain=domain, n_features_total=d,
                                           row_norm=self.row_norm, out_of_bounds=self.out_of_bounds,
                                           feature_names=feature_names)
        # the intercept column is a public constant that consumes norm budget (spec pitfall 4): in the l2 domain
        # it must be 1/sqrt(d) (its radius r = sqrt(1/d)) whether the features were scaled or clipped
        icpt_value = 1.0 / np.sqrt(d) if domain == "l2" else 1.0
        if self.fit_intercept:
            U = np.hstack([U, np.full((U.shape[0], 1), icpt_value)])
        y_unit = self._prepare_y(y)
        release_beta = self.release_beta or (self.calibration == "paper" and self.mechanism == "gaussian-fm")
        plan = DissectionPlan([d], 0, model=self._model, release_beta=release_beta)
        mech = make_mechanism(self.mechanism, plan=plan, n_samples=X.shape[0], epsilon=self.epsilon,
                              delta=self.delta, domain=domain, seeded=is_seeded(self.random_state),
                              **self._mechanism_options())
        rng = make_rng(self.random_state)
        objective = release_objective(plan, mech, [U], y_unit, rng)
        floor = mech.lambda_floor if self.lambda_floor is None else float(self.lambda_floor)
        result = solve_details(objective, lambda_floor=floor, fallback=self.fallback)
        self.objective_ = objective
        self.solve_result_ = result
        self.coef_unit_ = result.w
        self.privacy_report_ = mech.privacy_report()
        if self.bounds_.from_data:
            self.privacy_report_.mark_data_dependent("the feature bounds")
        y_bounds = getattr(self, "y_bounds_", None)
        if y_bounds is not None and y_bounds.from_data:
            self.privacy_report_.mark_data_dependent("the label bounds")
        self.n_features_in_ = X.shape[1]
        w_x = result.w[: X.shape[1]]
        coef, icpt = from_unit_interval_coefficients(w_x, self.bounds_, col_scale)
        if self.fit_intercept:
            icpt += float(result.w[-1] * icpt_value)
        self._set_output_units(coef, icpt)
        return self

    def _set_output_units(self, coef: np.ndarray, intercept: float) -> None:
        self.coef_ = coef
        self.intercept_ = intercept

    def _check_features(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "coef_"):
            raise ConfigurationError("this estimator is not fitted yet: call fit(X, y) first")
        X, _ = validate_xy(X)
        if X.shape[1] != self.n_features_in_:
            raise DataValidationError(f"X has {X.shape[1]} columns, the model was fitted on {self.n_features_in_}")
        return X

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self._check_features(X) @ self.coef_ + self.intercept_


class LinearRegression(_FMRegression):
    """Differentially private linear regression through the functional mechanism.

    Parameters follow diffprivlib: ``epsilon``, ``delta``, ``bounds`` (per-column (lo, hi), public), and
    ``y_bounds`` ((lo, hi) of the target, public). Without bounds they are taken from the data with a
    :class:`~vfl.exceptions.DataBoundsWarning` (not private). ``mechanism`` is ``"none"``, ``"laplace-fm"``,
    ``"gaussian-fm"`` (default) or ``"relaxed-fm"``. ``random_state`` fixes the noise (experiments only).

    Attributes: ``coef_``, ``intercept_`` (original units), ``coef_unit_`` (in the public domain),
    ``privacy_report_``.
    """

    _model = "linear"

    def __init__(self, *, y_bounds: tuple[float, float] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.y_bounds = y_bounds

    def _prepare_y(self, y: np.ndarray) -> np.ndarray:
        y_unit, yb = prepare_labels(y, "linear", y_bounds=self.y_bounds, out_of_bounds=self.out_of_bounds)
        self.y_bounds_ = yb
        return y_unit

    def _set_output_units(self, coef: np.ndarray, intercept: float) -> None:
        lo, hi = float(self.y_bounds_.lower[0]), float(self.y_bounds_.upper[0])
        half = (hi - lo) / 2.0
        self.coef_ = half * coef
        self.intercept_ = lo + half * (1.0 + intercept)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.decision_function(X)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        """Coefficient of determination R^2."""
        X, y = validate_xy(X, y)
        r = y - self.predict(X)
        tss = float(((y - y.mean()) ** 2).sum())
        return 1.0 - float(r @ r) / tss if tss > 0 else float("nan")


class LogisticRegression(_FMRegression):
    """Differentially private logistic regression via the order-2 Taylor FM objective (labels in {0, 1})."""

    _model = "logistic"

    def _prepare_y(self, y: np.ndarray) -> np.ndarray:
        validate_labels(y, "logistic")
        self.classes_ = np.array([0, 1])
        return y

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        z = self.decision_function(X)
        p1 = 0.5 * (1.0 + np.tanh(0.5 * z))
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.decision_function(X) >= 0.0).astype(int)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        """Mean accuracy."""
        X, y = validate_xy(X, y)
        return float(np.mean(self.predict(X) == y))
