"""The party role: registers its columns, computes its blocks and its side of every secure product.

A party never sends a raw row. What leaves it (see docs/threat_model.md):

* REGISTER: its name, row count, column names, whether it holds the label, and a SHA-256 digest of
  its row-ID column;
* READY (FM mechanisms): its public column bounds and the label owner's public label bounds (linear);
* BLOCK: each single-party block ``scale * raw + offset + noise`` with the owner's DP noise
  (:meth:`vfl.privacy.mechanisms.Mechanism.block_noise`), e.g. ``M[k,k] = (1/N) X_k^T X_k + E``;
* ENC_REQUEST (encryptor of a cross block): its packed columns under its own Paillier key;
* MASKED_RESPONSE (responder): the encrypted products with a uniform mask and the block's DP noise
  added inside the ciphertext (a discrete Gaussian/Laplace in fixed-point units; spec §1.3 [correction]);
* SHARE: its additive share of a cross block in fixed point ``2^-2p`` units, with its own local
  offset (logistic ``alpha``: ``(1/(2N)) sum_i x_i``, Zhang et al. 2012 eq. 12) folded in, so the
  coordinator only ever learns the noisy block.

Socket I/O and heartbeats stay on the calling thread; encryption and products run on a worker
thread, so heartbeats keep flowing during long computations.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    PartyFailure,
    PrivacyParameterError,
    ProtocolError,
    VFLError,
)
from vfl.fm.dissection import Block, DissectionPlan
from vfl.fm.domain import (
    ColumnBounds,
    prepare_labels,
    prepare_party_block,
    resolve_bounds,
    to_unit_interval,
)
from vfl.net.messages import IntArray, Message, MessageType, validate_name
from vfl.net.modelio import FittedModel
from vfl.net.transport import ClientTransport, CurveClientKeys
from vfl.privacy.fixed_point import (
    block_generators,
    cross_block_noise,
    cross_block_offset,
    prepare_fixed_point,
    single_party_block,
)
from vfl.rng import RandomState, make_rng

__all__ = ["PartyNode", "LocalData", "wire_reason"]

HEARTBEAT_SECONDS = 1.0
# Secure-product steps of parties sharing one process (vfl.fit runs them as threads) are serialised: they would
# only compete for the same cores, and it keeps the process-pool start-up simple.
_SECURE_LOCK = threading.Lock()
#: error classes whose messages state parameters, names, counts or protocol facts but never a data value; only
#: these are sent to the coordinator verbatim (which forwards the reason to every other party in its ABORT)
SHAREABLE_ERRORS = (ConfigurationError, ProtocolError, PrivacyParameterError)


def wire_reason(exc: BaseException, party: str) -> str:
    """The reason a failing party reports in its ERROR message.

    Local error messages may quote the party's data (``value 93.2 in age (row 17) lies outside its declared
    bounds``, ``found labels [2.0]``): such a message must not travel to the coordinator and, through its ABORT,
    to the other parties (spec pitfall 7: nothing data-dependent leaves un-noised). Only the error class and the
    party name go out, except for the classes in :data:`SHAREABLE_ERRORS`.
    """
    if isinstance(exc, SHAREABLE_ERRORS):
        return str(exc)[:2000] or type(exc).__name__
    return (f"{type(exc).__name__} at party {party} (details withheld: the message may describe that party's "
            "data; see its own output)")


@dataclass
class LocalData:
    """A party's data in raw units with its *declared* public bounds (None: inferred after the PLAN, and only
    for mechanisms that need them, with a DataBoundsWarning)."""

    name: str
    X: np.ndarray
    feature_names: list[str]
    y: np.ndarray | None
    bounds: ColumnBounds | None
    label_bounds: tuple[float, float] | None
    id_digest: str | None
    #: optional FM view of the same features (raw units and bounds; see vfl.net.config.LocalTable.fm_columns)
    fm_view: tuple[np.ndarray, ColumnBounds] | None = None

    @classmethod
    def build(cls, name: str, X: Any, y: Any = None, *, feature_names: Sequence[str] | None = None,
              bounds: Any = None, label_bounds: Sequence[float] | None = None, id_digest: str | None = None,
              use_bounds: bool = True, fm_columns: Any = None, fm_bounds: Any = None) -> LocalData:
        """Validate the party's table and its declared bounds (``bounds=None``: none declared)."""
        try:
            validate_name(name)
        except ProtocolError as exc:  # a user's typo, not a peer's protocol violation (CLI exit code 2, not 4)
            raise ConfigurationError(str(exc)) from None
        X = np.asarray(X, dtype=float)
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        if X.ndim != 2:
            raise DataValidationError(f"party {name}: X must be 2-D, got shape {X.shape}")
        if X.shape[1] == 0 and y is None:
            raise DataValidationError(f"party {name} has neither features nor the label")
        if not np.all(np.isfinite(X)):
            raise DataValidationError(f"party {name}: X contains NaN or infinity")
        names = list(feature_names) if feature_names is not None else [f"{name}_x{j}" for j in range(X.shape[1])]
        if len(names) != X.shape[1]:
            raise DataValidationError(f"party {name}: {len(names)} feature names for {X.shape[1]} columns")
        if len(set(names)) != len(names):
            raise DataValidationError(f"party {name}: duplicate feature names")
        yv = None
        if y is not None:
            yv = np.asarray(y, dtype=float).ravel()
            if yv.shape[0] != X.shape[0]:
                raise DataValidationError(f"party {name}: y has {yv.shape[0]} rows, X has {X.shape[0]}")
            if not np.all(np.isfinite(yv)):
                raise DataValidationError(f"party {name}: y contains NaN or infinity")
        cb = None
        if use_bounds and X.shape[1] > 0 and bounds is not None:
            cb = resolve_bounds(bounds, X, names, what=f"features of party {name}")
            # checked here, before connecting: the same check after the PLAN would fail remotely, and its message
            # (which quotes the offending value) is a local matter
            to_unit_interval(X, cb, feature_names=names)
        lb = None
        if label_bounds is not None:
            lo, hi = (float(v) for v in label_bounds)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise DataValidationError(f"party {name}: label bounds must be finite with lo < hi")
            lb = (lo, hi)
            if use_bounds and yv is not None:
                to_unit_interval(yv[:, None], ColumnBounds(np.array([lo]), np.array([hi])), feature_names=["label"])
        fm_view = None
        if fm_columns is not None:
            Xf = np.asarray(fm_columns, dtype=float)
            if Xf.shape != X.shape or not np.all(np.isfinite(Xf)):
                raise DataValidationError(f"party {name}: the FM view must be finite with the shape of X")
            cf = resolve_bounds(fm_bounds, Xf, names, what=f"features of party {name}")
            to_unit_interval(Xf, cf, feature_names=names)
            fm_view = (Xf, cf)
        return cls(name, X, names, yv, cb, lb, id_digest, fm_view)

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])


def product_sides(block: Block, plan: DissectionPlan) -> tuple[int, int]:
    """(encryptor, responder) party indices of a cross block."""
    assert block.encryptor is not None and block.responder is not None
    return block.encryptor, block.responder


class PartyNode:
    """One party of a run: ``PartyNode(...).run()`` returns the released model or raises.

    Raises :class:`PartyFailure` when the coordinator aborts or goes silent for ``timeout`` seconds,
    :class:`ProtocolError` on a malformed message from it.
    """

    def __init__(self, data: LocalData, connect: str, *, curve: CurveClientKeys | None = None,
                 timeout: float = 120.0, order: int | None = None, random_state: RandomState = None,
                 progress: bool = False, workers: int | None = None,
                 allow_insecure_keys: bool = False, log: Callable[[str], None] | None = None) -> None:
        self.data = data
        self.allow_insecure_keys = allow_insecure_keys
        self.connect = connect
        self.curve = curve
        self.timeout = float(timeout)
        self.order = order
        self.rng = make_rng(random_state)
        self.seeded = random_state is not None
        self.progress = progress
        self.workers = workers
        self.log = log or (lambda s: None)
        self._results: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ main loop
    def run(self) -> FittedModel:
        t = ClientTransport(self.connect, name=self.data.name, curve=self.curve)
        try:
            return self._run(t)
        except VFLError as exc:
            if not isinstance(exc, PartyFailure):
                self._send_error(t, exc)
            raise
        except Exception as exc:  # an unexpected bug: tell the coordinator, then surface it
            self._send_error(t, exc)
            raise
        finally:
            self._stop.set()
            t.close()

    def _send_error(self, t: ClientTransport, exc: BaseException) -> None:
        try:
            t.send(Message(MessageType.ERROR, {"reason": wire_reason(exc, self.data.name),
                                               "error": type(exc).__name__[:64]}), timeout=1.0)
        except Exception:  # the coordinator may be gone already
            pass

    def _register_body(self) -> dict:
        d = self.data
        body: dict[str, Any] = {"name": d.name, "n_rows": d.n_rows, "features": d.feature_names,
                                "label_owner": d.y is not None, "id_digest": d.id_digest}
        if self.order is not None:
            body["order"] = int(self.order)
        return body

    def _run(self, t: ClientTransport) -> FittedModel:
        t.send(Message(MessageType.REGISTER, self._register_body()))
        last_sent = time.monotonic()
        session: _Session | _BCDSession | None = None
        while True:
            msg = t.recv(0.2)
            now = time.monotonic()
            if msg is None:
                if now - t.last_seen > self.timeout:
                    raise PartyFailure(f"no message from the coordinator for {self.timeout:g} s "
                                       f"(is it running at {self.connect}?)")
            else:
                result = self._handle(t, msg, session)
                if isinstance(result, FittedModel):
                    return result
                if isinstance(result, (_Session, _BCDSession)):
                    session = result
            while not self._results.empty():
                item = self._results.get()
                if isinstance(item, BaseException):
                    raise item
                t.send(item)
                last_sent = time.monotonic()
            if now - last_sent > HEARTBEAT_SECONDS and t.run_id:
                t.send(Message(MessageType.HEARTBEAT))
                last_sent = now

    def _handle(self, t: ClientTransport, msg: Message, session: _Session | _BCDSession | None) -> Any:
        kind = msg.type
        if kind is MessageType.ABORT:
            raise PartyFailure(f"the coordinator aborted the run: {msg.body['reason']}")
        if kind in (MessageType.HEARTBEAT, MessageType.WELCOME):
            return None
        if kind is MessageType.PLAN:
            if session is not None:
                raise ProtocolError("second PLAN in one run")
            if msg.body["mechanism"] in ("bcd", "dp-bcd"):
                session = _BCDSession(self, msg)
            else:
                session = _Session(self, msg)
            self.log(f"[{self.data.name}] plan received: mechanism {msg.body['mechanism']}, "
                     f"index {session.index} of {len(msg.body['parties'])}")
            self._submit(session.start)
            return session
        if kind is MessageType.RESULT:
            return FittedModel.from_dict(msg.body["model"])
        if session is None:
            raise ProtocolError(f"{kind.value} before the plan")
        return session.handle(msg)

    def _submit(self, fn: Callable[..., list[Message]], *args: Any) -> None:
        """Run ``fn`` on the worker thread (one at a time, in order); its messages are sent by the loop."""
        prev = self._worker

        def work() -> None:
            if prev is not None:
                prev.join()
            if self._stop.is_set():
                return
            try:
                for m in fn(*args):
                    self._results.put(m)
            except BaseException as exc:  # delivered to the main loop, which reports and raises
                if not isinstance(exc, VFLError):
                    traceback.print_exc(file=sys.stderr)
                self._results.put(exc)

        self._worker = threading.Thread(target=work, daemon=True, name=f"vfl-party-{self.data.name}")
        self._worker.start()


class _Session:
    """State of one run after the PLAN: prepared data, mechanism, open secure products."""

    def __init__(self, node: PartyNode, plan_msg: Message) -> None:
        from vfl.privacy.mechanisms import make_mechanism

        self.node = node
        body = plan_msg.body
        params = body["params"]
        self.index = int(body["index"])
        self.n = int(body["n_samples"])
        parties = body["parties"]
        if self.n != node.data.n_rows:
            raise ProtocolError(f"plan says {self.n} rows, this party holds {node.data.n_rows}")
        try:
            counts = [int(p["n_features"]) for p in parties]
            names = [str(p["name"]) for p in parties]
            self.precision_bits = int(params["precision_bits"])
            self.key_bits = int(params["key_bits"])
            self.allow_insecure = bool(params.get("allow_insecure_keys", False))
            self.domain = str(params["domain"])
            mech_opts = dict(params.get("mechanism_options") or {})
            self.randomness = str(params.get("randomness", "short-exponent"))
            if self.randomness not in ("short-exponent", "standard"):
                raise ValueError(f"unknown randomness {self.randomness!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed plan: {exc}") from None
        if self.key_bits < 2048 and not node.allow_insecure_keys:
            raise ConfigurationError(f"the coordinator asked for {self.key_bits}-bit keys; this party refuses keys "
                                     "below 2048 bits (allow_insecure_keys is for tests only)")
        self.intercept = bool(parties[self.index].get("intercept", False)) if isinstance(
            parties[self.index], dict) else False
        if names[self.index] != node.data.name or counts[self.index] != node.data.X.shape[1] + int(self.intercept):
            raise ProtocolError("the plan does not describe this party")
        self.plan = DissectionPlan(counts, int(body["label_owner"]), model=body["model"])
        self.mechanism_name = str(body["mechanism"])
        self.mech = make_mechanism(self.mechanism_name, plan=self.plan, n_samples=self.n,
                                   epsilon=params.get("epsilon"), delta=params.get("delta"),
                                   domain=self.domain, party_names=names, seeded=node.seeded, **mech_opts)
        self.names = names
        # one independent generator per block (in plan order): the noise does not depend on the order in which
        # requests from different parties arrive, and no draw is ever reused across blocks
        self.block_rngs = block_generators(node.rng, self.plan)
        self.encryptors: dict[str, Any] = {}
        self.handled: set[tuple[str, MessageType]] = set()
        self.keypair: tuple | None = None
        self.Xp: np.ndarray = np.zeros((self.n, 0))
        self.yp: np.ndarray | None = None
        self.label_bounds: tuple[float, float] | None = None

    # ------------------------------------------------------------------ worker-thread steps
    def start(self) -> list[Message]:
        """Prepare data, send READY, single-party blocks and this party's encrypted requests."""
        d, me = self.node.data, self.index
        total = self.plan.n_features
        ready: dict[str, Any] = {"seeded": self.node.seeded}
        X_fm, declared = d.fm_view if d.fm_view is not None else (d.X, d.bounds)
        if X_fm.shape[1]:
            bounds = declared or resolve_bounds(None, X_fm, d.feature_names, what=f"features of party {d.name}")
            self.Xp, _ = prepare_party_block(X_fm, bounds=bounds, domain=self.domain, n_features_total=total,
                                             feature_names=d.feature_names)
            ready["bounds"] = {"pairs": bounds.to_list()}
            ready["bounds_from_data"] = bool(bounds.from_data)
        if self.intercept:
            # public constant column, scaled like every other column so ||x|| <= 1 still holds (spec pitfall 4)
            constant = 1.0 / np.sqrt(total) if self.domain == "l2" else 1.0
            self.Xp = np.hstack([self.Xp, np.full((self.n, 1), constant)])
        # Every value goes onto the public 2^-p grid the secure products use, so each released block is an exact
        # integer statistic plus exact integer noise: no floating-point porosity (Mironov 2012; spec pitfall 1).
        p = self.precision_bits
        self.Xp = prepare_fixed_point(self.Xp, precision_bits=p, domain=self.domain, n_features_total=total)
        out: list[Message] = []
        if me == self.plan.label_owner:
            assert d.y is not None
            yp, yb = prepare_labels(d.y, self.plan.model, y_bounds=d.label_bounds)
            self.yp = prepare_fixed_point(yp, precision_bits=p, domain="linf", n_features_total=total)
            if yb is not None:
                self.label_bounds = (float(yb.lower[0]), float(yb.upper[0]))
                ready["label_bounds"] = list(self.label_bounds)
                ready["label_bounds_from_data"] = bool(yb.from_data)
        out.append(Message(MessageType.READY, ready))
        for block in self.plan.single_party_blocks(me):
            value = self._single_value(block)
            out.append(Message(MessageType.BLOCK, {"block": block.name}, [np.asarray(value, dtype=float)]))
        for block in self.plan.cross_blocks():
            if block.encryptor == me:
                out.append(self._request(block))
        return out

    def _single_value(self, block: Block) -> np.ndarray:
        """A single-party block: exact integer statistic + exact discrete noise (:mod:`vfl.privacy.fixed_point`)."""
        return single_party_block(self.plan, self.mech, block, self.Xp, self.yp, n_samples=self.n,
                                  precision_bits=self.precision_bits, rng=self.block_rngs[block.name])

    def _matrix_for(self, block: Block, party: int) -> np.ndarray:
        """This party's operand of a cross block: its columns, or y for the label side of alpha[k]."""
        if block.kind == "alpha" and party == self.plan.label_owner and block.parties[0] != party:
            assert self.yp is not None
            return self.yp.reshape(-1, 1)
        return self.Xp

    def _request(self, block: Block) -> Message:
        from vfl.secure.keys import generate_keypair, public_key_to_bytes
        from vfl.secure.products import ProductEncryptor

        if self.keypair is None:
            self.keypair = generate_keypair(self.key_bits, allow_insecure=self.allow_insecure)
        pub, priv = self.keypair
        enc = ProductEncryptor(priv, self._matrix_for(block, self.index), precision_bits=self.precision_bits,
                               randomness=self.randomness,
                               progress=self.node.progress, workers=self.node.workers)
        self.encryptors[block.name] = enc
        with _SECURE_LOCK:
            header, frames = enc.request().to_wire()
        responder = self.names[block.responder]  # type: ignore[index]
        return Message(MessageType.ENC_REQUEST, {"block": block.name, "to": responder, "wire": header},
                       [public_key_to_bytes(pub), *frames])

    def _offset_fixed(self, block: Block, shape: tuple[int, ...]) -> np.ndarray:
        """This party's local offset of the block in raw fixed-point units, oriented like the product."""
        return cross_block_offset(self.plan, block, self.index, self.Xp, shape,
                                  precision_bits=self.precision_bits)

    def respond(self, block: Block, msg: Message) -> list[Message]:
        from vfl.secure.keys import public_key_from_bytes
        from vfl.secure.products import EncryptedBlock, ProductResponder

        pub = public_key_from_bytes(msg.blob(0), min_bits=self.key_bits)   # the plan's key size, no smaller
        request = EncryptedBlock.from_wire(msg.body["wire"], [msg.blob(1)], pub)
        B = self._matrix_for(block, self.index)
        shape = (request.n_cols, B.shape[1])
        noise = cross_block_noise(self.plan, self.mech, block, shape, n_samples=self.n,
                                  precision_bits=self.precision_bits, rng=self.block_rngs[block.name])
        responder = ProductResponder(B, precision_bits=self.precision_bits, randomness=self.randomness,
                                     progress=self.node.progress,
                                     workers=self.node.workers)
        with _SECURE_LOCK:
            response, share = responder.respond(request, noise)
        header, frames = response.to_wire()
        share = share + self._offset_fixed(block, shape)
        encryptor = self.names[block.encryptor]  # type: ignore[index]
        return [Message(MessageType.MASKED_RESPONSE, {"block": block.name, "to": encryptor, "wire": header}, frames),
                Message(MessageType.SHARE, {"block": block.name}, [IntArray.of(share)])]

    def decrypt(self, block: Block, msg: Message) -> list[Message]:
        from vfl.secure.products import MaskedResponse

        enc = self.encryptors.get(block.name)
        if enc is None:
            raise ProtocolError(f"masked response for {block.name}, which this party did not request")
        response = MaskedResponse.from_wire(msg.body["wire"], [msg.blob(0)], enc.public_key)
        with _SECURE_LOCK:
            share = enc.decrypt(response)
        share = share + self._offset_fixed(block, share.shape)
        return [Message(MessageType.SHARE, {"block": block.name}, [IntArray.of(share)])]

    # ------------------------------------------------------------------ dispatch (main thread)
    def handle(self, msg: Message) -> None:
        try:
            block = self.plan.block(msg.body.get("block", ""))
        except KeyError:
            raise ProtocolError(f"{msg.type.value} for unknown block {msg.body.get('block')!r}") from None
        if (block.name, msg.type) in self.handled:  # answering twice would release the block with fresh noise
            raise ProtocolError(f"second {msg.type.value} for block {block.name}")
        if msg.type is MessageType.ENC_REQUEST and block.responder == self.index:
            self.handled.add((block.name, msg.type))
            self.node._submit(self.respond, block, msg)
        elif msg.type is MessageType.MASKED_RESPONSE and block.encryptor == self.index:
            self.handled.add((block.name, msg.type))
            self.node._submit(self.decrypt, block, msg)
        else:
            raise ProtocolError(f"unexpected {msg.type.value} for block {block.name}")
        return None


class _BCDSession:
    """(DP-)BCD over the runtime (de Jong et al. 2022, Alg. 1/2; spec §4): remainders travel around the ring.

    The ring starts at the label owner (v = y). A party receiving ``v_in`` in round t runs
    :func:`vfl.models.bcd.dp_bcd_step` (or the exact least-squares step for ``bcd``) on its raw columns, adds
    beta~ to its coefficients and sends ``v_out`` on (relayed by the coordinator). After its round-T step
    it sends its coefficients (BCD_COEF "completed"); a failed utility check sends "aborted" instead and
    the coordinator ends the run for everyone with no model. Party i's noise comes from its own
    generator, so ``vfl.fit(..., random_state=s)`` reproduces ``vfl.models.bcd.run_dp_bcd(..., random_state=s)``.
    """

    def __init__(self, node: PartyNode, plan_msg: Message) -> None:
        from vfl.models.bcd import QRLeastSquares, per_message_epsilon

        body = plan_msg.body
        params = body["params"]
        self.node = node
        self.index = int(body["index"])
        self.k = len(body["parties"])
        self.names = [str(p["name"]) for p in body["parties"]]
        self.label_owner = int(body["label_owner"])
        self.private = body["mechanism"] == "dp-bcd"
        try:
            self.rounds = int(params["rounds"])
            self.gamma = float(params["gamma"])
            self.abort_rule = str(params.get("abort_rule", "paper"))
            self.noise_calibration = str(params.get("noise_calibration", "half-normal"))
            self.eps_r = per_message_epsilon(float(params["epsilon"]), self.k, self.rounds) if self.private else 0.0
            self.tol = None if params.get("tol") is None else float(params["tol"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed plan: {exc}") from None
        if self.names[self.index] != node.data.name or int(body["n_samples"]) != node.data.n_rows:
            raise ProtocolError("the plan does not describe this party")
        if node.data.X.shape[1] == 0:
            raise ConfigurationError(f"party {node.data.name} has no columns: (DP-)BCD needs features at every party")
        self.solver = QRLeastSquares(node.data.X)
        self.coef = np.zeros(node.data.X.shape[1])
        self.ring = [(self.label_owner + j) % self.k for j in range(self.k)]
        self.next = self.ring[(self.ring.index(self.index) + 1) % self.k]
        self.expected_round = 1
        # label owner, tol: RSS_0 = ||y||^2, then the RSS of every remainder that comes back to it (vfl.models.bcd)
        self.rss_previous = float(node.data.y @ node.data.y) if node.data.y is not None else math.nan

    def start(self) -> list[Message]:
        out = [Message(MessageType.READY, {"seeded": self.node.seeded})]
        if self.index == self.label_owner:
            assert self.node.data.y is not None
            out += self.step(self.node.data.y, 1)
        return out

    def step(self, v_in: np.ndarray, t: int) -> list[Message]:
        from vfl.models.bcd import dp_bcd_step, least_squares_step

        if t != self.expected_round:
            raise ProtocolError(f"remainder for round {t}, expected round {self.expected_round}")
        self.expected_round += 1
        if self.tol is not None and self.index == self.label_owner and t > 1:
            from vfl.models.bcd import _converged

            # v_in is the remainder after round t - 1: the convergence rule of vfl.models.bcd.run_(dp_)bcd, same round
            rss = float(v_in @ v_in)
            if _converged(self.rss_previous, rss, self.tol):
                return [Message(MessageType.BCD_COEF, {"status": "converged", "rounds_run": t - 1},
                                [self.coef.copy()])]
            self.rss_previous = rss
        if self.private:
            res = dp_bcd_step(self.solver, v_in, gamma=self.gamma, eps_r=self.eps_r, rng=self.node.rng,
                              abort_rule=self.abort_rule, noise_calibration=self.noise_calibration)
            if res.aborted:
                # xi = gamma ||(I - P) v_in|| and ||v_out|| are data-dependent and un-noised: they stay in this
                # party's own output; only the (unavoidable) abort event itself is reported
                self.node.log(f"[{self.node.data.name}] DP-BCD utility check failed in round {t}: ||v_out|| = "
                              f"{res.norm_v_out:.6g} > xi = {res.xi:.6g}")
                reason = f"DP-BCD aborted in round {t} at party {self.node.data.name}; no model is published"
                return [Message(MessageType.BCD_COEF, {"status": "aborted", "reason": reason})]
            beta, v_out = res.beta_tilde, res.v_out
        else:
            beta = least_squares_step(self.solver, v_in)
            v_out = v_in - self.solver.X @ beta
        assert beta is not None and v_out is not None
        self.coef += beta
        out: list[Message] = []
        next_round = t + 1 if self.next == self.label_owner else t
        if next_round <= self.rounds:
            out.append(Message(MessageType.BCD_REMAINDER, {"round": next_round, "to": self.names[self.next]},
                               [np.asarray(v_out, dtype=float)]))
        if t == self.rounds:
            out.append(Message(MessageType.BCD_COEF, {"status": "completed"}, [self.coef.copy()]))
        return out

    def stop(self) -> list[Message]:
        """The label owner's convergence check stopped the ring: release this party's coefficients."""
        return [Message(MessageType.BCD_COEF, {"status": "completed"}, [self.coef.copy()])]

    def handle(self, msg: Message) -> None:
        if msg.type is MessageType.BCD_STOP and self.index != self.label_owner:
            self.node._submit(self.stop)
            return None
        if msg.type is not MessageType.BCD_REMAINDER:
            raise ProtocolError(f"unexpected {msg.type.value} in a BCD run")
        v_in = msg.array()
        if v_in.shape != (self.node.data.n_rows,):
            raise ProtocolError(f"remainder has shape {v_in.shape}, expected ({self.node.data.n_rows},)")
        self.node._submit(self.step, v_in.astype(float), int(msg.body["round"]))

