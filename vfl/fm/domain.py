"""Public data domains, bounds and clipping (spec §0.2, §2.6, pitfalls 2-4).

FM sensitivities hold only on a public domain:

* ``"linf"`` (Dinf, Zhang et al. 2012; Xu et al. 2021): every feature in [-1, 1];
* ``"l2"``   (D2, Tasnim et al. 2023; Chaudhuri et al. 2011): ||x||_2 <= 1.

Raw columns are mapped to [-1, 1] with *declared* bounds (like diffprivlib's ``bounds``):
x_unit = 2 (x - lo)/(hi - lo) - 1, a public affine map that keeps per-record sensitivity. A model without
intercept needs a *linear* map (the affine offset -1 - 2 lo/(hi - lo) would act as a hidden intercept):
``symmetric=True`` maps by the pure scaling x_unit = x / m, m = max(|lo|, |hi|), i.e. with the symmetric
bounds (-m, m) (values are still checked against the declared (lo, hi)). For D2 each
party k then bounds its own block by r_k = sqrt(d_k/d) (sum_k r_k^2 = 1), either by the public scaling
x^k / sqrt(d) (default; never active clipping) or by clipping rows x^k min(1, r_k/||x^k||).
Bounds taken from the data leak (pitfall 2): that is allowed only with a :class:`DataBoundsWarning`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from vfl.exceptions import ConfigurationError, DataBoundsWarning, DataValidationError

Domain = Literal["linf", "l2"]
BoundsLike = None | tuple[float, float] | Sequence[tuple[float, float]] | Mapping[str, tuple[float, float]]

__all__ = [
    "ColumnBounds",
    "resolve_bounds",
    "infer_bounds",
    "to_unit_interval",
    "from_unit_interval_coefficients",
    "party_radii",
    "clip_rows",
    "prepare_party_block",
    "from_unit_interval_rows",
    "prepare_labels",
    "validate_domain",
    "fixed_point_shrink",
    "round_to_grid",
]


@dataclass(frozen=True)
class ColumnBounds:
    """Declared public bounds of each column: ``lower[j] <= x_j <= upper[j]``."""

    lower: np.ndarray
    upper: np.ndarray
    from_data: bool = False

    def __post_init__(self) -> None:
        lo = np.atleast_1d(np.asarray(self.lower, dtype=float))
        hi = np.atleast_1d(np.asarray(self.upper, dtype=float))
        if lo.shape != hi.shape or lo.ndim != 1:
            raise DataValidationError("lower and upper bounds must be 1-D of the same length")
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise DataValidationError("bounds must be finite numbers")
        if (hi <= lo).any():
            j = int(np.argmax(hi <= lo))
            raise DataValidationError(f"bounds of column {j} are empty or degenerate: ({lo[j]}, {hi[j]})")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)

    def __len__(self) -> int:
        return int(self.lower.size)

    def to_list(self) -> list[list[float]]:
        return [[float(a), float(b)] for a, b in zip(self.lower, self.upper, strict=True)]

    def symmetric(self) -> ColumnBounds:
        """(-m, m), m = max(|lo|, |hi|): the unit map becomes the pure scaling x / m (no hidden intercept)."""
        m = np.maximum(np.abs(self.lower), np.abs(self.upper))
        return ColumnBounds(-m, m, from_data=self.from_data)


def validate_domain(domain: str) -> Domain:
    if domain not in ("linf", "l2"):
        raise DataValidationError(f"domain must be 'linf' or 'l2', got {domain!r}")
    return domain  # type: ignore[return-value]


def infer_bounds(X: np.ndarray, *, what: str = "features") -> ColumnBounds:
    """Bounds from the data's own min/max. This leaks (spec pitfall 2) and always warns loudly."""
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    lo, hi = X.min(axis=0), X.max(axis=0)
    hi = np.where(hi > lo, hi, lo + 1.0)
    warnings.warn(
        f"bounds for the {what} were taken from the private data (min/max): this is NOT differentially "
        "private; declare public bounds (bounds=... / --bounds FILE) for a real guarantee",
        DataBoundsWarning,
        stacklevel=3,
    )
    return ColumnBounds(lo, hi, from_data=True)


def resolve_bounds(bounds: BoundsLike | ColumnBounds, X: np.ndarray,
                   feature_names: Sequence[str] | None = None, *, what: str = "features") -> ColumnBounds:
    """Turn user bounds into :class:`ColumnBounds` for the columns of X.

    Accepts ``None`` (inferred from data, warns), one ``(lo, hi)`` pair for all columns, a list of pairs,
    or a mapping column name -> (lo, hi) covering every column.
    """
    X = np.asarray(X, dtype=float)
    d = 1 if X.ndim == 1 else X.shape[1]
    if bounds is None:
        return infer_bounds(X, what=what)
    if isinstance(bounds, ColumnBounds):
        out = bounds
    elif isinstance(bounds, Mapping):
        if feature_names is None:
            raise DataValidationError("bounds given by column name but the columns have no names")
        missing = [n for n in feature_names if n not in bounds]
        if missing:
            raise DataValidationError(f"no bounds declared for column(s): {', '.join(map(str, missing))}")
        pairs = [tuple(bounds[n]) for n in feature_names]
        out = ColumnBounds(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    else:
        arr = np.asarray(bounds, dtype=float)
        if arr.shape == (2,):
            arr = np.tile(arr, (d, 1))
        if arr.shape != (d, 2):
            raise DataValidationError(f"bounds must be one (lo, hi) pair or {d} pairs, got shape {arr.shape}")
        out = ColumnBounds(arr[:, 0], arr[:, 1])
    if len(out) != d:
        raise DataValidationError(f"{len(out)} bounds declared for {d} columns")
    return out


def to_unit_interval(X: np.ndarray, bounds: ColumnBounds, *, out_of_bounds: str = "raise",
                     feature_names: Sequence[str] | None = None, symmetric: bool = False) -> np.ndarray:
    """Map each column from [lo, hi] to [-1, 1]; values outside the declared bounds raise or are clipped.

    Clipping to *declared* bounds is per-record and keeps the sensitivity; raising (default) tells the user
    their bounds are wrong instead of silently distorting the data. ``symmetric``: the linear map x / m
    (models without intercept; module docstring).
    """
    X = np.asarray(X, dtype=float)
    one_d = X.ndim == 1
    X2 = X[:, None] if one_d else X
    lo, hi = bounds.lower, bounds.upper
    if out_of_bounds not in ("raise", "clip"):   # validated up front, not only when a value is outside
        raise DataValidationError(f"out_of_bounds must be 'raise' or 'clip', got {out_of_bounds!r}")
    outside = (X2 < lo) | (X2 > hi)
    if outside.any():
        if out_of_bounds == "raise":
            r, c = np.argwhere(outside)[0]
            name = feature_names[c] if feature_names is not None else f"column {c}"
            raise DataValidationError(
                f"value {X2[r, c]:g} in {name} (row {r}) lies outside its declared bounds [{lo[c]:g}, {hi[c]:g}]"
            )
        X2 = np.clip(X2, lo, hi)
    if symmetric:
        lo, hi = -np.maximum(np.abs(lo), np.abs(hi)), np.maximum(np.abs(lo), np.abs(hi))
    U = 2.0 * (X2 - lo) / (hi - lo) - 1.0
    return U[:, 0] if one_d else U


def from_unit_interval_coefficients(w_unit: np.ndarray, bounds: ColumnBounds, column_scale: np.ndarray | float = 1.0,
                                    *, symmetric: bool = False) -> tuple[np.ndarray, float]:
    """Coefficients in original units for a model ``w . (s * u(x))`` with u the unit map: (coef, intercept).

    With ``symmetric`` (u(x) = x / m) the intercept is exactly 0.
    """
    if symmetric:
        bounds = bounds.symmetric()
    w = np.asarray(w_unit, dtype=float) * column_scale
    width = bounds.upper - bounds.lower
    coef = 2.0 * w / width
    intercept = float(np.sum(w * (-1.0 - 2.0 * bounds.lower / width)))
    return coef, intercept


def party_radii(feature_counts: Sequence[int]) -> np.ndarray:
    """Public per-party row-norm radii r_k = sqrt(d_k / d), so sum_k r_k^2 = 1 (spec §2.6)."""
    d = np.asarray(feature_counts, dtype=float)
    if d.sum() <= 0:
        raise DataValidationError("at least one feature is needed")
    return np.sqrt(d / d.sum())


def clip_rows(X: np.ndarray, radius: float) -> np.ndarray:
    """x <- x min(1, radius/||x||_2) row by row (per-record, keeps the sensitivity; spec pitfall 3)."""
    X = np.asarray(X, dtype=float)
    norms = np.linalg.norm(X, axis=1)
    factor = np.minimum(1.0, radius / np.maximum(norms, np.finfo(float).tiny))
    return X * factor[:, None]


def prepare_party_block(X_k: np.ndarray, *, bounds: ColumnBounds, domain: Domain, n_features_total: int,
                        radius: float | None = None, row_norm: str = "scale", out_of_bounds: str = "raise",
                        feature_names: Sequence[str] | None = None, symmetric: bool = False
                        ) -> tuple[np.ndarray, float]:
    """Map one party's raw columns into its share of the public domain; returns (block, column_scale).

    ``linf``: unit interval only (scale 1). ``l2``: ``row_norm="scale"`` multiplies by 1/sqrt(d), which
    bounds ||x^k|| by r_k = sqrt(d_k/d) without clipping; ``row_norm="clip"`` clips rows to ``radius``
    (default r_k) and returns scale 1. ``symmetric``: the linear unit map (runs without intercept).
    """
    domain = validate_domain(domain)
    U = to_unit_interval(X_k, bounds, out_of_bounds=out_of_bounds, feature_names=feature_names, symmetric=symmetric)
    if domain == "linf":
        return U, 1.0
    d_k = U.shape[1]
    if row_norm == "scale":
        s = 1.0 / np.sqrt(n_features_total)
        return U * s, float(s)
    if row_norm == "clip":
        r = float(np.sqrt(d_k / n_features_total)) if radius is None else float(radius)
        return clip_rows(U, r), 1.0
    raise DataValidationError(f"row_norm must be 'scale' or 'clip', got {row_norm!r}")


def from_unit_interval_rows(U: np.ndarray, bounds: ColumnBounds, *, symmetric: bool = False) -> np.ndarray:
    """The inverse of :func:`to_unit_interval`: rows of the public domain back in original units.

    x = lo + (u + 1)(hi - lo)/2, or x = m u with ``symmetric``. Used at prediction time for a ``row_norm="clip"``
    fit: the model ``coef_ . x + intercept_`` is linear in the *clipped* row, so a raw row is mapped, clipped by
    the fit's own rule (:func:`prepare_party_block`) and mapped back before the linear model is applied.
    """
    if symmetric:
        bounds = bounds.symmetric()
    lo, hi = bounds.lower, bounds.upper
    return lo + (np.asarray(U, dtype=float) + 1.0) * (hi - lo) / 2.0


def prepare_labels(y: np.ndarray, model: str, *, y_bounds: tuple[float, float] | None = None,
                   out_of_bounds: str = "raise", symmetric: bool = False) -> tuple[np.ndarray, ColumnBounds | None]:
    """Linear: map y from its declared bounds to [-1, 1]. Logistic: check y in {0, 1} (spec pitfall 5).

    ``symmetric`` (no intercept): y / m, m = max(|lo|, |hi|); the returned bounds are then (-m, m), the ones
    that map the model back (y = m * y_unit).
    """
    y = np.asarray(y, dtype=float)
    if model == "logistic":
        from vfl.fm.objective import validate_labels

        validate_labels(y, "logistic")
        return y, None
    yb = resolve_bounds(None if y_bounds is None else [tuple(y_bounds)], y[:, None], what="label")  # type: ignore[list-item]
    y_unit = to_unit_interval(y[:, None], yb, out_of_bounds=out_of_bounds, feature_names=["label"],
                              symmetric=symmetric)[:, 0]
    return y_unit, (yb.symmetric() if symmetric else yb)


FLOAT_MARGIN = 2.0**-48   # absorbs the float rounding of u/sqrt(d) and c*x (relative error <= 2^-50 per value)


def fixed_point_shrink(n_features_total: int, precision_bits: int) -> float:
    """c = 1 - sqrt(d) 2^-(p+1) - 2^-48: scaling prepared rows by c before rounding every value to the 2^-p grid
    keeps ||q(c x)|| <= c ||x|| (1 + 2^-50) + sqrt(d) 2^-(p+1) <= 1, so the D2 sensitivities hold for the
    quantized data exactly, float rounding of the prepared values included (the margin matters for p >~ 45).

    Raises :class:`ConfigurationError` when the grid is too coarse for d (c <= 0, i.e. sqrt(d) >= 2^(p+1)).
    """
    c = 1.0 - float(np.sqrt(n_features_total)) * 2.0 ** (-(precision_bits + 1)) - FLOAT_MARGIN
    if not c > 0.0:
        raise ConfigurationError(f"precision_bits={precision_bits} is too coarse for {n_features_total} features in "
                                 "the l2 domain (needs sqrt(d) < 2^(p+1)); use more precision bits")
    return c


def round_to_grid(values: np.ndarray, precision_bits: int) -> np.ndarray:
    """Round every value to the public fixed-point grid 2^-p (values in [-1, 1] stay in [-1, 1])."""
    scale = 2.0**precision_bits
    return np.rint(np.asarray(values, dtype=float) * scale) / scale
