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


def relaxed_sensitivity(model: str, d: int, n_samples: int, *, domain: str = "l2") -> float:
    """L2 sensitivity of the whole coefficient vector for relaxed FM (Ding et al. 2020; spec §5.3).

    Dinf: logistic (1/N) sqrt(d^2/16 + d), linear (2/N) sqrt(1 + 4d + d^2);
    D2: logistic sqrt(17)/(4N), linear 2 sqrt(6)/N.
    """
    n = float(n_samples)
    if domain == "linf":
        return (math.sqrt(d * d / 16 + d) if model == "logistic" else 2 * math.sqrt(1 + 4 * d + d * d)) / n
    return (math.sqrt(17.0) / 4 if model == "logistic" else 2 * math.sqrt(6.0)) / n
