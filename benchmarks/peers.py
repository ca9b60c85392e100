"""Private linear-regression peers for the utility benchmarks (issue 33): centralised, numpy only, not in the package.

Every peer works on the public unit domain that vfl uses: a row u with ||u||_2 <= 1 (the declared bounds map each
column to [-1, 1]; then either the public scaling 1/sqrt(d), ``row_norm="scale"``, or a clip of the feature part to
its public radius sqrt((d-1)/d), ``row_norm="clip"``), the intercept the constant column 1/sqrt(d), the label mapped
by its declared bounds to y in [-1, 1]. Neighbouring data sets differ by replacing one row (as everywhere in vfl),
so on this domain the L2 sensitivities of the sum-form statistics are Delta(X^T X) = sqrt(2) (Frobenius norm of
u u^T - u' u'^T), Delta(X^T y) = 2 and Delta(lambda_min(X^T X)) = 1 (Weyl). Gaussian releases are calibrated by
the analytic Gaussian mechanism (Balle & Wang 2018; :func:`vfl.privacy.calibration.calibrate_mu`): k releases with
equal shares get noise s_j = Delta_j sqrt(k) / mu*(epsilon, delta), so together they are one Gaussian mechanism
with mu = mu*(epsilon, delta), i.e. (epsilon, delta)-DP. The benchmarks use delta = 1e-5 for every method.

* :func:`adassp`: AdaSSP (Wang 2018, "Revisiting differentially private linear regression", Alg. 2), optionally
  with the intercept left out of the adaptive ridge (``free`` = the intercept's index);
* :func:`ssp_ridge`: sufficient statistics perturbation (Vu & Slavkovic 2009; Wang 2018, Sec. 3, "SSP") with a
  public, data-independent ridge;
* :func:`noisy_gd_linear`: per-row clipped noisy gradient descent (Song, Chaudhuri & Sarwate 2013), the algorithm
  of :class:`vfl.models.baselines.NoisyGradientDescent` with the same draws, computed without the n x d matrix of
  per-row gradients (it is the benchmark's slowest peer at n = 10^5);
* :func:`objective_perturbation_linear`: objective perturbation with Gaussian noise (Kifer, Smith & Thakurta 2012,
  Thm. 2; the objective perturbation of Chaudhuri, Monteleoni & Sarwate 2011 made (epsilon, delta) and constrained).

The logistic peers are the package's own baselines (:class:`vfl.models.baselines.ObjectivePerturbation`, Chaudhuri,
Monteleoni & Sarwate 2011, Alg. 2, and :class:`vfl.models.baselines.NoisyGradientDescent`).
"""

from __future__ import annotations

import math

import numpy as np

from vfl.privacy.accounting import noisy_gd_sigma_for
from vfl.privacy.calibration import calibrate_mu

__all__ = ["adassp", "ssp_ridge", "objective_perturbation_linear", "noisy_gd_linear", "ridge_bound",
           "trust_region_solve"]

#: failure probability rho of Wang 2018, Alg. 2 (the bound on the operator norm of the symmetric noise)
RHO = 0.05
#: sensitivities (replace one row, sum form) on the unit domain (module docstring)
SENS_LMIN, SENS_M, SENS_A = 1.0, math.sqrt(2.0), 2.0


def ridge_bound(d: int, s_m: float) -> float:
    """sqrt(d log(2 d^2 / rho)) s_M: with probability >= 1 - rho a bound on the operator norm of the symmetric
    Gaussian noise of scale s_M on X^T X (Wang 2018, Alg. 2's ridge before subtracting lambda_min)."""
    return math.sqrt(d * math.log(2.0 * d * d / RHO)) * s_m


def _symmetric_noise(d: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    upper = np.triu(rng.normal(0.0, scale, size=(d, d)))
    return upper + np.triu(upper, 1).T


def adassp(U: np.ndarray, y: np.ndarray, epsilon: float, delta: float, rng: np.random.Generator,
           free: int | None = None) -> np.ndarray:
    """AdaSSP (Wang 2018, Alg. 2) on the unit domain; returns w (unit domain).

    Releases, with equal shares of one Gaussian budget (s_j = Delta_j sqrt(3) / mu*, module docstring)::

        lmin~ = max(lambda_min(X^T X) + s_l z - s_l sqrt(log(6/delta)), 0)
        lambda = max(0, sqrt(d log(2 d^2/rho)) s_M - lmin~)
        theta = (X^T X + s_M Z + lambda P)^+ (X^T y + s_a z')

    with P = I (Wang's AdaSSP; the draws in the order of vfl.models.baselines.AdaSSP, so the same generator gives the
    same fit) or, with ``free`` = the intercept's column, P = I minus that diagonal entry: the intercept is not
    shrunk (post-processing of the same three releases, so the same (epsilon, delta)).
    """
    n, d = U.shape
    mu = calibrate_mu(epsilon, delta)
    s_l, s_m, s_a = (sens * math.sqrt(3.0) / mu for sens in (SENS_LMIN, SENS_M, SENS_A))
    gram = U.T @ U
    lmin = float(np.linalg.eigvalsh(gram)[0])
    lmin_noisy = max(lmin + s_l * rng.normal() - s_l * math.sqrt(math.log(6.0 / delta)), 0.0)
    ridge = max(0.0, ridge_bound(d, s_m) - lmin_noisy)
    gram_noisy = gram + _symmetric_noise(d, s_m, rng)
    xty_noisy = U.T @ y + rng.normal(0.0, s_a, size=d)
    penalty = np.ones(d)
    if free is not None:
        penalty[free] = 0.0
    return np.linalg.pinv(gram_noisy + ridge * np.diag(penalty), hermitian=True) @ xty_noisy


def ssp_ridge(U: np.ndarray, y: np.ndarray, epsilon: float, delta: float, rng: np.random.Generator) -> np.ndarray:
    """SSP with a public ridge (Vu & Slavkovic 2009; Wang 2018, Sec. 3) on the unit domain; returns w.

    Two Gaussian releases with equal shares (s_j = Delta_j sqrt(2) / mu*): X^T X + s_M Z (Z symmetric) and
    X^T y + s_a z'. The ridge is public and data-independent, lambda = sqrt(d log(2 d^2/rho)) s_M (rho = 0.05): the
    bound on ||s_M Z||_op that AdaSSP starts from, so that the released matrix plus lambda I is positive
    semi-definite with probability >= 1 - rho without spending budget on lambda_min. theta = (X^T X~ + lambda I)^+
    X^T y~.
    """
    d = U.shape[1]
    mu = calibrate_mu(epsilon, delta)
    s_m, s_a = (sens * math.sqrt(2.0) / mu for sens in (SENS_M, SENS_A))
    gram_noisy = U.T @ U + _symmetric_noise(d, s_m, rng)
    xty_noisy = U.T @ y + rng.normal(0.0, s_a, size=d)
    return np.linalg.pinv(gram_noisy + ridge_bound(d, s_m) * np.eye(d), hermitian=True) @ xty_noisy


def trust_region_solve(A: np.ndarray, g: np.ndarray, radius: float) -> np.ndarray:
    """argmin_{||w|| <= radius} w^T A w / 2 - g^T w for symmetric positive definite A (eigenbasis + bisection on
    the multiplier nu of ||(A + nu I)^-1 g|| = radius; the exact minimiser to relative accuracy 1e-12)."""
    lam, V = np.linalg.eigh(A)
    c = V.T @ g

    def norm(nu: float) -> float:
        return float(np.linalg.norm(c / (lam + nu)))

    if norm(0.0) <= radius:
        return V @ (c / lam)
    lo, hi = 0.0, float(np.linalg.norm(g)) / radius   # norm(hi) <= ||g|| / hi = radius
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if norm(mid) > radius:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return V @ (c / (lam + hi))


def objective_perturbation_linear(U: np.ndarray, y: np.ndarray, epsilon: float, delta: float,
                                  rng: np.random.Generator, radius: float = 2.0) -> np.ndarray:
    """Objective perturbation for least squares (Kifer, Smith & Thakurta 2012, Thm. 2, Gaussian noise); returns w.

    Loss l(w; u, y) = (u.w - y)^2 / 2 on the public set F = {||w|| <= R}: its gradient (u.w - y) u has norm at most
    zeta = R + 1 (||u|| <= 1, |y| <= 1), its Hessian u u^T has rank 1 and eigenvalue at most lambda = 1. With
    Delta >= 2 lambda / epsilon and b ~ N(0, zeta^2 (8 log(2/delta) + 4 epsilon) / epsilon^2 I_d), the exact
    minimiser over F of

        sum_i l(w; u_i, y_i) + (Delta/2) ||w||^2 + b.w

    is (epsilon, delta)-DP for data sets that differ in one row (Kifer et al. 2012, Thm. 2). It is a trust-region
    problem: A = X^T X + Delta I, g = X^T y - b (:func:`trust_region_solve`). R is public (default 2, not tuned on
    any data).
    """
    d = U.shape[1]
    zeta = radius + 1.0
    reg = 2.0 / epsilon
    sigma = zeta * math.sqrt(8.0 * math.log(2.0 / delta) + 4.0 * epsilon) / epsilon
    b = rng.normal(0.0, sigma, size=d)
    return trust_region_solve(U.T @ U + reg * np.eye(d), U.T @ y - b, radius)


def noisy_gd_linear(U: np.ndarray, y: np.ndarray, epsilon: float, delta: float, rng: np.random.Generator,
                    steps: int = 100, clip: float = 1.0, learning_rate: float = 0.5) -> np.ndarray:
    """Noisy gradient descent for least squares with per-row clipping (Song, Chaudhuri & Sarwate 2013); returns w.

        g_t = (1/N) sum_i clip_C(2 (u_i.w_t - y_i) u_i) + N(0, tau^2 I),   w_{t+1} = w_t - eta g_t,   w_0 = 0.

    Replace-one sensitivity of one step 2C/N; the T steps are one Gaussian mechanism with mu = sqrt(T) Delta / tau,
    tau = sqrt(T) Delta / mu*(epsilon, delta) (Dong, Roth & Su 2022; :func:`vfl.privacy.accounting.
    noisy_gd_sigma_for`), as in vfl.models.baselines.NoisyGradientDescent (same defaults, same draws). The per-row
    gradient 2 r_i u_i has norm 2 |r_i| ||u_i||, so the clipped sum is U^T (2 r_i min(1, C / (2 |r_i| ||u_i||))).
    """
    n, d = U.shape
    tau = noisy_gd_sigma_for(epsilon, delta, steps, 2.0 * clip / n)
    row_norms = np.linalg.norm(U, axis=1)
    tiny = np.finfo(float).tiny
    w = np.zeros(d)
    for _ in range(steps):
        r = 2.0 * (U @ w - y)
        factor = np.minimum(1.0, clip / np.maximum(np.abs(r) * row_norms, tiny))
        w = w - learning_rate * (U.T @ (r * factor) / n + rng.normal(0.0, tau, size=d))
    return w
