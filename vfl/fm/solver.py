"""Minimising a noisy quadratic objective (spec §2.5).

With M_hat = Q diag(s) Q^T (``numpy.linalg.eigh``), the PSD projection with a public floor
lambda_floor > 0 is M_+ = Q diag(max(s_i, lambda_floor)) Q^T and the minimiser of
beta + alpha^T w + w^T M_+ w is w = -(1/2) Q diag(1/max(s_i, lambda_floor)) Q^T alpha.
[correction] Clipping at 0 (Zhang et al. 2012; Tasnim et al. 2023) leaves the objective unbounded
below when alpha has a component in the null space, so the floor must be > 0 for noisy objectives; it
is post-processing and must be fixed before seeing the data. With ``lambda_floor = 0`` (noise-free
reference only) the null space is dropped, which gives the minimum-norm least-squares solution.

Adaptive regularisation (``regularization="adaptive"``, issue 24). The floor alone divides the released linear term
alpha by lambda_floor in every floored direction, so there the noise of alpha (public per-entry variances v_a, the
mechanism's) passes through at full strength. In the eigenbasis of M_hat, p_i = q_i^T alpha has noise variance
v_i = sum_a Q_ai^2 v_a; the adaptive solve multiplies p_i by the plug-in Wiener factor p_i^2 / (p_i^2 + v_i) (the
risk-optimal linear shrinkage a^2/(a^2 + v) of a noisy a, with a^2 estimated by p_i^2) before dividing by the
projected eigenvalue. Directions whose released signal is far above the noise keep their coefficient; directions at
the noise level shrink towards 0. Only released coefficients and public noise scales enter: post-processing, no
epsilon (docs/privacy.md, "Adaptive regularisation").

Unpenalised intercept (``intercept=``, measured in benchmarks/utility.py, not a default). With an intercept the rows
carry a public constant column c (index k), so M_kk = c^2 is public and M_jk = c mean(u_j), alpha_k = -2 c mean(y)
are released already. Minimising exactly over w_k first (the Schur complement, i.e. centring) gives

    M' = M_xx - M_xk M_kx / M_kk,   alpha' = alpha_x - alpha_k M_xk / M_kk

(noise-free: M' = Cov(u), alpha' = -2 Cov(u, y)); the floor then applies to M' only and
w_k = -(alpha_k + 2 M_kx w_x) / (2 M_kk), so a large floor converges to the noisy mean of y instead of the middle of
the label range. Also post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vfl.exceptions import ConfigurationError, DegenerateNoisyObjective
from vfl.fm.objective import QuadraticObjective

__all__ = ["SolveResult", "Intercept", "REGULARIZATIONS", "DEFAULT_REGULARIZATION", "default_regularization",
           "project_psd", "solve",
           "solve_details", "predict_linear", "predict_logistic_proba"]

#: how the projected objective is regularised: the public eigenvalue floor alone, or the floor plus the adaptive
#: shrinkage of the released linear term (module docstring)
REGULARIZATIONS = ("floor", "adaptive")
#: the default per model, chosen from benchmarks/utility.py (docs/benchmarks_utility.md): adaptive wins most linear
#: cells; logistic keeps the floor (not measured there)
DEFAULT_REGULARIZATION = {"linear": "adaptive", "logistic": "floor"}


def default_regularization(model: str, mechanism: str) -> str:
    """The solve's default per model and mechanism, shared by in-process and networked fits: today the model's
    :data:`DEFAULT_REGULARIZATION` for every mechanism. Relaxed FM was measured for a floor-only default (issue 33,
    benchmarks/utility_gd.py): the floor was at least as good in only 8 and 10 of 25 cells on two split sets, so it
    keeps the adaptive solve; this is where a per-mechanism default goes."""
    del mechanism   # one default for every mechanism (measured; docstring)
    return DEFAULT_REGULARIZATION[model]


@dataclass(frozen=True)
class SolveResult:
    w: np.ndarray
    eigenvalues: np.ndarray
    n_floored: int
    lambda_floor: float
    fallback_used: bool = False


@dataclass(frozen=True)
class Intercept:
    """The public constant column of a released objective: its ``index`` in w and its exact ``curvature`` M_kk
    (c^2 for linear regression with the constant c: public because c and N are)."""

    index: int
    curvature: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.curvature) and self.curvature > 0):
            raise ConfigurationError(f"the intercept column's curvature must be > 0, got {self.curvature}")


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
                  fallback: str = "raise", regularization: str = "floor", alpha_noise_var: np.ndarray | None = None,
                  intercept: Intercept | None = None) -> SolveResult:
    """Closed-form minimiser through the projected eigendecomposition (spec §2.5).

    If fewer than ``min_pos`` eigenvalues exceed the floor, raise :class:`DegenerateNoisyObjective`
    (``fallback="raise"``) or use M_+ = lambda_floor I (``fallback="ridge"``). ``regularization="adaptive"``
    shrinks the released linear term by its estimated signal-to-noise ratio in M_hat's eigenbasis and needs
    ``alpha_noise_var``, the public noise variance of every entry of alpha. ``intercept``: leave that constant
    column unpenalised (the floor applies to the centred M' only; the result's ``eigenvalues`` are then M''s).
    """
    if lambda_floor < 0 or not np.isfinite(lambda_floor):
        raise ConfigurationError(f"lambda_floor must be finite and >= 0, got {lambda_floor}")
    if fallback not in ("raise", "ridge"):
        raise ConfigurationError(f"fallback must be 'raise' or 'ridge', got {fallback!r}")
    if regularization not in REGULARIZATIONS:
        raise ConfigurationError(f"regularization must be one of {', '.join(REGULARIZATIONS)}, got {regularization!r}")
    alpha = np.asarray(objective.alpha, dtype=float)
    noise_var = None
    if regularization == "adaptive":
        noise_var = np.asarray(alpha_noise_var if alpha_noise_var is not None else [], dtype=float)
        if noise_var.shape != alpha.shape or not np.all(np.isfinite(noise_var)) or np.any(noise_var < 0):
            raise ConfigurationError(f"regularization='adaptive' needs alpha_noise_var: {alpha.size} finite variances "
                                     ">= 0 (the mechanism's public noise on alpha)")
    if intercept is not None:
        return _solve_unpenalised_intercept(objective, intercept, lambda_floor=lambda_floor, min_pos=min_pos,
                                            fallback=fallback, alpha_noise_var=noise_var)
    s, Q = np.linalg.eigh(_symmetric(objective.M))
    if noise_var is not None and np.any(noise_var > 0):   # no noise: exactly the floor solve
        alpha = Q @ _wiener(Q.T @ alpha, (Q * Q).T @ noise_var)
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


def _wiener(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """p * p^2 / (p^2 + v): the plug-in Wiener shrinkage of noisy coordinates p with noise variances v (v = 0 keeps
    p)."""
    p2 = p * p
    total = p2 + v
    return np.where(total > 0, p * p2 / np.where(total > 0, total, 1.0), p)


def _solve_unpenalised_intercept(objective: QuadraticObjective, intercept: Intercept, *, lambda_floor: float,
                                 min_pos: int, fallback: str, alpha_noise_var: np.ndarray | None) -> SolveResult:
    """Minimise exactly over the intercept coordinate k (its public curvature M_kk), floor the centred rest."""
    M = _symmetric(objective.M)
    alpha = np.asarray(objective.alpha, dtype=float)
    k, m_kk = intercept.index, float(intercept.curvature)
    if not 0 <= k < M.shape[0]:
        raise ConfigurationError(f"intercept index {k} is outside the {M.shape[0]} coefficients")
    rest = np.delete(np.arange(M.shape[0]), k)
    m_xk = M[rest, k]
    w = np.empty(M.shape[0])
    if rest.size == 0:
        result = SolveResult(np.empty(0), np.empty(0), 0, lambda_floor)
    else:
        reduced = QuadraticObjective(0.0, alpha[rest] - alpha[k] * m_xk / m_kk,
                                     M[np.ix_(rest, rest)] - np.outer(m_xk, m_xk) / m_kk)
        var = None if alpha_noise_var is None else alpha_noise_var[rest]
        result = solve_details(reduced, lambda_floor=lambda_floor, min_pos=min_pos, fallback=fallback,
                               regularization="floor" if var is None else "adaptive", alpha_noise_var=var)
    w[rest] = result.w
    w[k] = -(alpha[k] + 2.0 * float(m_xk @ result.w)) / (2.0 * m_kk)
    return SolveResult(w, result.eigenvalues, result.n_floored, result.lambda_floor, result.fallback_used)


def solve(objective: QuadraticObjective, *, lambda_floor: float, min_pos: int = 1, fallback: str = "raise",
          regularization: str = "floor", alpha_noise_var: np.ndarray | None = None,
          intercept: Intercept | None = None) -> np.ndarray:
    """The minimiser w of the projected objective (see :func:`solve_details`)."""
    return solve_details(objective, lambda_floor=lambda_floor, min_pos=min_pos, fallback=fallback,
                         regularization=regularization, alpha_noise_var=alpha_noise_var, intercept=intercept).w


def predict_linear(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.asarray(X, dtype=float) @ w


def predict_logistic_proba(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    z = np.asarray(X, dtype=float) @ w
    return 0.5 * (1.0 + np.tanh(0.5 * z))   # numerically stable sigmoid
