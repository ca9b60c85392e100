"""Centralized FM estimators with scikit-learn conventions (the reference the vertical protocol must match).

``LinearRegression`` and ``LogisticRegression`` map the raw columns into the mechanism's public domain
with declared ``bounds`` (diffprivlib style), release noisy FM coefficients block by block (the same
blocks and noise distribution as the vertical protocol, with a one-party plan), solve the projected
objective in closed form, and express the model back in the original units.

``fit_intercept=False`` means no intercept at all: the columns (and the label) are mapped by the pure scaling
x / max(|lo|, |hi|) (:mod:`vfl.fm.domain`), so ``intercept_`` is exactly 0 and ``mechanism="none"`` is least
squares through the origin. Parameters, validation, predict and score come from
:class:`vfl.models.base.LinearModelBase`; the privacy report's ``formal_dp`` from
:func:`vfl.privacy.accounting.formal_dp_status`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.fm.dissection import DissectionPlan
from vfl.fm.domain import (
    BoundsLike,
    ColumnBounds,
    clip_rows,
    from_unit_interval_coefficients,
    from_unit_interval_rows,
    prepare_labels,
    prepare_party_block,
    resolve_bounds,
)
from vfl.fm.objective import QuadraticObjective, fm_objective
from vfl.fm.solver import default_regularization, solve_details
from vfl.models.base import LinearModelBase
from vfl.models.inference import InferenceMixin, InferenceResult, release_inference
from vfl.privacy.accounting import PrivacyReport
from vfl.privacy.budget import check_fit, record_fit
from vfl.privacy.floor_selection import release_floor
from vfl.privacy.gradient_release import DEFAULT_RADIUS, DEFAULT_STEPS, LABEL_RELEASES, GradientRelease
from vfl.privacy.mechanisms import DEFAULT_DOMAIN, Mechanism, make_mechanism
from vfl.privacy.release_choice import ReleaseChoice, choose_release
from vfl.rng import RandomState, is_seeded, make_rng, randomness_source

__all__ = ["LinearRegression", "LogisticRegression", "release_objective", "finish_report", "diffprivlib_bounds"]


def release_objective(plan: DissectionPlan, mechanism: Mechanism, parts: Sequence[np.ndarray], y: np.ndarray,
                      rng: np.random.Generator) -> QuadraticObjective:
    """In-process release: every block's exact value plus its mechanism noise, reassembled (no cryptography)."""
    values = {b.name: plan.block_value(b, parts, y) + mechanism.block_noise(b, rng) for b in plan.blocks}
    return plan.assemble(values)


def finish_report(report: PrivacyReport, random_state: RandomState, bounds: Sequence[ColumnBounds | None],
                  names: Sequence[str]) -> PrivacyReport:
    """Record the randomness source and every data-derived bound on a report (which re-decides formal_dp)."""
    report.randomness = randomness_source(random_state)
    if is_seeded(random_state):
        report.mark_seeded()
    for b, what in zip(bounds, names, strict=True):
        if b is not None and b.from_data:
            report.mark_data_dependent(what)
    return report


def diffprivlib_bounds(bounds_X: Any, n_features: int) -> ColumnBounds:
    """diffprivlib's ``bounds_X = (lower, upper)``, each one number or one value per feature, as ColumnBounds.

    (vfl's own ``bounds`` is one ``(lo, hi)`` pair or one pair per column; for two features the two forms would
    be ambiguous, so each name keeps its own library's meaning.)
    """
    try:
        lower, upper = bounds_X
        lo = np.broadcast_to(np.asarray(lower, dtype=float), (n_features,)).copy()
        hi = np.broadcast_to(np.asarray(upper, dtype=float), (n_features,)).copy()
    except (TypeError, ValueError):
        raise DataValidationError(f"bounds_X must be (lower, upper) with one number or {n_features} values each "
                                  f"(diffprivlib's form), got {bounds_X!r}") from None
    return ColumnBounds(lo, hi)


def _one_of(owner: object, names: Sequence[str]) -> str | None:
    """The one alias in ``names`` that is set on ``owner`` (None if none); two set at once is an error."""
    given = [n for n in names if getattr(owner, n, None) is not None]
    if len(given) > 1:
        raise ConfigurationError(f"{' and '.join(given)} are aliases of one parameter: give only one")
    return given[0] if given else None


class _FMRegression(InferenceMixin, LinearModelBase):
    """Shared FM fit of :class:`LinearRegression` and :class:`LogisticRegression`; ``bse``, ``pvalues``,
    ``conf_int(alpha)``, ``summary()`` and ``inference_`` from the release (:mod:`vfl.models.inference`)."""

    _model = "linear"

    def _mechanism_options(self, mechanism: str) -> dict:
        if mechanism == "laplace-fm":
            return {"fm_sensitivity": self.fm_sensitivity}
        if mechanism == "gaussian-fm":
            return {"calibration": self.calibration, "sym": self.sym, "budget_split": self.budget_split}
        return {}

    def _prepare_y(self, y: np.ndarray) -> np.ndarray:
        return y

    def _feature_bounds(self, X: np.ndarray, feature_names: Sequence[str] | None) -> ColumnBounds:
        """``bounds``, or diffprivlib's ``bounds_X`` or (logistic) ``data_norm``: max ||x||_2 of a row, which
        implies the per-column bounds (-data_norm, data_norm) used here (the FM domain is their box)."""
        given = _one_of(self, ("bounds", "bounds_X", "data_norm"))
        if given == "bounds_X":
            return diffprivlib_bounds(self.bounds_X, X.shape[1])
        if given == "data_norm":
            norm = self.data_norm  # type: ignore[attr-defined]
            if not isinstance(norm, (int, float)) or not math.isfinite(norm) or norm <= 0:
                raise DataValidationError(f"data_norm must be a positive number, got {norm!r}")
            return ColumnBounds(np.full(X.shape[1], -float(norm)), np.full(X.shape[1], float(norm)))
        return resolve_bounds(self.bounds, X, feature_names)

    def fit(self, X: np.ndarray, y: np.ndarray, feature_names: Sequence[str] | None = None):
        """Release a noisy FM objective (or noisy FM gradients) of (X, y) and minimise it. Returns self."""
        X, y, feature_names = self._validate_fit_input(X, y, feature_names)
        d = X.shape[1] + (1 if self.fit_intercept else 0)
        mechanism, row_norm, choice = self.mechanism, self.row_norm, None
        if mechanism == "auto":   # public facts only (vfl.privacy.release_choice)
            choice = choose_release(self._model, X.shape[0], d, self.epsilon, self.delta)
            mechanism, row_norm = choice.mechanism, choice.row_norm
        self.mechanism_, self.row_norm_ = mechanism, row_norm
        if self.label_release is not None and self.label_release not in LABEL_RELEASES:   # before any rule runs
            raise ConfigurationError(f"label_release must be one of {', '.join(LABEL_RELEASES)}, got "
                                     f"{self.label_release!r}")
        if self.label_release is not None and mechanism != "noisy-gd" and self.mechanism != "auto":
            raise ConfigurationError(f"label_release applies to mechanism 'noisy-gd' only, not {mechanism!r}")
        domain = self.domain or DEFAULT_DOMAIN.get(mechanism, "l2" if mechanism == "noisy-gd" else "linf")
        if mechanism == "noisy-gd" and domain != "l2":
            raise ConfigurationError("mechanism 'noisy-gd' needs the l2 domain (its sensitivity holds for ||x|| <= 1)")
        self.domain_ = domain
        self.bounds_ = self._feature_bounds(X, feature_names)
        no_icpt = not self.fit_intercept
        U, col_scale = prepare_party_block(X, bounds=self.bounds_, domain=domain, n_features_total=d,
                                           row_norm=row_norm, out_of_bounds=self.out_of_bounds,
                                           feature_names=feature_names, symmetric=no_icpt)
        # the intercept column is a public constant that consumes norm budget (spec pitfall 4): in the l2 domain
        # it must be 1/sqrt(d) (its radius r = sqrt(1/d)) whether the features were scaled or clipped
        icpt_value = 1.0 / np.sqrt(d) if domain == "l2" else 1.0
        if self.fit_intercept:
            U = np.hstack([U, np.full((U.shape[0], 1), icpt_value)])
        y_unit = self._prepare_y(y)
        if mechanism == "noisy-gd":
            w, report = self._release_gradients(U, y_unit, choice)
        else:
            w, report = self._release_matrix(U, y_unit, mechanism, domain)
        if choice is not None:
            report.extra["release_choice"] = choice.to_dict()
            report.notes.append(f"mechanism='auto' chose {choice.mechanism} with row_norm={choice.row_norm!r} from "
                                f"public facts: {choice.reason}")
            if self.label_release is not None and mechanism != "noisy-gd":
                report.notes.append(f"label_release={self.label_release!r} was not used: it applies to the noisy "
                                    f"gradients only, and mechanism='auto' chose {mechanism}")
        self.__dict__.pop("_inference_result", None)
        self._release_ = None if mechanism == "noisy-gd" else (*self._matrix_release, icpt_value, col_scale, no_icpt)
        self.coef_unit_ = w
        self.privacy_report_ = finish_report(report, self.random_state,
                                             [self.bounds_, getattr(self, "y_bounds_", None)],
                                             ["the feature bounds", "the label bounds"])
        record_fit(self.accountant, self.privacy_report_.epsilon, self.privacy_report_.delta,
                   what=type(self).__name__)
        coef, icpt = from_unit_interval_coefficients(w[: X.shape[1]], self.bounds_, col_scale, symmetric=no_icpt)
        if self.fit_intercept:
            icpt += float(w[-1] * icpt_value)
        self._set_output_units(coef, icpt)
        return self

    def _release_matrix(self, U: np.ndarray, y_unit: np.ndarray, mechanism: str, domain: str
                        ) -> tuple[np.ndarray, PrivacyReport]:
        """The FM release of (alpha, M) and its floored solve (sets ``objective_``, ``solve_result_``)."""
        d = U.shape[1]
        release_beta = self.release_beta or (self.calibration == "paper" and mechanism == "gaussian-fm")
        plan = DissectionPlan([d], 0, model=self._model, release_beta=release_beta)
        mech = make_mechanism(mechanism, plan=plan, n_samples=U.shape[0], epsilon=self.epsilon,
                              delta=self.delta, domain=domain, seeded=is_seeded(self.random_state),
                              **self._mechanism_options(mechanism))
        planned = mech.privacy_report()
        check_fit(self.accountant, planned.epsilon, planned.delta, what=f"mechanism {mechanism!r}")
        rng = make_rng(self.random_state)
        objective = release_objective(plan, mech, [U], y_unit, rng)
        floor = release_floor(objective, mech, self.lambda_floor)
        regularization = self.regularization or default_regularization(self._model, mechanism)
        result = solve_details(objective, lambda_floor=floor, fallback=self.fallback, regularization=regularization,
                               alpha_noise_var=mech.alpha_noise_variance())
        self.objective_ = objective
        self.solve_result_ = result
        self._matrix_release = (mech, floor, regularization, plan.release_beta)
        return result.w, mech.privacy_report()

    def _release_gradients(self, U: np.ndarray, y_unit: np.ndarray, choice: ReleaseChoice | None
                           ) -> tuple[np.ndarray, PrivacyReport]:
        """T noisy projected gradient rounds of the FM objective (vfl.privacy.gradient_release); the exact objective
        is only the in-process gradient oracle and is not kept (``objective_`` and ``solve_result_`` are None).
        Under ``mechanism="auto"`` the rule's steps and label release apply unless given explicitly."""
        steps = self.steps if self.steps is not None else (choice.steps if choice and choice.steps else DEFAULT_STEPS)
        label_release = self.label_release or (choice.label_release if choice else None) or "every-round"
        release = GradientRelease(self._model, U.shape[0], U.shape[1], self.epsilon, self.delta, steps=steps,
                                  radius=DEFAULT_RADIUS if self.iterate_radius is None else self.iterate_radius,
                                  label_release=label_release)
        planned = release.privacy_report()
        check_fit(self.accountant, planned.epsilon, planned.delta, what="mechanism 'noisy-gd'")
        rng = make_rng(self.random_state)
        w = release.run_objective(fm_objective(U, y_unit, self._model), rng)
        self.objective_ = None
        self.solve_result_ = None
        return w, release.privacy_report()

    def _set_output_units(self, coef: np.ndarray, intercept: float) -> None:
        self.coef_ = coef
        self.intercept_ = float(intercept)

    def _decision(self, X: Any) -> np.ndarray:
        """z = x~ coef_ + intercept_, x~ the row as the fit saw it (:meth:`preprocess`)."""
        return self.preprocess(self._validate_predict_input(X)) @ self.coef_ + self.intercept_

    def preprocess(self, X: np.ndarray) -> np.ndarray:
        """Raw rows as the fit used them, in original units (the rows ``coef_``, ``intercept_`` apply to).

        ``row_norm="scale"`` (and the linf domain) is a public linear map of each column, so the model is linear in
        the raw row and the rows are returned unchanged. ``row_norm="clip"`` in the l2 domain clips each mapped row
        to the public radius r = sqrt(d_x/d) (:func:`vfl.fm.domain.clip_rows`), a nonlinear map: the fit's
        coefficients hold for the clipped row, so prediction applies the same clip (values outside the bounds are
        first clipped to them when ``out_of_bounds="clip"``, as in the fit) and maps the row back to original units.
        """
        X = np.asarray(X, dtype=float)
        if not (getattr(self, "row_norm_", self.row_norm) == "clip" and getattr(self, "domain_", None) == "l2"):
            return X
        symmetric = not self.fit_intercept
        b = self.bounds_.symmetric() if symmetric else self.bounds_
        if self.out_of_bounds == "clip":
            X = np.clip(X, self.bounds_.lower, self.bounds_.upper)
        U = X / b.upper if symmetric else 2.0 * (X - b.lower) / (b.upper - b.lower) - 1.0
        d = X.shape[1] + (1 if self.fit_intercept else 0)
        return from_unit_interval_rows(clip_rows(U, math.sqrt(X.shape[1] / d)), self.bounds_, symmetric=symmetric)

    def _original_units(self, w: np.ndarray) -> np.ndarray:
        """[coef..., intercept] in original units of the unit-domain model ``w`` (the public affine map of fit)."""
        _, _, _, _, icpt_value, col_scale, no_icpt = self._release_
        p = self.n_features_in_
        coef, icpt = from_unit_interval_coefficients(w[:p], self.bounds_, col_scale, symmetric=no_icpt)
        if self.fit_intercept:
            icpt += float(w[-1] * icpt_value)
        return np.append(*self._output_units(coef, icpt))

    def _output_units(self, coef: np.ndarray, intercept: float) -> tuple[np.ndarray, float]:
        return coef, float(intercept)

    def _inference(self) -> InferenceResult:
        """The inference of the release (computed on first use: post-processing, no epsilon)."""
        if "_inference_result" not in self.__dict__:
            self._inference_result = self.inference()
        return self._inference_result

    def inference(self, *, spectrum: str = "matched", debias: str | None = None) -> InferenceResult:
        """The inference of the release, computed afresh (post-processing, no epsilon); ``spectrum="deflated"``: the
        earlier bootstrap world (:func:`vfl.models.inference.release_inference`, docs/inference.md)."""
        self._check_is_fitted()
        if self._release_ is None:
            raise ConfigurationError("inference is computed from a released objective; mechanism 'noisy-gd' releases "
                                     "gradients only, so it has none")
        mech, floor, regularization, beta, icpt_value, _, _ = self._release_
        names = ([str(f) for f in self.feature_names_in_] if hasattr(self, "feature_names_in_")
                 else [f"x{j}" for j in range(self.n_features_in_)])
        yb = getattr(self, "y_bounds_", None)
        half = 1.0 if yb is None else float(yb.upper[0] - yb.lower[0]) / 2.0
        return release_inference(
            self.objective_, mech, w=self.coef_unit_, lambda_floor=floor, regularization=regularization,
            to_original=self._original_units, names=[*names, "intercept"],
            intercept_index=self.coef_unit_.size - 1 if self.fit_intercept else None,
            intercept_value=icpt_value, label_half_range=half, beta_released=beta, spectrum=spectrum,
            **({} if debias is None else {"debias": debias}))

    @property
    def inference_(self) -> InferenceResult:
        """Standard errors, intervals, p-values and fit measures from the release (:mod:`vfl.models.inference`)."""
        return self._inference()


_COMMON_DOC = """
    Parameters (diffprivlib conventions): ``mechanism`` ("none", "laplace-fm", "gaussian-fm" (default),
    "relaxed-fm", "noisy-gd": T noisy projected gradient rounds of the FM objective
    (:mod:`vfl.privacy.gradient_release`) with ``steps`` T (default 25), ``iterate_radius`` R (default 1) and
    ``label_release`` ("every-round" (default) or "once": the label term alpha released once, in-process only);
    "auto": the release picked from the public N, d, epsilon, delta by
    :func:`vfl.privacy.release_choice.choose_release`, recorded in ``privacy_report_.extra["release_choice"]``;
    docs/privacy.md, "Choosing the release from public facts"),
    ``epsilon``, ``delta``, ``bounds`` (public per-column (lo, hi); None takes them from the data
    with a :class:`~vfl.exceptions.DataBoundsWarning` and ``formal_dp: false``), ``fit_intercept`` (False: no
    intercept at all, ``intercept_ = 0``), ``domain`` ("linf" | "l2"; default per mechanism), ``fm_sensitivity``
    (Laplace), ``calibration``, ``sym`` and ``budget_split`` (Gaussian: "risk" (default), "equal" or the alpha
    block's share in (0, 1); docs/privacy.md, "Budget split between the blocks"), ``row_norm`` ("scale":
    the public scaling 1/sqrt(d); "clip": l2 rows clipped to the radius sqrt(d_x/d), and ``predict`` applies the
    same clip, :meth:`preprocess`), ``out_of_bounds`` ("raise" | "clip"),
    ``lambda_floor`` (None: the public floor sigma_M sqrt(d); logistic Gaussian FM selects it from the release,
    docs/privacy.md, "Logistic regression: the eigenvalue floor selected from the release"; a number: that floor),
    ``fallback``, ``regularization`` ("floor": the public eigenvalue floor alone; "adaptive": the
    floor plus the shrinkage of the released linear term by its signal-to-noise ratio, post-processing, no epsilon;
    None: the model's default, "adaptive" for linear and "floor" for logistic regression; docs/privacy.md,
    "Adaptive regularisation"), ``release_beta``, ``random_state`` (None: ChaCha20 noise from OS entropy;
    an int: reproducible PCG64 noise, and the report says ``seeded``/``formal_dp: false``), ``accountant``
    (a :class:`~vfl.privacy.budget.BudgetAccountant`: the fit is refused unless it covers the fit's true
    (epsilon, delta), which it then spends; None: the process's default accountant records the fit and warns once
    when fits add up, e.g. the folds of ``cross_val_score``).

    diffprivlib's names are accepted as aliases (give one name of each pair): ``bounds_X = (lower, upper)``
    (each one number or one value per feature; diffprivlib's form) for ``bounds``; ``bounds_y`` for ``y_bounds``
    (linear); ``data_norm`` (logistic; the largest ||x||_2 of a row), which implies the bounds
    (-data_norm, data_norm) of every column.

    Attributes: ``coef_``, ``intercept_`` (original units; with ``row_norm="clip"`` they apply to the clipped row,
    :meth:`preprocess`), ``coef_unit_`` (in the public domain), ``mechanism_``, ``row_norm_`` (what was run),
    ``n_features_in_``, ``feature_names_in_`` (when X has string column names), ``bounds_``,
    ``privacy_report_`` (:class:`~vfl.privacy.accounting.PrivacyReport`), ``objective_``, ``solve_result_``.
"""


class LinearRegression(_FMRegression):
    """Differentially private linear regression through the functional mechanism.
    {common}
    Linear only: ``y_bounds`` ((lo, hi) of the target, public); attribute ``y_bounds_``.
    """

    _model = "linear"

    def __init__(self, *, mechanism: str = "gaussian-fm", epsilon: float = 1.0, delta: float = 1e-5,
                 bounds: BoundsLike | ColumnBounds = None, y_bounds: tuple[float, float] | None = None,
                 fit_intercept: bool = True, domain: str | None = None, fm_sensitivity: str = "paper",
                 calibration: str = "analytic", sym: str = "iso", row_norm: str = "scale",
                 out_of_bounds: str = "raise", lambda_floor: float | None = None, fallback: str = "raise",
                 release_beta: bool = False, random_state: RandomState = None, bounds_X: Any = None,
                 bounds_y: tuple[float, float] | None = None, accountant: Any = None,
                 budget_split: str | float = "risk", regularization: str | None = None, steps: int | None = None,
                 iterate_radius: float | None = None, label_release: str | None = None) -> None:
        self.label_release = label_release
        self.steps = steps
        self.iterate_radius = iterate_radius
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.y_bounds = y_bounds
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
        self.bounds_X = bounds_X
        self.bounds_y = bounds_y
        self.accountant = accountant
        self.budget_split = budget_split
        self.regularization = regularization

    def _prepare_y(self, y: np.ndarray) -> np.ndarray:
        y_bounds = self.bounds_y if _one_of(self, ("y_bounds", "bounds_y")) == "bounds_y" else self.y_bounds
        y_unit, yb = prepare_labels(y, "linear", y_bounds=y_bounds, out_of_bounds=self.out_of_bounds,
                                    symmetric=not self.fit_intercept)
        self.y_bounds_ = yb
        return y_unit

    def _set_output_units(self, coef: np.ndarray, intercept: float) -> None:
        self.coef_, self.intercept_ = self._output_units(coef, intercept)

    def _output_units(self, coef: np.ndarray, intercept: float) -> tuple[np.ndarray, float]:
        lo, hi = float(self.y_bounds_.lower[0]), float(self.y_bounds_.upper[0])
        half = (hi - lo) / 2.0
        return half * coef, (float(lo + half * (1.0 + intercept)) if self.fit_intercept else 0.0)


class LogisticRegression(_FMRegression):
    """Differentially private binary logistic regression via the order-2 Taylor FM objective.
    {common}
    Any two labels are accepted and encoded as 0/1 (``classes_``, sorted); ``predict_proba`` gives
    P(classes_[0]), P(classes_[1]).
    """

    _model = "logistic"

    def __init__(self, *, mechanism: str = "gaussian-fm", epsilon: float = 1.0, delta: float = 1e-5,
                 bounds: BoundsLike | ColumnBounds = None, fit_intercept: bool = True, domain: str | None = None,
                 fm_sensitivity: str = "paper", calibration: str = "analytic", sym: str = "iso",
                 row_norm: str = "scale", out_of_bounds: str = "raise", lambda_floor: float | None = None,
                 fallback: str = "raise", release_beta: bool = False, random_state: RandomState = None,
                 bounds_X: Any = None, data_norm: float | None = None, accountant: Any = None,
                 budget_split: str | float = "risk", regularization: str | None = None, steps: int | None = None,
                 iterate_radius: float | None = None, label_release: str | None = None) -> None:
        self.label_release = label_release
        self.steps = steps
        self.iterate_radius = iterate_radius
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
        self.bounds_X = bounds_X
        self.data_norm = data_norm
        self.accountant = accountant
        self.budget_split = budget_split
        self.regularization = regularization


LinearRegression.__doc__ = LinearRegression.__doc__.format(common=_COMMON_DOC)
LogisticRegression.__doc__ = LogisticRegression.__doc__.format(common=_COMMON_DOC)
