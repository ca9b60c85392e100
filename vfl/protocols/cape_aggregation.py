"""CAPE release over separate sites as socket-free state machines (both sides; issue 10).

Imtiaz, Mohammadi & Sarwate (2021) CAPE and Tasnim et al. (2023) capeFM (Algorithm 3; spec §3.2, §3.4). S sites
hold disjoint rows; the aggregator relays and combines. Each class takes one :class:`CapeMessage` and returns
the messages to send; no sockets, no threads (:mod:`vfl.net.cape_aggregator` and :mod:`vfl.net.site` move them
over ZeroMQ; :func:`drive` moves them in process).

**Generic round** (:class:`CapeSiteRound`, :class:`CapeAggregatorRound`): a CAPE release of a list of arrays
("blocks"), usable for any CAPE statistic (capeFM here; capePCA/ICA can reuse it):

====  =======================  ==================================================================================
step  message                  content
====  =======================  ==================================================================================
1     ``key``   site -> agg     A_s = g^{a_s} mod p (RFC 3526 group 14, 256 bytes), :class:`SecAggSite`
2     ``keys``  agg -> sites    all S public values with each site's signature (relayed; checked end to end by
                               :mod:`vfl.protocols.cape_keys` before step 3; docs/threat_model.md)
3     ``masked`` site -> agg    enc(e^_s) + sum_{t>s} m_st - sum_{t<s} m_ts  mod 2^64 (pairwise masks, uint64 words)
4     ``sum``   agg -> sites    sum_s enc(e^_s) mod 2^64: the aggregator learns only sum_s e^_s (masks cancel)
5     ``release`` site -> agg   Lambda_s + e_s + g_s, e_s = e^_s - (1/S) sum_t e^_t (zero-sum), g_s ~ N(0, tau^2/S)
====  =======================  ==================================================================================

e^_s ~ N(0, tau_s^2) per entry (matrix blocks: (E + E^T)/2, spec §2.4) rounded to the 2^-40 grid, so the secure
sum is exact and sum_s e_s = 0 up to the float rounding of the last subtraction. The aggregator's received
messages are public keys, uniformly masked words and the final noisy releases: never a single site's e^_s or e_s
(:attr:`CapeAggregatorRound.on_receive` is the audit hook the tests use). Cryptography is
:mod:`vfl.secure.aggregation`; no new crypto here.

**capeFM** (:class:`CapeFMSite`, :class:`CapeFMAggregator`): the aggregator sends a public ``plan`` (model, eps,
delta, every N_s, S_C, calibration, ...); each site checks it against its own data and computes its own taus
with :func:`vfl.models.capefm.calibrate_cape_fm` (a curious aggregator cannot shrink a site's noise), then runs the
round on its average-form coefficients (alpha, M, and beta if released). The aggregator combines with weights
N_s/N (or 1/S), projects M (floor sigma_M sqrt(d)) and solves (:func:`vfl.models.capefm.combine_releases`), and
reports per-site eps and delta with the corrected kappa (:func:`vfl.models.capefm.cape_fm_report`).

**Dropouts: clean abort.** There is no Shamir sharing of seeds (Bonawitz et al.'s recovery): a site that
disappears at any step leaves :meth:`CapeAggregatorRound.waiting_for` non-empty and the driver aborts the run;
no ``sum`` is broadcast before every masked input arrived, so the remaining sites never release (their masked
words stay uniformly masked by the pair masks shared with the missing site) and no model is produced.
Restarting uses fresh keys and a fresh round id (a site masks at most one input per round).

**Test-only switch** ``noise``: ``"full"`` (default), ``"zero-sum-only"`` (no g_s: the releases then show that the
e_s cancel) and ``"none"`` (exact distributed FM). A site only accepts a plan whose mode equals its own, so
an aggregator can never turn a site's noise off; reports mark such runs ``noise: <mode>``.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError, ProtocolError
from vfl.fm.domain import round_to_grid
from vfl.models.capefm import (
    SECAGG_NOISE_PRECISION_BITS,
    aggregate_noise_std,
    calibrate_cape_fm,
    cape_fm_report,
    combine_releases,
    draw_block_noise,
    site_coefficients,
    validate_site_data,
)
from vfl.privacy.calibration import validate_delta, validate_epsilon
from vfl.privacy.ledger import Spend, gaussian_spend
from vfl.protocols.contracts import Incoming, Out, kind_of
from vfl.protocols.policy import SitePolicy, check_site_plan
from vfl.rng import RandomState, make_rng
from vfl.secure.aggregation import SecAggAggregator, SecAggSite, decode_fixed_point

__all__ = [
    "NOISE_MODES",
    "PUBLIC_KEY_BYTES",
    "CapeMessage",
    "CapeBlock",
    "CapeSiteRound",
    "CapeAggregatorRound",
    "CapeFMPlan",
    "CapeFMSite",
    "CapeFMAggregator",
    "TO_SITE_KINDS",
    "drive",
]

NOISE_MODES = ("full", "zero-sum-only", "none")
PUBLIC_KEY_BYTES = 256
KINDS = ("plan", "key", "keys", "masked", "sum", "release", "subspace", "state")


class CapeMessage(Out):
    """One CAPE protocol message, an :class:`~vfl.protocols.contracts.Out` like every phase's: wire type
    ``cape_<kind>`` (``CAPE_KEY`` ... ``CAPE_STATE``), ``body`` (always ``round`` after the plan, plus the signatures
    of the Diffie-Hellman steps) and ``payload`` its one numeric frame, or none for the plan. ``to`` is the site:
    the recipient (aggregator -> site) or the sender (site -> aggregator; the site's driver sends to the hub).

    The site index is never taken from the wire: the aggregator knows it from the sender's registration, the site
    from its plan (:meth:`received`). The plan travels as ``CAPE_PLAN``, whose body the drivers build.
    """

    def __init__(self, kind: str, site: int, body: dict[str, Any] | None = None, array: np.ndarray | None = None):
        super().__init__(type=f"cape_{kind}", body={} if body is None else body,
                         payload=[] if array is None else [array], to=site)

    @property
    def kind(self) -> str:
        """The step: ``plan``, ``key``, ``keys``, ``masked``, ``sum``, ``release``, ``subspace`` or ``state``."""
        return self.type.removeprefix("cape_")

    @property
    def site(self) -> int:
        return int(self.to)  # type: ignore[arg-type]

    @property
    def array(self) -> np.ndarray | None:
        return self.payload[0] if self.payload else None

    @classmethod
    def received(cls, msg: Incoming, site: int) -> CapeMessage:
        """A received CAPE round message (body and frame kinds already checked by the codec) from/to ``site``."""
        kind = kind_of(msg)
        if not kind.startswith("cape_") or kind == "cape_plan":
            raise ProtocolError(f"{kind} is not a CAPE round message")
        if len(msg.payload) != 1:
            raise ProtocolError(f"{kind} must carry exactly one frame, got {len(msg.payload)}")
        return cls(kind.removeprefix("cape_"), site, dict(msg.body), msg.array(0))


@dataclass(frozen=True)
class CapeBlock:
    """One released array: the site's clean value and its noise std tau (``symmetric``: square block, spec §2.4)."""

    name: str
    value: np.ndarray
    tau: float
    symmetric: bool = False


def _check_mode(noise: str) -> str:
    if noise not in NOISE_MODES:
        raise ConfigurationError(f"noise must be one of {', '.join(NOISE_MODES)}, got {noise!r}")
    return noise


def _key_to_array(value: int) -> np.ndarray:
    return np.frombuffer(int(value).to_bytes(PUBLIC_KEY_BYTES, "big"), dtype=np.uint8).copy()


def _array_to_key(arr: np.ndarray) -> int:
    return int.from_bytes(np.asarray(arr, dtype=np.uint8).tobytes(), "big")


def _expect_array(msg: CapeMessage, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    arr = msg.array
    if not isinstance(arr, np.ndarray) or arr.dtype != np.dtype(dtype) or arr.shape != shape:
        got = "nothing" if arr is None else f"{getattr(arr, 'dtype', type(arr).__name__)} {getattr(arr, 'shape', '')}"
        raise ProtocolError(f"{msg.kind} from/to site {msg.site}: expected a {np.dtype(dtype)} array of shape "
                            f"{shape}, got {got}")
    return arr


# ================================================================== generic round
class CapeSiteRound:
    """Site s's side of one CAPE release of ``blocks`` (message in -> messages out).

    All noise is drawn at construction from one generator in block order, e^_j then g_j per block (the order of
    :class:`vfl.models.capefm.CapeFM`'s per-site generator, so seeded runs reproduce the in-process estimator).
    ``release=False``: a **shares-only** round (steps 1-4): only the e^_j are drawn, the ``sum`` step leaves the
    zero-sum shares e_s in :attr:`zero_sum_` and sends nothing (capeDJICA sets up all rounds' shares this way,
    :mod:`vfl.protocols.cape_djica_rounds`); ``blocks`` then give the shapes and taus (values are ignored).
    ``e_hat_``, ``zero_sum_`` (e_s, after the ``sum``) and ``independent_`` (g_s) stay local: tests read them.
    """

    def __init__(self, site_id: int, n_sites: int, round_id: int, blocks: Sequence[CapeBlock], *,
                 random_state: RandomState = None, noise: str = "full",
                 precision_bits: int = SECAGG_NOISE_PRECISION_BITS, release: bool = True) -> None:
        self.noise = _check_mode(noise)
        self.release = bool(release)
        if not blocks or len({b.name for b in blocks}) != len(blocks):
            raise ConfigurationError("a CAPE round needs at least one block, with distinct names")
        self.site_id, self.n_sites, self.round_id = int(site_id), int(n_sites), int(round_id)
        self.blocks = [CapeBlock(b.name, np.asarray(b.value, dtype=float), float(b.tau), b.symmetric) for b in blocks]
        for b in self.blocks:
            if not np.all(np.isfinite(b.value)):
                raise DataValidationError(f"block {b.name} contains NaN or infinity")
            if not (math.isfinite(b.tau) and b.tau >= 0):
                raise ConfigurationError(f"block {b.name}: tau must be finite and >= 0, got {b.tau}")
        self.precision_bits = int(precision_bits)
        rng = make_rng(random_state)
        self.e_hat_: dict[str, np.ndarray] = {}
        self.independent_: dict[str, np.ndarray] = {}
        for b in self.blocks:
            shape = b.value.shape
            if self.noise == "none":
                e, g = np.zeros(shape), np.zeros(shape)
            else:
                e = round_to_grid(draw_block_noise(b.tau, shape, rng, symmetric=b.symmetric), self.precision_bits)
                if not self.release:  # shares only: no independent part is drawn
                    g = np.zeros(shape)
                else:
                    g = draw_block_noise(b.tau / math.sqrt(self.n_sites), shape, rng, symmetric=b.symmetric)
                if self.noise == "zero-sum-only":
                    g = np.zeros(shape)
            self.e_hat_[b.name], self.independent_[b.name] = e, g
        self.length = int(sum(b.value.size for b in self.blocks))
        self._secagg = SecAggSite(self.site_id, self.n_sites, self.length, self.precision_bits, self.round_id)
        self.zero_sum_: dict[str, np.ndarray] | None = None
        self.phase = "new"

    def start(self) -> list[CapeMessage]:
        """Step 1: this site's Diffie-Hellman public value."""
        if self.phase != "new":
            raise ProtocolError(f"site {self.site_id}: round {self.round_id} already started")
        self.phase = "keys"
        return [CapeMessage("key", self.site_id, {"round": self.round_id}, _key_to_array(self._secagg.public_key()))]

    def handle(self, msg: CapeMessage) -> list[CapeMessage]:
        """``keys`` -> the masked noise share; ``sum`` -> the noisy release."""
        if msg.body.get("round") != self.round_id:
            raise ProtocolError(f"site {self.site_id}: message for round {msg.body.get('round')!r}, "
                                f"this is round {self.round_id}")
        if msg.kind == "keys" and self.phase == "keys":
            arr = _expect_array(msg, np.uint8, (self.n_sites, PUBLIC_KEY_BYTES))
            self._secagg.receive_public_keys({t: _array_to_key(arr[t]) for t in range(self.n_sites)})
            flat = np.concatenate([self.e_hat_[b.name].ravel() for b in self.blocks])
            masked = self._secagg.masked_input(flat)
            self.phase = "sum"
            return [CapeMessage("masked", self.site_id, {"round": self.round_id}, masked)]
        if msg.kind == "sum" and self.phase == "sum":
            words = _expect_array(msg, np.uint64, (self.length,))
            total = decode_fixed_point(words, self.precision_bits)
            out, self.zero_sum_, pos = [], {}, 0
            for b in self.blocks:
                tot = total[pos:pos + b.value.size].reshape(b.value.shape)
                pos += b.value.size
                e = self.e_hat_[b.name] - tot / self.n_sites
                self.zero_sum_[b.name] = e
                out.append((b.value + e + self.independent_[b.name]).ravel())
            self.phase = "done"
            if not self.release:  # a shares-only round: e_s stays here for later releases
                return []
            return [CapeMessage("release", self.site_id, {"round": self.round_id}, np.concatenate(out))]
        raise ProtocolError(f"site {self.site_id}: unexpected {msg.kind!r} in phase {self.phase!r}")


class CapeAggregatorRound:
    """The aggregator's side of one CAPE round: relays keys, learns only sum_s e^_s, collects the releases.

    ``layout``: (name, shape) of the blocks in the sites' order. ``on_receive(msg)`` sees every message this
    object receives (an audit hook: tests check it never holds a single site's noise share). ``release=False``:
    a shares-only round, done once the ``sum`` is broadcast (:meth:`releases` is then empty).
    """

    def __init__(self, n_sites: int, layout: Sequence[tuple[str, tuple[int, ...]]], round_id: int, *,
                 precision_bits: int = SECAGG_NOISE_PRECISION_BITS,
                 on_receive: Callable[[CapeMessage], None] | None = None, release: bool = True) -> None:
        self.n_sites, self.round_id = int(n_sites), int(round_id)
        self.release = bool(release)
        self.layout = [(str(n), tuple(int(v) for v in s)) for n, s in layout]
        self.length = int(sum(math.prod(s) for _, s in self.layout))
        self.precision_bits = int(precision_bits)
        self.on_receive = on_receive
        self._secagg = SecAggAggregator(self.n_sites, self.length, self.precision_bits, self.round_id)
        self._keys: dict[int, int] = {}
        self._auths: dict[int, str | None] = {}   # each site's signature on its value, relayed as sent
        self._releases: dict[int, np.ndarray] = {}
        self.phase = "key"

    def waiting_for(self) -> list[int]:
        """Sites whose message of the current step has not arrived (empty when done)."""
        if self.phase == "key":
            have: Sequence[int] = list(self._keys)
        elif self.phase == "masked":
            return self._secagg.missing_sites()
        elif self.phase == "release":
            have = list(self._releases)
        else:
            return []
        return sorted(set(range(self.n_sites)) - set(have))

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def _check_site(self, msg: CapeMessage) -> int:
        s = msg.site
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s < self.n_sites:
            raise ProtocolError(f"{msg.kind} from unknown site {s!r}")
        if msg.body.get("round") != self.round_id:
            raise ProtocolError(f"site {s}: message for round {msg.body.get('round')!r}, this is round {self.round_id}")
        return int(s)

    def handle(self, msg: CapeMessage) -> list[CapeMessage]:
        if self.on_receive is not None:
            self.on_receive(msg)
        s = self._check_site(msg)
        if msg.kind == "key" and self.phase == "key":
            if s in self._keys:
                raise ProtocolError(f"site {s} sent its public key twice")
            key = _array_to_key(_expect_array(msg, np.uint8, (PUBLIC_KEY_BYTES,)))
            self._secagg.register_public_key(s, key)  # validates the group element
            self._keys[s] = key
            auth = msg.body.get("auth")
            self._auths[s] = auth if isinstance(auth, str) else None
            if len(self._keys) < self.n_sites:
                return []
            self.phase = "masked"
            table = np.stack([_key_to_array(self._keys[t]) for t in range(self.n_sites)])
            auths = [self._auths[t] for t in range(self.n_sites)]
            return [CapeMessage("keys", t, {"round": self.round_id, "auths": list(auths)}, table)
                    for t in range(self.n_sites)]
        if msg.kind == "masked" and self.phase == "masked":
            self._secagg.submit(s, _expect_array(msg, np.uint64, (self.length,)))
            if self._secagg.missing_sites():
                return []
            words = self._secagg.aggregate_words()  # the masks cancel: sum_s enc(e^_s) mod 2^64
            self.phase = "release" if self.release else "done"
            return [CapeMessage("sum", t, {"round": self.round_id}, words.copy()) for t in range(self.n_sites)]
        if msg.kind == "release" and self.phase == "release":
            if s in self._releases:
                raise ProtocolError(f"site {s} released twice")
            arr = _expect_array(msg, np.float64, (self.length,))
            if not np.all(np.isfinite(arr)):
                raise ProtocolError(f"site {s} released NaN or infinity")
            self._releases[s] = arr.copy()
            if len(self._releases) == self.n_sites:
                self.phase = "done"
            return []
        raise ProtocolError(f"unexpected {msg.kind!r} from site {s} while waiting for {self.phase!r}")

    def releases(self) -> list[dict[str, np.ndarray]]:
        """Every site's noisy release, split into the layout's blocks (after :attr:`done`)."""
        if not self.done:
            raise ProtocolError(f"the round is not complete: waiting for sites {self.waiting_for()}")
        if not self.release:
            return []
        out = []
        for s in range(self.n_sites):
            pos, blocks = 0, {}
            for name, shape in self.layout:
                size = math.prod(shape)
                blocks[name] = self._releases[s][pos:pos + size].reshape(shape)
                pos += size
            out.append(blocks)
        return out


# ================================================================== capeFM
@dataclass
class CapeFMPlan:
    """Public parameters of a capeFM run (the ``plan`` body); every site re-derives its taus from them."""

    model: str
    epsilon: float
    delta: float
    n_rows: list[int]
    n_features: int
    round_id: int
    n_colluders: int | None = None
    calibration: str = "analytic"
    release_constant: bool = False
    weights: str = "rows"
    noise: str = "full"

    def validate(self) -> CapeFMPlan:
        if self.model not in ("linear", "logistic"):
            raise ConfigurationError(f"model must be 'linear' or 'logistic', got {self.model!r}")
        validate_epsilon(self.epsilon)
        validate_delta(self.delta)
        if (not isinstance(self.n_rows, list) or len(self.n_rows) < 2
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.n_rows)):
            raise ConfigurationError("capeFM needs at least 2 sites with a positive row count each")
        S = len(self.n_rows)
        if self.n_colluders is not None and not (isinstance(self.n_colluders, int)
                                                 and not isinstance(self.n_colluders, bool)
                                                 and 0 <= self.n_colluders < S):
            raise ConfigurationError(f"n_colluders must be an integer in [0, {S - 1}], got {self.n_colluders!r}")
        if not (isinstance(self.n_features, int) and self.n_features >= 1):
            raise ConfigurationError(f"n_features must be a positive integer, got {self.n_features!r}")
        if self.calibration not in ("analytic", "paper"):
            raise ConfigurationError(f"calibration must be 'analytic' or 'paper', got {self.calibration!r}")
        if self.weights not in ("rows", "equal"):
            raise ConfigurationError(f"weights must be 'rows' or 'equal', got {self.weights!r}")
        _check_mode(self.noise)
        if not (isinstance(self.round_id, int) and 0 <= self.round_id < 2**63):
            raise ConfigurationError("round_id must be an integer in [0, 2^63)")
        return self

    def to_body(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CapeFMPlan:
        names = set(cls.__dataclass_fields__)
        if not isinstance(body, dict):
            raise ProtocolError("a capeFM plan must be an object")
        if not set(body) <= names:
            raise ProtocolError(f"plan has unexpected fields {sorted(set(body) - names)}")
        try:
            plan = cls(**body)
            plan.validate()
        except (TypeError, ConfigurationError, ValueError) as exc:
            raise ProtocolError(f"invalid capeFM plan: {exc}") from None
        return plan

    def calibration_values(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
        return calibrate_cape_fm(self.model, self.epsilon, self.delta, self.n_rows, n_colluders=self.n_colluders,
                                 calibration=self.calibration, release_constant=self.release_constant)

    def layout(self) -> list[tuple[str, tuple[int, ...]]]:
        d = self.n_features
        out: list[tuple[str, tuple[int, ...]]] = [("alpha", (d,)), ("M", (d, d))]
        if self.release_constant and self.model == "linear":
            out.append(("beta", (1,)))
        return out


class CapeFMSite:
    """One capeFM site: its rows in the D2 domain (||x|| <= 1; linear y in [-1, 1], logistic y in {0, 1}).

    ``handle(plan)`` checks the plan against the site's own data and noise mode, computes the site's taus itself
    and starts the round; later messages go to the :class:`CapeSiteRound`.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, model: str, *, random_state: RandomState = None,
                 noise: str = "full", policy: SitePolicy | None = None) -> None:
        self.policy = SitePolicy() if policy is None else policy
        #: the line this site printed for the plan it accepted (after the plan)
        self.plan_summary: str | None = None
        self.plan_spend: Spend | None = None
        self.model = model
        self.X, self.y = validate_site_data([(X, y), (X, y)], model)[0]  # D2 domain and labels (one site)
        self.noise = _check_mode(noise)
        self.random_state = random_state
        self.round: CapeSiteRound | None = None
        self.plan: CapeFMPlan | None = None
        self.index: int | None = None

    def handle(self, msg: CapeMessage) -> list[CapeMessage]:
        if msg.kind == "plan":
            if self.round is not None:
                raise ProtocolError("second capeFM plan in one run")
            return self._start(msg)
        if self.round is None:
            raise ProtocolError(f"{msg.kind!r} before the capeFM plan")
        return self.round.handle(msg)

    def _start(self, msg: CapeMessage) -> list[CapeMessage]:
        body = dict(msg.body)
        index = body.pop("index", None)
        plan = CapeFMPlan.from_body(body)
        S = len(plan.n_rows)
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < S):
            raise ProtocolError(f"plan gives this site an invalid index {index!r}")
        if plan.model != self.model:
            raise ConfigurationError(f"the aggregator trains a {plan.model} model, this site holds {self.model} data")
        if plan.n_rows[index] != self.X.shape[0]:
            raise ProtocolError(f"the plan says this site has {plan.n_rows[index]} rows, it has {self.X.shape[0]}")
        if plan.n_features != self.X.shape[1]:
            raise ConfigurationError(f"the plan has {plan.n_features} prepared columns, this site {self.X.shape[1]}")
        if plan.noise != self.noise:
            raise ConfigurationError(f"the aggregator runs noise mode {plan.noise!r} but this site runs {self.noise!r}"
                                     " (test modes must be enabled on every site and on the aggregator)")
        _, taus, info = plan.calibration_values()
        self.plan_summary = check_site_plan(self.policy, what=f"capeFM {plan.model}", epsilon=plan.epsilon,
                                            true_epsilon=float(info["true_epsilon"]), delta=plan.delta,
                                            n_colluders=int(info["n_colluders"]), n_sites=S,
                                            test_noise=plan.noise != "full")
        #: what this site's privacy ledger reserves for the plan (vfl.net.site): the true epsilon and the
        #: Gaussian-DP mu of the site's release against the aggregator and S_C colluding sites
        self.plan_spend = gaussian_spend(f"capeFM {plan.model}", float(info["true_epsilon"]), plan.delta,
                                     float(info["mu_site"]) if plan.noise == "full" else None)
        values = site_coefficients(self.X, self.y, self.model, release_beta="beta" in taus)
        blocks = [CapeBlock(name, values[name], float(taus[name][index]), symmetric=(name == "M"))
                  for name, _ in plan.layout()]
        self.plan, self.index = plan, index
        self.round = CapeSiteRound(index, S, plan.round_id, blocks, random_state=self.random_state, noise=self.noise)
        return self.round.start()


class CapeFMAggregator:
    """The capeFM aggregator: plan -> relay the round -> weighted combination, projection, solve, report."""

    def __init__(self, plan: CapeFMPlan, *, lambda_floor: float | None = None, min_pos: int = 1,
                 fallback: str = "raise", seeded: bool = False,
                 on_receive: Callable[[CapeMessage], None] | None = None) -> None:
        self.plan = plan.validate()
        self.sens, self.taus, self.info = plan.calibration_values()
        self.round = CapeAggregatorRound(len(plan.n_rows), plan.layout(), plan.round_id, on_receive=on_receive)
        self.lambda_floor, self.min_pos, self.fallback, self.seeded = lambda_floor, min_pos, fallback, seeded

    @classmethod
    def new_plan(cls, model: str, epsilon: float, delta: float, n_rows: Sequence[int], n_features: int,
                 **options: Any) -> CapeFMPlan:
        """A plan with a fresh random round id (from :mod:`secrets`)."""
        return CapeFMPlan(model, float(epsilon), float(delta), [int(n) for n in n_rows], int(n_features),
                          secrets.randbits(63), **options).validate()

    def plan_messages(self) -> list[CapeMessage]:
        return [CapeMessage("plan", s, {"index": s, **self.plan.to_body()}) for s in range(len(self.plan.n_rows))]

    def handle(self, msg: CapeMessage) -> list[CapeMessage]:
        return self.round.handle(msg)

    def waiting_for(self) -> list[int]:
        return self.round.waiting_for()

    @property
    def done(self) -> bool:
        return self.round.done

    def weights(self) -> np.ndarray:
        n = np.asarray(self.plan.n_rows, dtype=float)
        return n / n.sum() if self.plan.weights == "rows" else np.full(n.size, 1.0 / n.size)

    def finish(self) -> tuple[np.ndarray, dict[str, Any]]:
        """(w, privacy report): combine with the weights, project M, solve."""
        weights = self.weights()
        releases = self.round.releases()
        if self.plan.noise == "full":
            noise_std = {k: aggregate_noise_std(self.taus[k], weights) for k in self.taus}
        elif self.plan.noise == "zero-sum-only":  # only the (1/S - w_t) e^_t terms remain
            noise_std = {k: float(np.sqrt(np.sum((weights - 1.0 / weights.size) ** 2 * self.taus[k] ** 2)))
                         for k in self.taus}
        else:
            noise_std = {k: 0.0 for k in self.taus}
        _, result, floor = combine_releases(releases, weights, noise_std, lambda_floor=self.lambda_floor,
                                            min_pos=self.min_pos, fallback=self.fallback)
        report = cape_fm_report(self.plan.model, self.plan.calibration, self.plan.epsilon, self.plan.delta,
                                np.asarray(self.plan.n_rows), weights, self.sens, self.taus, self.info, noise_std,
                                floor, result.n_floored, noise=True if self.plan.noise == "full" else self.plan.noise,
                                seeded=self.seeded)
        if self.plan.noise != "full":  # formal_dp is already false (cape_fm_report applies the one rule)
            report["true_epsilon"] = None  # noise disabled by a test-only switch: no guarantee
            for entry in report["per_site"]:
                entry["epsilon"] = None
        report["round_id"] = self.plan.round_id
        return result.w, report


#: message kinds that travel aggregator -> site (the rest travel site -> aggregator); ``subspace`` and ``state``
#: are the public broadcasts of the multi-round capePCA/capeDJICA session (vfl.protocols.cape_djica_rounds)
TO_SITE_KINDS = ("plan", "keys", "sum", "subspace", "state")


def drive(aggregator: Any, sites: Sequence[Any], first: Sequence[CapeMessage] | None = None) -> None:
    """Move messages between ``aggregator`` and ``sites`` (objects with ``handle``) in process until done.

    ``first``: the opening messages (default: the aggregator's ``plan_messages()`` if it has them (capeFM,
    capeDJICA), else every site's ``start()``).
    """
    if first is None:
        first = (aggregator.plan_messages() if hasattr(aggregator, "plan_messages")
                 else [m for site in sites for m in site.start()])
    queue = list(first)
    while queue:
        msg = queue.pop(0)
        if msg.kind in TO_SITE_KINDS:
            queue.extend(sites[msg.site].handle(msg))
        else:
            queue.extend(aggregator.handle(msg))
    if not aggregator.done:
        raise ProtocolError(f"the round stalled waiting for sites {aggregator.waiting_for()}")
