"""Sensitivities of the FM coefficient releases (spec §1.2-1.4, §2.2, §2.6, §5.3).

All functions return **average-form** sensitivities (sum form / N, spec §0.3) unless named ``*_sum``.
Replace-one neighbouring (bounded DP, N public).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import Block, DissectionPlan

__all__ = [
    "laplace_sensitivity_sum",
    "block_l1_mass",
    "laplace_block_table_sum",
    "laplace_party_sensitivity_sum",
    "xu_party_sensitivity_sum",
    "gaussian_sensitivities",
    "gaussian_party_sensitivities",
    "partial_block_frobenius",
    "partial_block_frobenius_shared",
    "gaussian_block_sensitivities",
    "gaussian_view_sensitivities",
    "gaussian_party_view_sensitivities",
    "relaxed_sensitivity",
]

LAPLACE_VARIANTS = ("paper", "tight", "xu", "zhang")


def laplace_sensitivity_sum(model: str, d: int, *, variant: str = "paper", domain: str = "linf",
                            release_beta: bool = False) -> float:
    """Global L1 sensitivity Delta_f (sum form) of the FM coefficient vector (spec §1.2 table).

    * linear, paper (Zhang 2012 = Xu 2021, ordered pairs): 2(1+d)^2; tight vech: d^2+5d+2 (Dinf),
      d + 4 sqrt(d) + 3 (D2). Linear values include beta; 2 is subtracted when beta is not released.
    * logistic, ``zhang``: d^2/4 + 3d; ``xu``/``paper``: d^2/4 + d; tight: d + d(d+1)/8 (Dinf),
      sqrt(d) + (d+1)/8 (D2).
    Published values assume Dinf; under D2 they stay valid but loose.
    """
    if variant not in LAPLACE_VARIANTS:
        raise ConfigurationError(f"fm_sensitivity must be one of {LAPLACE_VARIANTS}, got {variant!r}")
    d = int(d)
    if model == "linear":
        if variant == "tight":
            val = d * d + 5 * d + 2 if domain == "linf" else d + 4 * math.sqrt(d) + 3
        else:
            val = 2.0 * (1 + d) ** 2
        return float(val - (0 if release_beta else 2))
    if model == "logistic":
        if variant == "tight":
            return float(d + d * (d + 1) / 8 if domain == "linf" else math.sqrt(d) + (d + 1) / 8)
        if variant == "zhang":
            return d * d / 4 + 3 * d
        return d * d / 4 + d
    raise ConfigurationError(f"unknown model {model!r}")


def block_l1_mass(plan: DissectionPlan, block: Block) -> float:
    """m_B: max over rows in Dinf of the per-row L1 mass of a block (sum form; spec §1.3 table)."""
    lin = plan.model == "linear"
    if block.kind == "beta":
        return 1.0
    if block.kind == "alpha":
        dk = block.shape[0]
        return 2.0 * dk if lin else dk / 2.0
    dk, dl = block.shape
    if block.diagonal:
        return dk * (dk + 1) / 2.0 if lin else dk * (dk + 1) / 16.0
    return float(dk * dl) if lin else dk * dl / 8.0


def laplace_block_table_sum(plan: DissectionPlan) -> dict[str, float]:
    """Delta_B = 2 m_B (sum form) for every released block of the plan."""
    return {b.name: 2.0 * block_l1_mass(plan, b) for b in plan.blocks}


def laplace_party_sensitivity_sum(plan: DissectionPlan, party: int) -> float:
    """Tight per-party Delta_f^(k) = 2 sum_{B : k in dep(B)} m_B (spec §1.3), from the block table."""
    return sum(2.0 * block_l1_mass(plan, b) for b in plan.blocks if party in b.depends_on)


def xu_party_sensitivity_sum(plan: DissectionPlan, party: int) -> float:
    """Xu et al. 2021 Thm. 2 closed forms (paper mode; spec §1.4).

    linear: Delta^(L) = 2(1 + 2d + d_L d), Delta^(k) = 2(2 d_k + d_k d);
    logistic: Delta^(L) = d + d_L(2d - d_L)/4, Delta^(k) = d_k + d_k(2d - d_k)/4.
    """
    d = plan.n_features
    dk = plan.feature_counts[party]
    if plan.model == "linear":
        if party == plan.label_owner:
            return 2.0 * (1 + 2 * d + dk * d)
        return 2.0 * (2 * dk + dk * d)
    if party == plan.label_owner:
        return d + dk * (2 * d - dk) / 4.0
    return dk + dk * (2 * d - dk) / 4.0


def gaussian_sensitivities(model: str, n_samples: int, *, paper: bool = False,
                           release_beta: bool = False) -> dict[str, float]:
    """Per-order L2 sensitivities Delta_0, Delta_1, Delta_2 (average form, D2, spec §2.2).

    linear: 1/N, 4/N, sqrt(2)/N; logistic: -, 1/N, sqrt(2)/(8N). ``paper=True`` gives Tasnim et al.'s
    spectral-norm Delta_2 (1/N, 1/(8N)), too small by sqrt(2) [correction]; used only to reproduce their noise.
    Only data-dependent released blocks appear (beta only for linear with ``release_beta``).
    """
    n = float(n_samples)
    c2 = 1.0 if paper else math.sqrt(2.0)
    if model == "linear":
        out = {"alpha": 4.0 / n, "M": c2 / n}
        if release_beta:
            out = {"beta": 1.0 / n, **out}
        return out
    if model == "logistic":
        return {"alpha": 1.0 / n, "M": c2 / (8.0 * n)}
    raise ConfigurationError(f"unknown model {model!r}")


def partial_block_frobenius(radius: float) -> float:
    """g(r) = max ||x x^T - x' x'^T||_F when only a block of norm <= r changes inside ||x|| <= 1 (spec §2.6).

    g(r) = sqrt(8 r^2 (1 - r^2)) for r^2 <= 1/2, else sqrt(2).
    """
    r2 = float(radius) ** 2
    return math.sqrt(8.0 * r2 * (1.0 - r2)) if r2 <= 0.5 else math.sqrt(2.0)


def gaussian_party_sensitivities(plan: DissectionPlan, party: int, n_samples: int,
                                 radii: Sequence[float], *, release_beta: bool = False) -> dict[str, float]:
    """Delta_j^(k): L2 sensitivities when only party k's part of one row changes (spec §2.6).

    k != L: Delta_0 = 0, Delta_1 = 4 r_k/N (linear) / r_k/N (logistic), Delta_2 = g(r_k)/N (/(8N));
    k = L (label holder): global Delta_0, Delta_1; Delta_2 = g(r_L)/N (/(8N)).
    """
    n = float(n_samples)
    r = float(radii[party])
    lin = plan.model == "linear"
    m_scale = 1.0 if lin else 1.0 / 8.0
    out: dict[str, float] = {}
    if party == plan.label_owner:
        out.update(gaussian_sensitivities(plan.model, n_samples, release_beta=release_beta))
    else:
        if lin and release_beta:
            out["beta"] = 0.0
        out["alpha"] = (4.0 if lin else 1.0) * r / n
    out["M"] = m_scale * partial_block_frobenius(r) / n
    return out


def partial_block_frobenius_shared(radius: float, weight: float) -> float:
    """g_w(r): the largest change when only a block of norm <= r changes inside ||x|| <= 1, measured in a view
    where the cross-party entries (the block against the rest of x) carry 1/weight times the noise variance.

    With a = ||x_k||^2, b = ||x'_k||^2, c = x_k . x'_k and S = ||rest of x||^2 <= 1 - max(a, b), the squared change
    is ||x_k x_k^T - x'_k x'_k^T||_F^2 + 2 w ||(x_k - x'_k) rest^T||_F^2 = a^2 + b^2 - 2c^2 + 2w(a + b - 2c) S,
    largest at a = b = r^2, S = 1 - r^2 and c = -w S (or c = -r^2 when -w S is out of reach):

        g_w(r)^2 = 2 (r^2 + w (1 - r^2))^2   if r^2 >= w (1 - r^2),   else 8 w r^2 (1 - r^2).

    w = 1 gives :func:`partial_block_frobenius` (one noise draw everywhere); w = 1/2 is the coordinator's view
    when both parties of every cross block add a calibrated draw (Xu, Yuan & Wu 2021's dissection with the
    distributed noise of docs/privacy.md, "Noise shared by both parties of a cross block").
    """
    r2, w = min(float(radius) ** 2, 1.0), float(weight)
    if not 0.0 < w <= 1.0:
        raise ConfigurationError(f"the view weight must lie in (0, 1], got {weight}")
    rest = 1.0 - r2
    if r2 >= w * rest:
        return math.sqrt(2.0) * (r2 + w * rest)
    return math.sqrt(8.0 * w * r2 * rest)


def gaussian_block_sensitivities(plan: DissectionPlan, n_samples: int, radii: Sequence[float], *,
                                 release_beta: bool = False) -> dict[str, float]:
    """Each released block's share Delta_b of the per-order L2 sensitivity (average form, l2 domain, radii r_k).

    beta: 1/N; alpha[k]: 4 r_k/N (logistic r_k/N); M[k,k]: sqrt(2) r_k^2/N; M[k,l] (k < l, counted with its mirror
    M[l,k]): 2 r_k r_l/N (logistic: M values / 8). For one row replaced, alpha changes by u = x y - x' y' with
    ||u_k|| <= 2 r_k, and M by D = x x^T - x' x'^T, whose weighted norm sum_k ||D_kk||^2 + w sum_{k != l} ||D_kl||^2
    is at most 2 [(1 - w) sum_k r_k^4 + w (sum_k r_k^2)^2] (expand in a_k = ||x_k||^2, b_k, c_k = x_k . x'_k: the
    c-terms form -2 c^T W c <= 0 with W = (1 - w) I + w 1 1^T positive semi-definite). Hence for any view in which
    block b carries noise std sigma_b = tau_j / sqrt(w_b), the release is a Gaussian mechanism with

        mu^2 <= sum_b (Delta_b / sigma_b)^2,

    and with one draw everywhere (and the default radii, sum r_k^2 = 1) the shares add up to the calibrated
    sensitivities exactly: sum_{b in order j} Delta_b^2 = Delta_j^2.
    """
    n = float(n_samples)
    lin = plan.model == "linear"
    r = [float(v) for v in radii]
    out: dict[str, float] = {}
    for b in plan.blocks:
        if b.kind == "beta":
            if release_beta:
                out[b.name] = 1.0 / n
        elif b.kind == "alpha":
            out[b.name] = (4.0 if lin else 1.0) * r[b.parties[0]] / n
        else:
            k, l = b.parties
            value = math.sqrt(2.0) * r[k] ** 2 if k == l else 2.0 * r[k] * r[l]
            out[b.name] = value / n if lin else value / (8.0 * n)
    return out


def _cross_weights(plan: DissectionPlan, draws: int) -> dict[str, float]:
    w = 1.0 / _check_draws(draws)
    return {b.name: (w if b.cross else 1.0) for b in plan.blocks}


def gaussian_view_sensitivities(plan: DissectionPlan, n_samples: int, radii: Sequence[float], *, draws: int,
                                release_beta: bool = False) -> dict[str, float]:
    """Per-order sensitivities Delta_j^view of a view in which every cross block carries ``draws`` independent
    calibrated draws (single-party blocks one), so mu_view = sqrt(sum_j (Delta_j^view / tau_j)^2).

    From :func:`gaussian_block_sensitivities`: (Delta_j^view)^2 = sum_{b in order j} w_b Delta_b^2, w_b = 1/draws for
    cross blocks; never above the calibrated Delta_j (adding independent noise is post-processing).
    """
    shares = gaussian_block_sensitivities(plan, n_samples, radii, release_beta=release_beta)
    weights = _cross_weights(plan, draws)
    full = gaussian_sensitivities(plan.model, n_samples, release_beta=release_beta)
    out: dict[str, float] = {}
    for kind, cap in full.items():
        total = sum(weights[b.name] * shares[b.name] ** 2 for b in plan.blocks if b.kind == kind and b.name in shares)
        out[kind] = min(math.sqrt(total), cap)
    return out


def gaussian_party_view_sensitivities(plan: DissectionPlan, party: int, n_samples: int, radii: Sequence[float], *,
                                      draws: int, release_beta: bool = False) -> dict[str, float]:
    """:func:`gaussian_party_sensitivities` in the view of :func:`gaussian_view_sensitivities` (cross blocks with
    ``draws`` draws): only party k's part of one row changes.

    k != L: Delta_1 = 4 r_k/N / sqrt(draws) (alpha[k] is a cross block; logistic r_k/N), Delta_2 = g_w(r_k)/N
    (:func:`partial_block_frobenius_shared`, w = 1/draws; logistic /8). k = L: y changes too, so alpha[L] moves by up
    to 2 r_L and the other alpha blocks by 2 ||rest|| <= 2 sqrt(1 - r_L^2): Delta_1^2 = (4/N)^2 (r_L^2 + w (1 - r_L^2))
    (logistic 1/N); Delta_0 = 1/N; Delta_2 = g_w(r_L)/N. Each value is capped by the one-draw value.
    """
    n = float(n_samples)
    w = 1.0 / _check_draws(draws)
    r = min(float(radii[party]), 1.0)
    lin = plan.model == "linear"
    one = gaussian_party_sensitivities(plan, party, n_samples, radii, release_beta=release_beta)
    a1 = 4.0 if lin else 1.0
    if party == plan.label_owner:
        alpha = a1 / n * math.sqrt(r * r + w * (1.0 - r * r))
    else:
        alpha = a1 * r / n * math.sqrt(w)
    out = {k: v for k, v in one.items() if k == "beta"}
    out["alpha"] = min(alpha, one["alpha"])
    out["M"] = min((1.0 if lin else 1.0 / 8.0) * partial_block_frobenius_shared(r, w) / n, one["M"])
    return out


def _check_draws(draws: int) -> int:
    if int(draws) < 1:
        raise ConfigurationError(f"a cross block's noise needs at least one draw, got {draws}")
    return int(draws)


def relaxed_sensitivity(model: str, d: int, n_samples: int, *, domain: str = "l2") -> float:
    """L2 sensitivity of the whole coefficient vector for relaxed FM (Ding et al. 2020; spec §5.3).

    Dinf: logistic (1/N) sqrt(d^2/16 + d), linear (2/N) sqrt(1 + 4d + d^2);
    D2: logistic sqrt(17)/(4N), linear 2 sqrt(6)/N.
    """
    n = float(n_samples)
    if domain == "linf":
        return (math.sqrt(d * d / 16 + d) if model == "logistic" else 2 * math.sqrt(1 + 4 * d + d * d)) / n
    return (math.sqrt(17.0) / 4 if model == "logistic" else 2 * math.sqrt(6.0)) / n
