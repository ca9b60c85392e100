"""Privacy accounting of CAPE (Imtiaz, Mohammadi & Sarwate 2021) and capeFM (Tasnim et al. 2023), spec §3.3.

CAPE protocol (spec §3.2): site s draws e^_s ~ N(0, tau_s^2) and g_s ~ N(0, tau_s^2/S); secure aggregation
gives everybody sum_s e^_s; the site releases a^_s = f(D_s) + e_s + g_s with the zero-sum part
e_s = e^_s - (1/S) sum_t e^_t.

**Adversary's view** (aggregator + colluding sites C, honest-but-curious): all a^_s, the broadcast sum
sum_s e^_s, and e^_c, g_c (and the data) of every c in C. It is Gaussian, o = m(D) + A omega with
omega = (e^_1..e^_S, g_1..g_S) independent, Sigma = A diag(std^2) A^T. Changing one record of an honest
site h moves m by v~ = Delta_h e_h (the row of a^_h). The privacy loss is z ~ N(q/2, q), q = v~^T Sigma^+ v~
(spec §3.3 Theorem 1 corrected: sigma_z^2 = 2 mu_z), i.e. the view is a Gaussian mechanism with
``mu = sqrt(q)``, exactly (eps, delta_G(eps; sqrt q))-DP.

**Closed form [correction]** (symmetric sites): ``q = (Delta_s / tau)^2 kappa(S, S_C)``,
``kappa(S, S_C) = (S/(S+1)) (2S - S_C)/(S - S_C)``, ``mu_z = q/2``. Imtiaz et al.'s eq. (1) is smaller
(it inverts the honest block with 2/S_H instead of 1/(1+S_C) and ignores that the adversary knows the
colluders' e^_c inside the broadcast sum); :func:`paper_mu_z` reproduces it for comparison only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from vfl.exceptions import ConfigurationError, PrivacyParameterError
from vfl.privacy.calibration import calibrate_mu, delta_gaussian, epsilon_of, validate_delta, validate_epsilon

__all__ = [
    "default_colluders",
    "colluders_note",
    "kappa",
    "cape_mu_z",
    "cape_mu_z_mean",
    "cape_sigma_z",
    "paper_mu_z",
    "paper_delta",
    "exact_delta",
    "calibrate_cape_tau",
    "cape_true_epsilon",
    "observation_map",
    "view_covariance",
    "privacy_q",
    "worst_case_q",
    "CapeView",
    "privacy_loss",
]


def _check_sites(n_sites: int, n_colluders: int) -> tuple[int, int]:
    if isinstance(n_sites, bool) or int(n_sites) != n_sites or n_sites < 2:
        raise ConfigurationError(f"CAPE needs an integer number of sites >= 2, got {n_sites!r}")
    if isinstance(n_colluders, bool) or int(n_colluders) != n_colluders or not 0 <= n_colluders <= n_sites - 1:
        raise ConfigurationError(f"n_colluders must be an integer in [0, {int(n_sites) - 1}], got {n_colluders!r}")
    return int(n_sites), int(n_colluders)


def default_colluders(n_sites: int) -> int:
    """S_C = ceil(S/3) - 1: the collusion bound of SecureAgg with threshold floor(2S/3)+1 (Imtiaz et al. §3.1)."""
    return max(math.ceil(n_sites / 3) - 1, 0)


def colluders_note(n_colluders: int, n_sites: int, *, defaulted: bool) -> str:
    """Plain words for S_C in a plan or report line: whom the noise protects a site against, and where S_C came
    from (the default ceil(S/3) - 1 is 0 for S <= 3: then no colluding site at all)."""
    whom = ("the aggregator alone, no colluding site" if n_colluders == 0
            else f"the aggregator together with up to {n_colluders} colluding site(s)")
    source = (f"the default ceil(S/3) - 1 for {n_sites} sites; --colluding sets it" if defaulted
              else "as requested")
    return f"(each site's noise protects it against {whom}; {source})"


def kappa(n_sites: int, n_colluders: int) -> float:
    """kappa(S, S_C) = (S/(S+1)) (2S - S_C)/(S - S_C): q = (Delta_s/tau)^2 kappa (spec §3.3 [correction]).

    2S/(S+1) for S_C = 0, -> 2.5 for S_C ~ S/3, S for S_C = S-1.
    """
    S, C = _check_sites(n_sites, n_colluders)
    return (S / (S + 1)) * (2 * S - C) / (S - C)


def cape_mu_z(sensitivity: float, tau: float, n_sites: int, n_colluders: int) -> float:
    """mu_z = (Delta_s^2 / (2 tau^2)) kappa(S, S_C): mean of the privacy loss of one honest site."""
    return float(sensitivity) ** 2 / (2.0 * float(tau) ** 2) * kappa(n_sites, n_colluders)


def cape_mu_z_mean(n_sites: int, n_colluders: int, n_total: int, tau: float) -> float:
    """For a mean query (Delta_s = 1/N_s = S/N): mu_z = S^3 (2S - S_C) / (2 tau^2 N^2 (S+1)(S - S_C))."""
    return cape_mu_z(n_sites / n_total, tau, n_sites, n_colluders)


def cape_sigma_z(mu_z: float) -> float:
    """sigma_z = sqrt(2 mu_z) (Imtiaz et al. eq. (2); Tasnim et al.'s "sigma_z = 2 mu_z" is a typo)."""
    return math.sqrt(2.0 * float(mu_z))


def paper_mu_z(n_sites: int, n_colluders: int, n_total: int, tau: float) -> float:
    """Imtiaz et al. (2021) Theorem 1 eq. (1), for **reproduction only** (it understates mu_z).

    Written as the corrected prefactor S^3/(2 tau^2 N^2 (S+1)) times the paper's bracket
    ``B = 1 + 2/S_H + 9 S_C^2 / (S_H (S(S+1) - 3 S_C^2))``, S_H = S - S_C: what the paper's Schur-complement
    derivation gives with Sigma_a^{-1} = S/((1+S) tau^2) (I + (2/S_H) 1 1^T) and a view made of the honest
    a^_s and the honest part of the broadcast sum. It reproduces the spec's quoted brackets
    (S=10, S_C=3: 1.425; S=50, S_C=16: 1.097; S=2, S_C=0: 2 = the corrected value), but was reconstructed
    from those values and the stated error, not transcribed from the paper's typeset equation.
    """
    S, C = _check_sites(n_sites, n_colluders)
    H = S - C
    bracket = 1.0 + 2.0 / H + 9.0 * C**2 / (H * (S * (S + 1) - 3.0 * C**2))
    return S**3 / (2.0 * tau**2 * n_total**2 * (S + 1)) * bracket


def paper_delta(epsilon: float, mu_z: float, sigma_z: float) -> float:
    """Paper form delta = 2 (sigma_z/(eps - mu_z)) phi((eps - mu_z)/sigma_z) (Imtiaz et al. Thm. 1).

    Uses the tail bound Q(x) < phi(x)/x and a two-sided factor 2; requires eps > mu_z.
    """
    eps = validate_epsilon(epsilon)
    if eps <= mu_z:
        raise PrivacyParameterError(f"the paper's delta needs epsilon > mu_z (got epsilon={eps}, mu_z={mu_z:.6g})")
    x = (eps - mu_z) / sigma_z
    return float(2.0 * norm.pdf(x) / x)


def exact_delta(epsilon: float, mu_z: float) -> float:
    """Exact delta = delta_G(eps; sigma_z), sigma_z = sqrt(2 mu_z): the view is a Gaussian mechanism (any eps)."""
    return delta_gaussian(validate_epsilon(epsilon), cape_sigma_z(mu_z))


def calibrate_cape_tau(sensitivity: float, epsilon: float, delta: float, n_sites: int, n_colluders: int,
                       n_blocks: int = 1, *, kappa_value: float | None = None) -> float:
    """tau = Delta_s sqrt(J' kappa) / mu*(eps, delta) (spec §3.4): per-site (eps, delta) for all J' blocks.

    With this tau every block contributes q_j = mu*^2 / J', so the whole view has mu = mu*. ``kappa_value``
    overrides the symmetric closed form (asymmetric sites: use :func:`worst_case_q` with unit stds).
    """
    k = kappa(n_sites, n_colluders) if kappa_value is None else float(kappa_value)
    return float(sensitivity) * math.sqrt(n_blocks * k) / calibrate_mu(epsilon, delta)


def cape_true_epsilon(sensitivities: Sequence[float], taus: Sequence[float], delta: float, kappa_value: float) -> float:
    """True per-site eps = epsilon_of(sqrt(kappa sum_j (Delta_j/tau_j)^2), delta) (spec §3.4 paper mode)."""
    validate_delta(delta)
    q = kappa_value * sum((float(d) / float(t)) ** 2 for d, t in zip(sensitivities, taus, strict=True))
    return epsilon_of(math.sqrt(q), delta)


# ---------------------------------------------------------------------------------------------------------
# Numeric recipe (spec §3.3): build the adversary's Gaussian view and compute q = v~^T Sigma^+ v~.


def observation_map(n_sites: int, colluders: Sequence[int]) -> np.ndarray:
    """A such that view = A omega, omega = (e^_1..e^_S, g_1..g_S).

    Rows: a^_s = e^_s - (1/S) sum_t e^_t + g_s (s = 1..S); the broadcast sum_t e^_t; e^_c and g_c for c in C.
    """
    S = int(n_sites)
    cols = sorted({int(c) for c in colluders})
    A = np.zeros((S + 1 + 2 * len(cols), 2 * S))
    A[:S, :S] = np.eye(S) - 1.0 / S
    A[:S, S:] = np.eye(S)
    A[S, :S] = 1.0
    for i, c in enumerate(cols):
        A[S + 1 + 2 * i, c] = 1.0
        A[S + 2 + 2 * i, S + c] = 1.0
    return A


def noise_stds(taus: Sequence[float]) -> np.ndarray:
    """Stds of omega: (tau_1..tau_S, tau_1/sqrt(S)..tau_S/sqrt(S))."""
    t = np.asarray(taus, dtype=float)
    return np.concatenate([t, t / math.sqrt(t.size)])


def view_covariance(taus: Sequence[float], colluders: Sequence[int]) -> np.ndarray:
    """Sigma = A diag(std^2) A^T of the adversary's view."""
    A = observation_map(len(taus), colluders)
    return (A * noise_stds(taus) ** 2) @ A.T


@dataclass(frozen=True)
class CapeView:
    """The adversary's Gaussian view against honest site ``honest``: shift v, pseudo-inverse P = Sigma^+, q."""

    A: np.ndarray
    stds: np.ndarray
    shift: np.ndarray
    precision: np.ndarray
    q: float

    @classmethod
    def build(cls, sensitivities: Sequence[float], taus: Sequence[float], honest: int,
              colluders: Sequence[int]) -> CapeView:
        S = len(taus)
        if len(sensitivities) != S:
            raise ConfigurationError("one sensitivity per site is needed")
        if honest in set(colluders) or not 0 <= honest < S:
            raise ConfigurationError(f"honest site {honest} must be a site outside the colluding set")
        scale = float(max(taus))  # work in units of the largest std (conditioning); q is scale-free
        A = observation_map(S, colluders)
        stds = noise_stds(np.asarray(taus, float) / scale)
        Sigma = (A * stds**2) @ A.T
        P = np.linalg.pinv(Sigma, rcond=1e-12, hermitian=True)
        v = np.zeros(A.shape[0])
        v[honest] = float(sensitivities[honest]) / scale
        if np.linalg.norm(Sigma @ (P @ v) - v) > 1e-8 * max(np.linalg.norm(v), 1e-300):
            q = math.inf  # the shift is outside the noise's support: privacy loss unbounded
        else:
            q = float(v @ P @ v)
        return cls(A=A, stds=stds * scale, shift=v * scale, precision=P / scale**2, q=q)


def privacy_q(sensitivities: Sequence[float], taus: Sequence[float], honest: int, colluders: Sequence[int]) -> float:
    """q = v~^T Sigma^+ v~ for one honest site and one colluding set; mu_site = sqrt(q), mu_z = q/2."""
    return CapeView.build(sensitivities, taus, honest, colluders).q


def worst_case_q(sensitivities: Sequence[float], taus: Sequence[float], n_colluders: int, *,
                 max_sets: int = 20000) -> float:
    """max over honest sites h and colluding sets C (|C| = S_C, h not in C) of q(h, C).

    A larger coalition sees more, so sets of exactly S_C suffice. Sites with equal (Delta, tau) are
    exchangeable; the enumeration covers the general case and refuses when it would exceed ``max_sets``.
    """
    S, C = _check_sites(len(taus), n_colluders)
    pairs = list(zip(np.round(sensitivities, 15), np.round(taus, 15), strict=True))
    if len(set(pairs)) == 1:  # symmetric: one representative
        return privacy_q(sensitivities, taus, 0, list(range(1, C + 1)))
    n_sets = S * math.comb(S - 1, C)
    if n_sets > max_sets:
        raise ConfigurationError(
            f"asymmetric CAPE accounting would enumerate {n_sets} (site, coalition) pairs (> max_sets={max_sets})"
        )
    worst = 0.0
    for h in range(S):
        others = [s for s in range(S) if s != h]
        for coalition in itertools.combinations(others, C):
            worst = max(worst, privacy_q(sensitivities, taus, h, coalition))
    return worst


def privacy_loss(view: CapeView, noise_observation: np.ndarray) -> np.ndarray:
    """log p_D(o)/p_D'(o) for o = m(D) + y (rows of ``noise_observation`` are y = A omega draws).

    Equals -v^T P y + q/2 (same covariance, means m and m + v); under D it is N(q/2, q).
    """
    y = np.atleast_2d(noise_observation)
    return -(y @ (view.precision @ view.shift)) + 0.5 * view.q
