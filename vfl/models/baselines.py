"""Comparison baselines (spec §5): noisy gradient descent, objective perturbation and AdaSSP (Wang 2018).

Both are centralized, scikit-learn style estimators working on the public ``l2`` domain ||x||_2 <= 1
(declared ``bounds`` map every column to [-1, 1], then the public factor 1/sqrt(d) bounds the row norm;
an intercept is the public constant column 1/sqrt(d)). Both expose ``privacy_report_``
(:class:`vfl.privacy.accounting.PrivacyReport`).

* :class:`NoisyGradientDescent` (Song, Chaudhuri & Sarwate 2013, as run by Tasnim et al. 2023; spec §5.1)::

      g_t = (1/N) sum_i clip_C(grad l(w_t; x_i, y_i)) + N(0, tau^2 I),   w_{t+1} = w_t - eta g_t,   w_0 = 0.

  Replace-one sensitivity of one step Delta = 2C/N. Logistic (y in {0, 1}) under D2 has
  ||grad|| = |sigmoid(w.x) - y| ||x|| <= 1, so C = 1 needs no clipping; the linear gradient
  2 (x.w - y) x is unbounded and is clipped at the public C. Accounting ``"exact"`` (default): T steps are
  one Gaussian mechanism with mu = sqrt(T) Delta / tau (Dong, Roth & Su 2022), tau = sqrt(T) Delta / mu*(eps,
  delta). ``"rdp"`` (paper-faithful, Mironov 2017): eps = rho + 2 sqrt(rho ln(1/delta)), rho = T Delta^2/(2 tau^2),
  solved for tau (more noise for the same eps); the report gives both values.

* :class:`ObjectivePerturbation` (Chaudhuri, Monteleoni & Sarwate 2011, Alg. 2; spec §5.2), logistic only.
  Labels are {0, 1} at the API and y_pm = 2y - 1 internally; l(z) = ln(1 + e^{-z}), c = 1/4, public Lambda > 0::

      eps'' = eps - 2 ln(1 + c/(N Lambda));  if eps'' > 0: Delta_r = 0
      else: Delta_r = c/(N (e^{eps/4} - 1)) - Lambda, eps'' = eps/2
      b ~ density prop. to exp(-(eps''/2) ||b||):  ||b|| ~ Gamma(d, 2/eps''), uniform direction
      w = argmin (1/N) sum l(y_i w.x_i) + (Lambda/2)||w||^2 + (1/N) b.w + (Delta_r/2)||w||^2

  Pure eps-DP only for the exact minimiser: Newton's method to gradient norm <= ``tol`` (1e-10).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vfl.exceptions import ConfigurationError, VFLError
from vfl.fm.domain import (
    BoundsLike,
    ColumnBounds,
    from_unit_interval_coefficients,
    prepare_labels,
    prepare_party_block,
    resolve_bounds,
)
from vfl.fm.objective import validate_model
from vfl.models.base import LinearModelBase, sigmoid
from vfl.models.estimators import finish_report
from vfl.privacy.accounting import (
    PrivacyReport,
    noisy_gd_epsilon_exact,
    noisy_gd_epsilon_rdp,
    noisy_gd_sigma_for,
)
from vfl.privacy.calibration import calibrate_mu, epsilon_of, validate_delta, validate_epsilon
from vfl.rng import RandomState, make_rng

__all__ = [
    "AdaSSP",
    "NoisyGradientDescent",
    "ObjectivePerturbation",
    "noisy_gd_sigma_rdp",
    "objective_perturbation_budget",
    "sample_objective_perturbation_noise",
]

LOGISTIC_C = 0.25   # Chaudhuri et al. 2011: |l''(z)| <= c = 1/4 for the logistic loss


# ------------------------------------------------------------------------------------------ helpers
def noisy_gd_sigma_rdp(epsilon: float, delta: float, steps: int, sensitivity: float) -> float:
    """tau such that the RDP bound rho + 2 sqrt(rho ln(1/delta)) equals eps (spec §5.1), rho = T Delta^2/(2 tau^2)."""
    eps = validate_epsilon(epsilon)
    log_inv = math.log(1.0 / validate_delta(delta))
    sqrt_rho = math.sqrt(log_inv + eps) - math.sqrt(log_inv)
    return sensitivity * math.sqrt(steps / 2.0) / sqrt_rho


def objective_perturbation_budget(epsilon: float, n_samples: int, regularization: float) -> tuple[float, float]:
    """(eps'', Delta_r) of Chaudhuri et al. 2011, Alg. 2, with c = 1/4 (spec §5.2)."""
    eps = validate_epsilon(epsilon)
    n = float(n_samples)
    eps_pp = eps - 2.0 * math.log1p(LOGISTIC_C / (n * regularization))
    if eps_pp > 0:
        return eps_pp, 0.0
    return eps / 2.0, LOGISTIC_C / (n * math.expm1(eps / 4.0)) - regularization


def sample_objective_perturbation_noise(n_features: int, eps_pp: float, rng: np.random.Generator) -> np.ndarray:
    """b with density prop. to exp(-(eps''/2)||b||): norm ~ Gamma(shape d, scale 2/eps''), uniform direction."""
    direction = rng.normal(size=n_features)
    direction /= np.linalg.norm(direction)
    return rng.gamma(shape=n_features, scale=2.0 / eps_pp) * direction


class _L2DomainEstimator(LinearModelBase):
    """Shared plumbing: public bounds -> l2 domain, intercept column, coefficients back in original units.

    ``fit_intercept=False``: the pure scaling x / max(|lo|, |hi|) (no hidden intercept, ``intercept_ = 0``).
    """

    _model = "logistic"

    def _finish_report(self) -> None:
        """Randomness source, fixed seed and data-derived bounds (spec pitfall 2) decide formal_dp."""
        finish_report(self.privacy_report_, self.random_state, [self.bounds_, getattr(self, "y_bounds_", None)],
                      ["the feature bounds", "the label bounds"])

    def _prepare(self, X, y, feature_names: Sequence[str] | None) -> tuple[np.ndarray, np.ndarray]:
        X, y, feature_names = self._validate_fit_input(X, y, feature_names)
        self.bounds_: ColumnBounds = resolve_bounds(self.bounds, X, feature_names)
        d = X.shape[1] + (1 if self.fit_intercept else 0)
        U, scale = prepare_party_block(X, bounds=self.bounds_, domain="l2", n_features_total=d, row_norm="scale",
                                       out_of_bounds=self.out_of_bounds, feature_names=feature_names,
                                       symmetric=not self.fit_intercept)
        self._col_scale = scale
        self._icpt_value = 1.0 / math.sqrt(d)
        if self.fit_intercept:
            U = np.hstack([U, np.full((U.shape[0], 1), self._icpt_value)])
        if self._model == "logistic":
            return U, y
        y_unit, self.y_bounds_ = prepare_labels(y, "linear", y_bounds=self.y_bounds, out_of_bounds=self.out_of_bounds,
                                                symmetric=not self.fit_intercept)
        return U, y_unit

    def _set_coefficients(self, w: np.ndarray) -> None:
        self.coef_unit_ = w
        p = self.n_features_in_
        coef, icpt = from_unit_interval_coefficients(w[:p], self.bounds_, self._col_scale,
                                                     symmetric=not self.fit_intercept)
        if self.fit_intercept:
            icpt += float(w[-1] * self._icpt_value)
        if self._model == "linear":
            lo, hi = float(self.y_bounds_.lower[0]), float(self.y_bounds_.upper[0])
            half = (hi - lo) / 2.0
            coef, icpt = half * coef, (lo + half * (1.0 + icpt) if self.fit_intercept else 0.0)
        self.coef_ = coef
        self.intercept_ = float(icpt)


# ------------------------------------------------------------------------------ noisy gradient descent
class NoisyGradientDescent(_L2DomainEstimator):
    """Full-batch noisy gradient descent (Song et al. 2013; spec §5.1), linear or logistic.

    Parameters: ``model`` ("linear" | "logistic"), ``epsilon``, ``delta``, ``steps`` T, ``learning_rate`` eta
    (default 1/L: 0.5 linear, 4 logistic, the smoothness bounds on D2), ``clip`` C (public; must be 1 for
    logistic, which needs no clipping), ``accounting`` ("exact" | "rdp"), ``bounds``, ``y_bounds`` (linear),
    ``fit_intercept``, ``out_of_bounds``, ``random_state``.
    """

    def __init__(self, *, model: str = "logistic", epsilon: float = 1.0, delta: float = 1e-5, steps: int = 100,
                 learning_rate: float | None = None, clip: float = 1.0, accounting: str = "exact",
                 bounds: BoundsLike | ColumnBounds = None, y_bounds: tuple[float, float] | None = None,
                 fit_intercept: bool = True, out_of_bounds: str = "raise", random_state: RandomState = None) -> None:
        self.model = model
        self.epsilon = epsilon
        self.delta = delta
        self.steps = steps
        self.learning_rate = learning_rate
        self.clip = clip
        self.accounting = accounting
        self.bounds = bounds
        self.y_bounds = y_bounds
        self.fit_intercept = fit_intercept
        self.out_of_bounds = out_of_bounds
        self.random_state = random_state

    def _per_row_gradients(self, U: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        z = U @ w
        if self._model == "logistic":
            return (sigmoid(z) - y)[:, None] * U          # norm <= 1 on D2: never clipped
        G = (2.0 * (z - y))[:, None] * U
        norms = np.linalg.norm(G, axis=1)
        return G * np.minimum(1.0, self.clip / np.maximum(norms, np.finfo(float).tiny))[:, None]

    def fit(self, X: np.ndarray, y: np.ndarray, feature_names: Sequence[str] | None = None) -> NoisyGradientDescent:
        """Run T noisy full-batch gradient steps from w_0 = 0. Returns self."""
        self._model = validate_model(self.model)
        eps = validate_epsilon(self.epsilon)
        delta = validate_delta(self.delta)
        steps = int(self.steps)
        if steps < 1:
            raise ConfigurationError(f"steps must be >= 1, got {self.steps}")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ConfigurationError(f"clip must be a finite number > 0, got {self.clip}")
        if self._model == "logistic" and self.clip != 1.0:
            raise ConfigurationError("logistic noisy GD on ||x|| <= 1 has gradient norm <= 1: use clip=1.0")
        if self.accounting not in ("exact", "rdp"):
            raise ConfigurationError(f"accounting must be 'exact' or 'rdp', got {self.accounting!r}")
        U, y_in = self._prepare(X, y, feature_names)
        n, d = U.shape
        sensitivity = 2.0 * self.clip / n
        if self.accounting == "exact":
            tau = noisy_gd_sigma_for(eps, delta, steps, sensitivity)
        else:
            tau = noisy_gd_sigma_rdp(eps, delta, steps, sensitivity)
        eta = self.learning_rate if self.learning_rate is not None else (0.5 if self._model == "linear" else 4.0)
        if not (math.isfinite(eta) and eta > 0):
            raise ConfigurationError(f"learning_rate must be a finite number > 0, got {eta}")
        rng = make_rng(self.random_state)
        w = np.zeros(d)
        for _ in range(steps):
            if self._model == "logistic":   # ||grad|| <= 1 on D2: no clipping, no per-row gradient matrix
                mean_grad = U.T @ (sigmoid(U @ w) - y_in) / n
            else:
                mean_grad = self._per_row_gradients(U, y_in, w).mean(axis=0)
            g = mean_grad + rng.normal(0.0, tau, size=d)
            w = w - eta * g
        self.noise_std_ = tau
        self.sensitivity_ = sensitivity
        self._set_coefficients(w)
        eps_exact = noisy_gd_epsilon_exact(steps, sensitivity, tau, delta)
        eps_rdp = noisy_gd_epsilon_rdp(steps, sensitivity, tau, delta)
        self.privacy_report_ = PrivacyReport(
            "noisy-gd", self._model, eps, eps_exact, delta, domain="l2 (||x||_2 <= 1)",
            calibration=f"{self.accounting} accounting over T={steps} Gaussian steps",
            sensitivities={"L2 per step (2C/N)": sensitivity}, noise_scales={"tau": tau},
            notes=["T-fold composition is one Gaussian mechanism with mu = sqrt(T) Delta/tau (exact epsilon)",
                   f"RDP bound (Mironov 2017, optimal order) for the same noise: epsilon = {eps_rdp:.4g}"],
            extra={"steps": steps, "learning_rate": eta, "clip": self.clip, "epsilon_exact": eps_exact,
                   "epsilon_rdp": eps_rdp},
        )
        self._finish_report()
        return self


# --------------------------------------------------------------------------- objective perturbation
class ObjectivePerturbation(_L2DomainEstimator):
    """Objective perturbation for logistic regression (Chaudhuri et al. 2011, Alg. 2; spec §5.2), pure eps-DP.

    Parameters: ``epsilon``, ``regularization`` Lambda > 0 (public), ``bounds``, ``fit_intercept``,
    ``out_of_bounds``, ``tol`` (gradient norm of the exact minimiser, default 1e-10), ``max_iter``,
    ``random_state``. Labels in {0, 1}.
    """

    _model = "logistic"

    def __init__(self, *, epsilon: float = 1.0, regularization: float = 1e-3, bounds: BoundsLike | ColumnBounds = None,
                 fit_intercept: bool = True, out_of_bounds: str = "raise", tol: float = 1e-10, max_iter: int = 200,
                 random_state: RandomState = None) -> None:
        self.epsilon = epsilon
        self.regularization = regularization
        self.bounds = bounds
        self.fit_intercept = fit_intercept
        self.out_of_bounds = out_of_bounds
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state

    @staticmethod
    def _objective_parts(U: np.ndarray, y_pm: np.ndarray, w: np.ndarray, ridge: float, b: np.ndarray
                         ) -> tuple[float, np.ndarray, np.ndarray]:
        """Value, gradient and Hessian of (1/N) sum ln(1 + e^{-y w.x}) + (ridge/2)||w||^2 + (1/N) b.w."""
        n = U.shape[0]
        m = y_pm * (U @ w)
        value = float(np.mean(np.logaddexp(0.0, -m)) + 0.5 * ridge * (w @ w) + (b @ w) / n)
        s = sigmoid(-m)                               # -l'(m)
        grad = -(U.T @ (y_pm * s)) / n + ridge * w + b / n
        curv = s * (1.0 - s)
        hess = (U.T * curv) @ U / n + ridge * np.eye(w.size)
        return value, grad, hess

    def fit(self, X: np.ndarray, y: np.ndarray, feature_names: Sequence[str] | None = None) -> ObjectivePerturbation:
        """Draw b, then minimise the perturbed objective exactly (Newton with backtracking). Returns self."""
        eps = validate_epsilon(self.epsilon)
        lam = float(self.regularization)
        if not (math.isfinite(lam) and lam > 0):
            raise ConfigurationError(f"regularization (Lambda) must be a finite number > 0, got {self.regularization}")
        U, y01 = self._prepare(X, y, feature_names)
        y_pm = 2.0 * y01 - 1.0                          # spec pitfall 5: {0,1} at the API, {-1,+1} inside
        n, d = U.shape
        eps_pp, delta_r = objective_perturbation_budget(eps, n, lam)
        rng = make_rng(self.random_state)
        b = sample_objective_perturbation_noise(d, eps_pp, rng)
        ridge = lam + delta_r
        w = np.zeros(d)
        value, grad, hess = self._objective_parts(U, y_pm, w, ridge, b)
        it = 0
        for it in range(int(self.max_iter)):  # noqa: B007 (it is read after the loop)
            if np.linalg.norm(grad) <= self.tol:
                break
            step = np.linalg.solve(hess, grad)
            t = 1.0
            while True:
                w_new = w - t * step
                v_new, g_new, h_new = self._objective_parts(U, y_pm, w_new, ridge, b)
                # Armijo on the value, or (near the optimum, where value decreases fall below float resolution)
                # a decrease of the gradient norm: the objective is strictly convex (ridge > 0), so both are safe.
                armijo = v_new <= value - 1e-4 * t * (grad @ step)
                if armijo or np.linalg.norm(g_new) < np.linalg.norm(grad) or t < 1e-12:
                    break
                t *= 0.5
            w, value, grad, hess = w_new, v_new, g_new, h_new
        else:
            it = int(self.max_iter)
        if np.linalg.norm(grad) > self.tol:
            raise VFLError(f"objective perturbation: Newton did not reach gradient norm {self.tol:g} in "
                           f"{self.max_iter} iterations; the guarantee needs the exact minimiser")
        self.n_iter_ = it
        self._set_coefficients(w)
        self.privacy_report_ = PrivacyReport(
            "objective-perturbation", "logistic", eps, eps, None, domain="l2 (||x||_2 <= 1)",
            calibration="Chaudhuri et al. 2011 Alg. 2 (c = 1/4)",
            noise_scales={"epsilon_pp": eps_pp, "gamma_scale": 2.0 / eps_pp},
            notes=["pure epsilon-DP for the exact minimiser (solved to gradient norm <= tol)",
                   "labels {0,1} mapped to {-1,+1} internally"],
            extra={"regularization": lam, "Delta_r": delta_r, "tol": self.tol},
        )
        self._finish_report()
        return self


# ------------------------------------------------------------------------------------------------ AdaSSP
ADASSP_FAILURE_PROBABILITY = 0.05   # rho of Wang 2018, Alg. 2


class AdaSSP(_L2DomainEstimator):
    """AdaSSP: sufficient statistics perturbation with an adaptive ridge (Wang 2018, Alg. 2), linear regression.

    On the public l2 domain (||x|| <= 1, |y| <= 1 after the declared ``bounds`` / ``y_bounds``; the intercept is
    the constant column 1/sqrt(d)) it releases three Gaussian quantities of the training set (sum form)::

        lmin~ = max(lambda_min(X^T X) + s_l z - s_l sqrt(log(6/delta)), 0)
        lambda = max(0, sqrt(d log(2 d^2 / rho)) s_M - lmin~)                     (rho = 0.05)
        XtX~ = X^T X + s_M Z  (Z symmetric, N(0, 1) on and above the diagonal),  Xty~ = X^T y + s_a z'
        theta = (XtX~ + lambda I)^+ Xty~   (pseudo-inverse; lambda > 0 almost always)

    Privacy accounting (replace one row, as everywhere in vfl): the L2 sensitivities are Delta_l = 1 (Weyl),
    Delta_M = sqrt(2) (||x x^T - x' x'^T||_F), Delta_a = 2; Wang splits the budget in three equal parts, here in
    the exact form of the analytic Gaussian mechanism (Balle & Wang 2018): s_j = Delta_j sqrt(3) / mu*(eps,
    delta), so the three releases together are one Gaussian mechanism with mu = mu*(eps, delta) (tighter than
    Wang's classical eps/3, delta/3 calibration, same structure).

    Parameters: ``epsilon``, ``delta``, ``bounds``, ``y_bounds``, ``fit_intercept``, ``out_of_bounds``,
    ``random_state``. Attributes: ``coef_``, ``intercept_``, ``ridge_`` (lambda), ``privacy_report_``.
    """

    _model = "linear"

    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-5, bounds: BoundsLike | ColumnBounds = None,
                 y_bounds: tuple[float, float] | None = None, fit_intercept: bool = True,
                 out_of_bounds: str = "raise", random_state: RandomState = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.y_bounds = y_bounds
        self.fit_intercept = fit_intercept
        self.out_of_bounds = out_of_bounds
        self.random_state = random_state

    @staticmethod
    def noise_scales(epsilon: float, delta: float) -> dict[str, float]:
        """s_lambda, s_M, s_alpha of the three releases (sum form, unit domain): Delta_j sqrt(3) / mu*."""
        mu = calibrate_mu(epsilon, delta)
        sens = ADASSP_SENSITIVITIES
        return {k: v * math.sqrt(len(sens)) / mu for k, v in sens.items()}

    def fit(self, X: np.ndarray, y: np.ndarray, feature_names: Sequence[str] | None = None) -> AdaSSP:
        """Release lambda_min, X^T X and X^T y with Gaussian noise and solve the adaptive ridge. Returns self."""
        eps = validate_epsilon(self.epsilon)
        delta = validate_delta(self.delta)
        U, y_unit = self._prepare(X, y, feature_names)
        d = U.shape[1]
        s = self.noise_scales(eps, delta)
        rng = make_rng(self.random_state)
        gram = U.T @ U
        lmin = float(np.linalg.eigvalsh(gram)[0])
        lmin_noisy = max(lmin + s["lambda_min"] * rng.normal() - s["lambda_min"] * math.sqrt(math.log(6.0 / delta)),
                         0.0)
        ridge = max(0.0, math.sqrt(d * math.log(2.0 * d * d / ADASSP_FAILURE_PROBABILITY)) * s["XtX"] - lmin_noisy)
        upper = np.triu(rng.normal(0.0, s["XtX"], size=(d, d)))
        gram_noisy = gram + upper + np.triu(upper, 1).T
        xty_noisy = U.T @ y_unit + rng.normal(0.0, s["Xty"], size=d)
        w = np.linalg.pinv(gram_noisy + ridge * np.eye(d), hermitian=True) @ xty_noisy
        self.ridge_ = ridge
        self._set_coefficients(w)
        mu = math.sqrt(sum((ADASSP_SENSITIVITIES[k] / s[k]) ** 2 for k in s))
        self.privacy_report_ = PrivacyReport(
            "adassp", "linear", eps, epsilon_of(mu, delta), delta, domain="l2 (||x||_2 <= 1)",
            calibration="analytic Gaussian calibration (Balle & Wang 2018), joint over the three releases of AdaSSP "
                        "(Wang 2018, Alg. 2), equal shares",
            sensitivities={f"L2 {k} (sum form)": v for k, v in ADASSP_SENSITIVITIES.items()},
            noise_scales={f"s_{k}": v for k, v in s.items()},
            notes=["three Gaussian releases (lambda_min, X^T X, X^T y) composed exactly: mu = sqrt(sum (Delta/s)^2)"],
            extra={"ridge": ridge, "mu": mu, "rho": ADASSP_FAILURE_PROBABILITY},
        )
        self._finish_report()
        return self


ADASSP_SENSITIVITIES = {"lambda_min": 1.0, "XtX": math.sqrt(2.0), "Xty": 2.0}
