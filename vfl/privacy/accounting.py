"""Privacy reports and accounting (spec §1.4, §2.3, §2.6, §5.1).

A :class:`PrivacyReport` states the guarantee of one whole release: global (eps, delta), the
neighbouring relation, per-party eps^(k), the paper-claimed epsilon next to the true one, and notes.
Noisy gradient descent gets exact (Gaussian-DP composition) and RDP accounting.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from vfl.privacy.calibration import calibrate_mu, epsilon_of, validate_delta

__all__ = [
    "PartyPrivacy",
    "PrivacyReport",
    "NEIGHBOURING",
    "gaussian_mu_of_blocks",
    "noisy_gd_mu",
    "noisy_gd_epsilon_exact",
    "noisy_gd_sigma_for",
    "noisy_gd_epsilon_rdp",
    "rdp_optimal_order",
    "tasnim_rdp_order",
]

NEIGHBOURING = "bounded DP: replace one row (features of every party and the label); N and the row alignment are public"


@dataclass
class PartyPrivacy:
    """Guarantee for changes of only party k's part of one row (Xu et al. 2021 Thm. 2 analogue)."""

    party: int
    name: str
    epsilon: float
    epsilon_bottom_up: float | None = None
    epsilon_paper: float | None = None
    sensitivity: dict[str, float] | float | None = None


@dataclass
class PrivacyReport:
    """What a release guarantees. ``epsilon`` is the true guarantee; ``epsilon_claimed`` what was asked for."""

    mechanism: str
    model: str
    epsilon_claimed: float | None
    epsilon: float | None
    delta: float | None
    formal_dp: bool = True
    neighbouring: str = NEIGHBOURING
    domain: str | None = None
    calibration: str | None = None
    sensitivities: dict[str, float] = field(default_factory=dict)
    noise_scales: dict[str, float] = field(default_factory=dict)
    parties: list[PartyPrivacy] = field(default_factory=list)
    seeded: bool = False
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def mark_data_dependent(self, what: str) -> None:
        """Bounds taken from the private data (spec pitfall 2): no formal guarantee; say what leaked."""
        self.formal_dp = False
        self.notes.append(f"{what} were taken from the private data: NOT differentially private")

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), indent=kwargs.pop("indent", 2), **kwargs)

    def to_text(self) -> str:
        def fmt(x: float | None) -> str:
            return "-" if x is None else (f"{x:.4g}" if math.isfinite(x) else "inf")

        lines = [f"Privacy report: {self.mechanism} ({self.model} regression)"]
        if not self.formal_dp:
            lines.append("  formal DP guarantee: NO")
        if self.epsilon is None:
            lines.append("  no noise: no differential privacy")
        else:
            d = "" if self.delta is None else f", delta = {self.delta:.3g}"
            lines.append(f"  global: epsilon = {fmt(self.epsilon)}{d}")
            if self.epsilon_claimed is not None and not math.isclose(self.epsilon_claimed, self.epsilon,
                                                                     rel_tol=1e-6):
                lines.append(f"  claimed epsilon = {fmt(self.epsilon_claimed)}, true epsilon = {fmt(self.epsilon)}")
        lines.append(f"  neighbouring: {self.neighbouring}")
        if self.domain:
            lines.append(f"  data domain: {self.domain}")
        if self.calibration:
            lines.append(f"  calibration: {self.calibration}")
        if self.sensitivities:
            lines.append("  sensitivities: " + ", ".join(f"{k} = {v:.4g}" for k, v in self.sensitivities.items()))
        if self.noise_scales:
            lines.append("  noise scales: " + ", ".join(f"{k} = {v:.4g}" for k, v in self.noise_scales.items()))
        for p in self.parties:
            extra = ""
            if p.epsilon_paper is not None:
                extra = f" (paper closed form {fmt(p.epsilon_paper)})"
            lines.append(f"  party {p.party} ({p.name}): epsilon^(k) = {fmt(p.epsilon)}{extra}")
        if self.seeded:
            lines.append("  WARNING: noise drawn from a fixed seed (reproducible experiment, not for release)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def gaussian_mu_of_blocks(sensitivities: dict[str, float], taus: dict[str, float]) -> float:
    """mu = sqrt(sum_j Delta_j^2 / tau_j^2) of a joint release of Gaussian blocks (spec §0.5 'Blocks')."""
    return math.sqrt(sum((sensitivities[k] / taus[k]) ** 2 for k in sensitivities if sensitivities[k] > 0))


# ------------------------------------------------------------------ noisy gradient descent (spec §5.1)
def noisy_gd_mu(steps: int, sensitivity: float, sigma: float) -> float:
    """T-fold adaptive composition of Gaussian steps: mu = sqrt(T) Delta / tau (Dong, Roth & Su 2022)."""
    return math.sqrt(steps) * sensitivity / sigma


def noisy_gd_epsilon_exact(steps: int, sensitivity: float, sigma: float, delta: float) -> float:
    """Exact epsilon of T noisy-GD steps: epsilon_of(sqrt(T) Delta/tau, delta)."""
    return epsilon_of(noisy_gd_mu(steps, sensitivity, sigma), delta)


def noisy_gd_sigma_for(epsilon: float, delta: float, steps: int, sensitivity: float) -> float:
    """Per-step noise std hitting a target: tau = sqrt(T) Delta / mu*(eps, delta)."""
    return math.sqrt(steps) * sensitivity / calibrate_mu(epsilon, delta)


def rdp_optimal_order(steps: int, sensitivity: float, sigma: float, delta: float) -> float:
    """alpha* = 1 + sqrt(ln(1/delta)/rho), rho = T Delta^2/(2 tau^2) (Mironov 2017)."""
    rho = steps * sensitivity**2 / (2 * sigma**2)
    return 1.0 + math.sqrt(math.log(1.0 / delta) / rho)


def tasnim_rdp_order(steps: int, sensitivity: float, sigma: float, delta: float) -> float:
    """Tasnim et al. 2023 eq. (8): alpha = 1 + sqrt(1 + 2 tau^2 ln(1/delta)/(T Delta^2)) (spurious '1 +')."""
    return 1.0 + math.sqrt(1.0 + 2 * sigma**2 * math.log(1.0 / delta) / (steps * sensitivity**2))


def noisy_gd_epsilon_rdp(steps: int, sensitivity: float, sigma: float, delta: float, *,
                         order: float | None = None) -> float:
    """RDP conversion eps(alpha) = alpha rho + ln(1/delta)/(alpha - 1); default alpha = alpha* (spec §5.1)."""
    validate_delta(delta)
    rho = steps * sensitivity**2 / (2 * sigma**2)
    a = rdp_optimal_order(steps, sensitivity, sigma, delta) if order is None else float(order)
    return a * rho + math.log(1.0 / delta) / (a - 1.0)
