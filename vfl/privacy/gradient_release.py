"""Noisy-gradient release of the FM objective: T rounds of projected gradient descent with Gaussian noise.

The FM objective (average form, :mod:`vfl.fm.objective`) is f(w) = beta + alpha^T w + w^T M w, so its gradient is
g(w) = alpha + 2 M w = (1/N) sum_i g_i(w) with one term per row:

* linear regression: g_i(w) = 2 x_i (x_i^T w - y_i);
* logistic regression (order-2 Taylor form, Zhang et al. 2012): g_i(w) = x_i (1/2 - y_i) + (1/4) x_i x_i^T w.

Instead of the d x d matrix M this releases d-vectors (Bassily, Smith & Thakurta 2014, noisy projected gradient
descent; Song, Chaudhuri & Sarwate 2013)::

    w_0 = 0,   g~_t = g(w_t) + N(0, sigma^2 I),   w_{t+1} = Pi_R(w_t - eta g~_t),   w^ = (1/T) sum_{t=1..T} w_t

with Pi_R the projection on the public ball ||w|| <= R, a public step size eta = 1/L (L = 2 lambda_max(M) <= 2 for
linear, 1/4 for logistic on the l2 domain), and the average of the iterates (Polyak averaging) as the model. Every
w_t is post-processing of the earlier noisy gradients, so releasing all iterates costs nothing more.

**Sensitivity of one round** (replace one row, the library's neighbouring relation; l2 domain ||x|| <= 1, |y| <= 1
for linear, y in {0, 1} for logistic, and ||w_t|| <= R by the projection). For rows (x, y), (x', y')::

    linear:   ||g_i - g_i'|| <= 2 ||(x x^T - x' x'^T) w|| + 2 ||x y - x' y'|| <= 2R + 4
    logistic: ||g_i - g_i'|| <= (1/4) ||(x x^T - x' x'^T) w|| + ||x (1/2 - y) - x' (1/2 - y')|| <= R/4 + 1

(x x^T - x' x'^T is a difference of two PSD matrices of operator norm <= 1, so its operator norm is <= 1), hence
Delta = (2R + 4)/N and (R/4 + 1)/N in average form. No per-row clipping is needed, which is what makes the release
computable across vertically split parties: M w_t needs only the cross-party products X_A^T (X_B w_B).

**Composition.** T adaptive Gaussian rounds of sensitivity Delta and std sigma are one Gaussian mechanism with
mu = sqrt(T) Delta / sigma (Dong, Roth & Su 2022, Cor. 3.3), so sigma = sqrt(T) Delta / mu*(eps, delta) with mu* of
:func:`vfl.privacy.calibration.calibrate_mu` (the exact conversion of Balle & Wang 2018) -- the same accountant as
:class:`vfl.models.baselines.NoisyGradientDescent`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.fm.objective import QuadraticObjective, validate_model
from vfl.privacy.accounting import PrivacyReport, noisy_gd_epsilon_exact, noisy_gd_sigma_for
from vfl.privacy.calibration import validate_delta, validate_epsilon

__all__ = ["GradientRelease", "round_sensitivity", "step_size", "run_noisy_gradient", "objective_gradient",
           "DEFAULT_STEPS", "DEFAULT_RADIUS", "project_ball", "GD_MECHANISMS", "GD_OPTIONS"]

#: public defaults (docs/privacy.md, "Choosing the release"): T rounds and the iterate radius R of the unit domain
DEFAULT_STEPS = 25
DEFAULT_RADIUS = 1.0
#: the networked mechanism name (vfl.protocols.gd_phase) and its public options (RunSettings.mechanism_options)
GD_MECHANISMS = ("noisy-gd",)
GD_OPTIONS = ("steps", "iterate_radius", "learning_rate")


def round_sensitivity(model: str, radius: float, n_samples: int) -> float:
    """L2 sensitivity of one round's average gradient (module docstring): (2R + 4)/N linear, (R/4 + 1)/N logistic."""
    model = validate_model(model)
    per_row = 2.0 * radius + 4.0 if model == "linear" else radius / 4.0 + 1.0
    return per_row / n_samples


def step_size(model: str) -> float:
    """eta = 1/L with L = 2 lambda_max(M) bounded on the l2 domain: 1/2 (linear, M = X^T X / N), 4 (logistic)."""
    return 0.5 if validate_model(model) == "linear" else 4.0


def objective_gradient(objective: QuadraticObjective) -> Callable[[np.ndarray], np.ndarray]:
    """w -> alpha + 2 M w of an exact (noise-free) objective: the in-process gradient oracle."""
    alpha, M2 = objective.alpha, 2.0 * objective.M
    return lambda w: alpha + M2 @ w


def project_ball(w: np.ndarray, radius: float) -> np.ndarray:
    """Pi_R: the Euclidean projection on the public ball ||w|| <= R."""
    norm = float(np.linalg.norm(w))
    return w * (radius / norm) if norm > radius else w


def run_noisy_gradient(gradient: Callable[[np.ndarray], np.ndarray], n_features: int, *, steps: int, eta: float,
                       radius: float, sigma: float, rng: np.random.Generator,
                       noise: Callable[[int], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(average iterate w^, last iterate) of T noisy projected gradient steps from w_0 = 0 (module docstring).

    ``gradient`` is the exact gradient oracle (in-process: :func:`objective_gradient`); the noise is added here:
    N(0, sigma^2 I) from ``rng``, or ``noise(t)`` if given (the networked phase's recorded draws, in tests).
    """
    w = np.zeros(n_features)
    total = np.zeros(n_features)
    for t in range(steps):
        e = rng.normal(0.0, sigma, size=n_features) if noise is None else noise(t)
        w = project_ball(w - eta * (gradient(w) + e), radius)
        total += w
    return total / steps, w


@dataclass
class GradientRelease:
    """The public parameters of one noisy-gradient release and its calibration (module docstring)."""

    model: str
    n_samples: int
    n_features: int
    epsilon: float
    delta: float
    steps: int = DEFAULT_STEPS
    radius: float = DEFAULT_RADIUS
    notes: list[str] = field(default_factory=list)
    #: public step size eta; None: 1/L (:func:`step_size`). Any eta > 0 keeps the guarantee (the iterates are
    #: post-processing); a larger one than 1/L may diverge to the ball's surface
    learning_rate: float | None = None

    def __post_init__(self) -> None:
        self.model = validate_model(self.model)
        self.epsilon = validate_epsilon(self.epsilon)
        self.delta = validate_delta(self.delta)
        if isinstance(self.steps, bool) or not isinstance(self.steps, (int, np.integer)) or self.steps < 1:
            raise ConfigurationError(f"steps must be an integer >= 1, got {self.steps!r}")
        if not (isinstance(self.radius, (int, float)) and math.isfinite(self.radius) and self.radius > 0):
            raise ConfigurationError(f"iterate_radius must be a finite number > 0, got {self.radius!r}")
        if self.n_samples < 1:
            raise ConfigurationError("the release needs at least one row")
        lr = self.learning_rate
        if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr)
                               or lr <= 0):
            raise ConfigurationError(f"learning_rate must be a finite number > 0, got {lr!r}")

    @property
    def sensitivity(self) -> float:
        return round_sensitivity(self.model, float(self.radius), self.n_samples)

    @property
    def eta(self) -> float:
        return step_size(self.model) if self.learning_rate is None else float(self.learning_rate)

    @property
    def sigma(self) -> float:
        """Per-round noise std: sqrt(T) Delta / mu*(eps, delta)."""
        return noisy_gd_sigma_for(self.epsilon, self.delta, int(self.steps), self.sensitivity)

    def run(self, gradient: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator) -> np.ndarray:
        """The released model w^ (average iterate) for the exact gradient oracle ``gradient``."""
        w_avg, _ = run_noisy_gradient(gradient, self.n_features, steps=int(self.steps), eta=self.eta,
                                      radius=float(self.radius), sigma=self.sigma, rng=rng)
        return w_avg

    def privacy_report(self) -> PrivacyReport:
        eps = noisy_gd_epsilon_exact(int(self.steps), self.sensitivity, self.sigma, self.delta)
        form = "(2R + 4)/N" if self.model == "linear" else "(R/4 + 1)/N"
        return PrivacyReport(
            "noisy-gd", self.model, self.epsilon, eps, self.delta, domain="l2 (||x||_2 <= 1)",
            calibration=f"T = {self.steps} Gaussian rounds composed as one Gaussian mechanism, mu = sqrt(T) "
                        "Delta / sigma (Dong, Roth & Su 2022); analytic calibration (Balle & Wang 2018)",
            sensitivities={f"L2 per round {form}": self.sensitivity},
            noise_scales={"sigma": self.sigma},
            notes=["noisy projected gradient descent on the FM objective (Bassily, Smith & Thakurta 2014): the "
                   "released gradients are d-vectors alpha + 2 M w_t; iterates are post-processing",
                   *self.notes],
            extra={"steps": int(self.steps), "iterate_radius": float(self.radius), "learning_rate": self.eta,
                   # Gaussian-DP mu of the T rounds (Dong, Roth & Su 2022, Cor. 3.3): the ledger composes with it
                   "mu": math.sqrt(int(self.steps)) * self.sensitivity / self.sigma,
                   "averaging": "mean of w_1..w_T"},
        )
