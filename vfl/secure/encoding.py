"""Fixed-point encoding with one agreed exponent and offset (non-negative) representation.

A real ``x`` with ``|x| <= V`` (the public ``value_bound``) is encoded as ``x_int = round(x 2^p)``
(``p = precision_bits``, one exponent agreed by both parties: phe's per-value float exponents would
leak magnitudes) and shifted by the public offset ``O = ceil(V 2^p)`` to ``x' = x_int + O`` in
``[0, 2 O]``. Products of offset values are non-negative, so packed slots never borrow; the offset
terms are removed afterwards by each party from its own share:

    sum_i a'_i b'_i = sum_i a_i b_i + O sum_i a_i + O sum_i b_i + n O^2.

Error of the decoded inner product (``|a|, |b| <= V``): each rounding error is at most ``2^-(p+1)``, so

    |sum_i a_i b_i - 2^-2p sum_i a_int_i b_int_i| <= n (V 2^-p + 2^-(2p+2))   (:func:`inner_product_error_bound`).
"""

from __future__ import annotations

import math

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError, EncodingOverflowError

DEFAULT_PRECISION_BITS = 24
"""Default fractional bits: inner products of n = 517 rows in [-1, 1] are exact to ~3e-5."""


def check_precision(precision_bits: int, value_bound: float) -> None:
    """Validate ``p`` and ``V``: ``V 2^p`` must be representable exactly in float64 arithmetic (< 2^52)."""
    if isinstance(precision_bits, bool) or not isinstance(precision_bits, (int, np.integer)):
        raise ConfigurationError(f"precision_bits must be an int, got {precision_bits!r}")
    if not 1 <= precision_bits <= 52:
        raise ConfigurationError(f"precision_bits must be in [1, 52], got {precision_bits}")
    if not (isinstance(value_bound, (int, float, np.floating)) and math.isfinite(value_bound) and value_bound > 0):
        raise ConfigurationError(f"value_bound must be a positive finite number, got {value_bound!r}")
    if value_bound * 2.0**precision_bits >= 2.0**52:
        raise ConfigurationError("value_bound * 2**precision_bits must be < 2**52 (float64 exactness)")


def offset(precision_bits: int, value_bound: float) -> int:
    """The public offset ``O = ceil(V 2^p)``; encoded values lie in ``[0, 2 O]``."""
    check_precision(precision_bits, value_bound)
    return math.ceil(value_bound * 2**precision_bits)


def to_fixed_point_ints(X: np.ndarray, precision_bits: int, value_bound: float) -> np.ndarray:
    """``round(X 2^p)`` as an object array of Python ints, refusing values outside ``[-V, V]``.

    Raises :class:`DataValidationError` for non-finite input and :class:`EncodingOverflowError` when
    ``|x| > V`` (checked before anything is encrypted).
    """
    check_precision(precision_bits, value_bound)
    X = np.asarray(X, dtype=np.float64)
    if not np.all(np.isfinite(X)):
        raise DataValidationError("cannot encode NaN or infinite values")
    if X.size and float(np.max(np.abs(X))) > value_bound:
        raise EncodingOverflowError(
            f"value {float(np.max(np.abs(X))):.6g} exceeds the public value_bound {value_bound:g}"
        )
    scaled = np.rint(X * float(2**precision_bits))  # exact: |X| 2^p < 2^52
    return np.vectorize(int, otypes=[object])(scaled) if scaled.size else scaled.astype(object)


def encode_offset(X: np.ndarray, precision_bits: int, value_bound: float) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(X' = round(X 2^p) + O, column sums of round(X 2^p))`` as object int arrays.

    The column sums stay with their owner: they are what that party subtracts from its share.
    """
    X_int = to_fixed_point_ints(X, precision_bits, value_bound)
    O = offset(precision_bits, value_bound)
    col_sums = X_int.sum(axis=0) if X_int.shape[0] else np.zeros(X_int.shape[1], dtype=object)
    return X_int + O, np.asarray(col_sums, dtype=object)


def encode_offset_chunk(X: np.ndarray, precision_bits: int, value_bound: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`encode_offset` for one chunk of rows, as an int64 matrix (fast; exact since ``V 2^p < 2^52``).

    Same checks and errors as :func:`to_fixed_point_ints`; the column sums of ``round(X 2^p)`` are exact Python ints.
    """
    check_precision(precision_bits, value_bound)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    if not np.all(np.isfinite(X)):
        raise DataValidationError("cannot encode NaN or infinite values")
    if X.size and float(np.max(np.abs(X))) > value_bound:
        raise EncodingOverflowError(
            f"value {float(np.max(np.abs(X))):.6g} exceeds the public value_bound {value_bound:g}"
        )
    X_int = np.rint(X * float(2**precision_bits)).astype(np.int64)
    O = offset(precision_bits, value_bound)
    if X_int.shape[0] * (O + 1) < 2**62:
        col_sums = np.array([int(v) for v in X_int.sum(axis=0)], dtype=object)
    else:
        col_sums = X_int.astype(object).sum(axis=0)
    return X_int + O, np.asarray(col_sums, dtype=object).reshape(X_int.shape[1])


def decode_products(raw: np.ndarray, precision_bits: int) -> np.ndarray:
    """Integers in units ``2^-2p`` to float64, correctly rounded (Python int true division)."""
    scale = 2 ** (2 * precision_bits)
    raw = np.asarray(raw, dtype=object)
    return np.vectorize(lambda v: int(v) / scale, otypes=[np.float64])(raw) if raw.size else raw.astype(float)


def inner_product_error_bound(n_rows: int, precision_bits: int, value_bound: float) -> float:
    """Worst-case ``|a.b - decoded|`` for ``n_rows`` products of values in ``[-V, V]`` (see module doc)."""
    return n_rows * (value_bound * 2.0**-precision_bits + 2.0 ** -(2 * precision_bits + 2))
