"""Helpers both roles of the packed secure product use: input checks, offset-encoded row sources, task sizes and
progress bars (see :mod:`vfl.secure.products`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vfl.data.rows import ArrayRows, RowSource
from vfl.exceptions import (
    DataValidationError,
    EncodingOverflowError,
)
from vfl.progress import Progress, progress
from vfl.secure.encoding import encode_offset_chunk


def _as_matrix(X: Any, name: str) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise DataValidationError(f"{name} must be a non-empty 2-D array, got shape {X.shape}")
    return X


def _progress_bar(enabled: bool, total: int, desc: str, unit: str) -> Progress:
    return progress(total, desc, enabled=enabled, unit=unit)   # a bar on a terminal, plain lines in a log


def _check_noise(noise: Any, shape: tuple[int, int], bound: int) -> np.ndarray:
    if noise is None:
        return np.zeros(shape, dtype=object)
    arr = np.asarray(noise)
    if arr.shape != shape:
        raise DataValidationError(f"noise must have shape {shape}, got {arr.shape}")
    if arr.dtype != object and not np.issubdtype(arr.dtype, np.integer):
        raise DataValidationError("noise must be an integer array in fixed-point units 2**-(2*precision_bits)")
    out = np.empty(shape, dtype=object)
    for idx, v in np.ndenumerate(arr):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise DataValidationError("noise entries must be integers")
        if abs(int(v)) >= bound:  # the message never quotes the (secret) noise value
            raise EncodingOverflowError(
                f"a noise entry exceeds the agreed bound 2**noise_bits = 2**{bound.bit_length() - 1}"
            )
        out[idx] = int(v)
    return out


def _encoded_source(X: Any, name: str, precision_bits: int, value_bound: float
                    ) -> tuple[RowSource, np.ndarray | None, np.ndarray | None]:
    """``(source, encoded, col_sums)``: an in-memory array is encoded (and bound-checked) at once; a row source
    is encoded chunk by chunk while streaming (``encoded``/``col_sums`` None until then)."""
    if isinstance(X, RowSource) and not isinstance(X, np.ndarray):
        if X.n_rows < 1 or X.n_cols < 1:
            raise DataValidationError(f"{name} must be non-empty, got {X.n_rows} x {X.n_cols}")
        return X, None, None
    X = _as_matrix(X, name)
    encoded, col_sums = encode_offset_chunk(X, precision_bits, value_bound)
    return ArrayRows(encoded), encoded, col_sums


def _task_rows(chunk_rows: int, n_chunks: int, parallel: int) -> int:
    """Rows per executor task: a whole chunk when there are enough chunks to keep ``parallel`` workers busy,
    else the chunk split so that every worker gets work (small products)."""
    if parallel <= 1 or n_chunks >= 2 * parallel:
        return chunk_rows
    return max(1, math.ceil(chunk_rows / (2 * parallel)))
