"""Minimising a noisy quadratic objective (spec §2.5).

With M_hat = Q diag(s) Q^T (``numpy.linalg.eigh``), the PSD projection with a public floor
lambda_floor > 0 is M_+ = Q diag(max(s_i, lambda_floor)) Q^T and the minimiser of
beta + alpha^T w + w^T M_+ w is w = -(1/2) Q diag(1/max(s_i, lambda_floor)) Q^T alpha.
[correction] Clipping at 0 (Zhang et al. 2012; Tasnim et al. 2023) leaves the objective unbounded
below when alpha has a component in the null space, so the floor must be > 0 for noisy objectives; it
is post-processing and must be fixed before seeing the data. With ``lambda_floor = 0`` (noise-free
reference only) the null space is dropped, which gives the minimum-norm least-squares solution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vfl.exceptions import ConfigurationError, DegenerateNoisyObjective
from vfl.fm.objective import QuadraticObjective

__all__ = ["SolveResult", "project_psd", "solve", "solve_details", "predict_linear", "predict_logistic_proba"]


@dataclass(frozen=True)
class SolveResult:
    w: np.ndarray
    eigenvalues: np.ndarray
    n_floored: int
    lambda_floor: float
    fallback_used: bool = False


def _symmetric(M: np.ndarray) -> np.ndarray:
    M = np.asarray(M, dtype=float)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ConfigurationError(f"M must be square, got {M.shape}")
    if not np.allclose(M, M.T, rtol=0, atol=1e-12 * max(1.0, float(np.abs(M).max(initial=0.0)))):
        raise ConfigurationError("M must be symmetric: never solve with an unsymmetrized noise matrix "
                                 "(docs/privacy.md)")
    return (M + M.T) / 2.0


def project_psd(M: np.ndarray, lambda_floor: float) -> np.ndarray:
    """M_+ = Q diag(max(s, lambda_floor)) Q^T."""
    s, Q = np.linalg.eigh(_symmetric(M))
    return (Q * np.maximum(s, lambda_floor)) @ Q.T


def solve_details(objective: QuadraticObjective, *, lambda_floor: float, min_pos: int = 1,
                  fallback: str = "raise") -> SolveResult:
    """Closed-form minimiser through the projected eigendecomposition (spec §2.5).

    If fewer than ``min_pos`` eigenvalues exceed the floor, raise :class:`DegenerateNoisyObjective`
    (``fallback="raise"``) or use M_+ = lambda_floor I (``fallback="ridge"``).
    """
    if lambda_floor < 0 or not np.isfinite(lambda_floor):
        raise ConfigurationError(f"lambda_floor must be finite and >= 0, got {lambda_floor}")
    if fallback not in ("raise", "ridge"):
        raise ConfigurationError(f"fallback must be 'raise' or 'ridge', got {fallback!r}")
    s, Q = np.linalg.eigh(_symmetric(objective.M))
    alpha = objective.alpha
    if lambda_floor == 0.0:
        tol = max(s.max(initial=0.0), 0.0) * s.size * np.finfo(float).eps * 10
        keep = s > tol
        if keep.sum() < min_pos:
            raise DegenerateNoisyObjective("the objective has no positive curvature: nothing to minimise")
        inv = np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)
        w = -0.5 * (Q * inv) @ (Q.T @ alpha)
        return SolveResult(w, s, int((~keep).sum()), 0.0)
    n_pos = int((s > lambda_floor).sum())
    if n_pos < min_pos:
        if fallback == "raise":
            raise DegenerateNoisyObjective(
                f"only {n_pos} eigenvalue(s) of the noisy M exceed the floor {lambda_floor:.3g} (need {min_pos}): "
                "the noise swamps the data; use a larger epsilon, more rows, or fallback='ridge'"
            )
        return SolveResult(-0.5 * alpha / lambda_floor, s, s.size, lambda_floor, fallback_used=True)
    floored = np.maximum(s, lambda_floor)
    w = -0.5 * (Q / floored) @ (Q.T @ alpha)
    return SolveResult(w, s, int((s < lambda_floor).sum()), lambda_floor)


def solve(objective: QuadraticObjective, *, lambda_floor: float, min_pos: int = 1, fallback: str = "raise"
          ) -> np.ndarray:
    """The minimiser w of the projected objective (see :func:`solve_details`)."""
    return solve_details(objective, lambda_floor=lambda_floor, min_pos=min_pos, fallback=fallback).w


def predict_linear(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.asarray(X, dtype=float) @ w


def predict_logistic_proba(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    z = np.asarray(X, dtype=float) @ w
    return 0.5 * (1.0 + np.tanh(0.5 * z))   # numerically stable sigmoid
