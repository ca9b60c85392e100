"""Privacy reports and accounting (spec §1.4, §2.3, §2.6, §5.1).

A :class:`PrivacyReport` states the guarantee of one whole release: global (eps, delta), the
neighbouring relation, per-party eps^(k), the paper-claimed epsilon next to the true one, and notes.
Noisy gradient descent gets exact (Gaussian-DP composition) and RDP accounting.

**Against whom** (``epsilon_against``; per party ``PartyPrivacy.epsilon_against``). A vertical FM release is
seen by the coordinator (every released block) and by every party (the model, its own data and the noise it drew
itself). With the distributed noise of Xu, Yuan & Wu 2021's dissection made two-sided (``noise_sharing=
"two-sided"``: both parties of a cross block add an independent draw of the block's full calibrated noise; m = 2
contributors, t = 1 tolerated), the noise a single party (alone or with the coordinator) does not know has the
calibrated variance tau^2 on every block, so the calibrated epsilon holds against it; the coordinator alone faces
2 tau^2 on the cross blocks, hence a smaller epsilon. ``"one-sided"`` is the earlier release (the responder of a
cross block draws its whole noise, so it sees that block noise-free: no guarantee against a party);
``"central"`` is an in-process release (one process draws everything: the guarantee is against anyone who sees
the model). Keys: :data:`AGAINST_COORDINATOR`, :data:`AGAINST_PARTY`, :data:`AGAINST_PARTY_AND_COORDINATOR`,
:data:`AGAINST_ANYONE`. Terms are defined for users in docs/privacy.md.

**The one formal_dp rule** (:func:`formal_dp_status`; every report path calls it): a report says
``formal_dp: true`` only when (1) the mechanism has a formal (eps, delta)-DP proof and added its noise,
(2) no bound (feature or label clipping bounds) was taken from the private data (spec pitfall 2), and
(3) the noise came from OS entropy, not a fixed seed (noise anyone can regenerate can be subtracted).
Otherwise ``formal_dp: false`` and ``formal_dp_reasons`` lists every reason that applies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vfl.privacy.calibration import calibrate_mu, epsilon_of, validate_delta

__all__ = [
    "FORMAL_DP_RULE",
    "NO_FORMAL_GUARANTEE",
    "DP_BCD_REASON",
    "SEEDED_REASON",
    "formal_dp_status",
    "apply_formal_dp",
    "PartyPrivacy",
    "PrivacyReport",
    "NEIGHBOURING",
    "NOISE_SHARING",
    "AGAINST_COORDINATOR",
    "AGAINST_PARTY",
    "AGAINST_PARTY_AND_COORDINATOR",
    "AGAINST_ANYONE",
    "epsilon_against",
    "gaussian_mu_of_blocks",
    "noisy_gd_mu",
    "noisy_gd_epsilon_exact",
    "noisy_gd_sigma_for",
    "noisy_gd_epsilon_rdp",
    "rdp_optimal_order",
    "tasnim_rdp_order",
]

NEIGHBOURING = "bounded DP: replace one row (features of every party and the label); N and the row alignment are public"

NOISE_SHARING = ("central", "one-sided", "two-sided")   # who draws a cross block's noise (module docstring)
AGAINST_COORDINATOR = "coordinator"
AGAINST_PARTY = "each party"
AGAINST_PARTY_AND_COORDINATOR = "party + coordinator"
AGAINST_ANYONE = "anyone who sees the model"
AGAINST_TEXT = {
    AGAINST_COORDINATOR: "the coordinator alone",
    AGAINST_PARTY: "any single party (about the other parties' data)",
    AGAINST_PARTY_AND_COORDINATOR: "a party together with the coordinator",
    AGAINST_ANYONE: "anyone who sees the model or the released coefficients",
}
NOISE_SHARING_TEXT = {
    "two-sided": "both parties of every cross-party block add an independent draw of the block's full noise, so "
                 "no single participant knows a block's total noise",
    "one-sided": "one party of every cross-party block draws the block's whole noise and so sees the block "
                 "without noise",
    "central": "one process draws all the noise (in-process release)",
}


def epsilon_against(noise_sharing: str, *, calibrated: float | None, coordinator: float | None,
                    party_sees_noise_free: bool) -> dict[str, float | None]:
    """epsilon against each kind of observer (module docstring, "Against whom").

    ``calibrated``: the epsilon of the release with one calibrated draw of unknown noise on every block;
    ``coordinator``: the coordinator's epsilon when cross blocks carry two draws; ``party_sees_noise_free``: under
    one-sided noise, some party responds to a cross block that depends on data it does not hold (it then sees
    that block without noise, so no epsilon bounds what it learns: inf).
    """
    if noise_sharing not in NOISE_SHARING:
        raise ValueError(f"noise_sharing must be one of {NOISE_SHARING}, got {noise_sharing!r}")
    if noise_sharing == "central":
        return {AGAINST_ANYONE: calibrated}
    if noise_sharing == "one-sided":
        party = math.inf if (party_sees_noise_free and calibrated is not None) else calibrated
        return {AGAINST_COORDINATOR: calibrated, AGAINST_PARTY: party, AGAINST_PARTY_AND_COORDINATOR: party}
    return {AGAINST_COORDINATOR: coordinator, AGAINST_PARTY: calibrated, AGAINST_PARTY_AND_COORDINATOR: calibrated}


FORMAL_DP_RULE = (
    "formal_dp is true only when the mechanism has a formal (eps, delta)-DP proof and added its noise, every "
    "bound was declared publicly (none taken from the data), and the noise came from OS entropy (no fixed seed)"
)
DP_BCD_REASON = (
    "DP-BCD is locally-sensitive DP over a tiny universe with data-dependent noise, and the receiving "
    "party learns X*beta~ = v_in - v_out exactly (de Jong et al. 2022; docs/dp_bcd.md), so no formal "
    "(eps, delta)-DP guarantee holds"
)
SEEDED_REASON = "the noise was drawn from a fixed seed (random_state): anyone with the seed can remove it"
NO_FORMAL_GUARANTEE: dict[str, str] = {
    "none": "mechanism 'none' adds no noise: the model reveals its training data",
    "bcd": "BCD adds no noise: the model and every remainder reveal the data",
    "dp-bcd": DP_BCD_REASON,
}


def formal_dp_status(mechanism: str, *, noise: bool = True, data_dependent: Sequence[str] = (),
                     seeded: bool = False, other_reasons: Sequence[str] = ()) -> tuple[bool, list[str]]:
    """THE rule deciding ``formal_dp`` for every report (module docstring); returns (formal_dp, reasons).

    ``mechanism``: its name (``"none"``, ``"bcd"``, ``"dp-bcd"`` have no formal guarantee, see
    :data:`NO_FORMAL_GUARANTEE`); ``noise``: False when a noisy mechanism was run without noise;
    ``data_dependent``: what came from the private data (e.g. ``"the feature bounds"``); ``seeded``: a fixed
    seed was used; ``other_reasons``: further reasons a caller already recorded (kept, deduplicated).
    """
    reasons: list[str] = []
    if mechanism in NO_FORMAL_GUARANTEE:
        reasons.append(NO_FORMAL_GUARANTEE[mechanism])
    elif not noise:
        reasons.append(f"{mechanism} was run without noise")
    reasons += [f"{what} were taken from the private data" for what in data_dependent]
    if seeded:
        reasons.append(SEEDED_REASON)
    reasons += [r for r in other_reasons if r not in reasons]
    return (not reasons, reasons)


def apply_formal_dp(report: dict[str, Any], mechanism: str, *, noise: bool = True,
                    data_dependent: Sequence[str] = (), seeded: bool = False) -> dict[str, Any]:
    """Set ``formal_dp``/``formal_dp_reasons`` of a dict report (capeFM, BCD) by :func:`formal_dp_status`."""
    previous = [r for r in report.get("formal_dp_reasons", []) if isinstance(r, str)]
    report["formal_dp"], report["formal_dp_reasons"] = formal_dp_status(
        mechanism, noise=noise, data_dependent=data_dependent, seeded=seeded, other_reasons=previous)
    report["seeded"] = bool(seeded or report.get("seeded", False))
    return report


@dataclass
class PartyPrivacy:
    """Guarantee for changes of only party k's part of one row (Xu et al. 2021 Thm. 2 analogue)."""

    party: int
    name: str
    epsilon: float
    epsilon_bottom_up: float | None = None
    epsilon_paper: float | None = None
    sensitivity: dict[str, float] | float | None = None
    epsilon_against: dict[str, float | None] = field(default_factory=dict)


@dataclass
class PrivacyReport:
    """What a release guarantees. ``epsilon`` is the true guarantee; ``epsilon_claimed`` what was asked for.

    ``formal_dp`` and ``formal_dp_reasons`` are decided by :func:`formal_dp_status` from ``mechanism``,
    ``seeded`` and ``data_dependent`` (never set by hand); :meth:`mark_data_dependent` and
    :meth:`mark_seeded` re-decide. A ``formal_dp=False`` passed in (a stored report) is kept.
    """

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
    data_dependent: list[str] = field(default_factory=list)
    formal_dp_reasons: list[str] = field(default_factory=list)
    randomness: str | None = None
    noise_sharing: str | None = None
    epsilon_against: dict[str, float | None] = field(default_factory=dict)
    epsilon_against_notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.formal_dp and not self.formal_dp_reasons:  # a stored report that said no, without reasons
            self.formal_dp_reasons = ["the stored report recorded formal_dp: false"]
        self._decide()

    def _decide(self) -> None:
        self.formal_dp, self.formal_dp_reasons = formal_dp_status(
            self.mechanism, noise=True, data_dependent=self.data_dependent, seeded=self.seeded,
            other_reasons=self.formal_dp_reasons)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def mark_data_dependent(self, what: str) -> None:
        """Bounds taken from the private data (spec pitfall 2): no formal guarantee; say what leaked."""
        if what not in self.data_dependent:
            self.data_dependent.append(what)
            self.notes.append(f"{what} were taken from the private data: NOT differentially private")
        self._decide()

    def mark_seeded(self, source: str | None = None) -> None:
        """The noise came from a fixed seed (reproducible): no formal guarantee."""
        self.seeded = True
        if source is not None:
            self.randomness = source
        self._decide()

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), indent=kwargs.pop("indent", 2), **kwargs)

    def to_text(self) -> str:
        """The report in plain words; every term is explained in docs/privacy.md."""
        name = MECHANISM_TEXT.get(self.mechanism)
        lines = [f"Privacy report: {self.mechanism}" + (f", {name}" if name else "") + f" ({self.model} regression)"]
        if self.formal_dp:
            lines.append("  formal DP guarantee: yes")
        else:
            lines.append("  formal DP guarantee: no (" + "; ".join(self.formal_dp_reasons) + ")")
        lines.append(f"  protected (neighbouring datasets): {self.neighbouring}")
        if self.epsilon is None:
            lines.append("  no noise: no differential privacy")
        else:
            lines += self._epsilon_lines()
        lines += self._detail_lines()
        if self.seeded:
            lines.append("  WARNING: noise drawn from a fixed seed (reproducible experiment, not for release)")
        if self.randomness:
            lines.append(f"  randomness: {self.randomness}")
        lines += [f"  note: {n}" for n in self.notes]
        lines.append("  (terms: docs/privacy.md)")
        return "\n".join(lines)

    def against_summary(self) -> str:
        """One line for a plan printout: formal DP yes/no and epsilon against whom (issue 21: every party prints it
        for the plan it accepts), e.g. ``formal DP: yes; epsilon 1 against any single party or a party with the
        coordinator, 0.778 against the coordinator alone (delta 1e-05)``."""
        head = f"formal DP: {'yes' if self.formal_dp else 'no'}"
        if self.epsilon is None:
            return f"{head}; no noise"
        a = self.epsilon_against
        if AGAINST_COORDINATOR in a:
            body = (f"epsilon {_fmt(a.get(AGAINST_PARTY))} against any single party or a party with the coordinator, "
                    f"{_fmt(a[AGAINST_COORDINATOR])} against the coordinator alone")
        else:
            body = f"epsilon {_fmt(self.epsilon)} against anyone who sees the model"
        return head + "; " + body + ("" if self.delta is None else f" (delta {self.delta:.3g})")

    def _epsilon_lines(self) -> list[str]:
        d = "" if self.delta is None else f", delta = {self.delta:.3g}"
        lines = [f"  overall: epsilon = {_fmt(self.epsilon)}{d}"]
        if self.epsilon_claimed is not None and self.epsilon is not None and not math.isclose(
                self.epsilon_claimed, self.epsilon, rel_tol=1e-6):
            lines.append(f"  claimed epsilon = {_fmt(self.epsilon_claimed)}, true epsilon = {_fmt(self.epsilon)}")
        if self.epsilon_against:
            lines.append("  epsilon against whom (what each can learn from everything it sees, the model included):")
            for who, eps in self.epsilon_against.items():
                note = self.epsilon_against_notes.get(who)
                tail = f" ({note})" if note else ""
                lines.append(f"    {AGAINST_TEXT.get(who, who)}: epsilon = {_fmt(eps)}{tail}")
        if self.parties:
            lines.append("  per party (only that party's part of one row changes):")
        for p in self.parties:
            extra = "" if p.epsilon_paper is None else f"; Xu et al. 2021's closed form {_fmt(p.epsilon_paper)}"
            against, eps = p.epsilon_against, p.epsilon
            if AGAINST_COORDINATOR in against:
                eps = against.get(AGAINST_PARTY, eps)
                extra = (f" against any other party, alone or with the coordinator; "
                         f"{_fmt(against[AGAINST_COORDINATOR])} against the coordinator alone") + extra
            lines.append(f"    party {p.party} ({p.name}): epsilon = {_fmt(eps)}{extra}")
        return lines

    def _detail_lines(self) -> list[str]:
        lines = []
        if self.noise_sharing:
            lines.append(f"  noise sharing: {NOISE_SHARING_TEXT.get(self.noise_sharing, self.noise_sharing)}")
        if self.domain:
            lines.append(f"  data domain: {self.domain}")
        if self.calibration:
            lines.append(f"  calibration: {self.calibration}")
        if self.sensitivities:
            lines.append("  sensitivity (the largest change one row can make): "
                         + ", ".join(f"{_term(k)} {v:.4g}" for k, v in self.sensitivities.items()))
        if self.noise_scales:
            lines.append("  noise per coefficient: "
                         + ", ".join(f"{_term(k)} {v:.4g}" for k, v in self.noise_scales.items()))
        return lines

    def __str__(self) -> str:
        return self.to_text()


MECHANISM_TEXT = {
    "none": "no noise",
    "gaussian-fm": "Gaussian functional mechanism",
    "laplace-fm": "Laplace functional mechanism",
    "relaxed-fm": "relaxed functional mechanism",
    "noisy-gd": "noisy gradient descent",
    "objective-perturbation": "objective perturbation",
}
TERMS = {   # names in sensitivities / noise_scales -> plain words (docs/privacy.md, "Reading a privacy report")
    "beta": "constant term (beta):", "alpha": "linear terms (alpha):", "M": "quadratic terms (M):",
    "tau_beta": "constant term (beta): std", "tau_alpha": "linear terms (alpha): std",
    "tau_M": "quadratic terms (M): std", "tau": "every coefficient: std",
    "laplace_b": "every coefficient: Laplace scale",
    "L1 (noise)": "all coefficients, L1, used for the noise:", "L1 (tight block table)": "all coefficients, L1, tight:",
    "L2 (whole vector)": "all coefficients, L2:",
}


def _fmt(x: float | None) -> str:
    return "-" if x is None else (f"{x:.4g}" if math.isfinite(x) else "unbounded (no guarantee)")


def _term(key: str) -> str:
    return TERMS.get(key, f"{key} =")


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
