"""Privacy accounting of multi-round CAPE releases (capeDJICA) and the sensitivities of capePCA / capeDJICA.

Imtiaz, Mohammadi, Silva, Baker, Plis, Sarwate & Calhoun (2021), "A correlated noise-assisted decentralized
differentially private estimation protocol, and its application to fMRI source separation" (the CAPE seed;
arXiv 1910.12913), §IV-§V. Spec: ``privacy.md`` §0.5 (Gaussian primitives), §3.3 (CAPE view, corrected mu_z).

**Per-round mechanism.** In round j every site releases its blocks through CAPE. Against the aggregator and
S_C colluding sites the view of one honest site is a Gaussian mechanism with
``mu_j = sqrt(kappa sum_b (Delta_b / tau_b)^2)`` (spec §3.3; the privacy loss is z_j ~ N(mu_z, 2 mu_z),
mu_z = mu_j^2 / 2). The sensitivities Delta_b may depend on the public iterate (W_j, b_j); calibrating
tau_b proportionally keeps mu_j fixed, and adaptive composition of Gaussian mechanisms is exact
(Dong, Roth & Su 2022): J rounds of mu_j give ``mu = sqrt(sum_j mu_j^2)``.

**Reported epsilons** (all for the same noise; :func:`compare_accountants`):

* ``gdp`` - exact: ``epsilon_of(sqrt(sum_j mu_j^2), delta)`` (Balle & Wang 2018 applied to the composed view).
* ``pld`` - Google ``dp-accounting`` privacy-loss-distribution accountant (numerically tight, pessimistic).
* ``rdp`` - ``dp-accounting`` RDP accountant (Mironov 2017; its improved RDP->DP conversion,
  Canonne, Kamath & Steinke 2020 Prop. 12). The seed's closed form, with the classic conversion
  eps = min_alpha alpha rho + ln(1/delta)/(alpha - 1), rho = sum_j mu_j^2/2 = J mu_z, is
  ``rho + 2 sqrt(rho ln(1/delta))`` (:func:`rdp_closed_form_epsilon`).
* ``moments`` - the moments accountant (Abadi et al. 2016, Thm. 2) as the seed uses it: log moments
  alpha(lambda) = lambda * RDP(lambda + 1) at integer lambda (for the Gaussian privacy loss z ~ N(mu_z, 2 mu_z),
  log E exp(lambda z) = lambda (lambda + 1) mu_z exactly), eps = min_lambda (alpha(lambda) + ln(1/delta))/lambda.
  The RDP values come from the ``dp-accounting`` RDP accountant; with continuous lambda this is the same
  closed form as RDP.
* ``strong`` - strong (advanced) composition (Dwork, Rothblum & Vadhan 2010; heterogeneous form
  eps = sqrt(2 ln(1/delta') sum_j eps_j^2) + sum_j eps_j (e^eps_j - 1), delta = sum_j delta_j + delta'), each
  round (eps_j, delta_j)-DP with eps_j = epsilon_of(mu_j, delta_j) exactly; the split of delta between
  delta' and the rounds is optimised on a grid. No library implements it; it is the seed's first analysis.

All are valid upper bounds; ``gdp`` is exact for this mechanism, so ``pld`` ~ ``gdp`` <= ``rdp`` <= ``moments``
and ``strong`` is far larger for many rounds (the seed's point for using RDP / the moments accountant).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vfl.exceptions import ConfigurationError, PrivacyParameterError
from vfl.privacy.calibration import calibrate_mu, epsilon_of, validate_delta, validate_epsilon

try:  # optional extra `ica` (pyproject): Google's dp-accounting
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant
except ImportError:  # pragma: no cover - dp-accounting is installed in every test environment
    dp_accounting = None

__all__ = [
    "ACCOUNTANTS",
    "MOMENTS_ORDERS",
    "pca_sensitivity",
    "infomax_sensitivities",
    "rdp_closed_form_epsilon",
    "moments_closed_form_epsilon",
    "strong_composition_epsilon",
    "gdp_epsilon",
    "rdp_epsilon",
    "rdp_curve",
    "moments_epsilon",
    "pld_epsilon",
    "compare_accountants",
    "calibrate_round_mu",
]

#: Accountants usable to calibrate the per-round noise (``pld`` is report-only: slow to invert).
ACCOUNTANTS = ("gdp", "rdp", "moments", "strong")
#: Integer orders alpha = lambda + 1 of the moments accountant (Abadi et al. use lambda <= 32; we go further).
MOMENTS_ORDERS = tuple(range(2, 257))

Events = Sequence[tuple[float, int]]


def _require_library() -> None:
    if dp_accounting is None:  # pragma: no cover
        raise ConfigurationError("this accountant needs Google's dp-accounting: pip install 'vfl[ica]'")


def _events(events: Events) -> list[tuple[float, int]]:
    out = []
    for mu, count in events:
        mu = float(mu)
        if not math.isfinite(mu) or mu < 0:
            raise PrivacyParameterError(f"every mu must be finite and >= 0, got {mu!r}")
        if isinstance(count, bool) or int(count) != count or count < 0:
            raise PrivacyParameterError(f"every round count must be an integer >= 0, got {count!r}")
        if mu > 0 and count > 0:
            out.append((mu, int(count)))
    return out


# ------------------------------------------------------------------------------------------------ sensitivities


def pca_sensitivity(n_rows: int, unit_size: int = 1) -> float:
    """L2 (Frobenius) sensitivity of C_s = (1/N_s) X_s X_s^T, columns ||x||_2 <= 1, replace one unit of k columns.

    ||sum_{i<=k} (x_i x_i^T - x'_i x'_i^T)||_F <= sqrt(2) k (spec §2.6: the exact maximum for k = 1 is sqrt(2),
    attained at orthogonal unit vectors; the seed's capePCA uses 1/N_s, the spectral-norm bound).
    """
    if n_rows < 1 or unit_size < 1:
        raise ConfigurationError("n_rows and unit_size must be >= 1")
    return math.sqrt(2.0) * unit_size / n_rows


def infomax_sensitivities(W: np.ndarray, b: np.ndarray, learning_rate: float, n_rows: int, data_radius: float,
                          unit_size: int = 1) -> tuple[float, float]:
    """L2 sensitivities of a site's infomax update (Delta W_s, Delta b_s), replace one unit of ``unit_size`` columns.

    Seed eq. for G_s (Bell & Sejnowski infomax with bias, natural gradient, average form over the N_s columns):
    ``Delta W_s = rho (I + (1/N_s) sum_n (1 - 2 y_n) z_n^T) W``, ``Delta b_s = rho (1/N_s) sum_n (1 - 2 y_n)``,
    z_n = W x_n + b, y_n = sigmoid(z_n). One column contributes t(x) = (1 - 2y) (W^T z)^T (rank one), with
    |1 - 2 y_i| = |tanh(z_i / 2)| <= min(1, |z_i| / 2), ||z|| <= ||W||_2 r + ||b|| =: B (r = public data radius):

        ||t(x)||_F <= ||1 - 2y|| ||W||_2 ||z|| <= m ||W||_2 B,     m = min(sqrt(R), B / 2),
        Delta_W = 2 rho k m ||W||_2 B / N_s,       Delta_b = 2 rho k m / N_s   (replace-one, triangle inequality).

    W and b are public (released in earlier rounds), so these bounds are data-independent given the transcript.
    """
    W = np.asarray(W, float)
    b = np.asarray(b, float)
    if n_rows < 1 or unit_size < 1 or learning_rate <= 0 or data_radius <= 0:
        raise ConfigurationError("n_rows, unit_size, learning_rate and data_radius must be positive")
    spec = float(np.linalg.norm(W, 2))
    bound_z = spec * float(data_radius) + float(np.linalg.norm(b))
    m = min(math.sqrt(W.shape[0]), bound_z / 2.0)
    scale = 2.0 * float(learning_rate) * unit_size * m / n_rows
    return scale * spec * bound_z, scale


# ------------------------------------------------------------------------------------------------ closed forms


def rdp_closed_form_epsilon(mu_z_total: float, delta: float) -> float:
    """Seed's RDP / moments closed form: min over alpha > 1 of alpha rho + ln(1/delta)/(alpha - 1), rho = sum mu_z.

    For Gaussian privacy losses N(mu_z, 2 mu_z) the Renyi divergence of order alpha is alpha mu_z; the optimum
    alpha* = 1 + sqrt(ln(1/delta)/rho) gives ``rho + 2 sqrt(rho ln(1/delta))``.
    """
    dlt = validate_delta(delta)
    rho = float(mu_z_total)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / dlt))


def moments_closed_form_epsilon(mu_z_total: float, delta: float, lambdas: Sequence[int] | None = None) -> float:
    """Moments accountant in closed form: min over integer lambda of (lambda (lambda + 1) rho + ln(1/delta))/lambda.

    log E[exp(lambda z)] = lambda mu_z + lambda^2 sigma_z^2 / 2 = lambda (lambda + 1) mu_z (sigma_z^2 = 2 mu_z,
    spec §3.3), summed over rounds (rho = sum_j mu_z,j); Abadi et al. (2016) Thm. 2 tail bound.
    """
    dlt = validate_delta(delta)
    lam = np.asarray([o - 1 for o in MOMENTS_ORDERS] if lambdas is None else lambdas, float)
    return float(np.min((lam * (lam + 1.0) * mu_z_total + math.log(1.0 / dlt)) / lam))


def _strong(eps_rounds: np.ndarray, counts: np.ndarray, delta_prime: float) -> float:
    total_sq = float(np.sum(counts * eps_rounds**2))
    return math.sqrt(2.0 * math.log(1.0 / delta_prime) * total_sq) + float(np.sum(counts * eps_rounds
                                                                                  * np.expm1(eps_rounds)))


def strong_composition_epsilon(events: Events, delta: float, *, grid: int = 41) -> float:
    """Strong composition (Dwork, Rothblum & Vadhan 2010, heterogeneous form) of Gaussian rounds.

    ``events`` are (mu_j, count_j). A fraction f of delta goes to delta' and (1 - f) delta is spread evenly over
    the K = sum count_j rounds (delta_j = (1 - f) delta / K, eps_j = epsilon_of(mu_j, delta_j)); the smallest
    eps over f in a log-spaced grid on [1e-3, 0.999] is returned. K = 1 returns the single round's exact eps.
    """
    dlt = validate_delta(delta)
    ev = _events(events)
    if not ev:
        return 0.0
    mus = np.array([m for m, _ in ev])
    counts = np.array([c for _, c in ev], float)
    K = float(counts.sum())
    if K == 1:
        return epsilon_of(mus[0], dlt)
    best = math.inf
    for f in np.concatenate([np.geomspace(1e-3, 0.5, grid), 1.0 - np.geomspace(1e-3, 0.5, grid)[::-1]]):
        d_round = (1.0 - f) * dlt / K
        eps_rounds = np.array([epsilon_of(m, d_round) for m in mus])
        best = min(best, _strong(eps_rounds, counts, f * dlt))
    return best


# ------------------------------------------------------------------------------------------------ accountants


def gdp_epsilon(events: Events, delta: float) -> float:
    """Exact: the composed view is a Gaussian mechanism with mu = sqrt(sum_j count_j mu_j^2) (spec §0.5)."""
    mu = math.sqrt(sum(c * m * m for m, c in _events(events)))
    return epsilon_of(mu, delta)


def _gaussian_event(mu: float):
    return dp_accounting.GaussianDpEvent(noise_multiplier=1.0 / mu)


def rdp_curve(events: Events, orders: Sequence[float]) -> np.ndarray:
    """RDP epsilon(alpha) of the composition, from the ``dp-accounting`` RDP accountant (public API only).

    For each order alone, the accountant's epsilon at a reference delta is inverted through its documented
    conversion eps = rdp + ln(1 - 1/alpha) - ln(delta alpha)/(alpha - 1); for the Gaussian this equals
    alpha sum_j count_j mu_j^2 / 2 (tested).
    """
    _require_library()
    ev = _events(events)
    ref = 1e-300
    out = []
    for a in orders:
        acc = rdp_privacy_accountant.RdpAccountant(orders=[float(a)])
        for mu, c in ev:
            acc.compose(_gaussian_event(mu), c)
        eps = acc.get_epsilon(ref)
        out.append(eps - math.log1p(-1.0 / a) + math.log(ref * a) / (a - 1.0))
    return np.asarray(out)


def rdp_epsilon(events: Events, delta: float, orders: Sequence[float] | None = None) -> float:
    """``dp-accounting`` RdpAccountant (default orders 1.1..1024) epsilon of the composition."""
    _require_library()
    dlt = validate_delta(delta)
    ev = _events(events)
    if not ev:
        return 0.0
    acc = rdp_privacy_accountant.RdpAccountant(orders=None if orders is None else list(orders))
    for mu, c in ev:
        acc.compose(_gaussian_event(mu), c)
    return float(acc.get_epsilon(dlt))


def moments_epsilon(events: Events, delta: float, orders: Sequence[int] = MOMENTS_ORDERS) -> float:
    """Moments accountant (Abadi et al. 2016 Thm. 2) on the library RDP: min_lambda RDP(lambda+1) + ln(1/delta)/lambda.

    Orders alpha = lambda + 1 are integers (``MOMENTS_ORDERS``); log moment alpha(lambda) = lambda RDP(lambda + 1).
    """
    dlt = validate_delta(delta)
    if not _events(events):
        return 0.0
    alphas = np.asarray(orders, float)
    rdp = rdp_curve(events, alphas)
    return float(np.min(rdp + math.log(1.0 / dlt) / (alphas - 1.0)))


def pld_epsilon(events: Events, delta: float, *, discretization: float = 1e-3) -> float:
    """``dp-accounting`` PLD accountant epsilon (pessimistic discretisation ``discretization``)."""
    _require_library()
    dlt = validate_delta(delta)
    ev = _events(events)
    if not ev:
        return 0.0
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=discretization)
    for mu, c in ev:
        acc.compose(_gaussian_event(mu), c)
    return float(acc.get_epsilon(dlt))


def compare_accountants(events: Events, delta: float, *, include_pld: bool = True) -> dict[str, float | None]:
    """epsilon of the same composition under every accountant (module docstring), plus the seed's closed form."""
    dlt = validate_delta(delta)
    ev = _events(events)
    rho = sum(c * m * m / 2.0 for m, c in ev)
    have_lib = dp_accounting is not None  # without the optional extra only the library-free values are given
    out: dict[str, float | None] = {
        "gdp": gdp_epsilon(ev, dlt),
        "rdp": rdp_epsilon(ev, dlt) if have_lib else None,
        "moments": moments_epsilon(ev, dlt) if have_lib else None,
        "strong": strong_composition_epsilon(ev, dlt),
        "rdp_closed_form": rdp_closed_form_epsilon(rho, dlt) if rho > 0 else 0.0,
        "moments_closed_form": moments_closed_form_epsilon(rho, dlt) if rho > 0 else 0.0,
    }
    if include_pld:
        out["pld"] = pld_epsilon(ev, dlt) if have_lib else None
    return out


def _epsilon(accountant: str, events: Events, delta: float) -> float:
    if accountant == "gdp":
        return gdp_epsilon(events, delta)
    if accountant == "rdp":
        return rdp_epsilon(events, delta)
    if accountant == "moments":
        return moments_epsilon(events, delta)
    if accountant == "strong":
        return strong_composition_epsilon(events, delta)
    raise ConfigurationError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")


def calibrate_round_mu(epsilon: float, delta: float, rounds: int, accountant: str = "gdp", *,
                       fixed_events: Events = (), rtol: float = 1e-6) -> float:
    """Largest per-round mu such that ``rounds`` rounds (plus ``fixed_events``) are (epsilon, delta)-DP.

    ``gdp`` is solved exactly: mu = sqrt((mu*(eps, delta)^2 - sum fixed mu^2) / rounds). The other accountants
    bisect on mu (their epsilon increases with mu) and return the lower end (private side).
    """
    eps = validate_epsilon(epsilon)
    dlt = validate_delta(delta)
    if isinstance(rounds, bool) or int(rounds) != rounds or rounds < 1:
        raise ConfigurationError(f"rounds must be an integer >= 1, got {rounds!r}")
    fixed = _events(fixed_events)
    if accountant == "gdp":
        rest = calibrate_mu(eps, dlt) ** 2 - sum(c * m * m for m, c in fixed)
        if rest <= 0:
            raise PrivacyParameterError("the fixed releases already use the whole (epsilon, delta) budget")
        return math.sqrt(rest / rounds)
    if accountant not in ACCOUNTANTS:
        raise ConfigurationError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")

    def eps_of(mu: float) -> float:
        return _epsilon(accountant, [*fixed, (mu, int(rounds))], dlt)

    if fixed and _epsilon(accountant, fixed, dlt) >= eps:
        raise PrivacyParameterError("the fixed releases already use the whole (epsilon, delta) budget")
    lo, hi = 0.0, calibrate_mu(eps, dlt) / math.sqrt(rounds) * 1.01  # no accountant beats the exact GDP bound
    if eps_of(hi * 1e-9) > eps:  # e.g. strong composition spreads delta over the rounds even as mu -> 0
        raise PrivacyParameterError(f"(epsilon={eps}, delta={dlt}) cannot be met with {rounds} rounds under the "
                                    f"{accountant!r} accountant (with the fixed releases)")
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if eps_of(mid) <= eps:
            lo = mid
        else:
            hi = mid
    return lo
