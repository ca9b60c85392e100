"""Privacy mechanisms for FM coefficient releases, usable centrally and block-wise.

Every mechanism assigns each released *entry* a noise distribution (:class:`NoiseSpec`) that depends
only on the block kind, so drawing noise block by block over any :class:`~vfl.fm.dissection.DissectionPlan`
gives exactly the centralized mechanism's distribution (Xu et al. 2021's "same utility" claim, spec §2.6).

* ``none``       - no noise, no privacy (reference).
* ``laplace-fm`` - Zhang et al. 2012 / Xu et al. 2021: i.i.d. Lap(Delta_f/eps) on alpha, vech(M) (and beta),
  ``fm_sensitivity="paper"|"xu"|"zhang"|"tight"`` (spec §1.2); pure eps-DP.
* ``gaussian-fm``- Tasnim et al. 2023 with the spec's corrections: Delta_2 = sqrt(2)/N, joint calibration
  tau_j = Delta_j sqrt(J')/mu*(eps, delta) (spec §2.3), ``sym="iso"`` noise (E + E^T)/2 (spec §2.4);
  ``calibration="classical"`` (eps < 1 only) and ``"paper"`` (their per-block classical noise, true eps reported).
* ``relaxed-fm`` - Ding et al. 2020: one common Gaussian std for all coefficients, calibrated with
  ``calibrate_mu`` to the L2 sensitivity of the whole vector (spec §5.3).

All noise is in average-form coefficient units.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from vfl.exceptions import ConfigurationError, PrivacyLeakWarning, PrivacyParameterError
from vfl.fm.dissection import Block, DissectionPlan
from vfl.fm.domain import party_radii
from vfl.privacy.accounting import (
    AGAINST_COORDINATOR,
    NOISE_SHARING,
    PartyPrivacy,
    PrivacyReport,
    epsilon_against,
    gaussian_mu_of_blocks,
)
from vfl.privacy.calibration import calibrate_mu, classical_sigma, epsilon_of, validate_delta, validate_epsilon
from vfl.privacy.sensitivity import (
    gaussian_party_sensitivities,
    gaussian_party_view_sensitivities,
    gaussian_sensitivities,
    gaussian_view_sensitivities,
    laplace_block_table_sum,
    laplace_party_sensitivity_sum,
    laplace_sensitivity_sum,
    relaxed_sensitivity,
    xu_party_sensitivity_sum,
)

MECHANISMS = ("none", "laplace-fm", "gaussian-fm", "relaxed-fm")
GAUSSIAN_CALIBRATIONS = ("analytic", "classical", "paper")   # gaussian-fm's calibration= (spec §2.3)
SYM_LAYOUTS = ("iso", "mirror")                              # gaussian-fm's sym= (spec §2.4)
DEFAULT_DOMAIN = {"none": "linf", "laplace-fm": "linf", "gaussian-fm": "l2", "relaxed-fm": "l2"}

__all__ = ["NoiseSpec", "Mechanism", "NoMechanism", "LaplaceFM", "GaussianFM", "RelaxedFM", "make_mechanism",
           "MECHANISMS", "GAUSSIAN_CALIBRATIONS", "SYM_LAYOUTS", "DEFAULT_DOMAIN", "draw_noise", "symmetric_noise",
           "BUDGET_SPLITS", "budget_shares", "risk_alpha_share"]


@dataclass(frozen=True)
class NoiseSpec:
    """Distribution of the noise on every entry of a block: std for Gaussian, scale b for Laplace."""

    kind: Literal["none", "gaussian", "laplace"]
    scale: float

    @property
    def std(self) -> float:
        return {"none": 0.0, "gaussian": self.scale, "laplace": math.sqrt(2.0) * self.scale}[self.kind]


class Mechanism:
    """Base class: per-block noise plus the privacy report of the whole release."""

    name = "none"

    def __init__(self, plan: DissectionPlan, n_samples: int, *, domain: str | None = None,
                 party_names: Sequence[str] | None = None, seeded: bool = False,
                 noise_sharing: str = "central") -> None:
        if int(n_samples) < 1:
            raise ConfigurationError(f"n_samples must be >= 1, got {n_samples}")
        if noise_sharing not in NOISE_SHARING:
            raise ConfigurationError(f"noise_sharing must be one of {', '.join(NOISE_SHARING)}, got {noise_sharing!r}")
        self.plan = plan
        self.model = plan.model
        self.n_samples = int(n_samples)
        self.domain = domain or DEFAULT_DOMAIN[self.name]
        self.party_names = list(party_names) if party_names else [f"party{k}" for k in range(plan.n_parties)]
        self.seeded = seeded
        self.noise_sharing = noise_sharing

    # ---- noise ---------------------------------------------------------------------------------
    def entry_noise(self, block: Block) -> NoiseSpec:
        """Noise distribution of each entry of ``block`` (for a diagonal M block: of its off-diagonal entries)."""
        return NoiseSpec("none", 0.0)

    def diagonal_noise(self, block: Block) -> NoiseSpec:
        """Noise of the diagonal entries of a diagonal M block (iso noise differs there)."""
        return self.entry_noise(block)

    def block_noise(self, block: Block, rng: np.random.Generator) -> np.ndarray:
        """Draw the block's noise: i.i.d. :meth:`entry_noise`, or for a diagonal M block the symmetric noise of
        :attr:`diagonal_layout` (:func:`symmetric_noise`)."""
        if block.diagonal:
            noise, halves = symmetric_noise(self.diagonal_layout, block.shape[0],
                                            lambda shape: draw_noise(self.diagonal_noise(block), shape, rng))
            return noise / halves
        return draw_noise(self.entry_noise(block), block.shape, rng)

    @property
    def diagonal_std(self) -> float:
        """sigma_M: noise std of a diagonal entry of M (sets the default eigenvalue floor, spec §2.5)."""
        return 0.0

    @property
    def diagonal_layout(self) -> str:
        """How a diagonal M block is noised: ``"iso"`` = (E + E^T)/2 with E i.i.d. of :meth:`diagonal_noise`;
        ``"vech"`` = i.i.d. draws on a <= b mirrored (spec §0.4, §2.4)."""
        return "vech"

    @property
    def lambda_floor(self) -> float:
        """Default public eigenvalue floor sigma_M sqrt(d) (spec §2.5); 0 without noise."""
        return self.diagonal_std * math.sqrt(self.plan.n_features)

    def alpha_noise_variance(self) -> np.ndarray:
        """Public noise variance of every entry of the released alpha (all alpha blocks, in the plan's order): the
        entry noise's variance, times :attr:`cross_block_draws` on a cross block. Used by the adaptive
        regularisation of the solve (:mod:`vfl.fm.solver`)."""
        var = np.zeros(self.plan.n_features)
        for b in self.plan.blocks:
            if b.kind == "alpha":
                draws = self.cross_block_draws if b.cross else 1
                var[self.plan.index(b)[0]] = draws * self.entry_noise(b).std ** 2
        return var

    @property
    def cross_block_draws(self) -> int:
        """Independent draws of a cross block's full calibrated noise: 2 when both of its parties add one
        (``noise_sharing="two-sided"``, the networked release), else 1 (docs/privacy.md, "Noise shared by both
        parties of a cross block")."""
        return 2 if self.noise_sharing == "two-sided" else 1

    def _against(self, calibrated: float | None, coordinator: float | None,
                 depends_on: int | None = None) -> dict[str, float | None]:
        """:func:`vfl.privacy.accounting.epsilon_against` for the whole release (``depends_on=None``) or for a change
        of party k's part only: under one-sided noise a party sees a cross block noise-free when it responds to a
        block that depends on data it does not hold."""
        if self.plan.n_parties < 2:
            return epsilon_against("central", calibrated=calibrated, coordinator=calibrated,
                                   party_sees_noise_free=False)
        exposed = any(b.cross and (depends_on is None or (depends_on in b.depends_on and b.responder != depends_on))
                      for b in self.plan.blocks)
        return epsilon_against(self.noise_sharing, calibrated=calibrated, coordinator=coordinator,
                               party_sees_noise_free=exposed)

    def _finish_against(self, report: PrivacyReport, coordinator_note: str | None = None) -> PrivacyReport:
        """Record the noise sharing and the against-whom figures on a report (two-sided runs only note the
        coordinator's kind of bound)."""
        report.noise_sharing = self.noise_sharing if self.plan.n_parties > 1 else None
        if coordinator_note and AGAINST_COORDINATOR in report.epsilon_against and self.noise_sharing == "two-sided":
            report.epsilon_against_notes[AGAINST_COORDINATOR] = coordinator_note
        return report

    def privacy_report(self) -> PrivacyReport:
        return PrivacyReport(self.name, self.model, None, None, None, domain=self.domain,
                             notes=["mechanism 'none' adds no noise: the model reveals its training data"])


class NoMechanism(Mechanism):
    name = "none"


def draw_noise(spec: NoiseSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """i.i.d. draws of one entry distribution (Gaussian std / Laplace scale b); zeros for no noise."""
    if spec.kind == "gaussian":
        return rng.normal(0.0, spec.scale, size=shape)
    if spec.kind == "laplace":
        return rng.laplace(0.0, spec.scale, size=shape)
    return np.zeros(shape)


def symmetric_noise(layout: str, d: int, draw: Callable[[tuple[int, ...]], np.ndarray],
                    batch: tuple[int, ...] = ()) -> tuple[np.ndarray, int]:
    """The noise of a diagonal M block (d x d, symmetric) as ``(H, halves)``: the noise is ``H / halves``.

    The one definition of both layouts (spec §0.4, §2.4), shared by the float mechanisms, the exact-integer
    networked release (:func:`vfl.privacy.fixed_point.single_party_block`, which adds ``halves * raw + H`` to stay
    in integers) and the audit (leading ``batch`` axes):

    * ``"iso"``: ``E + E^T`` with E (d x d) i.i.d., halves = 2, i.e. (E + E^T)/2: diagonal entries have the
      drawn distribution, off-diagonal ones half its variance (Gaussian);
    * ``"vech"``: d(d+1)/2 i.i.d. draws on a <= b copied to the lower triangle, halves = 1.

    ``draw(shape)`` returns i.i.d. draws of the diagonal entry distribution (floats or exact integers).
    """
    if layout == "iso":
        E = draw((*batch, d, d))
        return E + np.swapaxes(E, -1, -2), 2
    iu = np.triu_indices(d)
    values = draw((*batch, iu[0].size))
    U = np.zeros((*batch, d, d), dtype=np.asarray(values).dtype)
    U[..., iu[0], iu[1]] = values
    return U + np.swapaxes(np.triu(U, 1), -1, -2), 1


BUDGET_SPLITS = ("risk", "equal")   # gaussian-fm's budget_split= (or a float: the share of the alpha block)
RISK_MAX_ALPHA_SHARE = 0.9   # measured safeguard (docs/privacy.md): above it the floor shrinks the intercept too
RISK_MIN_GAIN = 0.005        # the equal split unless the reference risk falls by at least 0.5 % (docs/privacy.md)
_SPLIT_GRID = np.linspace(0.001, RISK_MAX_ALPHA_SHARE, int(round(RISK_MAX_ALPHA_SHARE * 1000)))


def _split_error(split: object) -> ConfigurationError:
    return ConfigurationError(f"budget_split must be 'risk', 'equal' or a number in (0, 1), got {split!r}")


def risk_alpha_share(n_features: int, n_samples: int, mu: float) -> float:
    """The alpha block's share s of the joint Gaussian budget that minimises the reference excess risk of linear
    regression (docs/privacy.md, "Budget split between the blocks"): with tau_alpha = Delta_alpha/(mu sqrt(s)),
    tau_M = Delta_M/(mu sqrt(1 - s)) (Delta_alpha = 4/N, Delta_M = sqrt(2)/N) and the solver's eigenvalue floor
    lambda = sqrt(d) tau_M acting as a ridge on the public reference problem M = I/d (rows on the unit sphere) with
    ||w||^2 = 4d/(3d + 1) (the norm at which the rule is the equal split when the noise is negligible):

        R(s) = (1/d) [ 2 d tau_M^2 + d tau_alpha^2 / 4 ] / (1/d + sqrt(d) tau_M)^2,

    minimised over a grid of step 0.001 in (0, :data:`RISK_MAX_ALPHA_SHARE`]; the equal split (0.5) unless the
    minimum is at least :data:`RISK_MIN_GAIN` below R(0.5). Public: d, N and mu*(epsilon, delta) only. The cap:
    where the floor dominates, R keeps falling as s -> 1, but the reference leaves out the intercept, which a huge
    floor shrinks to the middle of the label range (measured in docs/privacy.md).
    """
    d, n = float(n_features), float(n_samples)

    def risk(s: np.ndarray) -> np.ndarray:
        tau_a2 = (4.0 / n) ** 2 / (mu * mu * s)
        tau_m2 = (math.sqrt(2.0) / n) ** 2 / (mu * mu * (1.0 - s))
        return (2.0 * tau_m2 + tau_a2 / 4.0) / (1.0 / d + np.sqrt(d * tau_m2)) ** 2

    values = risk(_SPLIT_GRID)
    best = int(np.argmin(values))
    if values[best] > (1.0 - RISK_MIN_GAIN) * float(risk(np.array([0.5]))[0]):
        return 0.5   # the reference predicts less than RISK_MIN_GAIN: keep the equal split
    return round(float(_SPLIT_GRID[best]), 3)


def budget_shares(model: str, n_features: int, n_samples: int, mu: float, sensitivities: dict[str, float],
                  split: str | float = "risk") -> dict[str, float]:
    """Shares s_j (summing to 1) of the joint Gaussian budget mu*^2 spent on each released block:
    tau_j = Delta_j / (mu* sqrt(s_j)), so that sqrt(sum_j (Delta_j / tau_j)^2) = mu* exactly for any split.

    ``"equal"``: s_j = 1/J' (every block the same share; the calibration before issue 24). ``"risk"`` (linear
    regression): the alpha block gets :func:`risk_alpha_share` of what alpha and M share, chosen from d, N and
    mu* only; for logistic regression ``"risk"`` is the equal split (not measured to win there). A float in
    (0, 1) is the alpha share itself. A released beta block keeps the share 1/J'.
    """
    names = list(sensitivities)
    equal = {k: 1.0 / len(names) for k in names}
    if isinstance(split, str):
        if split not in BUDGET_SPLITS:
            raise _split_error(split)
        if split == "equal" or model != "linear":
            return equal
        alpha = risk_alpha_share(n_features, n_samples, mu)
    else:
        try:
            alpha = float(split)
        except (TypeError, ValueError):
            raise _split_error(split) from None
        if isinstance(split, bool) or not 0.0 < alpha < 1.0:
            raise _split_error(split)
    rest = 1.0 - equal.get("beta", 0.0)
    shares = {"alpha": alpha * rest, "M": (1.0 - alpha) * rest, "beta": equal.get("beta", 0.0)}
    return {k: shares[k] for k in names}


LAPLACE_SENSITIVITY_TEXT = {
    "paper": "Zhang et al. 2012 / Xu et al. 2021", "xu": "Xu et al. 2021", "zhang": "Zhang et al. 2012",
    "tight": "the tight per-block table of docs/privacy.md",
}


class LaplaceFM(Mechanism):
    """Laplace functional mechanism (Zhang et al. 2012, Alg. 1; Xu et al. 2021, Alg. 1; spec §1)."""

    name = "laplace-fm"

    def __init__(self, plan: DissectionPlan, n_samples: int, *, epsilon: float, fm_sensitivity: str = "paper",
                 domain: str | None = None, **kw) -> None:
        super().__init__(plan, n_samples, domain=domain, **kw)
        self.epsilon = validate_epsilon(epsilon)
        if plan.model == "logistic" and fm_sensitivity == "paper":
            fm_sensitivity = "xu"
        self.fm_sensitivity = fm_sensitivity
        self.sensitivity_sum = laplace_sensitivity_sum(plan.model, plan.n_features, variant=fm_sensitivity,
                                                       domain=self.domain, release_beta=plan.release_beta)
        self.scale = self.sensitivity_sum / (self.n_samples * self.epsilon)   # b, average form

    def entry_noise(self, block: Block) -> NoiseSpec:
        return NoiseSpec("laplace", self.scale)

    @property
    def diagonal_std(self) -> float:
        return math.sqrt(2.0) * self.scale

    def _true_sensitivity_sum(self) -> float:
        table = sum(laplace_block_table_sum(self.plan).values())
        if self.domain == "l2":
            table = min(table, laplace_sensitivity_sum(self.model, self.plan.n_features, variant="tight",
                                                       domain="l2", release_beta=self.plan.release_beta))
        return table

    def privacy_report(self) -> PrivacyReport:
        """Global eps from the tight block table; per-party eps^(k) = Delta^(k)/Delta_noise * eps (Xu Thm 2)."""
        noise_sum = self.sensitivity_sum
        eps_true = min(self.epsilon, self._true_sensitivity_sum() / noise_sum * self.epsilon)
        blocks = laplace_block_table_sum(self.plan)
        eps_block = {name: v / noise_sum * self.epsilon for name, v in blocks.items()}
        parties = []
        for k in range(self.plan.n_parties):
            top = laplace_party_sensitivity_sum(self.plan, k) / noise_sum * self.epsilon
            bottom = sum(eps_block[b.name] for b in self.plan.blocks if k in b.depends_on)
            paper = xu_party_sensitivity_sum(self.plan, k) / noise_sum * self.epsilon
            eps_k = min(top, eps_true)
            parties.append(PartyPrivacy(k, self.party_names[k], eps_k, bottom, paper,
                                        laplace_party_sensitivity_sum(self.plan, k) / self.n_samples,
                                        epsilon_against=self._against(eps_k, eps_k, k)))
        n_blocks = len(self.plan.blocks)
        report = PrivacyReport(
            self.name, self.model, self.epsilon, eps_true, None, domain=self.domain,
            calibration=(f"Laplace noise scaled to the L1 sensitivity of all coefficients together "
                         f"(fm_sensitivity={self.fm_sensitivity!r}: {LAPLACE_SENSITIVITY_TEXT[self.fm_sensitivity]})"),
            sensitivities={"L1 (noise)": noise_sum / self.n_samples,
                           "L1 (tight block table)": sum(blocks.values()) / self.n_samples},
            noise_scales={"laplace_b": self.scale}, parties=parties, seeded=self.seeded,
            notes=["per-party epsilon: Xu et al. 2021, Theorem 2, from the sensitivity of every released block "
                   "that depends on the party's data (adding up the blocks gives the same values)"],
            extra={"epsilon_per_block": eps_block,
                   "xu_corollary1_epsilon": n_blocks * sum(eps_block.values()) if n_blocks else 0.0},
            epsilon_against=self._against(eps_true, eps_true),
        )
        return self._finish_against(report, "an upper bound: the coordinator sees the sum of two Laplace draws on "
                                            "each cross-party block, which is at least as private as one")


class GaussianFM(Mechanism):
    """Gaussian functional mechanism (Tasnim et al. 2023, Alg. 1) with the spec §2 corrections."""

    name = "gaussian-fm"

    def __init__(self, plan: DissectionPlan, n_samples: int, *, epsilon: float, delta: float,
                 calibration: str = "analytic", sym: str = "iso", domain: str | None = None,
                 radii: Sequence[float] | None = None, budget_split: str | float = "risk", **kw) -> None:
        super().__init__(plan, n_samples, domain=domain, **kw)
        self.epsilon = validate_epsilon(epsilon)
        self.delta = validate_delta(delta)
        if sym not in SYM_LAYOUTS:
            raise ConfigurationError(f"sym must be 'iso' or 'mirror', got {sym!r}")
        self.sym = sym
        self.calibration = calibration
        self.radii = self._checked_radii(plan, radii)
        self.sens = gaussian_sensitivities(plan.model, self.n_samples, release_beta=plan.release_beta)
        self.budget_split = budget_split
        mu = calibrate_mu(self.epsilon, self.delta) if calibration == "analytic" else 1.0
        if calibration == "classical" and self.epsilon < 1.0:
            mu = 1.0 / classical_sigma(self.epsilon, self.delta)
        self.shares = budget_shares(plan.model, plan.n_features, self.n_samples, mu, self.sens, budget_split)
        if calibration == "analytic":
            self.taus = {k: v / (mu * math.sqrt(self.shares[k])) for k, v in self.sens.items()}
        elif calibration == "classical":
            if self.epsilon >= 1.0:
                raise PrivacyParameterError(
                    f"calibration='classical' is only proven for epsilon < 1 (got {self.epsilon}); use 'analytic'")
            c = classical_sigma(self.epsilon, self.delta)
            self.taus = {k: v * c / math.sqrt(self.shares[k]) for k, v in self.sens.items()}
        elif calibration == "paper":
            warnings.warn("calibration='paper' reproduces Tasnim et al.'s per-block noise, whose real epsilon is "
                          "larger than the requested one (see privacy_report_)", PrivacyLeakWarning, stacklevel=3)
            c = classical_sigma(self.epsilon, self.delta, require_proven=False)   # Tasnim et al. use it for any eps
            paper = gaussian_sensitivities(plan.model, self.n_samples, paper=True, release_beta=plan.release_beta)
            self.taus = {k: v * c for k, v in paper.items()}
        else:
            raise ConfigurationError(f"calibration must be 'analytic', 'classical' or 'paper', got {calibration!r}")
        if self.domain != "l2":
            raise ConfigurationError("gaussian-fm sensitivities hold on the l2 domain (||x|| <= 1) only")

    @staticmethod
    def _checked_radii(plan: DissectionPlan, radii: Sequence[float] | None) -> np.ndarray:
        """The per-party row-norm radii of the per-party report: r_k = sqrt(d_k/d) (how every party's columns are
        prepared), or larger given ones (conservative). Smaller ones are refused: nothing clips the rows to them, so
        the report would state a per-party epsilon the release does not give."""
        default = party_radii(plan.feature_counts)
        if radii is None:
            return default
        given = np.asarray(radii, dtype=float)
        if given.shape != default.shape or not np.isfinite(given).all() or (given < default - 1e-12).any():
            raise ConfigurationError(
                f"radii must be one number per party, each at least sqrt(d_k/d) = "
                f"{', '.join(f'{r:.4g}' for r in default)} (the rows are prepared to these radii and not clipped "
                f"further), got {list(np.atleast_1d(given))}")
        return given

    def entry_noise(self, block: Block) -> NoiseSpec:
        tau = self.taus[block.kind]
        if block.kind == "M" and self.sym == "iso":
            tau /= math.sqrt(2.0)   # off-diagonal entries of (E + E^T)/2
        return NoiseSpec("gaussian", tau)

    def diagonal_noise(self, block: Block) -> NoiseSpec:
        return NoiseSpec("gaussian", self.taus[block.kind])

    @property
    def diagonal_std(self) -> float:
        return self.taus["M"]

    @property
    def diagonal_layout(self) -> str:
        return "iso" if self.sym == "iso" else "vech"

    def true_mu(self) -> float:
        return gaussian_mu_of_blocks(self.sens, self.taus)

    def view_mu(self, draws: int, party: int | None = None) -> float:
        """mu of the view in which every cross block carries ``draws`` independent calibrated draws of unknown noise
        (single-party blocks one): sqrt(sum_j (Delta_j^view / tau_j)^2) with the view sensitivities of
        :func:`vfl.privacy.sensitivity.gaussian_view_sensitivities` (whole rows) or
        :func:`~vfl.privacy.sensitivity.gaussian_party_view_sensitivities` (only ``party``'s part of a row).
        ``draws=1`` is the calibrated release; ``draws=2`` the coordinator's view of a two-sided release."""
        beta = self.plan.release_beta
        if party is None:
            sens = gaussian_view_sensitivities(self.plan, self.n_samples, self.radii, draws=draws, release_beta=beta)
        else:
            sens = gaussian_party_view_sensitivities(self.plan, party, self.n_samples, self.radii, draws=draws,
                                                     release_beta=beta)
        return gaussian_mu_of_blocks({k: v for k, v in sens.items() if k in self.taus}, self.taus)

    def privacy_report(self) -> PrivacyReport:
        mu = self.true_mu()
        eps_true = epsilon_of(mu, self.delta)
        mu_coord = min(self.view_mu(self.cross_block_draws), mu)
        parties = []
        for k in range(self.plan.n_parties):
            s_k = gaussian_party_sensitivities(self.plan, k, self.n_samples, self.radii,
                                               release_beta=self.plan.release_beta)
            eps_k = epsilon_of(gaussian_mu_of_blocks(s_k, self.taus), self.delta)
            eps_k_coord = epsilon_of(self.view_mu(self.cross_block_draws, k), self.delta)
            parties.append(PartyPrivacy(k, self.party_names[k], eps_k, sensitivity=s_k,
                                        epsilon_against=self._against(eps_k, min(eps_k_coord, eps_k), k)))
        notes = ["all released coefficients share one budget: their noise is calibrated together so that the whole "
                 "release spends the requested epsilon (joint calibration, docs/privacy.md)",
                 "the quadratic terms' sensitivity is sqrt(2)/N (Tasnim et al. 2023 state 1/N, too small by sqrt(2))"]
        if self.calibration != "paper" and len(self.shares) > 1:
            notes.append("budget split between the blocks (share of the joint budget): " + ", ".join(
                f"{k} {v:.3f}" for k, v in self.shares.items()) + f" (budget_split={self.budget_split!r}, "
                "docs/privacy.md)")
        if self.calibration == "paper":
            notes.append(f"paper calibration: claimed epsilon {self.epsilon:g} is really {eps_true:.4g}")
        report = PrivacyReport(
            self.name, self.model, self.epsilon, eps_true, self.delta, domain="l2 (||x||_2 <= 1)",
            calibration=f"{GAUSSIAN_CALIBRATION_TEXT[self.calibration]}; {SYM_TEXT[self.sym]}",
            sensitivities=dict(self.sens),
            noise_scales={f"tau_{k}": v for k, v in self.taus.items()}, parties=parties, seeded=self.seeded,
            notes=notes, extra={"mu": mu, "mu_coordinator": mu_coord, "radii": self.radii.tolist(),
                                "calibration_name": self.calibration, "sym": self.sym,
                                "budget_split": self.budget_split, "budget_shares": dict(self.shares)},
            epsilon_against=self._against(eps_true, epsilon_of(mu_coord, self.delta)),
        )
        return self._finish_against(report, "every cross-party block carries two independent noise draws the "
                                            "coordinator does not know: twice the calibrated variance")


GAUSSIAN_CALIBRATION_TEXT = {
    "analytic": "analytic Gaussian calibration (Balle & Wang 2018), joint over all released coefficients",
    "classical": "classical Gaussian calibration sqrt(2 ln(1.25/delta))/epsilon (Dwork & Roth 2014), joint over all "
                 "released coefficients",
    "paper": "Tasnim et al. 2023's per-block classical calibration (reproduction only: its true epsilon is larger)",
}
SYM_TEXT = {
    "iso": "symmetric noise on the quadratic terms: (E + E^T)/2 ('iso')",
    "mirror": "symmetric noise on the quadratic terms: one draw per upper-triangle entry, mirrored ('mirror')",
}


class RelaxedFM(Mechanism):
    """Relaxed functional mechanism (Ding et al. 2020; spec §5.3): one Gaussian std for all coefficients."""

    name = "relaxed-fm"

    def __init__(self, plan: DissectionPlan, n_samples: int, *, epsilon: float, delta: float,
                 domain: str | None = None, **kw) -> None:
        super().__init__(plan, n_samples, domain=domain, **kw)
        self.epsilon = validate_epsilon(epsilon)
        self.delta = validate_delta(delta)
        self.sensitivity = relaxed_sensitivity(plan.model, plan.n_features, self.n_samples, domain=self.domain)
        self.tau = self.sensitivity / calibrate_mu(self.epsilon, self.delta)

    def entry_noise(self, block: Block) -> NoiseSpec:
        if block.kind == "M":
            return NoiseSpec("gaussian", self.tau / math.sqrt(2.0))
        return NoiseSpec("gaussian", self.tau)

    def diagonal_noise(self, block: Block) -> NoiseSpec:
        return NoiseSpec("gaussian", self.tau)

    @property
    def diagonal_std(self) -> float:
        return self.tau

    @property
    def diagonal_layout(self) -> str:
        return "iso"

    def privacy_report(self) -> PrivacyReport:
        eps = self.epsilon
        report = PrivacyReport(
            self.name, self.model, eps, eps, self.delta, domain=self.domain,
            calibration=("one noise std for all coefficients, analytic Gaussian calibration (Balle & Wang 2018) "
                         "instead of Ding et al. 2020's Extended Gaussian mechanism"),
            sensitivities={"L2 (whole vector)": self.sensitivity}, noise_scales={"tau": self.tau},
            parties=[PartyPrivacy(k, self.party_names[k], eps, epsilon_against=self._against(eps, eps, k))
                     for k in range(self.plan.n_parties)],
            seeded=self.seeded, notes=["per-party epsilon reported as the global one (no per-party analysis)"],
            epsilon_against=self._against(eps, eps),
        )
        return self._finish_against(report, "an upper bound: the coordinator sees two independent noise draws on "
                                            "each cross-party block, which is at least as private as one")


def make_mechanism(name: str, *, plan: DissectionPlan, n_samples: int, epsilon: float | None = None,
                   delta: float | None = None, **options) -> Mechanism:
    """Build a mechanism by name (``none``, ``laplace-fm``, ``gaussian-fm``, ``relaxed-fm``)."""
    if name not in MECHANISMS:
        raise ConfigurationError(f"unknown mechanism {name!r}; choose one of {', '.join(MECHANISMS)}")
    common = {k: options.pop(k) for k in ("domain", "party_names", "seeded", "noise_sharing") if k in options}
    if name == "none":
        return NoMechanism(plan, n_samples, **common)
    if epsilon is None:
        raise PrivacyParameterError(f"mechanism {name} needs epsilon")
    if name == "laplace-fm":
        allowed = {"fm_sensitivity"}
        cls = LaplaceFM
        kwargs = {"epsilon": epsilon}
    else:
        if delta is None:
            raise PrivacyParameterError(f"mechanism {name} needs delta")
        allowed = {"calibration", "sym", "radii", "budget_split"} if name == "gaussian-fm" else set()
        cls = GaussianFM if name == "gaussian-fm" else RelaxedFM
        kwargs = {"epsilon": epsilon, "delta": delta}
    unknown = set(options) - allowed
    if unknown:
        raise ConfigurationError(f"option(s) {sorted(unknown)} do not apply to mechanism {name}")
    return cls(plan, n_samples, **kwargs, **options, **common)
