"""Federated scoring of a released model, both sides, socket-free (issues 22 and 29; docs/serving.md).

A released vertical model is affine in the raw columns, ``z(x) = sum_k c_k . x_k + b`` (:mod:`vfl.models.modelio`:
each party's coefficient block ``c_k`` in original units, the label map of a linear model folded in, and one public
intercept ``b``). Party k holds only its columns ``x_k``, so a prediction for ID ``i`` is computed together:

1. **Session.** The hub (the requester) sends every serving party a SCORE_PLAN: the serving parties in the model's
   order, a fresh session id, the digest of the model it scores with, its ``--max-query-ids`` and the fixed-point
   precision ``f``. A party serves only the model it holds itself (same digest), only if its columns are its block's
   features (checked by the role), only a block with public bounds whose largest partial score fits the encoding at
   ``f`` (:func:`check_servable`: decided from public values, so a refusal says nothing about the data), and only
   a plan within its own cap on the IDs of a query. The plan's transcript ``T = H(session, model, parties, max_ids,
   f)`` (:meth:`ScorePlan.transcript`) is what the parties sign and mask under.
2. **Authenticated key agreement** (Bonawitz et al. 2017, §4; :mod:`vfl.secure.aggregation`). Party s draws a
   Diffie-Hellman secret in RFC 3526 group 14 and sends ``A_s`` signed with its Ed25519 identity over
   ``(T, its name, index, A_s)`` (:mod:`vfl.secure.identity`). The hub relays every signed value; each party checks
   every co-party's signature against the *pinned* key of the name the plan lists and against *its own* ``T``, so a
   hub can neither put its own key in the middle nor give two parties different plans (a different precision, model
   or cap makes the signatures fail). Party s and t derive the pair key ``K_st``.
3. **Query round r** (r = 1, 2, ...; never reused). The hub sends the query's normalised IDs
   (:func:`vfl.secure.psi.normalise_ids`) as one frame: ``count`` little-endian uint32 byte lengths, then the UTF-8
   IDs, so a party checks ``count`` against its own cap before it allocates anything per ID. The query context
   ``C_r = H(T, r, count, sha256(frame))`` is mixed into every pair mask (:func:`vfl.secure.aggregation.pair_mask`),
   so masks cancel only among parties that answered the same round of the same ID list under the same plan. Party
   s looks each ID up; for a held ID it clips the row to the model's public bounds and computes
   ``p_s,i = c_s . clip(x_s,i)``, encoded ``round(p 2^f) mod 2^64``, and a missing flag ``m_s,i = 0``; for an ID it
   does not hold it puts a uniform random word instead and a uniform *non-zero* flag ``m_s,i``. It sends
   ``y_s = (enc(p_s) || m_s || 0) + sum_{t>s} PRG(K_st, r, C_r) - sum_{t<s} PRG(K_ts, r, C_r)  (mod 2^64)``.
4. **Hub.** ``sum_s y_s = (sum_s enc(p_s) || sum_s m_s || 0)`` when every party answered the same query: for an ID
   every party holds, ``sum_s p_s,i`` (error ``<= S 2^-(f+1)``), to which it adds ``b``; for an ID some party
   lacks, a uniform total and a flag sum that is uniform on the non-zero words (up to ``2^-64``): reported missing,
   never scored. The last word must be 0: otherwise the parties answered different queries or plans (the masks did
   not cancel), and the hub refuses the whole answer, which is then uniform noise.

Who learns what: each masked vector alone is uniform (one pair key unknown to the hub suffices); whatever the hub
sends, it learns the totals of held IDs of the query every party answered, and for an ID some party lacks only that
bit (not which party, not how many; a flag sum is 0 for two or more missing parties with probability ``< 2^-64``);
no party learns anything of another's partial scores; every party sees the query's IDs. With two parties, a requester
that is itself a party learns the other party's partial score ``total - own``. Semi-honest parties; no dropout
recovery: a party that leaves fails the query naming it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError, IdentityError, ProtocolError
from vfl.protocols.contracts import Incoming, Out, kind_of
from vfl.secure.aggregation import (
    SecAggSite,
    decode_fixed_point,
    encode_fixed_point,
    max_abs_encoded,
    validate_public_value,
)
from vfl.secure.identity import PinnedKeys, SigningIdentity, digest_of
from vfl.secure.psi import MAX_ID_CHARS, normalise_ids

__all__ = ["SCORE_PRECISION_BITS", "DH_BYTES", "ScorePlan", "ScoringBlock", "ScoringParty", "ScoringHub",
           "ScoreResult", "check_query", "check_servable", "key_digest", "query_context", "id_frame", "parse_id_frame"]

#: fractional bits of the partial scores: error <= S 2^-37 per total, range +-2^27/S (1.3e8 for 3 parties)
SCORE_PRECISION_BITS = 36
DH_BYTES = 256


#: bytes one ID may take in a query frame (MAX_ID_CHARS characters of up to 4 UTF-8 bytes)
MAX_ID_BYTES = 4 * MAX_ID_CHARS


def key_digest(plan: ScorePlan, name: str, index: int, public_hex: str) -> bytes:
    """What a SCORE_KEY signature covers: the plan's transcript (session, model, serving parties, cap, precision),
    the sender and its value. A party verifies it against its *own* plan, so plans that differ fail."""
    return digest_of("vfl score key v2", plan.transcript(), name, index, public_hex)


def query_context(plan: ScorePlan, round_id: int, count: int, frame: bytes) -> bytes:
    """``C_r = H(T, r, count, sha256(frame))``: mixed into the pair masks of round r, so they cancel only among
    parties that answered the same ID frame in the same round under the same plan."""
    return digest_of("vfl score query v2", plan.transcript(), int(round_id), int(count),
                     hashlib.sha256(frame).digest())


def id_frame(ids: Sequence[str]) -> bytes:
    """A query's ID frame: ``len(ids)`` little-endian uint32 UTF-8 byte lengths, then the UTF-8 IDs."""
    encoded = [i.encode("utf-8") for i in ids]
    return np.fromiter((len(e) for e in encoded), dtype="<u4", count=len(encoded)).tobytes() + b"".join(encoded)


def parse_id_frame(frame: bytes, count: int, cap: int) -> list[str]:
    """The IDs of a query frame, refused (ProtocolError) *before anything per ID is allocated* when ``count`` exceeds
    ``cap`` or the frame is not ``count`` lengths and exactly that many bytes of IDs; then checked normalised and
    distinct."""
    if not 1 <= count <= cap:
        raise ProtocolError(f"score_query of {count} IDs refused: this party serves at most {cap} per query")
    head = 4 * count
    if len(frame) < head or len(frame) > head + count * MAX_ID_BYTES:
        raise ProtocolError(f"score_query: the ID frame of {len(frame)} bytes does not hold {count} IDs")
    lengths = np.frombuffer(frame, dtype="<u4", count=count)
    if int(lengths.max()) > MAX_ID_BYTES or int(lengths.sum(dtype=np.int64)) != len(frame) - head:
        raise ProtocolError(f"score_query: the ID frame's lengths do not add up to its {len(frame) - head} bytes")
    ends = np.cumsum(lengths, dtype=np.int64) + head
    try:
        ids = [frame[a:b].decode("utf-8") for a, b in zip([head, *ends[:-1].tolist()], ends.tolist(), strict=True)]
    except UnicodeDecodeError:
        raise ProtocolError("score_query: an ID is not UTF-8") from None
    try:
        if check_query(ids, cap) != ids:
            raise ProtocolError("score_query: the IDs are not normalised")
    except DataValidationError as exc:
        raise ProtocolError(f"score_query: {exc}") from None
    return ids


@dataclass(frozen=True)
class ScorePlan:
    """The public plan of a scoring session (the SCORE_PLAN body without ``index``)."""

    session: str
    model: str
    parties: tuple[str, ...]
    max_ids: int
    precision_bits: int = SCORE_PRECISION_BITS

    def transcript(self) -> bytes:
        """``T``: sha256 of every plan parameter that shapes an answer (signed with the keys, mixed into masks)."""
        return digest_of("vfl score plan v2", self.session, self.model, list(self.parties), self.max_ids,
                         self.precision_bits)

    def body(self, index: int) -> dict:
        return {"index": index, "parties": list(self.parties), "session": self.session, "model": self.model,
                "max_ids": self.max_ids, "precision_bits": self.precision_bits}

    @classmethod
    def from_body(cls, body: dict) -> tuple[ScorePlan, int]:
        plan = cls(str(body["session"]), str(body["model"]), tuple(str(p) for p in body["parties"]),
                   int(body["max_ids"]), int(body["precision_bits"]))
        if len(set(plan.parties)) != len(plan.parties) or len(plan.parties) < 2:
            raise ProtocolError("score_plan: the serving parties must be at least two distinct names")
        index = int(body["index"])
        if not 0 <= index < len(plan.parties):
            raise ProtocolError("score_plan: index outside the serving parties")
        return plan, index


@dataclass(frozen=True)
class ScoringBlock:
    """One party's block of a released model: its features, coefficients ``c_k`` in original units (a linear model's
    label map folded in) and public bounds (NaN: the column is used as given)."""

    features: tuple[str, ...]
    coef: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    def partial(self, X: np.ndarray) -> np.ndarray:
        """``c_k . clip(x, lower, upper)`` per row: rows are clipped to the public bounds the model was trained on."""
        lo = np.nan_to_num(self.lower, nan=-np.inf)
        hi = np.nan_to_num(self.upper, nan=np.inf)
        return np.clip(np.asarray(X, dtype=float), lo, hi) @ self.coef

    def max_abs_partial(self) -> float:
        """``sum_j |c_j| max(|lower_j|, |upper_j|)``: the largest ``|c . clip(x)|`` over any row (public); inf when
        a bound is missing."""
        reach = np.maximum(np.abs(self.lower), np.abs(self.upper))
        if self.coef.size and not np.all(np.isfinite(reach)):
            return float("inf")
        return float(np.abs(self.coef) @ reach) if self.coef.size else 0.0


def check_servable(block: ScoringBlock, n_parties: int, precision_bits: int, name: str = "this party") -> None:
    """Refuse (ConfigurationError, one line) a block this party must never serve: one without public bounds on every
    column, or whose largest partial score ``|c . clip(x)|`` (:meth:`ScoringBlock.max_abs_partial`) could leave the
    fixed-point range of ``n_parties`` sites at ``precision_bits`` (:func:`vfl.secure.aggregation.max_abs_encoded`).
    Decided from public values only, before any query, so an encoding overflow can never depend on a row (it would
    be a side channel to the hub)."""
    missing = [f for f, lo, hi in zip(block.features, block.lower, block.upper, strict=True)
               if not (np.isfinite(lo) and np.isfinite(hi))]
    if missing:
        raise ConfigurationError(f"party {name} refuses to serve a block without public bounds (no bounds recorded "
                                 f"for {', '.join(missing)}; a model trained with declared --bounds records them)")
    if not np.all(np.isfinite(block.coef)):
        raise ConfigurationError(f"party {name} refuses to serve a block with non-finite coefficients")
    reach = block.max_abs_partial()
    if not 8 <= precision_bits <= 52 or np.ldexp(reach * (1 + 1e-9), precision_bits) + 1 > max_abs_encoded(n_parties):
        raise ConfigurationError(f"party {name} refuses to serve: its largest partial score {reach:.6g} (from the "
                                 f"public bounds) does not fit {precision_bits}-bit fixed point for {n_parties} "
                                 "parties")


def check_query(ids: Sequence[Any], max_ids: int) -> list[str]:
    """A query's IDs, normalised (:func:`vfl.secure.psi.normalise_ids`); refused (DataValidationError, one line) when
    empty, longer than ``max_ids`` or holding a missing or duplicate ID."""
    values = list(ids)
    if not values:
        raise DataValidationError("the query holds no IDs")
    if len(values) > max_ids:
        raise DataValidationError(f"the query holds {len(values)} IDs, more than --max-query-ids {max_ids}")
    clean = normalise_ids(values, what="query")
    try:   # a lone surrogate (JSON "\\udcff") has no UTF-8 form, so no query frame (id_frame)
        "".join(clean).encode("utf-8")
    except UnicodeEncodeError:
        row = next(r for r, text in enumerate(clean, start=1) if not _utf8(text))
        raise DataValidationError(f"query: the ID in data row {row} is not valid Unicode text") from None
    return clean


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ScoringParty:
    """A serving party's side of a session: its signed key, the co-parties' keys, then one masked vector per query.

    ``ids``: its normalised row IDs; ``X``: its rows of the block's features (raw units, preprocessing applied);
    ``identity``/``pinned`` None: no identities (loopback experiments, ``--insecure-no-identity``). ``max_ids``: this
    party's own cap on the IDs of one query (a plan above it is refused); default the plan's."""

    def __init__(self, *, name: str, plan: ScorePlan, index: int, ids: Sequence[str], X: np.ndarray,
                 block: ScoringBlock, identity: SigningIdentity | None, pinned: PinnedKeys | None,
                 max_ids: int | None = None) -> None:
        if plan.parties[index] != name:
            raise ProtocolError(f"score_plan names {plan.parties[index]!r} at this party's index, not {name!r}")
        if (identity is None) != (pinned is None):
            raise ConfigurationError("a signing identity and pinned keys go together")
        self.cap = plan.max_ids if max_ids is None else int(max_ids)
        if plan.max_ids > self.cap:
            raise ConfigurationError(f"party {name} refuses a plan of up to {plan.max_ids} IDs per query: it serves at "
                                     f"most {self.cap} (vfl serve --max-query-ids)")
        check_servable(block, len(plan.parties), plan.precision_bits, name)
        self.name, self.plan, self.index, self.block = name, plan, index, block
        self.identity, self.pinned = identity, pinned
        self.rows = {i: r for r, i in enumerate(ids)}
        self.X = np.asarray(X, dtype=float)
        if self.X.shape != (len(self.rows), len(block.features)):
            raise DataValidationError(f"party {name}: {self.X.shape} rows x columns for {len(self.rows)} IDs and "
                                      f"{len(block.features)} features")
        if not np.all(np.isfinite(self.X)):
            raise DataValidationError(f"party {name}: its table holds NaN or infinite values; refusing to serve")
        self.site = SecAggSite(index, len(plan.parties), 1, plan.precision_bits, 0)
        self.ready = False
        self.answered = 0

    def key_message(self) -> Out:
        """SCORE_KEY: this party's Diffie-Hellman value, signed over the session (when it has an identity)."""
        value = self.site.public_key().to_bytes(DH_BYTES, "big")
        body: dict = {"index": self.index}
        if self.identity is not None:
            body["auth"] = self.identity.sign(key_digest(self.plan, self.name, self.index, value.hex()))
        return Out(type="score_key", body=body, payload=[value])

    def on_keys(self, msg: Incoming) -> list[Out]:
        """Check every co-party's signed value against its pinned identity, derive the pair keys; SCORE_READY."""
        if self.ready:
            raise ProtocolError("second score_keys in one session")
        entries = msg.body["entries"]
        if len(entries) != len(self.plan.parties):
            raise ProtocolError(f"score_keys carries {len(entries)} values for {len(self.plan.parties)} parties")
        keys: dict[int, int] = {}
        for i, (entry, name) in enumerate(zip(entries, self.plan.parties, strict=True)):
            if not isinstance(entry, dict) or entry.get("party") != name or entry.get("index") != i:
                raise ProtocolError(f"score_keys: entry {i} is not {name}'s")
            key = entry.get("key")
            if not isinstance(key, str) or len(key) != 2 * DH_BYTES:
                raise ProtocolError(f"score_keys: {name}'s value is malformed")
            if i != self.index and self.pinned is not None:
                if name not in self.pinned:
                    raise IdentityError(f"serving party {name!r} has no pinned identity; refusing the session")
                self.pinned.verify(name, key_digest(self.plan, name, i, key), entry.get("auth"), "scoring key")
            try:
                keys[i] = int(key, 16)
            except ValueError:
                raise ProtocolError(f"score_keys: {name}'s value is not hex") from None
        if keys[self.index] != self.site.public_key():
            raise ProtocolError("score_keys: this party's own value was altered on the way")
        self.site.receive_public_keys(keys)
        self.ready = True
        return [Out(type="score_ready")]

    def on_query(self, msg: Incoming) -> list[Out]:
        """SCORE_PARTIAL of round r under the query context ``C_r`` (:func:`query_context`): masked (encoded partial
        score, or a uniform word where the ID is not held), masked missing flags (0 where held, a uniform non-zero
        word where not) and a masked zero check word."""
        if not self.ready:
            raise ProtocolError("score_query before the keys were agreed")
        r, n = int(msg.body["round"]), int(msg.body["count"])
        frame = msg.blob(0)
        ids = parse_id_frame(frame, n, min(self.cap, self.plan.max_ids))
        pos = np.fromiter((self.rows.get(i, -1) for i in ids), dtype=np.int64, count=n)
        held = pos >= 0
        words = np.frombuffer(secrets.token_bytes(8 * n), dtype="<u8").astype(np.uint64)
        flags = np.frombuffer(secrets.token_bytes(8 * n), dtype="<u8").astype(np.uint64)
        while np.any(flags[~held] == 0):      # a uniform non-zero word where the ID is not held
            zero = ~held & (flags == 0)
            flags[zero] = np.frombuffer(secrets.token_bytes(8 * int(zero.sum())), dtype="<u8")
        flags[held] = 0
        if held.any():   # never raises: check_servable bounded every partial score from public values
            partial = self.block.partial(self.X[pos[held]])
            words[held] = encode_fixed_point(partial, self.plan.precision_bits, len(self.plan.parties))
        masked = self.site.mask_words(np.concatenate([words, flags, np.zeros(1, np.uint64)]), r,
                                      query_context(self.plan, r, n, frame))
        self.answered += 1
        return [Out(type="score_partial", body={"round": r, "count": n}, payload=[masked])]


@dataclass
class ScoreResult:
    """One query's answer at the hub: ``z`` (the sum of the partial scores; NaN where missing) and per ID whether
    some party does not hold it (which, or how many, is not known to the hub)."""

    ids: list[str]
    z: np.ndarray
    missing: np.ndarray


class ScoringHub:
    """The hub's side of a session: plan, relay the signed keys, then one round per query (sum of masked vectors)."""

    def __init__(self, plan: ScorePlan) -> None:
        self.plan = plan
        self._keys: dict[int, dict] = {}
        self._ready: set[int] = set()
        self.round = 0
        self._ids: list[str] | None = None
        self._sum: np.ndarray | None = None
        self._got: set[int] = set()

    @property
    def n(self) -> int:
        return len(self.plan.parties)

    @property
    def ready(self) -> bool:
        return len(self._ready) == self.n

    def plan_messages(self) -> list[Out]:
        return [Out(type="score_plan", body=self.plan.body(i), to=i) for i in range(self.n)]

    def handle(self, i: int, msg: Incoming) -> list[Out]:
        """SCORE_KEY (all in: SCORE_KEYS to everyone), SCORE_READY, SCORE_PARTIAL of the open round."""
        kind = kind_of(msg)
        name = self.plan.parties[i]
        if kind == "score_key":
            if i in self._keys or msg.body["index"] != i:
                raise ProtocolError(f"party {name} sent a second or misindexed score_key")
            value = msg.blob(0)
            if len(value) != DH_BYTES:
                raise ProtocolError(f"party {name}'s Diffie-Hellman value has {len(value)} bytes")
            validate_public_value(int.from_bytes(value, "big"))
            self._keys[i] = {"party": name, "index": i, "key": value.hex(),
                             **({"auth": msg.body["auth"]} if "auth" in msg.body else {})}
            if len(self._keys) < self.n:
                return []
            entries = [self._keys[j] for j in range(self.n)]
            return [Out(type="score_keys", body={"entries": entries}, to=j) for j in range(self.n)]
        if kind == "score_ready":
            if i not in self._keys or len(self._keys) < self.n:
                raise ProtocolError(f"party {name} is ready before the keys were relayed")
            self._ready.add(i)
            return []
        if kind == "score_partial":
            self._partial(i, msg)
            return []
        raise ProtocolError(f"unexpected {kind} from party {name} in a scoring session")

    def query(self, ids: Sequence[Any]) -> list[Out]:
        """Open round r + 1 for ``ids`` (checked by :func:`check_query`); SCORE_QUERY to every party."""
        if not self.ready:
            raise ProtocolError("the scoring session is not ready")
        if self._ids is not None:
            raise ProtocolError("a query is still open")
        clean = check_query(ids, self.plan.max_ids)
        blob = id_frame(clean)   # before the round opens: nothing below may leave it half open
        self.round += 1
        self._ids, self._got = clean, set()
        self._sum = np.zeros(2 * len(clean) + 1, dtype=np.uint64)
        body = {"round": self.round, "count": len(clean)}
        return [Out(type="score_query", body=dict(body), payload=[blob], to=j) for j in range(self.n)]

    def _partial(self, i: int, msg: Incoming) -> None:
        name = self.plan.parties[i]
        if self._ids is None or self._sum is None or msg.body["round"] != self.round or i in self._got:
            raise ProtocolError(f"party {name} sent a score_partial for no open round")
        words = msg.array(0)
        if words.dtype != np.uint64 or words.shape != self._sum.shape:
            raise ProtocolError(f"party {name}'s score_partial is not {self._sum.shape[0]} uint64 words")
        self._sum += words
        self._got.add(i)

    @property
    def waiting_for(self) -> list[str]:
        """The parties whose SCORE_PARTIAL of the open round has not arrived."""
        return [p for j, p in enumerate(self.plan.parties) if self._ids is not None and j not in self._got]

    @property
    def done(self) -> bool:
        return self._ids is not None and len(self._got) == self.n

    def result(self) -> ScoreResult:
        """The open round's totals (the masks cancelled); closes the round."""
        if not self.done or self._ids is None or self._sum is None:
            raise ProtocolError("the query's partial scores are not all in")
        L, total = len(self._ids), self._sum
        ids = self._ids
        self._ids, self._sum = None, None
        if total[2 * L] != 0:
            raise ProtocolError("the parties' answers do not add up (they answered different queries or plans, or "
                                "masked under other keys); nothing scored")
        missing = total[L:2 * L] != 0
        z = decode_fixed_point(total[:L], self.plan.precision_bits)
        z[missing] = np.nan
        return ScoreResult(ids, z, missing)
