"""Row alignment by private set intersection (PSI) of the parties' row IDs: both sides, socket-free.

Protocol (K >= 1 parties in plan order 0..K-1, each with secret PSI key ``k_j`` and normalised, duplicate-free IDs
``x_{j,1..n_j}`` in its own row order; every message goes through the coordinator, which holds no key)::

    coordinator -> every party j   PSI_START   {index: j, parties: K, registrations: [REG_0 ... REG_{K-1}]}
    party j     -> coordinator     PSI_POINTS  {origin: j, hops: 1, offset, auth}   [H(x_j)^k_j ...]  (its row order)
    coordinator -> party (o+h)%K   PSI_POINTS  {origin: o, hops: h, offset, auth}   relayed unchanged while h < K
    that party  -> coordinator     PSI_POINTS  {origin: o, hops: h+1, offset, auth} [P^k ...]         (same order)
    coordinator                    on hops == K: F_o = [H(x_o)^(k_0 ... k_{K-1}) ...] (fully blinded, o's order)
    coordinator -> every party j   PSI_RESULT  {n_common: N, offset}   int64 positions of j's common rows
                                                                       in the common order

Every list travels in chunks (issue 34; :mod:`vfl.protocols.psi_stream`): one PSI_POINTS message carries the points
``offset .. offset + m - 1`` of the list (``m`` <= ``VFL_PSI_CHUNK_POINTS``, default 65 536), and every chunk is
signed on its own with its ``offset`` inside the signed body, so a chunk cannot be moved, repeated, reordered or
replayed into another list or ring; receivers take the chunks of a list strictly in order (``offset`` = the points
received so far) and refuse a chunk that would take the list past its signed count. PSI_RESULT travels in chunks of
positions the same way. The coordinator keeps the fully blinded points on disk in buckets and intersects one bucket
at a time (:class:`vfl.protocols.psi_stream.BucketStore`), so no process holds a whole list as Python objects.

The coordinator intersects the K fully blinded lists (equal points <=> equal IDs, :mod:`vfl.secure.psi`) and
orders the common points by (bucket, bytes) -- a pseudorandom order that depends on no ID's value -- and tells each
party which of ITS rows are common, in that order. Every party then keeps exactly those rows in that order, so the
joined table is aligned. Refused: fewer than ``min_rows`` common rows (the run stops; ``min_rows`` is public).

Bounded re-blinding (issue 20). Re-blinding is an oracle: whoever sends party j a list ``[H(g)^k ...]`` of guessed
IDs ``g`` and gets ``[H(g)^(k k_j) ...]`` back can compare it with j's own list raised to ``k`` and so test every guess
for membership in j's IDs. A party therefore re-blinds a list only if (checked in this order, before any
elliptic-curve work; any failure raises :class:`ProtocolError` naming the party and stops the run):

1. the ring is the one PSI_START announces: ``REG_i`` is party i's REGISTER body, signed by i's pinned Ed25519 identity
   (:mod:`vfl.secure.identity`), with its ID count ``n_i``; j's own entry is ``REG_j`` with ``n_j`` = its ID count;
2. the list's origin ``o`` is a ring member other than j and the hop is the one the ring order implies
   (``(o + h) % K == j``), once per origin;
3. the chunk continues the list where the last one ended (``offset`` = points of ``o`` re-blinded so far) and
   does not take it past ``n_o`` points, the count ``o`` signed at registration;
4. the chunk is signed by the party that sent it (``(o + h - 1) % K``, the one that applied the last key): ``auth``
   is its Ed25519 signature over ``digest_of(ring digest, message digest of the PSI_POINTS)`` (body with ``offset``,
   and the chunk's points), where the ring digest is the sha256 of the K signed registrations (so a chunk cannot be
   replayed into another ring, run, list or place in its list).

So a prober can test at most as many guesses as the count it signed, and only from a pinned identity (docs/psi.md).

Who learns what (semi-honest, no collusion; docs/threat_model.md):

* party j: which of its own IDs are in the intersection of ALL K sets (and hence N), and every party's ID count
  n_i (the length of the lists it re-blinds); nothing about any ID outside the intersection: every point it sees
  carries at least one key it does not hold (DDH in Curve25519's prime-order subgroup), and no fully blinded
  list ever reaches a party, so no party can match its own IDs against another's (for K >= 3 not even pairwise
  intersections are revealed).
* coordinator: the counts n_j, N, and how many fully blinded points each subset of parties shares (the sizes of
  the "Venn diagram" of the K ID sets); no ID, no plain hash of an ID (every point it relays is keyed).

Sequential cost: each party computes ``n_j`` hashes-to-curve and sum_{i != j} n_i exponentiations (both on
Curve25519 through libsodium, vfl.secure.psi); 2n each for K = 2, the same total work as one two-party
ECDH-PSI run (docs/psi.md).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.exceptions import DataValidationError, ProtocolError
from vfl.protocols.contracts import Out
from vfl.protocols.psi_stream import BucketStore, bucket_cap, chunk_points, id_array, points_array
from vfl.protocols.roster import sign_registration, verify_registration
from vfl.secure.identity import PinnedKeys, SigningIdentity, digest_of, message_digest
from vfl.secure.psi import POINT_BYTES, BlindingKey, self_test, split_points

__all__ = ["PSI_START", "PSI_POINTS", "PSI_RESULT", "Out", "AlignmentParty", "AlignmentCoordinator", "PsiRing",
           "IntersectionTooSmall", "align_in_process"]

# wire values of the three message types (vfl.net.messages.MessageType compares equal to them)
PSI_START = "psi_start"
PSI_POINTS = "psi_points"
PSI_RESULT = "psi_result"

_self_tested = False


class IntersectionTooSmall(DataValidationError):
    """The parties have fewer common row IDs than the public minimum (--min-rows); nothing is trained."""


def _blob(msg: Any) -> bytes:
    payload = getattr(msg, "payload", None)
    if not isinstance(payload, list) or len(payload) != 1 or not isinstance(payload[0], (bytes, bytearray)):
        raise ProtocolError(f"{_type(msg)}: expected exactly one byte-string frame")
    return bytes(payload[0])


def _type(msg: Any) -> str:
    t = getattr(msg, "type", None)
    return str(getattr(t, "value", t))


def _int_field(body: Mapping[str, Any], key: str, lo: int, hi: int, what: str) -> int:
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ProtocolError(f"{what}: invalid {key} {v!r}")
    return v


@dataclass(frozen=True)
class PsiRing:
    """The ring a PSI_START announces: member names and signed ID counts in ring order, and the ring digest that
    every PSI list signature is bound to (sha256 of the K registrations, signatures included)."""

    names: tuple[str, ...]
    counts: tuple[int, ...]
    digest: bytes

    @classmethod
    def from_start(cls, body: Mapping[str, Any], *, index: int, name: str | None, n_ids: int,
                   pinned: PinnedKeys | None, run: str = "") -> PsiRing:
        """Parse and check PSI_START's ``registrations`` (one REGISTER body per party, ring order): each names a
        distinct party that aligns by ID, signed by its pinned identity (unless ``pinned`` is None: no identities);
        entry ``index`` is this party (``name``) with its own ID count ``n_ids``. The ring digest binds the run id
        ``run`` and the K signed registrations."""
        regs = body.get("registrations")
        K = body.get("parties")
        if not isinstance(regs, list) or len(regs) != K or not all(isinstance(r, dict) for r in regs):
            raise ProtocolError("psi_start: expected the signed registration of every party of the ring")
        names: list[str] = []
        counts: list[int] = []
        for i, reg in enumerate(regs):
            who = reg.get("name")
            if not isinstance(who, str) or who in names:
                raise ProtocolError(f"psi_start: ring entry {i} has a missing or repeated party name")
            if reg.get("row_ids") is not True:
                raise ProtocolError(f"psi_start: party {who!r} did not register row IDs")
            count = _int_field(reg, "n_rows", 1, 2**62, f"psi_start: registration of {who!r}")
            if pinned is not None:
                verify_registration(pinned, reg)
            names.append(who)
            counts.append(count)
        if (name is not None and names[index] != name) or counts[index] != n_ids:
            raise ProtocolError(f"psi_start: ring entry {index} is {names[index]!r} with {counts[index]} IDs, not this "
                                f"party's registration ({name!r}, {n_ids} IDs)")
        digest = digest_of("vfl.psi.ring.v1", run, [message_digest("register", r, exclude=()).hex() for r in regs])
        return cls(tuple(names), tuple(counts), digest)

    def list_digest(self, body: Mapping[str, Any], blob: bytes) -> bytes:
        """What the sender of a PSI_POINTS chunk signs: the ring digest and the message digest (body without
        ``auth``, so with ``origin``, ``hops`` and ``offset``; and the chunk's points)."""
        return digest_of(self.digest, message_digest(PSI_POINTS, body, [blob]))


class AlignmentParty:
    """Party side: blinds its own IDs, re-blinds the other parties' lists, then learns its common rows.

    ``ids``: the party's row IDs in row order (normalised and checked here into one fixed-width UTF-8 array:
    :func:`vfl.protocols.psi_stream.id_array`). ``chunk``: points per PSI_POINTS message (default
    :func:`vfl.protocols.psi_stream.chunk_points`).
    ``identity`` / ``pinned``: its Ed25519 signing identity and the pinned keys of its co-parties
    (:mod:`vfl.secure.identity`); it signs every list it sends and re-blinds only lists that pass the checks of the
    module docstring; without them (``--insecure-no-identity``) only the counts and the ring order are checked,
    against registrations nobody signed. ``run``: the run id (bound into every list signature); ``registration``:
    the REGISTER body it sent, which its ring entry must equal. After :attr:`done`, :attr:`rows` holds the positions
    of this party's common rows in the agreed order.
    """

    def __init__(self, ids: Sequence[Any], *, key: BlindingKey | None = None,
                 identity: SigningIdentity | None = None, pinned: PinnedKeys | None = None,
                 name: str | None = None, run: str = "", registration: Mapping[str, Any] | None = None,
                 chunk: int | None = None) -> None:
        global _self_tested
        if (identity is None) != (pinned is None):
            raise ValueError("identity and pinned keys go together")
        self.ids = id_array(ids)
        self.chunk = chunk or chunk_points()
        if not _self_tested:
            self_test()
            _self_tested = True
        self._key = key or BlindingKey()
        self.identity = identity
        self.pinned = pinned
        self.name = identity.name if identity is not None else name
        self.run = run
        self.registration = None if registration is None else dict(registration)
        self.index: int | None = None
        self.ring: PsiRing | None = None
        self._next: dict[int, int] = {}   # origin -> points of its list re-blinded so far
        self._own_sent = 0
        self._rows: np.ndarray | None = None   # PSI_RESULT chunks received so far
        self._rows_got = 0
        self.rows: np.ndarray | None = None

    @property
    def done(self) -> bool:
        return self.rows is not None

    @property
    def n_parties(self) -> int | None:
        return None if self.ring is None else len(self.ring.names)

    def on_message(self, msg: Any) -> Iterable[Out]:
        """Handle PSI_START, PSI_POINTS or PSI_RESULT; returns the messages to send to the coordinator (for
        PSI_START an iterator: the own list's chunks, each blinded when the one before has been taken)."""
        kind = _type(msg)
        body = getattr(msg, "body", {})
        if kind == PSI_START:
            if self.index is not None:
                raise ProtocolError("psi_start: the alignment already started")
            n_parties = _int_field(body, "parties", 1, 10_000, "psi_start")
            index = _int_field(body, "index", 0, n_parties - 1, "psi_start")
            self.ring = PsiRing.from_start(body, index=index, name=self.name, n_ids=len(self.ids), pinned=self.pinned,
                                           run=self.run)
            if self.registration is not None and body["registrations"][index] != self.registration:
                raise ProtocolError(f"psi_start: ring entry {index} is not the registration {self.name!r} sent")
            self.index = index
            return self._own_list()
        if self.index is None or self.ring is None:
            raise ProtocolError(f"{kind}: the alignment has not started")
        if kind == PSI_POINTS:
            return [self.reblind(self.check_points(msg))]
        if kind == PSI_RESULT:
            return self._result(body, msg)
        raise ProtocolError(f"unexpected message {kind!r} during row alignment")

    def check_points(self, msg: Any) -> tuple[int, int, int, bytes]:
        """The checks of a PSI_POINTS chunk before re-blinding (module docstring, 2-4), cheap (a sha256 and one
        Ed25519 verification): a party runs them on its receive thread, so a chunk it would refuse is never queued.
        Returns (origin, hops, offset, points) for :meth:`reblind`."""
        if self.index is None or self.ring is None:
            raise ProtocolError(f"{_type(msg)}: the alignment has not started")
        if _type(msg) != PSI_POINTS:
            raise ProtocolError(f"unexpected message {_type(msg)!r} during row alignment")
        return self._check_list(getattr(msg, "body", {}), msg)

    def reblind(self, checked: tuple[int, int, int, bytes]) -> Out:
        """``P^k`` of a chunk :meth:`check_points` accepted, signed (the elliptic-curve work, on a worker)."""
        origin, hops, offset, blob = checked
        return self._signed({"origin": origin, "hops": hops + 1, "offset": offset}, self._key.reblind(blob))

    def _own_list(self) -> Iterator[Out]:
        """``H(x)^k`` of this party's IDs, one signed chunk at a time (never the whole list in memory)."""
        assert self.index is not None
        for start in range(0, len(self.ids), self.chunk):
            part = [b.decode() for b in self.ids[start:start + self.chunk]]
            blob = self._key.blind(part)
            self._own_sent = start + len(part)
            yield self._signed({"origin": self.index, "hops": 1, "offset": start}, blob)

    def _check_list(self, body: Mapping[str, Any], msg: Any) -> tuple[int, int, int, bytes]:
        """The checks before re-blinding (module docstring, 2-4): ring member, hop, the chunk's place in the list
        and the signed count, sender's signature; ProtocolError naming the party otherwise. Returns (origin, hops,
        offset, points)."""
        ring = self.ring
        assert ring is not None and self.index is not None
        K = len(ring.names)
        origin = _int_field(body, "origin", 0, K - 1, "psi_points")
        hops = _int_field(body, "hops", 1, K - 1, "psi_points") if K > 1 else 0
        who = ring.names[origin]
        done = self._next.get(origin, 0)
        if origin == self.index or (origin + hops) % K != self.index or done == ring.counts[origin]:
            raise ProtocolError(f"psi_points: unexpected list of party {who!r} after {hops} hop(s); refusing to "
                                "re-blind it")
        offset = body.get("offset")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset != done:
            raise ProtocolError(f"psi_points: a chunk of the list of party {who!r} starts at point {offset!r}, not "
                                f"at {done} (chunks missing, repeated or out of order); refusing to re-blind it")
        blob = _blob(msg)
        if len(blob) % POINT_BYTES or not blob or offset + len(blob) // POINT_BYTES > ring.counts[origin]:
            size = (f"{offset + len(blob) // POINT_BYTES} points" if len(blob) % POINT_BYTES == 0
                    else f"a chunk of {len(blob)} bytes")
            raise ProtocolError(f"psi_points: the list of party {who!r} holds {size} but {who!r} signed "
                                f"{ring.counts[origin]} row IDs at registration; refusing to re-blind it")
        if self.pinned is not None:
            sender = ring.names[(origin + hops - 1) % K]
            self.pinned.verify(sender, ring.list_digest(body, blob), body.get("auth"),
                               f"the PSI list of party {who!r} after {hops} hop(s)")
        self._next[origin] = offset + len(blob) // POINT_BYTES
        return origin, hops, offset, blob

    def _signed(self, body: dict, blob: bytes) -> Out:
        if self.identity is not None:
            assert self.ring is not None
            body = {**body, "auth": self.identity.sign(self.ring.list_digest(body, blob))}
        return Out(type=PSI_POINTS, body=body, payload=[blob])

    def _result(self, body: Mapping[str, Any], msg: Any) -> list[Out]:
        """One chunk of PSI_RESULT (``offset``: positions received so far); the last one completes :attr:`rows`.
        Refused before the ring finished: this party's own list not all sent or a co-party's not all re-blinded."""
        ring = self.ring
        assert ring is not None
        if self.rows is not None:
            raise ProtocolError("psi_result: received twice")
        due = [o for o in range(len(ring.names)) if o != self.index and self._next.get(o, 0) != ring.counts[o]]
        if self._own_sent != len(self.ids) or due:
            raise ProtocolError("psi_result: sent before the ring finished (a list this party sends or re-blinds "
                                "is not complete)")
        payload = getattr(msg, "payload", None)
        part = payload[0] if isinstance(payload, list) and len(payload) == 1 else None
        if not isinstance(part, np.ndarray) or part.dtype != np.int64 or part.ndim != 1:
            raise ProtocolError("psi_result: expected one int64 vector of row positions")
        n_common = _int_field(body, "n_common", 0, len(self.ids), "psi_result")
        if self._rows is None:
            self._rows = np.empty(n_common, dtype=np.int64)
        if body.get("offset") != self._rows_got or n_common != self._rows.size or self._rows_got + part.size > n_common:
            raise ProtocolError("psi_result: row positions miscounted, or chunks missing, repeated or out of order")
        self._rows[self._rows_got:self._rows_got + part.size] = part
        self._rows_got += part.size
        if self._rows_got < n_common:
            if not part.size:
                raise ProtocolError("psi_result: an empty chunk of row positions")
            return []
        rows = self._rows
        if rows.size and (rows.min() < 0 or rows.max() >= len(self.ids) or np.unique(rows).size != rows.size):
            raise ProtocolError("psi_result: row positions out of range, repeated or miscounted")
        self.rows = rows
        return []

    def common_ids(self) -> list[str]:
        """This party's common IDs in the agreed order (after :attr:`done`); stays local."""
        if self.rows is None:
            raise ProtocolError("the alignment has not finished")
        return [bytes(self.ids[int(i)]).decode() for i in self.rows]


class AlignmentCoordinator:
    """Coordinator side: relays the point lists round the ring, intersects the fully blinded ones, orders them.

    ``registrations[j]``: party j's REGISTER body as it signed it (``n_rows``: its ID count; its lists must have
    exactly that many points), sent to every party in PSI_START so each can check the ring itself. ``min_rows``:
    public minimum intersection size; fewer common rows raise :class:`IntersectionTooSmall`.
    """

    def __init__(self, registrations: Sequence[Mapping[str, Any]], *, min_rows: int = 1,
                 chunk: int | None = None) -> None:
        if not registrations:
            raise ValueError("at least one party")
        self.registrations = [dict(r) for r in registrations]
        self.n_rows = [int(r["n_rows"]) for r in self.registrations]
        self.n_parties = len(self.n_rows)
        self.min_rows = max(1, int(min_rows))
        self.chunk = chunk or chunk_points()
        self._next: dict[tuple[int, int], int] = {}   # (origin, hops) -> points of that list received so far
        self._store: BucketStore | None = None
        self.n_common: int | None = None
        self.venn: dict[tuple[int, ...], int] | None = None

    @property
    def done(self) -> bool:
        return self.n_common is not None

    def plan_messages(self) -> list[Out]:
        """The messages that open the phase (PSI_START to every party; named like the other phases' openers so
        :meth:`vfl.net.coordinator.Coordinator._run_phase` drives every phase the same way)."""
        return [Out(type=PSI_START, body={"index": j, "parties": self.n_parties,
                                          "registrations": [dict(r) for r in self.registrations]}, to=j)
                for j in range(self.n_parties)]

    def handle(self, sender: int, msg: Any) -> list[Out]:
        """Handle a PSI_POINTS chunk from party ``sender``: relay it, or store a fully blinded one (all lists
        complete: intersect and answer every party)."""
        if _type(msg) != PSI_POINTS:
            raise ProtocolError(f"unexpected message {_type(msg)!r} during row alignment")
        K = self.n_parties
        body = getattr(msg, "body", {})
        origin = _int_field(body, "origin", 0, K - 1, "psi_points")
        hops = _int_field(body, "hops", 1, K, "psi_points")
        n = self.n_rows[origin]
        done = self._next.get((origin, hops), 0)
        # the list of `origin` after `hops` keys must come from the party that applied the last one
        if (origin + hops - 1) % K != sender or done == n:
            raise ProtocolError(f"psi_points: party {sender} sent an unexpected list (origin {origin}, hops {hops})")
        offset = body.get("offset")
        if offset != done or isinstance(offset, bool):
            raise ProtocolError(f"psi_points: party {sender} sent a chunk of list (origin {origin}, hops {hops}) at "
                                f"point {offset!r}, not {done} (missing, repeated or out of order)")
        blob = _blob(msg)
        m = len(blob) // POINT_BYTES
        ahead = n if hops == 1 else self._next.get((origin, hops - 1), 0)   # it cannot re-blind what it never got
        if len(blob) % POINT_BYTES or m == 0 or done + m > ahead:
            raise ProtocolError(f"psi_points: list of party {origin} has {done + m} points, {n} registered"
                                + ("" if ahead == n else f" and {ahead} sent to party {sender}"))
        self._next[(origin, hops)] = done + m
        if hops < K:   # relayed unchanged, with its sender's signature (the next party checks it)
            relayed = {"origin": origin, "hops": hops, "offset": offset,
                       **({"auth": body["auth"]} if "auth" in body else {})}
            return [Out(type=PSI_POINTS, body=relayed, payload=[blob], to=(origin + hops) % K)]
        split_points(blob, m)   # the points' format, one chunk at a time
        if self._store is None:
            self._store = BucketStore(K)
        try:   # fully blinded points are pseudorandom: a list piled into a few buckets is refused (bucket_cap)
            self._store.add(origin, offset, points_array(blob), cap=bucket_cap(n))
        except ProtocolError as exc:
            raise ProtocolError(f"psi_points: the list of party {origin} fully blinded by party {sender}: {exc}; "
                                "refusing it") from None
        if any(self._next.get((o, K), 0) != self.n_rows[o] for o in range(K)):
            return []
        return self._finish()

    def _finish(self) -> list[Out]:
        K = self.n_parties
        assert self._store is not None
        self.venn = {}
        try:
            positions = self._store.intersect(self.venn)
        finally:
            self.close()
        self.n_common = int(positions[0].size)
        if self.n_common < self.min_rows:
            raise IntersectionTooSmall(f"the parties' row IDs have {self.n_common} in common, fewer than the "
                                       f"public minimum --min-rows {self.min_rows}; run stopped, no model written")
        return [Out(type=PSI_RESULT, body={"n_common": self.n_common, "offset": start},
                    payload=[positions[j][start:start + self.chunk]], to=j)
                for j in range(K) for start in range(0, self.n_common, self.chunk)]

    def close(self) -> None:
        """Remove the bucket files (after the intersection, or when the run stops before it)."""
        if self._store is not None:
            self._store.close()
            self._store = None


def align_in_process(id_lists: Sequence[Sequence[Any]], *, min_rows: int = 1) -> list[np.ndarray]:
    """Run the whole alignment for K parties in one process (tests, benchmarks/psi.py): party j's common row
    positions in the agreed order. Messages pass through the same state machines as over the network, with a
    throwaway Ed25519 identity per party (signed registrations and signed lists, as in a networked run)."""
    identities = [SigningIdentity.generate(f"p{j}") for j in range(len(id_lists))]
    pinned = PinnedKeys({i.name: i.key.verify_key for i in identities})
    run = secrets.token_hex(16)
    parties = [AlignmentParty(ids, identity=i, pinned=pinned, run=run)
               for ids, i in zip(id_lists, identities, strict=True)]
    registrations = [sign_registration(i, {"name": i.name, "n_rows": len(p.ids), "features": [], "label_owner": False,
                                           "row_ids": True}) for p, i in zip(parties, identities, strict=True)]
    coordinator = AlignmentCoordinator(registrations, min_rows=min_rows)
    queue = [(o.to, o) for o in coordinator.plan_messages()]
    while queue:
        to, out = queue.pop(0)
        if to is None:
            raise ProtocolError("alignment message without a recipient")
        for reply in parties[to].on_message(out):
            queue.extend((o.to, o) for o in coordinator.handle(to, reply))
    coordinator.close()
    if not coordinator.done or not all(p.done for p in parties):
        raise ProtocolError("alignment did not finish")
    return [p.rows for p in parties]  # type: ignore[misc]
