"""Noise calibration primitives for the Gaussian and Laplace mechanisms (spec §0.5-0.6).

The analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8): adding N(0, sigma^2) to a query of
L2 sensitivity Delta is (eps, delta)-DP iff ``delta >= delta_gaussian(eps, mu)`` with mu = Delta/sigma,

    delta_G(eps; mu) = Phi(-eps/mu + mu/2) - exp(eps) * Phi(-eps/mu - mu/2).

Everything else in vfl calls these functions; nothing re-derives a calibration.

Ranges (issue 14, item 5): epsilon must lie in [:data:`EPSILON_MIN`, :data:`EPSILON_MAX`]. Beyond the top the
guarantee is void anyway (use mechanism ``none`` deliberately) and ``delta_G`` loses all precision (it overflowed
to NaN near 1e155 and the bisection never ended); below the bottom the noise scale (``Delta / eps``) overflows the
fixed-point noise range of the secure products and floats. Every search loop has an iteration bound and a NaN
check, so no input can make a calibration run forever.
"""

from __future__ import annotations

import math

import numpy as np

from vfl.exceptions import PrivacyParameterError

__all__ = [
    "EPSILON_MIN",
    "EPSILON_MAX",
    "validate_epsilon",
    "validate_delta",
    "delta_gaussian",
    "calibrate_mu",
    "epsilon_of",
    "classical_sigma",
    "classical_mu",
    "gaussian_sigma",
    "laplace_scale",
]


EPSILON_MIN = 1e-9
"""Smallest accepted epsilon: the noise scale Delta/eps must stay representable (fixed point, floats)."""
EPSILON_MAX = 1e9
"""Largest accepted epsilon: beyond it a DP claim means nothing and ``delta_G`` is numerically void."""
_MAX_DOUBLINGS = 200
_MAX_BISECTIONS = 200


def validate_epsilon(epsilon: float) -> float:
    """Return epsilon as float; raise PrivacyParameterError unless it is a number in [EPSILON_MIN, EPSILON_MAX]."""
    try:
        eps = float(epsilon)
    except (TypeError, ValueError, OverflowError):
        raise PrivacyParameterError(f"epsilon must be a number, got {epsilon!r}") from None
    if not math.isfinite(eps) or eps <= 0:
        raise PrivacyParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not EPSILON_MIN <= eps <= EPSILON_MAX:
        raise PrivacyParameterError(
            f"epsilon must lie in [{EPSILON_MIN:g}, {EPSILON_MAX:g}], got {eps:g}"
            + (" (no meaningful guarantee; use mechanism 'none' deliberately)" if eps > EPSILON_MAX
               else " (the noise scale Delta/epsilon would overflow)"))
    return eps


def _checked_delta(epsilon: float, mu: float) -> float:
    value = delta_gaussian(epsilon, mu)
    if not math.isfinite(value):
        raise PrivacyParameterError(f"Gaussian calibration is numerically undefined at epsilon={epsilon:g}, "
                                    f"mu={mu:g}")
    return value


def validate_delta(delta: float) -> float:
    """Return delta as float; raise PrivacyParameterError unless 0 < delta < 1."""
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise PrivacyParameterError(f"delta must be a number in (0, 1), got {delta!r}") from None
    if not (0.0 < d < 1.0):
        raise PrivacyParameterError(f"delta must lie in the open interval (0, 1), got {delta!r}")
    return d


def delta_gaussian(epsilon: float, mu: float) -> float:
    """Exact delta of a Gaussian mechanism with mu = Delta/sigma at epsilon (Balle & Wang 2018, Thm. 8).

    Computed as ``Phi(a) * (1 - exp(eps + log Phi(b) - log Phi(a)))`` with a = -eps/mu + mu/2,
    b = -eps/mu - mu/2, which stays accurate for tiny delta (spec §0.5 numerics).
    """
    eps = float(epsilon)
    mu = float(mu)
    if mu <= 0:
        return 0.0
    if not math.isfinite(mu):
        return 1.0
    from scipy.special import log_ndtr, ndtr  # here, not at import: `vfl --help` starts without scipy

    a = -eps / mu + mu / 2.0
    b = -eps / mu - mu / 2.0
    log_pa = float(log_ndtr(a))
    log_pb = float(log_ndtr(b))
    ratio = eps + log_pb - log_pa
    if ratio >= 0:  # delta ~ 0, reached through rounding; capped at exp(0): for mu >~ 1e10 the exponent is huge
        return max(float(ndtr(a)) - math.exp(min(eps + log_pb, 0.0)), 0.0)
    return float(math.exp(log_pa) * -math.expm1(ratio))


def calibrate_mu(epsilon: float, delta: float, *, rtol: float = 1e-12) -> float:
    """mu*(eps, delta) = sup{mu : delta_G(eps; mu) <= delta}; sigma = Delta / mu* (spec §0.5).

    delta_G is increasing in mu: bracket [0, mu_hi] by doubling, bisect to relative tolerance ``rtol``
    and return the lower end, so the result is always on the private side.
    Both loops are bounded (:data:`_MAX_DOUBLINGS`, :data:`_MAX_BISECTIONS`) and a non-finite ``delta_G`` raises
    :class:`PrivacyParameterError` instead of steering the search.
    """
    eps = validate_epsilon(epsilon)
    dlt = validate_delta(delta)
    hi = 1.0
    for _ in range(_MAX_DOUBLINGS):
        if _checked_delta(eps, hi) > dlt:
            break
        hi *= 2.0
    else:
        raise PrivacyParameterError(f"cannot calibrate Gaussian noise for epsilon={eps:g}, delta={dlt:g}")
    lo = 0.0
    for _ in range(_MAX_BISECTIONS):
        if hi - lo <= rtol * hi:
            break
        mid = 0.5 * (lo + hi)
        if _checked_delta(eps, mid) <= dlt:
            lo = mid
        else:
            hi = mid
    if lo <= 0.0:
        raise PrivacyParameterError(f"cannot calibrate Gaussian noise for epsilon={eps:g}, delta={dlt:g}")
    return lo


#: above this mu, :func:`epsilon_of` returns the closed-form upper bound (the bisection's digits run out)
LARGE_MU = 1e6


def epsilon_of(mu: float, delta: float, *, rtol: float = 1e-12) -> float:
    """Smallest eps with delta_G(eps; mu) <= delta: the true epsilon of a mu-Gaussian mechanism.

    delta_G is decreasing in eps; bisect and return the upper end (spec §0.5). Returns 0 for mu = 0.
    For ``mu >= LARGE_MU`` (a mechanism with essentially no privacy), where ``a = -eps/mu + mu/2`` loses its digits
    to cancellation, it returns the closed-form upper bound ``mu^2/2 + mu Phi^{-1}(1 - delta)``: delta_G(eps) <=
    Phi(a) (Balle & Wang 2018, Thm. 8, dropping the subtracted term), within 1e-12 relative of the exact value there.
    """
    dlt = validate_delta(delta)
    mu = float(mu)
    if mu < 0 or not math.isfinite(mu):
        raise PrivacyParameterError(f"mu must be finite and >= 0, got {mu!r}")
    if mu >= LARGE_MU:
        from scipy.special import ndtri  # here, not at import: `vfl --help` starts without scipy

        return mu * mu / 2.0 - mu * float(ndtri(dlt))
    if mu == 0.0 or _checked_delta(0.0, mu) <= dlt:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(_MAX_DOUBLINGS):
        if _checked_delta(hi, mu) <= dlt:
            break
        lo, hi = hi, hi * 2.0
    else:
        raise PrivacyParameterError(f"cannot compute the epsilon of a Gaussian mechanism with mu={mu:g}")
    for _ in range(_MAX_BISECTIONS):
        if hi - lo <= rtol * hi:
            break
        mid = 0.5 * (lo + hi)
        if _checked_delta(mid, mu) > dlt:
            lo = mid
        else:
            hi = mid
    return hi


def classical_sigma(epsilon: float, delta: float, sensitivity: float = 1.0, *, require_proven: bool = True) -> float:
    """Classical sigma = Delta sqrt(2 ln(1.25/delta)) / eps (Dwork & Roth 2014, Thm. A.1), proven only for eps < 1.

    ``require_proven=False`` computes it for any eps (to reproduce papers that use it there; not a DP guarantee).
    """
    eps = validate_epsilon(epsilon)
    dlt = validate_delta(delta)
    if eps >= 1.0 and require_proven:
        raise PrivacyParameterError(
            f"the classical Gaussian calibration is only proven for epsilon < 1 (got {eps}); "
            "use calibration='analytic'"
        )
    return float(sensitivity) * math.sqrt(2.0 * math.log(1.25 / dlt)) / eps


def classical_mu(epsilon: float, delta: float) -> float:
    """mu = Delta / classical_sigma (the 'paper' noise level expressed as a Gaussian mechanism)."""
    return 1.0 / classical_sigma(epsilon, delta, 1.0)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0, *, calibration: str = "analytic") -> float:
    """Noise std for one Gaussian release of L2 sensitivity ``sensitivity``."""
    if calibration == "analytic":
        return float(sensitivity) / calibrate_mu(epsilon, delta)
    if calibration == "classical":
        return classical_sigma(epsilon, delta, sensitivity)
    raise PrivacyParameterError(f"calibration must be 'analytic' or 'classical', got {calibration!r}")


def laplace_scale(epsilon: float, l1_sensitivity: float) -> float:
    """Laplace scale b = Delta_1 / eps; i.i.d. Lap(b) per coordinate is eps-DP (spec §0.6)."""
    eps = validate_epsilon(epsilon)
    if not np.isfinite(l1_sensitivity) or l1_sensitivity < 0:
        raise PrivacyParameterError(f"L1 sensitivity must be finite and >= 0, got {l1_sensitivity!r}")
    return float(l1_sensitivity) / eps
