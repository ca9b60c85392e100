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

**Against a hostile co-party** (networked form, :mod:`vfl.protocols.gd_rounds`; party P = A or the label owner
B, co-party Q). There g = c (X^T v_P + X^T v_Q) per block, where v_P = s X_P w_P + l (P's operand: s = 1, c = 2/N
linear; s = 1/4, c = 1/N logistic; l = -y resp. 1/2 - y at B, |l| <= lam_P with lam_B = 1 resp. 1/2, lam_A = 0) and
v_Q is **Q's choice**: Q may encrypt any operand its encoder accepts, |v_Q,i| <= b per row (b = max_l b_l, the
common scale of the plan's layout, value bound 1 on v/b), and answer P's request with any rows ||z_i|| <= r_Q. The
(2R + 4)/N above assumed v_Q = s X_Q w_Q with the same w in the ball; a hostile Q is not bound by it. Fix Q's row
(z, q = v_Q,i) and replace P's part (u, l) of row i by (u', l') (||u||, ||u'|| <= r_P; Q's own term X_Q^T v_Q does
not move). The row's contribution to the released gradient moves, per block, by::

    block P:  s (u u^T - u' u'^T) w_P + u (l + q) - u' (l' + q)   <= s r_P^2 R + 2 r_P (b + lam_P)
    block Q:  z (s (u - u')^T w_P + l - l')                          <= r_Q (2 s r_P R + 2 lam_P)

(||w_P|| <= R; the last two terms of block P by the triangle inequality, |l + q| <= b + lam_P), so against P::

    Delta_P = c_1 sqrt((s r_P^2 R + 2 r_P (b + lam_P))^2 + (2 r_Q (s r_P R + lam_P))^2) / N,   c_1 = 2 / 1

from public facts only (R, r_A, r_B, N, the model). It covers the honest co-party (|s z^T w_Q + l_Q| <= b_Q <= b).
Each party's unknown noise is its own draw (std sigma); the coordinator sees two draws (2 sigma^2) and a full row's
change. With ``party_radii`` set (the networked release) sigma is calibrated to
Delta* = max(Delta_A, Delta_B, Delta/sqrt(2)), so epsilon holds against either party whatever the other encrypts
inside the layout, and against the coordinator with noise sqrt(2) sigma and max(Delta, Delta_A, Delta_B). What
this does **not** cover: an operand outside the layout's per-row bound that the slot and magnitude checks still
pass (crafted ciphertexts, or a responder's rows beyond r_Q; docs/threat_model.md, "Amplification inside the
declared range"); no check enforces the per-row bound on a crafted ciphertext.

**Composition.** T adaptive Gaussian rounds of sensitivity Delta and std sigma are one Gaussian mechanism with
mu = sqrt(T) Delta / sigma (Dong, Roth & Su 2022, Cor. 3.3), so sigma = sqrt(T) Delta / mu*(eps, delta) with mu* of
:func:`vfl.privacy.calibration.calibrate_mu` (the exact conversion of Balle & Wang 2018) -- the same accountant as
:class:`vfl.models.baselines.NoisyGradientDescent`.

**Releasing the label term once** (``label_release="once"``, in-process only). g(w) = alpha + 2 M w splits into a
part that does not depend on w -- the label term alpha = -(2/N) X^T y (linear), (1/N) X^T (1/2 - y) (logistic) --
and the matrix part 2 M w. Re-releasing alpha every round with fresh noise is what costs the "+4" (linear) and "+1"
(logistic) above. Instead release alpha~ = alpha + N(0, sigma_a^2 I) once and per round only (2 M w_t)~ = 2 M w_t +
N(0, sigma^2 I); the gradient used is alpha~ + (2 M w_t)~, so every iterate is post-processing of (alpha~, the T
round vectors). Replace-one sensitivities on the same domain::

    alpha:       linear  (2/N) ||x y - x' y'|| <= 4/N;   logistic (1/N) ||x (1/2 - y) - x' (1/2 - y')|| <= 1/N
    2 M w_t:     linear  (2/N) ||(x x^T - x' x'^T) w|| <= 2R/N;   logistic (1/(4N)) ||...|| <= R/(4N)

The release is one adaptive composition of T + 1 Gaussian mechanisms, so it is mu-GDP with mu^2 = (Delta_a/sigma_a)^2 +
T (Delta_M/sigma)^2 (Dong, Roth & Su 2022, Cor. 3.3); a public share f of mu*(eps, delta)^2 goes to alpha:
sigma_a = Delta_a / (sqrt(f) mu*), sigma = sqrt(T) Delta_M / (sqrt(1 - f) mu*). The default share
f = Delta_a / (Delta_a + Delta_M) (2/3 linear and 4/5 logistic at R = 1) makes the split never worse than the
every-round release for any linear filter of the noise (ignoring the projection): with it sigma^2 + T sigma_a^2 equals
the every-round per-round variance T (Delta_M + Delta_a)^2 / mu*^2, and a filter with weights c_t gets from the label
noise sigma_a^2 (sum c_t)^2 <= T sigma_a^2 sum c_t^2 (Cauchy-Schwarz) -- equality when every round weighs the same
(directions that gradient descent has not converged in), a gain where it has. The networked protocol
(:mod:`vfl.protocols.gd_rounds`) still releases the label term every round.

**Averaging.** ``averaging="all"``: w^ = mean of w_1..w_T (Polyak); ``"last-half"``: mean of the last ceil(T/2)
iterates (tail averaging), which drops the early iterates that are still far from the minimiser.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.fm.objective import QuadraticObjective, validate_model
from vfl.privacy.accounting import PrivacyReport, noisy_gd_epsilon_exact, noisy_gd_mu, noisy_gd_sigma_for
from vfl.privacy.calibration import calibrate_mu, epsilon_of, validate_delta, validate_epsilon

__all__ = ["GradientRelease", "round_sensitivity", "step_size", "run_noisy_gradient", "objective_gradient",
           "DEFAULT_STEPS", "DEFAULT_RADIUS", "project_ball", "GD_MECHANISMS", "GD_OPTIONS",
           "operand_bound", "party_sensitivity", "label_sensitivity", "matrix_round_sensitivity",
           "default_label_share", "LABEL_RELEASES", "AVERAGINGS", "average_window"]

#: public defaults (docs/privacy.md, "Choosing the release"): T rounds and the iterate radius R of the unit domain
DEFAULT_STEPS = 25
DEFAULT_RADIUS = 1.0
#: the networked mechanism name (vfl.protocols.gd_phase) and its public options (RunSettings.mechanism_options)
GD_MECHANISMS = ("noisy-gd",)
GD_OPTIONS = ("steps", "iterate_radius", "learning_rate")
#: how the label term alpha is released (module docstring, "Releasing the label term once")
LABEL_RELEASES = ("every-round", "once")
#: which iterates are averaged into the model (module docstring, "Averaging")
AVERAGINGS = ("all", "last-half")


def round_sensitivity(model: str, radius: float, n_samples: int) -> float:
    """L2 sensitivity of one round's average gradient (module docstring): (2R + 4)/N linear, (R/4 + 1)/N logistic."""
    model = validate_model(model)
    per_row = 2.0 * radius + 4.0 if model == "linear" else radius / 4.0 + 1.0
    return per_row / n_samples


def label_sensitivity(model: str, n_samples: int) -> float:
    """L2 sensitivity of the label term alpha released once: 4/N linear, 1/N logistic (module docstring)."""
    return (4.0 if validate_model(model) == "linear" else 1.0) / n_samples


def matrix_round_sensitivity(model: str, radius: float, n_samples: int) -> float:
    """L2 sensitivity of one round's 2 M w_t (||w_t|| <= R): 2R/N linear, R/(4N) logistic (module docstring)."""
    return (2.0 * radius if validate_model(model) == "linear" else radius / 4.0) / n_samples


def default_label_share(model: str, radius: float) -> float:
    """f = Delta_a / (Delta_a + Delta_M): the public share of mu^2 spent on alpha (module docstring)."""
    a, m = label_sensitivity(model, 1), matrix_round_sensitivity(model, radius, 1)
    return a / (a + m)


def average_window(steps: int, averaging: str) -> int:
    """How many of the last iterates are averaged: T ("all") or ceil(T/2) ("last-half")."""
    return steps if averaging == "all" else (steps + 1) // 2


def operand_bound(model: str, radius: float, party_radius: float, label_owner: bool) -> float:
    """Public bound b_l on an honest |v_l| (:mod:`vfl.protocols.gd_rounds`): |s x_l^T w_l| <= s r_l R, plus the label
    term at the owner (1 linear, 1/2 logistic)."""
    s = 1.0 if model == "linear" else 0.25
    extra = 0.0 if not label_owner else (1.0 if model == "linear" else 0.5)
    return s * party_radius * radius + extra


def party_sensitivity(model: str, radius: float, party_radii: tuple[float, float], party: int,
                      n_samples: int) -> float:
    """Delta_P (module docstring, "Against a hostile co-party"): the L2 sensitivity of one round's released gradient
    to party ``party``'s part of one row (0 = A, 1 = the label owner B) when the co-party encrypts any operand
    |v_Q,i| <= b (the common scale) and answers with any rows of norm <= r_Q."""
    model = validate_model(model)
    s, c1, lam = (1.0, 2.0, 1.0) if model == "linear" else (0.25, 1.0, 0.5)
    lam_p = lam if party == 1 else 0.0
    b = max(operand_bound(model, radius, party_radii[k], label_owner=k == 1) for k in (0, 1))
    r_p, r_q = party_radii[party], party_radii[1 - party]
    block_p = s * r_p * r_p * radius + 2.0 * r_p * (b + lam_p)
    block_q = 2.0 * r_q * (s * r_p * radius + lam_p)
    return c1 * math.hypot(block_p, block_q) / n_samples


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
                       noise: Callable[[int], np.ndarray] | None = None,
                       window: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(average iterate w^, last iterate) of T noisy projected gradient steps from w_0 = 0 (module docstring).

    ``gradient`` is the exact gradient oracle (in-process: :func:`objective_gradient`); the noise is added here:
    N(0, sigma^2 I) from ``rng``, or ``noise(t)`` if given (the networked phase's recorded draws, in tests).
    ``window``: average the last ``window`` iterates (default all T).
    """
    w = np.zeros(n_features)
    total = np.zeros(n_features)
    first = steps - (steps if window is None else window)
    for t in range(steps):
        e = rng.normal(0.0, sigma, size=n_features) if noise is None else noise(t)
        w = project_ball(w - eta * (gradient(w) + e), radius)
        if t >= first:
            total += w
    return total / (steps - first), w


def run_label_once(alpha: np.ndarray, matrix_product: Callable[[np.ndarray], np.ndarray], *, steps: int, eta: float,
                   radius: float, sigma: float, label_sigma: float, window: int, rng: np.random.Generator,
                   transcript: list[np.ndarray] | None = None) -> np.ndarray:
    """The model of the split release (module docstring): alpha~ = alpha + N(0, sigma_a^2 I) once, then per round
    (2 M w_t)~ = ``matrix_product(w_t)`` + N(0, sigma^2 I). Every released vector is appended to ``transcript``
    (alpha~ first) when given; the model is a function of the transcript alone (:func:`replay_label_once`)."""
    released = [alpha + rng.normal(0.0, label_sigma, size=alpha.shape)]

    def round_vector(w: np.ndarray) -> np.ndarray:
        released.append(matrix_product(w) + rng.normal(0.0, sigma, size=w.shape))
        return released[-1]

    w_avg = _label_once_iterates(released[0], round_vector, steps=steps, eta=eta, radius=radius, window=window)
    if transcript is not None:
        transcript.extend(released)
    return w_avg


def replay_label_once(transcript: list[np.ndarray], *, eta: float, radius: float, window: int) -> np.ndarray:
    """The split release's model from its released vectors only (alpha~, then the T round vectors): the proof that
    the model is post-processing of the release."""
    rounds = iter(transcript[1:])
    return _label_once_iterates(transcript[0], lambda w: next(rounds), steps=len(transcript) - 1, eta=eta,
                                radius=radius, window=window)


def _label_once_iterates(alpha_noisy: np.ndarray, round_vector: Callable[[np.ndarray], np.ndarray], *, steps: int,
                         eta: float, radius: float, window: int) -> np.ndarray:
    w = np.zeros(alpha_noisy.shape[0])
    total = np.zeros_like(w)
    for t in range(steps):
        w = project_ball(w - eta * (alpha_noisy + round_vector(w)), radius)
        if t >= steps - window:
            total += w
    return total / window


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
    #: (r_A, r_B) of a networked release: sigma is calibrated against a hostile co-party (module docstring); None:
    #: one process draws all the noise (in-process), calibrated to the full-row Delta
    party_radii: tuple[float, float] | None = None
    #: "every-round" (alpha + 2 M w_t per round) or "once" (alpha~ once, then 2 M w_t per round; in-process only)
    label_release: str = "every-round"
    #: the public share f of mu^2 spent on alpha when ``label_release="once"``; None: :func:`default_label_share`
    label_share: float | None = None
    #: "all" (mean of w_1..w_T) or "last-half" (mean of the last ceil(T/2) iterates)
    averaging: str = "all"

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
        if self.label_release not in LABEL_RELEASES:
            raise ConfigurationError(f"label_release must be one of {LABEL_RELEASES}, got {self.label_release!r}")
        if self.averaging not in AVERAGINGS:
            raise ConfigurationError(f"averaging must be one of {AVERAGINGS}, got {self.averaging!r}")
        if self.label_release == "once" and self.party_radii is not None:
            raise ConfigurationError("label_release='once' has no networked form yet: the networked rounds release "
                                     "the label term every round")
        f = self.label_share
        if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 < f < 1.0):
            raise ConfigurationError(f"label_share must be a number in (0, 1), got {f!r}")

    @property
    def label_once(self) -> bool:
        return self.label_release == "once"

    @property
    def sensitivity(self) -> float:
        """One round's L2 sensitivity: (2R + 4)/N resp. (R/4 + 1)/N; 2R/N resp. R/(4N) when alpha is released once."""
        if self.label_once:
            return matrix_round_sensitivity(self.model, float(self.radius), self.n_samples)
        return round_sensitivity(self.model, float(self.radius), self.n_samples)

    @property
    def label_sensitivity(self) -> float | None:
        """Delta_a of the one-time alpha release (None when alpha is released every round)."""
        return label_sensitivity(self.model, self.n_samples) if self.label_once else None

    @property
    def share(self) -> float:
        """f: the share of mu*^2 spent on alpha (0 when alpha is released every round)."""
        if not self.label_once:
            return 0.0
        return default_label_share(self.model, float(self.radius)) if self.label_share is None \
            else float(self.label_share)

    @property
    def label_sigma(self) -> float | None:
        """sigma_a = Delta_a / (sqrt(f) mu*) of the one-time alpha release (module docstring)."""
        da = self.label_sensitivity
        return None if da is None else da / (math.sqrt(self.share) * calibrate_mu(self.epsilon, self.delta))

    @property
    def mu(self) -> float:
        """Gaussian-DP mu of the whole release: sqrt((Delta_a/sigma_a)^2 + T (Delta/sigma)^2) (Dong, Roth & Su 2022)."""
        rounds = noisy_gd_mu(int(self.steps), self.sensitivity, self.sigma)
        da, sa = self.label_sensitivity, self.label_sigma
        return rounds if da is None or sa is None else math.hypot(da / sa, rounds)

    @property
    def window(self) -> int:
        return average_window(int(self.steps), self.averaging)

    @property
    def party_sensitivities(self) -> tuple[float, float] | None:
        """(Delta_A, Delta_B) against a hostile co-party (networked), or None (in-process)."""
        if self.party_radii is None:
            return None
        radii = (float(self.party_radii[0]), float(self.party_radii[1]))
        return tuple(party_sensitivity(self.model, float(self.radius), radii, k, self.n_samples)  # type: ignore
                     for k in (0, 1))

    @property
    def calibration_sensitivity(self) -> float:
        """The Delta sigma is calibrated to: Delta in-process; max(Delta_A, Delta_B, Delta/sqrt(2)) networked."""
        ps = self.party_sensitivities
        return self.sensitivity if ps is None else max(*ps, self.sensitivity / math.sqrt(2.0))

    @property
    def eta(self) -> float:
        return step_size(self.model) if self.learning_rate is None else float(self.learning_rate)

    @property
    def sigma(self) -> float:
        """Per-round noise std: sqrt(T) Delta* / mu*(eps, delta) (Delta* = :attr:`calibration_sensitivity`); with
        alpha released once, sqrt(T) Delta / (sqrt(1 - f) mu*)."""
        sigma = noisy_gd_sigma_for(self.epsilon, self.delta, int(self.steps), self.calibration_sensitivity)
        return sigma / math.sqrt(1.0 - self.share)

    def run(self, gradient: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator) -> np.ndarray:
        """The released model w^ (average iterate) for the exact gradient oracle ``gradient`` (alpha every round)."""
        if self.label_once:
            raise ConfigurationError("label_release='once' needs alpha and M apart: use run_objective")
        w_avg, _ = run_noisy_gradient(gradient, self.n_features, steps=int(self.steps), eta=self.eta,
                                      radius=float(self.radius), sigma=self.sigma, rng=rng, window=self.window)
        return w_avg

    def run_objective(self, objective: QuadraticObjective, rng: np.random.Generator,
                      transcript: list[np.ndarray] | None = None) -> np.ndarray:
        """The released model for an exact (in-process) FM objective, by either label release."""
        if not self.label_once:
            return self.run(objective_gradient(objective), rng)
        M2 = 2.0 * objective.M
        return run_label_once(objective.alpha, lambda w: M2 @ w, steps=int(self.steps), eta=self.eta,
                              radius=float(self.radius), sigma=self.sigma, label_sigma=float(self.label_sigma or 0.0),
                              window=self.window, rng=rng, transcript=transcript)

    def privacy_report(self) -> PrivacyReport:
        ps = self.party_sensitivities
        against = self.sensitivity if ps is None else max(ps)
        if self.label_once:
            return self._label_once_report()
        eps = noisy_gd_epsilon_exact(int(self.steps), against, self.sigma, self.delta)
        form = "(2R + 4)/N" if self.model == "linear" else "(R/4 + 1)/N"
        sens = {f"L2 per round {form}": self.sensitivity}
        if ps is not None:
            sens.update({"L2 per round against A, hostile B": ps[0], "L2 per round against B, hostile A": ps[1]})
        return PrivacyReport(
            "noisy-gd", self.model, self.epsilon, eps, self.delta, domain="l2 (||x||_2 <= 1)",
            calibration=f"T = {self.steps} Gaussian rounds composed as one Gaussian mechanism, mu = sqrt(T) "
                        "Delta / sigma (Dong, Roth & Su 2022); analytic calibration (Balle & Wang 2018)",
            sensitivities=sens,
            noise_scales={"sigma": self.sigma},
            notes=["noisy projected gradient descent on the FM objective (Bassily, Smith & Thakurta 2014): the "
                   "released gradients are d-vectors alpha + 2 M w_t; iterates are post-processing",
                   *self.notes],
            extra={"steps": int(self.steps), "iterate_radius": float(self.radius), "learning_rate": self.eta,
                   # Gaussian-DP mu of the T rounds (Dong, Roth & Su 2022, Cor. 3.3): the ledger composes with it
                   "mu": math.sqrt(int(self.steps)) * self.sensitivity / self.sigma,
                   "averaging": self._averaging_text(), "label_release": self.label_release},
        )

    def _averaging_text(self) -> str:
        return "mean of w_1..w_T" if self.averaging == "all" else f"mean of the last {self.window} of the T iterates"

    def _label_once_report(self) -> PrivacyReport:
        linear = self.model == "linear"
        da, sa = float(self.label_sensitivity or 0.0), float(self.label_sigma or 0.0)
        return PrivacyReport(
            "noisy-gd", self.model, self.epsilon, epsilon_of(self.mu, self.delta), self.delta,
            domain="l2 (||x||_2 <= 1)",
            calibration=f"alpha released once (sensitivity {'4/N' if linear else '1/N'}, std sigma_a) and T = "
                        f"{self.steps} rounds of 2 M w_t (sensitivity {'2R/N' if linear else 'R/(4N)'}, std sigma): "
                        "one Gaussian mechanism, mu^2 = (Delta_a/sigma_a)^2 + T (Delta/sigma)^2 (Dong, Roth & Su "
                        f"2022), a share f = {self.share:.4g} of mu^2 on alpha; analytic calibration (Balle & Wang "
                        "2018)",
            sensitivities={"L2 of alpha (once)": da, "L2 per round of 2 M w_t": self.sensitivity},
            noise_scales={"sigma_a": sa, "sigma": self.sigma},
            notes=["noisy projected gradient descent on the FM objective (Bassily, Smith & Thakurta 2014) with the "
                   "label term released once: the gradient used is alpha~ + (2 M w_t)~; iterates are "
                   "post-processing", *self.notes],
            extra={"steps": int(self.steps), "iterate_radius": float(self.radius), "learning_rate": self.eta,
                   "mu": self.mu, "label_share": self.share, "averaging": self._averaging_text(),
                   "label_release": self.label_release},
        )
