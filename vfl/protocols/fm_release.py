"""The functional-mechanism release, both sides, in protocol order (Xu et al. 2021 §4; spec §1.3, §2.5).

One FM run after registration, top to bottom:

1. **Plan** (coordinator, :meth:`FMCoordinator.plan_messages`): the :class:`~vfl.fm.dissection.DissectionPlan`
   (the label owner carries the public intercept column, spec pitfall 4), the mechanism built from the run
   settings, and one PLAN per party.
2. **Prepare** (party, :meth:`FMParty.start`): columns scaled into the public domain and onto the 2^-p grid
   (:func:`vfl.privacy.fixed_point.prepare_fixed_point`), then READY with the public column (and label) bounds.
3. **Single-party blocks** (party, same step): each block the party owns as an exact integer statistic plus exact
   discrete noise (:func:`vfl.privacy.fixed_point.single_party_block`), sent as BLOCK.
4. **Secure cross blocks** (:mod:`vfl.secure.products`): the encryptor sends ENC_REQUEST (its packed, encrypted
   operand), the coordinator relays it once (:meth:`FMCoordinator.handle`), the responder answers with the
   masked, noised products (MASKED_RESPONSE, relayed back) and its SHARE; the encryptor decrypts its SHARE and adds
   its own noise share (two-sided noise). Shares are packed integers modulo the encryptor's Paillier ``n``, each
   carrying its owner's local offset; the coordinator combines them with the layout of the request it relayed
   (:func:`vfl.secure.products.combine_packed_shares`: range-checked, else the encryptor is named), and
   ``scale * combined 2^-2p`` is the noisy block.
5. **Assembly** (coordinator, :meth:`FMCoordinator.finish`): (beta, alpha, M) from the blocks, projection with
   the mechanism's public eigenvalue floor, the minimiser, and the privacy report: an :class:`FMRelease`, which
   the coordinator turns into the model file.

Both sides are socket-free: messages in, :class:`~vfl.protocols.contracts.Out` records out. The party's heavy
steps (``start`` and the callables :meth:`FMParty.handle` returns) are meant to run on a worker thread; the
checks in ``handle`` run where it is called, so a replayed message is refused before any work starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.data.rows import ArrayRows, RowSource
from vfl.exceptions import ConfigurationError, DegenerateNoisyObjective, ProtocolError, VFLError
from vfl.fm.dissection import Block, DissectionPlan
from vfl.fm.domain import fixed_point_shrink
from vfl.fm.objective import QuadraticObjective
from vfl.fm.solver import default_regularization, solve_details
from vfl.privacy.fixed_point import (
    accumulate_single_party_raw,
    block_generators,
    cross_block_noise,
    cross_block_offset,
    orient,
    release_single_party_block,
)
from vfl.privacy.floor_selection import release_floor
from vfl.privacy.mechanisms import Mechanism, make_mechanism
from vfl.protocols.contracts import Incoming, Out, PlanBody, PlanParty, ReadyBody, Registration, kind_of
from vfl.protocols.party_columns import PreparedColumns
from vfl.protocols.settings import RunSettings
from vfl.rng import CHACHA_ROUNDS
from vfl.secure.encoding import DEFAULT_PRECISION_BITS, decode_products
from vfl.secure.fastmath import RANDOMNESS_MODES
from vfl.secure.keys import generate_keypair, public_key_from_bytes, public_key_to_bytes
from vfl.secure.products import (
    DEFAULT_MAX_FRAME_BYTES,
    ChunkGate,
    EncryptedChunk,
    ProductEncryptor,
    ProductResponder,
    ProductStreamHeader,
    add_packed,
    combine_packed_shares,
)

__all__ = ["FMCoordinator", "FMParty", "FMRelease", "FMParams", "product_shape", "operand_of",
           "CREDIT_WINDOW", "MAX_CREDIT_WINDOW", "NOISE_TAIL_STDS", "check_product_magnitude",
           "product_magnitude_bound"]

#: chunks a responder lets its encryptor have in flight (credit-based flow control, as in the ZeroMQ guide's file
#: transfer pattern): the coordinator and the responder never hold more than this many ciphertext chunks of a product
CREDIT_WINDOW = 4
#: the coordinator refuses credit further ahead than this (a responder cannot make it buffer more)
MAX_CREDIT_WINDOW = 8
#: room for a chunk message's JSON header and framing on top of its ciphertext frame
FRAME_HEADROOM = 64 * 1024
#: rows per chunk when a party reads its prepared columns (single-party blocks, offsets)
READ_CHUNK_ROWS = 65_536


# ------------------------------------------------------------------ shared rules
def party_frame_bytes(max_frame_bytes: int | None, message_limit: Any, name: str) -> int:
    """The largest ciphertext frame this party sends: its own ``max_frame_bytes``, or the default (less if the
    coordinator's ``message_limit`` from the PLAN accepts less); a frame the limit cannot carry is refused."""
    limit = message_limit if isinstance(message_limit, int) and not isinstance(message_limit, bool) else None
    if max_frame_bytes is None:
        if limit is None:
            return DEFAULT_MAX_FRAME_BYTES
        return max(1, min(DEFAULT_MAX_FRAME_BYTES, limit - FRAME_HEADROOM))
    if limit is not None and max_frame_bytes + FRAME_HEADROOM > limit:
        raise ConfigurationError(
            f"party {name}: ciphertext frames of up to {max_frame_bytes} bytes do not fit the coordinator's "
            f"message limit of {limit} bytes; lower this party's --max-frame-bytes (at most "
            f"{max(0, limit - FRAME_HEADROOM)}) or raise the coordinator's --max-message-bytes")
    return max_frame_bytes


def product_shape(plan: DissectionPlan, block: Block) -> tuple[int, int]:
    """Shape of a cross block's secure product (encryptor operand columns x responder operand columns)."""
    def width(party: int) -> int:
        return 1 if plan.label_operand(block, party) else plan.feature_counts[party]

    return (width(block.encryptor), width(block.responder))  # type: ignore[arg-type]


def operand_of(plan: DissectionPlan, block: Block, party: int, X: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """A party's operand of a cross block: its columns, or y for the label side of alpha[k]."""
    if plan.label_operand(block, party):
        assert y is not None
        return y.reshape(-1, 1)
    return X


def _block_named(plan: DissectionPlan, msg: Incoming, what: str) -> Block:
    try:
        return plan.block(msg.body.get("block", ""))
    except KeyError:
        raise ProtocolError(f"{kind_of(msg)} {what} {msg.body.get('block')!r}") from None


@dataclass(frozen=True, kw_only=True)
class FMParams:
    """The FM part of a PLAN's ``params`` (all public)."""

    epsilon: float | None
    delta: float | None
    precision_bits: int
    key_bits: int
    allow_insecure_keys: bool
    domain: str
    mechanism_options: dict
    randomness: str = "short-exponent"
    release_beta: bool = False   # the label owner releases beta = (1/N) y'y (a block of the plan; linear only)

    def to_params(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "precision_bits": self.precision_bits,
                "key_bits": self.key_bits, "allow_insecure_keys": self.allow_insecure_keys, "domain": self.domain,
                "mechanism_options": self.mechanism_options, "randomness": self.randomness,
                "release_beta": self.release_beta}

    @classmethod
    def from_params(cls, params: dict) -> FMParams:
        try:
            out = cls(epsilon=params.get("epsilon"), delta=params.get("delta"),
                      precision_bits=int(params["precision_bits"]), key_bits=int(params["key_bits"]),
                      allow_insecure_keys=bool(params.get("allow_insecure_keys", False)),
                      domain=str(params["domain"]), mechanism_options=dict(params.get("mechanism_options") or {}),
                      randomness=str(params.get("randomness", "short-exponent")),
                      release_beta=params.get("release_beta", False))
            if out.randomness not in RANDOMNESS_MODES or not isinstance(out.release_beta, bool):
                raise ValueError(f"unknown randomness {out.randomness!r} or release_beta {out.release_beta!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed plan: {exc}") from None
        return out


@dataclass(frozen=True, kw_only=True)
class FMRelease:
    """What an FM run releases: the minimiser and everything the model file records about it."""

    w: np.ndarray
    report: dict
    label_bounds: list[float] | None
    column_scale: float
    intercept_party: int | None
    lambda_floor: float
    n_floored: int
    regularization: str
    domain: str
    precision_bits: int
    objective: QuadraticObjective | None = None   # the released objective and its noise law: inference from the
    mechanism: Mechanism | None = None            # release (vfl.models.inference), post-processing


#: a combined entry may exceed its noise-free bound by this many standard deviations of the sum of the two noise
#: draws: an honest run is refused with probability < 4e-33 per entry (Gaussian) or < 1e-9 (two Laplace draws,
#: tail exp(-24)(1 + 12)); a larger margin would let an amplified operand through by as much
NOISE_TAIL_STDS = 12.0


def product_magnitude_bound(n_rows: int, enc_bound: int, resp_bound: int, noise_std_raw: float) -> int:
    """``1.5 n A B + ceil(NOISE_TAIL_STDS sqrt(2) sigma)``: the largest |entry| of an honest combined cross block
    (raw units 2^-2p; see :func:`check_product_magnitude`)."""
    return 3 * n_rows * enc_bound * resp_bound // 2 + math.ceil(NOISE_TAIL_STDS * math.sqrt(2.0) * noise_std_raw)


def check_product_magnitude(total: np.ndarray, *, n_rows: int, enc_bound: int, resp_bound: int,
                            noise_std_raw: float, block: str, encryptor: str) -> None:
    """Refuse a combined cross block whose entries exceed what honest operands can produce (issue 20, item 4).

    Honest prepared operands satisfy ``|a_int| <= enc_bound`` and ``|b_int| <= resp_bound`` (public: ``2^p`` for the
    label and in the linf domain, ``ceil(c 2^p / sqrt(d)) + 1`` for features in the l2 domain), so
    ``|sum_i a_int_ij b_int_ik| <= n A B``; a party's local offset (logistic alpha: ``|sum_i x_int| 2^(p-1)``) adds at
    most half of that; the sum of the two noise draws (each of std ``sigma``) exceeds ``NOISE_TAIL_STDS sqrt(2) sigma``
    with negligible probability. An encryptor that amplifies its operand inside its declared slots (``lambda e_i``) is
    thereby limited to ``|lambda| <= 1.5 n A``, i.e. at most ``1.5 n`` times its largest honest value, instead of the
    ~``2^noise_bits`` the slot check alone allows (docs/threat_model.md, "Residual").
    """
    bound = product_magnitude_bound(n_rows, enc_bound, resp_bound, noise_std_raw)
    if any(abs(int(u)) > bound for u in np.asarray(total, dtype=object).flat):
        raise ProtocolError(f"secure product refused: the combined block {block} exceeds what operands inside the "
                            f"public bounds can produce ({encryptor}'s operand is amplified, or a share is "
                            "corrupted); the run stops")


# ------------------------------------------------------------------ coordinator side
class FMCoordinator:
    """Coordinator side: plan, relay each secure-product message once, collect blocks and shares, assemble, solve."""

    def __init__(self, settings: RunSettings, regs: list[Registration],
                 log: Callable[[str], None] | None = None) -> None:
        s = self.settings = settings
        self.regs, self.log = regs, log or (lambda line: None)
        self.n = regs[0].n_rows
        self.label_owner = next(i for i, r in enumerate(regs) if r.label_owner)
        # FM runs: the label owner carries the public constant column (spec pitfall 4); it counts in its radius
        self.intercept_party = self.label_owner if s.fit_intercept else None
        counts = [len(r.features) + (1 if i == self.intercept_party else 0) for i, r in enumerate(regs)]
        self.plan = DissectionPlan(counts, self.label_owner, model=s.model,  # type: ignore[arg-type]  # validated
                                   release_beta=s.beta_released)
        opts = {k: v for k, v in s.mechanism_options.items() if k != "domain"}
        self.mech = make_mechanism(s.mechanism, plan=self.plan, n_samples=self.n, epsilon=s.epsilon, delta=s.delta,
                                   domain=s.domain, party_names=[r.name for r in regs], noise_sharing="two-sided",
                                   **opts)   # both parties of a cross block draw its noise: the report's "against whom"
        self.precision_bits = s.precision_bits or DEFAULT_PRECISION_BITS
        if self.mech.domain == "l2":
            fixed_point_shrink(self.plan.n_features, self.precision_bits)   # refuses a grid too coarse for d now
        self.params = FMParams(epsilon=s.epsilon, delta=s.delta, precision_bits=self.precision_bits,
                               key_bits=s.key_bits, allow_insecure_keys=s.allow_insecure_keys,
                               domain=self.mech.domain, mechanism_options=opts, randomness=s.randomness,
                               release_beta=self.plan.release_beta)
        self.values: dict[str, np.ndarray] = {}
        self.shares: dict[str, dict[int, np.ndarray]] = {b.name: {} for b in self.plan.cross_blocks()}
        self.ready: dict[int, ReadyBody] = {}
        self.relayed: set[tuple[str, str]] = set()
        self.streams: dict[str, dict[str, int]] = {}
        #: per cross block, from the ENC_REQUEST relayed: (public stream header, Paillier modulus n)
        self.products: dict[str, tuple[ProductStreamHeader, int]] = {}

    def plan_messages(self) -> list[Out]:
        """One PLAN per party (step 1)."""
        s, icpt = self.settings, self.intercept_party
        parties = [PlanParty(name=r.name, n_features=len(r.features) + (1 if i == icpt else 0), features=r.features,
                             label_owner=r.label_owner, intercept=i == icpt) for i, r in enumerate(self.regs)]
        self.log(f"plan: {len(self.plan.blocks)} blocks ({len(self.plan.cross_blocks())} secure products), "
                 f"mechanism {s.mechanism}, {s.key_bits}-bit keys")
        return [Out(type="plan", to=i, body=PlanBody(index=i, parties=parties, model=s.model, mechanism=s.mechanism,
                                                     params=self.params.to_params(), n_samples=self.n,
                                                     label_owner=self.label_owner).to_body())
                for i in range(len(self.regs))]

    @property
    def done(self) -> bool:
        return len(self.values) == len(self.plan.blocks) and len(self.ready) == len(self.regs)

    def handle(self, i: int, msg: Incoming) -> list[Out]:
        """A message from party ``i``: READY, BLOCK, SHARE are collected; ENC_REQUEST / MASKED_RESPONSE relayed."""
        kind = kind_of(msg)
        reg = self.regs[i]
        if kind == "ready":
            if i in self.ready:
                raise ProtocolError(f"second READY from {reg.name}")
            ready = ReadyBody.from_body(msg.body, party=reg.name, n_features=len(reg.features))
            if ready.bounds is not None:
                reg.bounds, reg.bounds_from_data = ready.bounds, ready.bounds_from_data
            self.ready[i] = ready
            return []
        block = _block_named(self.plan, msg, "names an unknown block")
        if kind in ("enc_request", "masked_response", "enc_chunk", "credit"):
            return [self._relay(block, i, msg)]
        if kind == "block":
            self._collect_block(block, i, msg)
        elif kind == "share":
            self._collect_share(block, i, msg)
        else:
            raise ProtocolError(f"unexpected {kind} from {reg.name}")
        return []

    def _relay(self, block: Block, i: int, msg: Incoming) -> Out:
        kind = kind_of(msg)
        src, dst = ((block.encryptor, block.responder) if kind in ("enc_request", "enc_chunk")
                    else (block.responder, block.encryptor))
        if i != src or msg.body["to"] != self.regs[dst].name:  # type: ignore[index]
            raise ProtocolError(f"party {self.regs[i].name} may not send {kind} for {block.name}")
        if kind in ("enc_chunk", "credit"):
            self._flow_control(block, kind, msg)
        elif (block.name, kind) in self.relayed:  # a second product would draw the block's noise twice
            raise ProtocolError(f"party {self.regs[i].name} sent a second {kind} for {block.name}; "
                                "each secure product runs once")
        else:
            self.relayed.add((block.name, kind))
            if kind == "enc_request":
                stream = self._request_layout(block, i, msg)
                self.streams[block.name] = {"n_chunks": stream.n_chunks, "relayed": 0, "upto": 0}
        return Out(type=kind, body={**msg.body, "origin": self.regs[i].name}, payload=msg.payload, to=dst)

    def _request_layout(self, block: Block, i: int, msg: Incoming) -> ProductStreamHeader:
        """The public layout of a relayed ENC_REQUEST (stream header + the encryptor's public key), parsed with the
        responder's validators and kept: the shares of the block are combined and range-checked with it."""
        name = self.regs[i].name
        try:
            pub = public_key_from_bytes(msg.blob(0), min_bits=self.params.key_bits)
            stream = ProductStreamHeader.from_wire(msg.body["wire"], [], pub, max_frame_bytes=1 << 62)
        except (VFLError, KeyError, ValueError, TypeError) as exc:
            raise ProtocolError(f"the request of {name} for {block.name} is malformed: {exc}") from None
        if (stream.layout.n_rows, stream.n_cols, stream.layout.precision_bits) != (
                self.n, product_shape(self.plan, block)[0], self.precision_bits):
            raise ProtocolError(f"the request of {name} for {block.name} declares {stream.layout.n_rows} rows x "
                                f"{stream.n_cols} columns at precision {stream.layout.precision_bits}; the plan "
                                f"gives {self.n} x {product_shape(self.plan, block)[0]} at {self.precision_bits}")
        self.products[block.name] = (stream, int(pub.n))
        return stream

    def _flow_control(self, block: Block, kind: str, msg: Incoming) -> None:
        """Credit-based flow control of a streamed product (ZeroMQ guide, ch. 7 file transfer): a chunk is relayed
        only within the credit its responder granted, in order and once, so the coordinator never queues more than
        :data:`MAX_CREDIT_WINDOW` chunks of a product, however slow the responder."""
        stream = self.streams.get(block.name)
        if stream is None:
            raise ProtocolError(f"{kind} for {block.name} before its request")
        if kind == "credit":
            upto = msg.body["upto"]
            if not stream["upto"] < upto <= min(stream["n_chunks"], stream["relayed"] + MAX_CREDIT_WINDOW):
                raise ProtocolError(f"credit up to chunk {upto} of {block.name} is not ahead of {stream['upto']} or "
                                    f"more than {MAX_CREDIT_WINDOW} chunks ahead of the {stream['relayed']} relayed")
            stream["upto"] = upto
            return
        index = msg.body["wire"].get("index")
        if index != stream["relayed"]:
            raise ProtocolError(f"chunk {index!r} of {block.name} out of order (expected {stream['relayed']})")
        if index >= stream["upto"]:
            raise ProtocolError(f"chunk {index} of {block.name} sent without credit (granted up to {stream['upto']})")
        stream["relayed"] += 1

    def _collect_block(self, block: Block, i: int, msg: Incoming) -> None:
        name = self.regs[i].name
        if block.cross or block.noised_by != i or block.name in self.values:
            raise ProtocolError(f"party {name} sent block {block.name} it does not own")
        arr = msg.array()
        expected = block.shape or (1,)   # the scalar beta travels as one entry
        if arr.shape != expected:
            raise ProtocolError(f"block {block.name} from {name} has shape {arr.shape}, expected {expected}")
        self.values[block.name] = arr.astype(float).reshape(block.shape)

    def _collect_share(self, block: Block, i: int, msg: Incoming) -> None:
        got = self.shares[block.name] if block.cross else None
        if got is None or i not in (block.encryptor, block.responder) or i in got:
            raise ProtocolError(f"unexpected share of {block.name} from {self.regs[i].name}")
        if block.name not in self.products:
            raise ProtocolError(f"share of {block.name} from {self.regs[i].name} before its request")
        stream, modulus = self.products[block.name]
        share = msg.ints()
        expected = (product_shape(self.plan, block)[1], stream.n_groups)   # packed: responder columns x groups
        if share.shape != expected:
            raise ProtocolError(f"share of {block.name} has shape {share.shape}, expected {expected}")
        if not all(0 <= int(v) < modulus for v in share.flat):
            raise ProtocolError(f"share of {block.name} from {self.regs[i].name} is not a packed share modulo n")
        got[i] = share
        if len(got) < 2:
            return
        # Z = S^enc + S^resp mod n, unpacked with the public layout: every slot inside its declared range and
        # nothing above the last slot, or the encryptor's operand was not what its request declared (or the
        # responder corrupted its share: the shares alone cannot tell which)
        encryptor = f"party {self.regs[block.encryptor].name}"  # type: ignore[index]
        total = combine_packed_shares(*got.values(), layout=stream.layout, n_cols=stream.n_cols, modulus=modulus,
                                      encryptor=encryptor,
                                      responder=f"party {self.regs[block.responder].name}")  # type: ignore[index]
        check_product_magnitude(total, n_rows=self.n, enc_bound=self._operand_bound(block, block.encryptor),
                                resp_bound=self._operand_bound(block, block.responder),
                                noise_std_raw=self._noise_std_raw(block), block=block.name, encryptor=encryptor)
        raw = decode_products(total, self.precision_bits)
        self.values[block.name] = self.plan.scale(block, self.n) * orient(block, raw)
        self.log(f"  block {block.name} complete")

    def _operand_bound(self, block: Block, party: int | None) -> int:
        """Largest |value| of a party's prepared operand on the 2^-p grid (public): the label and the linf domain
        are in [-1, 1]; l2 features are scaled by c/sqrt(d) (:func:`vfl.fm.domain.prepare_party_block`)."""
        p = self.precision_bits
        if self.mech.domain != "l2" or (party is not None and self.plan.label_operand(block, party)):
            return 1 << p
        d = self.plan.n_features
        return math.ceil(fixed_point_shrink(d, p) / math.sqrt(d) * 2.0**p) + 1

    def _noise_std_raw(self, block: Block) -> float:
        """Std of one party's noise draw on an entry of a cross block, in the product's raw units 2^-2p."""
        spec = self.mech.entry_noise(block)
        return spec.std / abs(self.plan.scale(block, self.n)) * 2.0 ** (2 * self.precision_bits)

    @property
    def regularization(self) -> str:
        """The solve's regularisation: the run's choice, else the model's default (:mod:`vfl.fm.solver`)."""
        return self.settings.regularization or default_regularization(self.plan.model, self.mech.name)

    def finish(self) -> FMRelease:
        """Assemble (beta, alpha, M), project with the public eigenvalue floor, solve, and report (step 5)."""
        s, plan = self.settings, self.plan
        try:
            objective = plan.assemble(self.values)
            floor = release_floor(objective, self.mech, s.lambda_floor)
            sol = solve_details(objective, lambda_floor=floor, regularization=self.regularization,
                                alpha_noise_var=self.mech.alpha_noise_variance())
        except (ArithmeticError, ValueError, np.linalg.LinAlgError) as exc:
            if isinstance(exc, VFLError):
                raise
            raise DegenerateNoisyObjective(f"the released objective cannot be solved ({type(exc).__name__})") from None
        if not np.all(np.isfinite(sol.w)):
            raise DegenerateNoisyObjective("the released objective has no finite minimiser; no model written")
        report, label_bounds = self._report()
        # the parties' prepared columns: u(x)/sqrt(d), shrunk by c so the 2^-p rounding keeps ||x|| <= 1
        scale = (fixed_point_shrink(plan.n_features, self.precision_bits) / math.sqrt(plan.n_features)
                 if self.mech.domain == "l2" else 1.0)
        return FMRelease(w=sol.w, report=report, label_bounds=label_bounds, column_scale=scale,
                         intercept_party=self.intercept_party, lambda_floor=floor, n_floored=sol.n_floored,
                         regularization=self.regularization,
                         domain=self.mech.domain, precision_bits=self.precision_bits, objective=objective,
                         mechanism=self.mech)

    def _report(self) -> tuple[dict, list[float] | None]:
        """The mechanism's privacy report and the label bounds (linear).

        ``formal_dp`` is decided by the one rule (:func:`vfl.privacy.accounting.formal_dp_status`, through the
        report's ``mark_*`` methods): false for a mechanism without noise, for any bound a party took from its
        data, and when any party drew its noise from a fixed seed.
        """
        rep = self.mech.privacy_report()
        seeded = any(r.seeded for r in self.ready.values())
        rep.randomness = ("a fixed seed (random_state) at one or more parties: reproducible, not for release"
                          if seeded else f"ChaCha{CHACHA_ROUNDS} keyed from OS entropy at every party")
        if seeded:
            rep.mark_seeded()
        for r in self.regs:
            if r.bounds_from_data:
                rep.mark_data_dependent(f"party {r.name}'s feature bounds")
        owner = self.label_owner
        label_info = self.ready.get(owner, ReadyBody())
        label_bounds = (label_info.checked_label_bounds(self.regs[owner].name)
                        if self.settings.model == "linear" else None)
        if label_info.label_bounds_from_data:
            rep.mark_data_dependent("the label bounds")
        return rep.to_dict(), label_bounds


# ------------------------------------------------------------------ party side
class FMParty:
    """Party side after the PLAN: prepared data, the mechanism, this party's blocks and secure-product sides.
    ``data``: the party's table (:class:`vfl.net.party.LocalData`), prepared lazily (:mod:`~.party_columns`):
    single-party blocks accumulate (exactly) over chunks, secure products stream them (:class:`ProductStreamHeader`,
    then :class:`EncryptedChunk` frames within the responder's credit). ``executor``: where this party's encryption
    and multi-exponentiations run (None: local processes; a Dask scheduler address; an executor;
    :mod:`vfl.secure.executors`)."""

    def __init__(self, data: Any, plan: PlanBody, *, rng: np.random.Generator, seeded: bool = False,
                 allow_insecure_keys: bool = False, progress: bool = False, workers: int | None = None,
                 executor: Any = None, max_frame_bytes: int | None = None) -> None:
        self.data, self.seeded, self.progress, self.workers = data, seeded, progress, workers
        self.executor_spec = executor
        self.index, self.n = plan.index, plan.n_samples
        if self.n != data.n_rows:
            raise ProtocolError(f"plan says {self.n} rows, this party holds {data.n_rows}")
        p = self.params = FMParams.from_params(plan.params)
        if p.key_bits < 2048 and not allow_insecure_keys:
            raise ConfigurationError(f"the coordinator asked for {p.key_bits}-bit keys; this party refuses keys "
                                     "below 2048 bits (allow_insecure_keys is for tests only)")
        self.max_frame_bytes = party_frame_bytes(max_frame_bytes, plan.params.get("max_message_bytes"), data.name)
        self.intercept = plan.me.intercept
        # no party carries the constant column: a run without intercept, whose maps must be pure scalings
        # (an affine map into [-1, 1] would re-introduce a hidden intercept; vfl.fm.domain)
        self.no_intercept = not any(q.intercept for q in plan.parties)
        if plan.me.name != data.name or plan.me.n_features != data.X.shape[1] + int(self.intercept):
            raise ProtocolError("the plan does not describe this party")
        self.names = plan.names
        self.plan = DissectionPlan([q.n_features for q in plan.parties], plan.label_owner,
                                   model=plan.model, release_beta=p.release_beta)  # type: ignore[arg-type]  # checked
        self.mech = make_mechanism(plan.mechanism, plan=self.plan, n_samples=self.n, epsilon=p.epsilon,
                                   delta=p.delta, domain=p.domain, party_names=self.names, seeded=seeded,
                                   noise_sharing="two-sided", **p.mechanism_options)
        # one independent generator per block (in plan order): the noise does not depend on the order in which
        # requests from different parties arrive, and no draw is ever reused across blocks
        self.block_rngs = block_generators(rng, self.plan, self.index)
        self.encryptors: dict[str, ProductEncryptor] = {}
        self.outgoing: dict[str, tuple[ProductStreamHeader, Iterator[EncryptedChunk]]] = {}
        self.sent: dict[str, int] = {}
        self.folds: dict[str, list[Any]] = {}
        self.handled: set[tuple[str, str]] = set()
        self.chunks = ChunkGate(MAX_CREDIT_WINDOW)   # responder: chunks admitted on the receive thread
        self.keypair: tuple | None = None
        self.Xp: RowSource = ArrayRows(np.zeros((self.n, 0)))
        self.yp: RowSource | None = None
        self.label_bounds: tuple[float, float] | None = None
        self._stack = ExitStack()
        self._executor: Any = None

    # ------------------------------------------------------------------ resources
    def executor(self, work_ms: float) -> Any:
        """The executor for ``work_ms`` of serial work: None (products run inline) for small work with the local
        default; otherwise one executor per run, opened on first use and closed by :meth:`close`."""
        from vfl.secure.executors import open_executor
        from vfl.secure.fastmath import resolve_workers

        if self._executor is not None:
            return self._executor
        workers = resolve_workers(self.workers, work_ms)
        if self.executor_spec is None and workers <= 1:
            return None
        self._executor = self._stack.enter_context(open_executor(self.executor_spec, workers))
        return self._executor

    def close(self) -> None:
        """Shut down the executor this party opened (idempotent)."""
        self._stack.close()
        self._executor = None

    # ------------------------------------------------------------------ steps (worker thread)
    def start(self) -> list[Out]:
        """Steps 2-4 of this party: prepare its data, READY, its single-party blocks, its encrypted requests."""
        ready = self._prepare()
        out = [Out(type="ready", body=ready.to_body())]
        p = self.params.precision_bits
        for block in self.plan.single_party_blocks(self.index):
            y_chunks = self.yp.iter_chunks(READ_CHUNK_ROWS) if self.yp is not None else None
            pairs = ((X, None if y_chunks is None else next(y_chunks)[:, 0])
                     for X in self.Xp.iter_chunks(READ_CHUNK_ROWS))
            raw = accumulate_single_party_raw(self.plan, block, pairs, precision_bits=p)
            value = release_single_party_block(self.plan, self.mech, block, raw, n_samples=self.n, precision_bits=p,
                                               rng=self.block_rngs[block.name])
            out.append(Out(type="block", body={"block": block.name}, payload=[np.asarray(value, dtype=float)]))
        for block in self.plan.cross_blocks():
            if block.encryptor == self.index:
                out.append(self._request(block))
        return out

    def _prepare(self) -> ReadyBody:
        """Columns into the public domain and onto the 2^-p grid (row by row, lazily); the READY with the bounds."""
        columns = PreparedColumns.of(self.data, self.plan, self.params, self.index, intercept=self.intercept,
                                     no_intercept=self.no_intercept, seeded=self.seeded)
        self.Xp, self.yp, self.label_bounds = columns.X, columns.y, columns.label_bounds
        return columns.ready

    def _operand(self, block: Block) -> RowSource:
        if block.kind == "alpha" and self.index == self.plan.label_owner and block.parties[0] != self.index:
            assert self.yp is not None
            return self.yp
        return self.Xp

    def _work_ms(self, n_cols: int) -> float:
        return self.n * max(1, n_cols) * 0.05

    def paillier_key(self) -> bytes | None:
        """The Paillier public key this party encrypts every request under (generated now, before the roster, so
        its fingerprint is signed into it: vfl.protocols.roster); None if it encrypts no block."""
        if not any(b.encryptor == self.index for b in self.plan.cross_blocks()):
            return None
        if self.keypair is None:
            p = self.params
            self.keypair = generate_keypair(p.key_bits, allow_insecure=p.allow_insecure_keys)
        return public_key_to_bytes(self.keypair[0])

    def sender_of(self, msg: Incoming) -> str:
        """The party the plan names as the sender of a relayed message for one of this party's blocks: the
        encryptor of ENC_REQUEST / ENC_CHUNK, the responder of CREDIT / MASKED_RESPONSE (ProtocolError if the
        block is unknown or this party is not the other side)."""
        kind, block = kind_of(msg), _block_named(self.plan, msg, "for unknown block")
        src, dst = ((block.encryptor, block.responder) if kind in ("enc_request", "enc_chunk")
                    else (block.responder, block.encryptor))
        if kind not in ("enc_request", "enc_chunk", "credit", "masked_response") or dst != self.index or src is None:
            raise ProtocolError(f"unexpected {kind} for block {block.name}")
        return self.names[src]

    def _request(self, block: Block) -> Out:
        """Encryptor: the stream header now; the chunks follow as the responder grants credit."""
        p = self.params
        if self.keypair is None:
            self.keypair = generate_keypair(p.key_bits, allow_insecure=p.allow_insecure_keys)
        pub, priv = self.keypair
        # the responder's width comes from the plan this party accepted, never from the response (issue 14)
        operand = self._operand(block)
        enc = ProductEncryptor(priv, operand, response_cols=product_shape(self.plan, block)[1],
                               precision_bits=p.precision_bits, randomness=p.randomness, progress=self.progress,
                               workers=self.workers, executor=self.executor(self._work_ms(operand.n_cols)),
                               max_frame_bytes=self.max_frame_bytes)
        self.encryptors[block.name] = enc
        header = enc.stream_header()
        self.outgoing[block.name] = (header, enc.encrypted_chunks())
        self.sent[block.name] = 0
        responder = self.names[block.responder]  # type: ignore[index]
        return Out(type="enc_request", body={"block": block.name, "to": responder, "wire": header.to_wire()[0]},
                   payload=[public_key_to_bytes(pub)])

    def send_chunks(self, block: Block, upto: int) -> Iterator[Out]:
        """Encryptor: the next chunks, up to the credit ``upto`` (chunk indices ``< upto``), as they are ready."""
        header, chunks = self.outgoing[block.name]
        responder = self.names[block.responder]  # type: ignore[index]
        while self.sent[block.name] < min(upto, header.n_chunks):
            chunk = next(chunks)
            self.sent[block.name] += 1
            wire, frames = chunk.to_wire()
            yield Out(type="enc_chunk", body={"block": block.name, "to": responder, "wire": wire}, payload=frames)
        if self.sent[block.name] == header.n_chunks:
            next(chunks, None)   # let the generator finish: the column sums and stats are final now

    def _offset_fixed(self, block: Block, shape: tuple[int, int]) -> np.ndarray:
        """This party's local offset of the block in raw fixed-point units, oriented like the product (summed over
        chunks: it is a sum over rows, logistic alpha only)."""
        p = self.params.precision_bits
        total = cross_block_offset(self.plan, block, self.index, np.zeros((0, self.Xp.n_cols)), shape,
                                   precision_bits=p)
        if block.parties[0] == self.index and block.kind == "alpha" and self.plan.model == "logistic":
            for chunk in self.Xp.iter_chunks(READ_CHUNK_ROWS):
                total = total + cross_block_offset(self.plan, block, self.index, chunk, shape, precision_bits=p)
        return total

    def _credit(self, block: Block, upto: int) -> Out:
        encryptor = self.names[block.encryptor]  # type: ignore[index]
        return Out(type="credit", body={"block": block.name, "to": encryptor, "upto": upto})

    def respond(self, block: Block, msg: Incoming) -> list[Out]:
        """Responder, stream header: check it, draw the block's DP noise, open the fold, grant the first credit."""
        p = self.params
        pub = public_key_from_bytes(msg.blob(0), min_bits=p.key_bits)   # the plan's key size, no smaller
        stream = ProductStreamHeader.from_wire(msg.body["wire"], [], pub)
        B = self._operand(block)
        shape = (stream.n_cols, B.n_cols)
        noise = cross_block_noise(self.plan, self.mech, block, shape, n_samples=self.n,
                                  precision_bits=p.precision_bits, rng=self.block_rngs[block.name])
        responder = ProductResponder(B, precision_bits=p.precision_bits, randomness=p.randomness,
                                     progress=self.progress, workers=self.workers,
                                     executor=self.executor(self._work_ms(B.n_cols)))
        self.folds[block.name] = [stream, responder.open(stream, noise), 0]
        return [self._credit(block, min(CREDIT_WINDOW, stream.n_chunks))]

    def respond_chunk(self, block: Block, msg: Incoming) -> list[Out]:
        """Responder, one chunk: fold it in; more credit, or after the last chunk the masked response and share."""
        state = self.folds.get(block.name)
        if state is None:
            raise ProtocolError(f"chunk of {block.name} before its request")
        stream, fold, folded = state
        fold.add(EncryptedChunk.from_wire(msg.body["wire"], [msg.blob(0)], stream))
        state[2] = folded = folded + 1
        if folded < stream.n_chunks:
            return [self._credit(block, folded + CREDIT_WINDOW)] if folded + CREDIT_WINDOW <= stream.n_chunks else []
        del self.folds[block.name]
        response, share = fold.finish()   # packed: d_resp x groups, mod n (vfl.secure.products)
        header, frames = response.to_wire()
        share = add_packed(share, self._offset_fixed(block, (stream.n_cols, fold.responder.n_cols)),
                           layout=stream.layout, modulus=int(stream.public_key.n))
        encryptor = self.names[block.encryptor]  # type: ignore[index]
        return [Out(type="masked_response", body={"block": block.name, "to": encryptor, "wire": header},
                    payload=frames),
                Out(type="share", body={"block": block.name}, payload=[np.asarray(share, dtype=object)])]

    def decrypt(self, block: Block, msg: Incoming) -> list[Out]:
        """Encryptor: decrypt the masked response into this party's packed share, adding its own noise share.

        Two-sided noise: this party draws the block's full calibrated entry noise from its own block generator
        (:func:`vfl.privacy.fixed_point.cross_block_noise`, as the responder does), so that no single participant
        knows the block's total noise.
        """
        enc = self.encryptors.get(block.name)
        if enc is None:
            raise ProtocolError(f"masked response for {block.name}, which this party did not request")
        response = enc.response_from_wire(msg.body["wire"], [msg.blob(0)])
        shape = (enc.n_cols, enc.response_cols)
        noise = cross_block_noise(self.plan, self.mech, block, shape, n_samples=self.n,
                                  precision_bits=self.params.precision_bits, rng=self.block_rngs[block.name])
        share = enc.decrypt(response, noise=noise)
        share = add_packed(share, self._offset_fixed(block, shape), layout=enc.layout,
                           modulus=int(enc.public_key.n))
        return [Out(type="share", body={"block": block.name}, payload=[np.asarray(share, dtype=object)])]

    # ------------------------------------------------------------------ dispatch (caller's thread)
    def handle(self, msg: Incoming) -> Callable[[], Any]:
        """Check a relayed message now; return the step that answers it (run in order on one worker thread).

        ENC_REQUEST and MASKED_RESPONSE are answered once per block; ENC_CHUNK and CREDIT belong to an open stream
        (their order and credit are checked by the coordinator and again by the stream itself).
        """
        kind = kind_of(msg)
        block = _block_named(self.plan, msg, "for unknown block")
        if kind == "enc_chunk" and block.responder == self.index and (block.name, "enc_request") in self.handled:
            self.chunks.admit(block.name, msg.body.get("wire"), (self.folds.get(block.name) or [0, 0, 0])[2])
            return lambda: self.respond_chunk(block, msg)
        if kind == "credit" and block.encryptor == self.index and block.name in self.outgoing:
            upto = int(msg.body["upto"])
            return lambda: self.send_chunks(block, upto)
        if (block.name, kind) in self.handled:  # answering twice would release the block with fresh noise
            raise ProtocolError(f"second {kind} for block {block.name}")
        if kind == "enc_request" and block.responder == self.index:
            self.handled.add((block.name, kind))
            return lambda: self.respond(block, msg)
        if kind == "masked_response" and block.encryptor == self.index:
            self.handled.add((block.name, kind))
            return lambda: self.decrypt(block, msg)
        raise ProtocolError(f"unexpected {kind} for block {block.name}")
