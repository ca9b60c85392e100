"""capePCA then capeDJICA over separate sites as socket-free state machines (both sides; issue 11).

Imtiaz, Mohammadi & Sarwate (2021), Algorithms 3 and 4, as the pipeline of :mod:`vfl.models.cape_ica`: S sites hold
disjoint **columns** (time points) of the D x N data, the aggregator relays and combines. Every numeric step is the
in-process estimators' own function (:func:`~vfl.models.cape_pca.calibrate_pca`,
:func:`~vfl.models.cape_pca.second_moment`, :func:`~vfl.models.cape_pca.combine_second_moments`,
:func:`~vfl.models.cape_pca.whitening_matrix`, :func:`~vfl.models.cape_ica.whiten_and_clip`,
:func:`~vfl.models.cape_djica.calibrate_djica`, :func:`~vfl.models.cape_djica.noisy_site_update`,
:func:`~vfl.models.cape_djica.combine_updates`, :class:`~vfl.models.cape_djica.InfomaxSchedule`), and every CAPE
secure aggregation is a :class:`~vfl.protocols.cape_aggregation.CapeSiteRound` /
:class:`~vfl.protocols.cape_aggregation.CapeAggregatorRound`; so a seeded run equals
:func:`vfl.models.cape_ica.fit_cape_ica` with the same seed **bit for bit** (same operations on the same float64
values in the same order; the wire carries raw float64 frames).

=====  =========================  ================================================================================
phase  messages                   content
=====  =========================  ================================================================================
plan   ``plan`` agg -> site        public :class:`CapeICAPlan` (config, every N_s, D, round id); each site checks its
                                  own N_s and D and derives its taus itself
PCA    key/keys/masked/sum/release one CAPE round (round id r) of C_s = X_s X_s^T / N_s: release C_s + e_s + g_s
       ``subspace`` agg -> site    V_K (D x K) and lambda_K of the combined release (post-processing)
shares key/keys/masked/sum         (noise "cape" only) one shares-only CAPE round (round id r + 1): the unit-scale
                                  zero-sum shares z_s of all J rounds (J x (K^2 + K)); the aggregator learns only
                                  their sum
ICA    ``state`` agg -> site       round j (round id r + 2 + j): W, b, rho (public)
       ``release`` site -> agg     Delta W_s + c_W z_s,j + g, Delta b_s + c_b z_s,j + g (c from the public W, b,
                                  rho; the site computes it); the aggregator combines, updates W, b and rho
=====  =========================  ================================================================================

A site refuses a ``state`` out of order (each share row is used once) or beyond the planned J rounds (its
privacy budget), a plan whose noise mode differs from its own, a D or N_s that is not its own. The aggregator's
received messages are public keys, uniformly masked words and noisy releases: never a site's share or clean
gradient (``on_receive`` is the audit hook). A site that disappears leaves :meth:`CapeICAAggregator.waiting_for`
non-empty and the driver aborts (no dropout recovery, as capeFM).

Test-only switch ``noise="none"`` (the plan's and every site's): no noise at all (non-private djICA over the
network); reports then say ``formal_dp: false``.
"""

from __future__ import annotations

import math
import secrets
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, PrivacyLeakWarning, ProtocolError, VFLError
from vfl.models.cape_djica import (
    DJICACalibration,
    InfomaxSchedule,
    calibrate_djica,
    combine_updates,
    djica_privacy_report,
    noisy_site_update,
    planned_true_epsilon,
    round_noise_scales,
)
from vfl.models.cape_ica import (
    RADIUS_SLACK,
    CapeICAConfig,
    pipeline_random_states,
    public_radius,
    site_generator,
    whiten_and_clip,
)
from vfl.models.cape_pca import (
    PAPER_WARNING,
    PCACalibration,
    calibrate_pca,
    combine_second_moments,
    pca_privacy_report,
    second_moment,
    validate_site_columns,
    whitening_matrix,
)
from vfl.privacy.accounting import apply_formal_dp
from vfl.privacy.ledger import Spend, gaussian_spend
from vfl.protocols.cape_aggregation import CapeAggregatorRound, CapeBlock, CapeMessage, CapeSiteRound
from vfl.protocols.policy import SitePolicy, check_site_plan
from vfl.rng import RandomState, randomness_source

__all__ = ["ICA_NOISE_MODES", "MAX_ICA_ROUNDS", "CapeICAPlan", "CapeICASite", "CapeICAAggregator",
           "check_message_sizes", "check_plan_sizes"]

ICA_NOISE_MODES = ("cape", "none")  # networked modes: CAPE, or no noise (test-only switch)
MAX_ROUND_ID = 2**62  # round ids r, r + 1, r + 2 + j all stay below 2^63
MAX_ICA_ROUNDS = 100_000  # capeDJICA rounds J (`--rounds`, max_iter): the largest a plan may ask for
MESSAGE_HEADROOM = 16 * 1024  # bytes kept for a CAPE message's JSON header next to its array frame


def check_message_sizes(max_message_bytes: int | None, *, n_components: int, max_iter: int, noise: str,
                        n_dims: int | None = None, whose: str = "the aggregator's") -> None:
    """Refuse (one-line :class:`ConfigurationError`) a run whose largest messages exceed ``max_message_bytes``.

    The capePCA round carries D^2 64-bit words (CAPE_MASKED / CAPE_SUM / CAPE_RELEASE; the subspace D K + K and
    the infomax state K^2 + K + 1 floats are no larger for K <= D), the shares round J (K^2 + K) words; each plus
    :data:`MESSAGE_HEADROOM` bytes of header. ZeroMQ silently drops a larger message, which would surface only as
    a silence timeout. ``n_dims`` None skips the capePCA check (D not known yet).
    """
    if max_message_bytes is None:
        return
    K = int(n_components)
    if n_dims is not None:
        D = int(n_dims)
        need = 8 * max(D * D, D * K + K + 1, K * K + K + 1) + MESSAGE_HEADROOM
        if need > max_message_bytes:
            raise ConfigurationError(f"D = {D}: the capePCA round sends {need} bytes per message, above "
                                     f"{whose} message limit of {max_message_bytes} bytes (--max-message-bytes)")
    if noise == "cape":
        need = 8 * int(max_iter) * (K * K + K) + MESSAGE_HEADROOM
        if need > max_message_bytes:
            raise ConfigurationError(f"{max_iter} rounds x K = {K} components: the shares round sends {need} bytes "
                                     f"per message, above {whose} message limit of {max_message_bytes} bytes "
                                     "(--max-message-bytes); lower --rounds or --components")


def check_plan_sizes(plan: CapeICAPlan | dict[str, Any], max_message_bytes: int | None) -> None:
    """:func:`check_message_sizes` for a site's plan (a parsed :class:`CapeICAPlan` or the ``plan`` body, its
    ``index`` ignored), against the site's own message limit, before the site allocates anything."""
    if isinstance(plan, dict):
        plan = CapeICAPlan.from_body({k: v for k, v in plan.items() if k != "index"})
    cfg = plan.settings()
    check_message_sizes(max_message_bytes, n_components=cfg.n_components, max_iter=cfg.max_iter, noise=cfg.noise,
                        n_dims=plan.n_dims, whose="this site's")


@dataclass
class CapeICAPlan:
    """Public parameters of a networked capePCA + capeDJICA run (the ``plan`` body)."""

    config: dict[str, Any]
    n_rows: list[int]
    n_dims: int
    round_id: int

    def validate(self) -> CapeICAPlan:
        cfg = self.settings()
        if cfg.noise not in ICA_NOISE_MODES:
            raise ConfigurationError(f"networked capeDJICA runs noise {' or '.join(ICA_NOISE_MODES)}, "
                                     f"not {cfg.noise!r}")
        if cfg.n_components < 2:
            raise ConfigurationError("ICA needs at least 2 components (n_components >= 2)")
        if not cfg.max_iter <= MAX_ICA_ROUNDS:
            raise ConfigurationError(f"capeDJICA rounds (--rounds, max_iter) must be at most {MAX_ICA_ROUNDS}, "
                                     f"got {cfg.max_iter}")
        if (not isinstance(self.n_rows, list) or len(self.n_rows) < 2
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.n_rows)):
            raise ConfigurationError("capeDJICA needs at least 2 sites with a positive column count each")
        if not (isinstance(self.n_dims, int) and not isinstance(self.n_dims, bool) and self.n_dims >= 1):
            raise ConfigurationError(f"n_dims must be a positive integer, got {self.n_dims!r}")
        if cfg.n_components > self.n_dims:
            raise ConfigurationError(f"n_components={cfg.n_components} exceeds the data dimension D={self.n_dims}")
        if cfg.n_colluders is not None and not 0 <= cfg.n_colluders < len(self.n_rows):
            raise ConfigurationError(f"n_colluders must be an integer in [0, {len(self.n_rows) - 1}]")
        if not (isinstance(self.round_id, int) and 0 <= self.round_id < MAX_ROUND_ID):
            raise ConfigurationError("round_id must be an integer in [0, 2^62)")
        return self

    def settings(self) -> CapeICAConfig:
        if not isinstance(self.config, dict):
            raise ConfigurationError("the plan's config must be an object")
        names = {f.name for f in fields(CapeICAConfig)}
        if not set(self.config) <= names:
            raise ConfigurationError(f"config has unexpected fields {sorted(set(self.config) - names)}")
        if "n_components" not in self.config:
            raise ConfigurationError("config has no n_components")
        return CapeICAConfig(**self.config).validate()

    def to_body(self) -> dict[str, Any]:
        return {"config": dict(self.config), "n_rows": list(self.n_rows), "n_dims": self.n_dims,
                "round_id": self.round_id}

    @classmethod
    def new(cls, config: CapeICAConfig, n_rows: list[int], n_dims: int) -> CapeICAPlan:
        """A plan with a fresh random round id (from :mod:`secrets`)."""
        return cls(config.to_dict(), [int(n) for n in n_rows], int(n_dims), secrets.randbits(62)).validate()

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CapeICAPlan:
        if not isinstance(body, dict) or set(body) != {"config", "n_rows", "n_dims", "round_id"}:
            raise ProtocolError("a capeDJICA plan has exactly the fields config, n_rows, n_dims, round_id")
        try:
            return cls(**body).validate()
        except (TypeError, ValueError, VFLError) as exc:
            raise ProtocolError(f"invalid capeDJICA plan: {exc}") from None

    # public calibrations, identical at every site and the aggregator
    def pca_calibration(self) -> PCACalibration:
        c = self.settings()
        return calibrate_pca(self.n_rows, c.epsilon, c.delta, noise=c.noise, mu=c.pca_mu, n_colluders=c.n_colluders,
                             calibration=c.calibration, unit_size=c.unit_size)

    def ica_calibration(self, pca: PCACalibration) -> DJICACalibration:
        c = self.settings()
        return calibrate_djica(self.n_rows, c.epsilon, c.delta, noise=c.noise, max_iter=c.max_iter,
                               n_colluders=c.n_colluders, calibration=c.calibration, accountant=c.accountant,
                               prior_releases=c.prior_releases(pca.mu_site))

    @property
    def ica_length(self) -> int:
        K = int(self.config["n_components"])
        return K * K + K


def _warn_paper(cfg: CapeICAConfig) -> None:
    """The estimators' warning for the seed's Lemma-1 calibration (the true epsilon is in the report)."""
    if cfg.noise == "cape" and cfg.calibration == "paper":
        warnings.warn(PAPER_WARNING, PrivacyLeakWarning, stacklevel=3)


def _subspace(comps: np.ndarray, eigs: np.ndarray) -> np.ndarray:
    return np.concatenate([comps.ravel(), eigs])


def _round_radius(plan: CapeICAPlan, comps: np.ndarray, eigs: np.ndarray, noise_std: float
                  ) -> tuple[np.ndarray, float]:
    """(M, rho): the whitening and the public clipping radius, both sides by the same functions."""
    cfg = plan.settings()
    M, r = whitening_matrix(comps, eigs, noise_std)
    return M, public_radius(r, cfg.clip, cfg.n_components)


def _expect(msg: CapeMessage, shape: tuple[int, ...]) -> np.ndarray:
    arr = msg.array
    if not isinstance(arr, np.ndarray) or arr.dtype != np.float64 or arr.shape != shape:
        got = "nothing" if arr is None else f"{getattr(arr, 'dtype', '?')} {getattr(arr, 'shape', '')}"
        raise ProtocolError(f"{msg.kind}: expected a float64 array of shape {shape}, got {got}")
    if not np.all(np.isfinite(arr)):
        raise ProtocolError(f"{msg.kind} contains NaN or infinity")
    return arr


# ================================================================== site
class CapeICASite:
    """One site: its D x N_s columns (every ||x_n||_2 <= 1, public scaling done before).

    ``random_state``: None (every real run: fresh ChaCha20) or the pipeline seed k - a site given k draws exactly
    the noise the in-process :func:`~vfl.models.cape_ica.fit_cape_ica` with ``random_state=k`` draws for its index.
    ``noise``: "cape" or the test-only "none" (must equal the plan's). ``max_message_bytes``: the site's transport
    limit; a plan whose messages exceed it is refused before anything is allocated (:func:`check_plan_sizes`).
    ``policy``: what the site agrees to run (:class:`~vfl.protocols.policy.SitePolicy`, checked on the plan).
    """

    def __init__(self, X: np.ndarray, *, random_state: RandomState = None, noise: str = "cape",
                 max_message_bytes: int | None = None, policy: SitePolicy | None = None) -> None:
        self.max_message_bytes = max_message_bytes  # the site transport's limit: a plan above it is refused
        self.policy = SitePolicy() if policy is None else policy
        #: the line this site printed for the plan it accepted (after the plan)
        self.plan_summary: str | None = None
        #: what this site's privacy ledger reserves for the whole plan (after the plan)
        self.plan_spend: Spend | None = None
        if noise not in ICA_NOISE_MODES:
            raise ConfigurationError(f"noise must be one of {ICA_NOISE_MODES}, got {noise!r}")
        self.X = validate_site_columns([X], min_sites=1, what="capeDJICA site")[0]
        self.noise = noise
        self.random_state = random_state
        self.plan: CapeICAPlan | None = None
        self.index: int | None = None
        self.round: CapeSiteRound | None = None
        self.phase = "plan"
        self.white_: np.ndarray | None = None
        self.zero_sum_: np.ndarray | None = None
        self.next_round = 0
        self.releases_ = 0

    def handle(self, msg: CapeMessage) -> list[CapeMessage]:
        if msg.kind == "plan":
            if self.phase != "plan":
                raise ProtocolError("second capeDJICA plan in one run")
            return self._start(msg)
        if self.plan is None:
            raise ProtocolError(f"{msg.kind!r} before the capeDJICA plan")
        if msg.kind in ("keys", "sum"):
            if self.round is None or self.phase not in ("pca", "shares"):
                raise ProtocolError(f"{msg.kind!r} outside a CAPE round")
            out = self.round.handle(msg)
            if self.phase == "shares" and self.round.phase == "done":
                assert self.round.zero_sum_ is not None
                self.zero_sum_ = self.round.zero_sum_["zero_sum"]
                self.phase = "ica"
            return out
        if msg.kind == "subspace" and self.phase == "pca" and self.round is not None and self.round.phase == "done":
            return self._whiten(msg)
        if msg.kind == "state" and self.phase == "ica":
            return self._release(msg)
        raise ProtocolError(f"unexpected {msg.kind!r} in phase {self.phase!r}")

    def _start(self, msg: CapeMessage) -> list[CapeMessage]:
        check_plan_sizes(msg.body, self.max_message_bytes)
        body = dict(msg.body)
        index = body.pop("index", None)
        plan = CapeICAPlan.from_body(body)
        S = len(plan.n_rows)
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < S):
            raise ProtocolError(f"plan gives this site an invalid index {index!r}")
        D, n = self.X.shape
        if plan.n_dims != D:
            raise ConfigurationError(f"the plan has D = {plan.n_dims} rows (dimensions), this site's data has {D}")
        if plan.n_rows[index] != n:
            raise ProtocolError(f"the plan says this site has {plan.n_rows[index]} columns, it has {n}")
        cfg = plan.settings()
        if cfg.noise != self.noise:
            raise ConfigurationError(f"the aggregator runs noise {cfg.noise!r} but this site runs {self.noise!r} "
                                     "(the test mode must be enabled on every site and on the aggregator)")
        self.pca_cal = plan.pca_calibration()
        # both calibrations are public (plan only): the policy checks the true epsilon of every planned round
        self.ica_cal = ica_cal = plan.ica_calibration(self.pca_cal)
        self.plan_summary = check_site_plan(self.policy, what="capePCA + capeDJICA", epsilon=cfg.epsilon,
                                            true_epsilon=planned_true_epsilon(ica_cal, cfg.delta), delta=cfg.delta,
                                            n_colluders=int(ica_cal.n_colluders), n_sites=S,
                                            test_noise=cfg.noise == "none", rounds=cfg.max_iter)
        # the whole plan (the capePCA release and every planned round), as the ledger reserves it (vfl.net.site)
        mu = None if not ica_cal.private else math.sqrt(
            sum(c * m * m for m, c in [*ica_cal.prior_releases, (ica_cal.mu_round_true, ica_cal.max_iter)]))
        self.plan_spend = gaussian_spend("capePCA + capeDJICA", planned_true_epsilon(ica_cal, cfg.delta), cfg.delta, mu)
        self.plan, self.index = plan, index
        _warn_paper(cfg)
        pca_state, ica_state = pipeline_random_states(self.random_state)
        self._pca_rng = site_generator(pca_state, S, index)
        self._ica_rng = site_generator(ica_state, S, index)
        block = CapeBlock("C", second_moment(self.X), float(self.pca_cal.taus[index]), symmetric=True)
        self.round = CapeSiteRound(index, S, plan.round_id, [block], random_state=self._pca_rng,
                                   noise="full" if self.noise == "cape" else "none")
        self.phase = "pca"
        return self.round.start()

    def _whiten(self, msg: CapeMessage) -> list[CapeMessage]:
        plan, index = self.plan, self.index
        assert plan is not None and index is not None
        if msg.body.get("round") != plan.round_id:
            raise ProtocolError(f"subspace for round {msg.body.get('round')!r}, this run is {plan.round_id}")
        D, K = plan.n_dims, int(plan.config["n_components"])
        arr = _expect(msg, (D * K + K,))
        comps, eigs = arr[: D * K].reshape(D, K), arr[D * K:]
        M, radius = _round_radius(plan, comps, eigs, self.pca_cal.noise_std)
        self.radius = radius
        self.data_radius = radius * (1 + RADIUS_SLACK)
        self.white_ = validate_site_columns([whiten_and_clip(self.X, M, radius)], radius=self.data_radius,
                                            min_sites=1, what="capeDJICA site")[0]
        if self.noise != "cape":
            self.phase = "ica"
            return []
        J, S = self.ica_cal.max_iter, self.ica_cal.n_sites
        block = CapeBlock("zero_sum", np.zeros((J, plan.ica_length)), float(self.ica_cal.rel[index]))
        self.round = CapeSiteRound(index, S, plan.round_id + 1, [block], random_state=self._ica_rng, release=False)
        self.phase = "shares"
        return self.round.start()

    def _release(self, msg: CapeMessage) -> list[CapeMessage]:
        plan, index, white = self.plan, self.index, self.white_
        assert plan is not None and index is not None and white is not None
        j = msg.body.get("round", -1) - plan.round_id - 2 if isinstance(msg.body.get("round"), int) else -1
        if j != self.next_round:
            raise ProtocolError(f"state for round {j}, expected round {self.next_round} (each round is released once)")
        if j >= self.ica_cal.max_iter:
            raise ProtocolError(f"the aggregator asks for round {j + 1} but the plan (this site's budget) has "
                                f"{self.ica_cal.max_iter}")
        K = int(plan.config["n_components"])
        arr = _expect(msg, (K * K + K + 1,))
        W, b, rho = arr[: K * K].reshape(K, K), arr[K * K: K * K + K], float(arr[-1])
        if not rho > 0:
            raise ProtocolError(f"learning rate must be > 0, got {rho}")
        cfg = plan.settings()
        scales = round_noise_scales(self.ica_cal, W, b, rho, self.data_radius, cfg.unit_size)
        row = None if self.zero_sum_ is None else self.zero_sum_[j]
        dW, db = noisy_site_update(white, W, b, rho, self.ica_cal, index, scales, row, self._ica_rng)
        self.next_round += 1
        self.releases_ += 1
        return [CapeMessage("release", index, {"round": plan.round_id + 2 + j}, np.concatenate([dW.ravel(), db]))]


# ================================================================== aggregator
class CapeICAAggregator:
    """The aggregator: plan -> capePCA round -> subspace -> shares round -> J infomax rounds -> :meth:`finish`.

    ``seeded``: some site's noise is seeded (the report then says formal_dp false); ``on_receive(msg)`` sees every
    message this object receives (audit hook).
    """

    def __init__(self, plan: CapeICAPlan, *, seeded: bool = False,
                 on_receive: Callable[[CapeMessage], None] | None = None) -> None:
        self.plan = plan.validate()
        self.config = plan.settings()
        _warn_paper(self.config)
        self.n_sites = len(plan.n_rows)
        self.seeded = bool(seeded)
        self.on_receive = on_receive
        self.pca_cal = plan.pca_calibration()
        D = plan.n_dims
        self.round: CapeAggregatorRound | None = CapeAggregatorRound(self.n_sites, [("C", (D, D))], plan.round_id)
        self.phase = "pca"
        self.schedule = InfomaxSchedule(self.config.n_components, self.config.max_iter,
                                        learning_rate=self.config.learning_rate, anneal_deg=self.config.anneal_deg,
                                        anneal_step=self.config.anneal_step,
                                        restart_factor=self.config.restart_factor, tol=self.config.tol)
        self._updates: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._scales: tuple[float, float] | None = None

    @classmethod
    def new_plan(cls, config: CapeICAConfig, n_rows: list[int], n_dims: int) -> CapeICAPlan:
        return CapeICAPlan.new(config, n_rows, n_dims)

    def plan_messages(self) -> list[CapeMessage]:
        return [CapeMessage("plan", s, {"index": s, **self.plan.to_body()}) for s in range(self.n_sites)]

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def waiting_for(self) -> list[int]:
        if self.phase in ("pca", "shares") and self.round is not None:
            return self.round.waiting_for()
        if self.phase == "ica":
            return sorted(set(range(self.n_sites)) - set(self._updates))
        return []

    def _check_site(self, msg: CapeMessage) -> int:
        s = msg.site
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s < self.n_sites:
            raise ProtocolError(f"{msg.kind} from unknown site {s!r}")
        return int(s)

    def handle(self, msg: CapeMessage) -> list[CapeMessage]:
        if self.on_receive is not None:
            self.on_receive(msg)
        s = self._check_site(msg)
        if self.phase in ("pca", "shares"):
            assert self.round is not None
            out = self.round.handle(msg)
            if self.round.done:
                out += self._after_pca() if self.phase == "pca" else self._start_ica()
            return out
        if self.phase == "ica" and msg.kind == "release":
            j = self.schedule.rounds
            if msg.body.get("round") != self.plan.round_id + 2 + j:
                raise ProtocolError(f"site {s}: release for round id {msg.body.get('round')!r}, this is round {j}")
            if s in self._updates:
                raise ProtocolError(f"site {s} released round {j} twice")
            K = self.config.n_components
            arr = _expect(msg, (K * K + K,))
            self._updates[s] = (arr[: K * K].reshape(K, K).copy(), arr[K * K:].copy())
            if len(self._updates) < self.n_sites:
                return []
            updates = [self._updates[t] for t in range(self.n_sites)]
            self._updates = {}
            self.schedule.apply(*combine_updates(updates, self.ica_cal.weights), self._scales)
            if self.schedule.done:
                self.phase = "done"
                return []
            return self._state_messages()
        raise ProtocolError(f"unexpected {msg.kind!r} from site {s} in phase {self.phase!r}")

    def _after_pca(self) -> list[CapeMessage]:
        assert self.round is not None
        releases = [r["C"] for r in self.round.releases()]
        self.covariance_, self.components_, self.eigenvalues_ = combine_second_moments(
            releases, self.pca_cal.weights, self.config.n_components)
        self.whitening_, self.radius_ = _round_radius(self.plan, self.components_, self.eigenvalues_,
                                                      self.pca_cal.noise_std)
        self.data_radius = self.radius_ * (1 + RADIUS_SLACK)
        self.ica_cal = self.plan.ica_calibration(self.pca_cal)
        array = _subspace(self.components_, self.eigenvalues_)
        out = [CapeMessage("subspace", t, {"round": self.plan.round_id}, array.copy()) for t in range(self.n_sites)]
        if self.config.noise != "cape":
            return out + self._start_ica()
        J, L = self.ica_cal.max_iter, self.plan.ica_length
        self.round = CapeAggregatorRound(self.n_sites, [("zero_sum", (J, L))], self.plan.round_id + 1,
                                         release=False)
        self.phase = "shares"
        return out

    def _start_ica(self) -> list[CapeMessage]:
        self.round = None
        self.phase = "ica"
        return self._state_messages()

    def _state_messages(self) -> list[CapeMessage]:
        sch = self.schedule
        self._scales = round_noise_scales(self.ica_cal, sch.W, sch.b, sch.learning_rate, self.data_radius,
                                          self.config.unit_size)
        array = np.concatenate([sch.W.ravel(), sch.b, [sch.learning_rate]])
        rid = self.plan.round_id + 2 + sch.rounds
        return [CapeMessage("state", t, {"round": rid}, array.copy()) for t in range(self.n_sites)]

    def finish(self) -> dict[str, Any]:
        """The released model: subspace, whitening, unmixing W and bias b, end-to-end unmixing W M, reports."""
        if not self.done:
            raise ProtocolError(f"the run is not complete: waiting for sites {self.waiting_for()}")
        cfg = self.config
        randomness = ("seeded by the sites (reproducible; not for release)" if self.seeded
                      else randomness_source(None) + " at every site")
        pca_report = pca_privacy_report(self.pca_cal, cfg.epsilon, cfg.delta, mu_given=True, seeded=self.seeded,
                                        randomness=randomness)
        ica_report = djica_privacy_report(self.ica_cal, self.schedule, cfg.epsilon, cfg.delta,
                                          unit_size=cfg.unit_size, data_radius=self.data_radius,
                                          seeded=self.seeded, randomness=randomness)
        report: dict[str, Any] = {
            "mechanism": "capePCA + capeDJICA (networked)", "noise": cfg.noise, "n_sites": self.n_sites,
            "n_rows": list(self.plan.n_rows), "epsilon": cfg.epsilon, "delta": cfg.delta,
            "true_epsilon": ica_report["true_epsilon"],
            "note": "epsilon and delta hold per site for the whole pipeline (capePCA release plus every planned "
                    "capeDJICA round) against the aggregator plus n_colluders sites",
            "pca": pca_report, "djica": ica_report, "round_id": self.plan.round_id,
        }
        apply_formal_dp(report, "capePCA + capeDJICA", noise=cfg.noise != "none", seeded=self.seeded)
        sch = self.schedule
        return {"config": cfg.to_dict(), "n_dims": self.plan.n_dims, "components": self.components_,
                "eigenvalues": self.eigenvalues_, "whitening": self.whitening_, "radius": self.radius_,
                "unmixing": sch.W, "bias": sch.b, "n_rounds": sch.rounds, "n_restarts": sch.restarts,
                "converged": sch.converged, "learning_rates": list(sch.learning_rates), "privacy_report": report}

