"""Quality of an ICA solution: the normalised Moreau-Amari index used by djICA and the CAPE seed.

For a true mixing matrix A (D x R) and an estimated unmixing matrix W_hat (R x D), P = W_hat A (R x R) is a
scaled permutation matrix exactly when the sources are recovered up to order and scale. The normalised index

    q(P) = 1 / (2 R (R - 1)) * [ sum_i ( sum_j |p_ij| / max_k |p_ik| - 1 )
                                + sum_j ( sum_i |p_ij| / max_k |p_kj| - 1 ) ]

lies in [0, 1]: 0 for a scaled permutation, 1 when every entry has the same magnitude (Amari, Cichocki &
Yang 1996; normalisation as in Baker et al. 2015's djICA code ``compute_isi.m`` and Imtiaz et al. 2021).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from vfl.exceptions import DataValidationError

__all__ = ["amari_index", "match_mixing_matrix"]


def amari_index(P: np.ndarray) -> float:
    """Normalised Moreau-Amari index of the square matrix P = W_hat A (module docstring)."""
    P = np.abs(np.asarray(P, dtype=float))
    if P.ndim != 2 or P.shape[0] != P.shape[1] or P.shape[0] < 2:
        raise DataValidationError(f"the Amari index needs a square matrix of size >= 2, got shape {P.shape}")
    if not np.isfinite(P).all():
        raise DataValidationError("the Amari index needs a finite matrix")
    R = P.shape[0]
    row_max = P.max(axis=1, keepdims=True)
    col_max = P.max(axis=0, keepdims=True)
    if (row_max == 0).any() or (col_max == 0).any():
        return 1.0  # a zero row/column: a source is lost entirely (worst case by convention)
    rows = np.sum(P / row_max, axis=1) - 1.0
    cols = np.sum(P / col_max, axis=0) - 1.0
    return float((rows.sum() + cols.sum()) / (2.0 * R * (R - 1)))


def match_mixing_matrix(A_true: np.ndarray, A_hat: np.ndarray) -> np.ndarray:
    """Reorder, re-sign and rescale the columns of A_hat to best match A_true (for figures only).

    Columns are paired by the Hungarian algorithm on |correlation|; each matched column is scaled by the
    least-squares factor onto its partner (ICA recovers columns only up to permutation and scale).
    """
    A_true = np.asarray(A_true, float)
    A_hat = np.asarray(A_hat, float)
    if A_true.shape != A_hat.shape:
        raise DataValidationError(f"shapes differ: {A_true.shape} vs {A_hat.shape}")
    a = A_true / np.linalg.norm(A_true, axis=0)
    h = A_hat / np.maximum(np.linalg.norm(A_hat, axis=0), 1e-300)
    rows, cols = linear_sum_assignment(-np.abs(a.T @ h))
    out = np.empty_like(A_hat)
    for r, c in zip(rows, cols, strict=True):
        col = A_hat[:, c]
        denom = float(col @ col)
        out[:, r] = col * (float(A_true[:, r] @ col) / denom if denom > 0 else 0.0)
    return out
