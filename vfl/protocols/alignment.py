"""Row alignment by private set intersection (PSI) of the parties' row IDs: both sides, socket-free.

Protocol (K >= 1 parties in plan order 0..K-1, each with secret PSI key ``k_j`` and normalised, duplicate-free IDs
``x_{j,1..n_j}`` in its own row order; every message goes through the coordinator, which holds no key)::

    coordinator -> every party j   PSI_START   {index: j, parties: K}
    party j     -> coordinator     PSI_POINTS  {origin: j, hops: 1}   [H(x_j)^k_j ...]            (its row order)
    coordinator -> party (o+h)%K   PSI_POINTS  {origin: o, hops: h}   relayed unchanged while h < K
    that party  -> coordinator     PSI_POINTS  {origin: o, hops: h+1} [P^k ...]                   (same order)
    coordinator                    on hops == K: F_o = [H(x_o)^(k_0 ... k_{K-1}) ...] (fully blinded, o's order)
    coordinator -> every party j   PSI_RESULT  {n_common: N}          int64 positions of j's common rows
                                                                       in the common order

The coordinator intersects the K fully blinded lists (equal points <=> equal IDs, :mod:`vfl.secure.psi`) and
orders the common points by their bytes -- a pseudorandom order that depends on no ID's value -- and tells each
party which of ITS rows are common, in that order. Every party then keeps exactly those rows in that order, so the
joined table is aligned. Refused: fewer than ``min_rows`` common rows (the run stops; ``min_rows`` is public).

Who learns what (semi-honest, no collusion; docs/threat_model.md):

* party j: which of its own IDs are in the intersection of ALL K sets (and hence N), and every party's ID count
  n_i (the length of the lists it re-blinds); nothing about any ID outside the intersection: every point it sees
  carries at least one key it does not hold (DDH on P-256), and no fully blinded list ever reaches a party, so no
  party can match its own IDs against another's (for K >= 3 not even pairwise intersections are revealed).
* coordinator: the counts n_j, N, and how many fully blinded points each subset of parties shares (the sizes of
  the "Venn diagram" of the K ID sets); no ID, no plain hash of an ID (every point it relays is keyed).

Sequential cost: each party computes ``n_j`` hashes-to-curve and sum_{i != j} n_i exponentiations (both on P-256 in
openmined-psi's C++); 2n each for K = 2, the same total work as one two-party ECDH-PSI run (docs/psi.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vfl.exceptions import DataValidationError, ProtocolError
from vfl.protocols.contracts import Out
from vfl.secure.psi import POINT_BYTES, BlindingKey, normalise_ids, self_test, split_points

__all__ = ["PSI_START", "PSI_POINTS", "PSI_RESULT", "Out", "AlignmentParty", "AlignmentCoordinator",
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


def _int_field(body: dict, key: str, lo: int, hi: int, what: str) -> int:
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ProtocolError(f"{what}: invalid {key} {v!r}")
    return v


class AlignmentParty:
    """Party side: blinds its own IDs, re-blinds the other parties' lists, then learns its common rows.

    ``ids``: the party's row IDs in row order (normalised and checked here: :func:`vfl.secure.psi.normalise_ids`).
    After :attr:`done`, :attr:`rows` holds the positions of this party's common rows in the agreed order.
    """

    def __init__(self, ids: Sequence[Any], *, key: BlindingKey | None = None) -> None:
        global _self_tested
        self.ids = normalise_ids(ids)
        if not _self_tested:
            self_test()
            _self_tested = True
        self._key = key or BlindingKey()
        self.index: int | None = None
        self.n_parties: int | None = None
        self._reblinded: set[int] = set()
        self.rows: np.ndarray | None = None

    @property
    def done(self) -> bool:
        return self.rows is not None

    def on_message(self, msg: Any) -> list[Out]:
        """Handle PSI_START, PSI_POINTS or PSI_RESULT; returns the messages to send to the coordinator."""
        kind = _type(msg)
        body = getattr(msg, "body", {})
        if kind == PSI_START:
            if self.index is not None:
                raise ProtocolError("psi_start: the alignment already started")
            self.n_parties = _int_field(body, "parties", 1, 10_000, "psi_start")
            self.index = _int_field(body, "index", 0, self.n_parties - 1, "psi_start")
            return [Out(type=PSI_POINTS, body={"origin": self.index, "hops": 1}, payload=[self._key.blind(self.ids)])]
        if self.index is None or self.n_parties is None:
            raise ProtocolError(f"{kind}: the alignment has not started")
        if kind == PSI_POINTS:
            origin = _int_field(body, "origin", 0, self.n_parties - 1, "psi_points")
            hops = _int_field(body, "hops", 1, self.n_parties - 1, "psi_points")
            if (origin + hops) % self.n_parties != self.index or origin in self._reblinded:
                raise ProtocolError(f"psi_points: unexpected list from party {origin} after {hops} hop(s)")
            self._reblinded.add(origin)
            blob = self._key.reblind(_blob(msg))
            return [Out(type=PSI_POINTS, body={"origin": origin, "hops": hops + 1}, payload=[blob])]
        if kind == PSI_RESULT:
            if self.rows is not None:
                raise ProtocolError("psi_result: received twice")
            payload = getattr(msg, "payload", None)
            rows = payload[0] if isinstance(payload, list) and len(payload) == 1 else None
            if not isinstance(rows, np.ndarray) or rows.dtype != np.int64 or rows.ndim != 1:
                raise ProtocolError("psi_result: expected one int64 vector of row positions")
            n_common = _int_field(body, "n_common", 0, len(self.ids), "psi_result")
            if (rows.size != n_common or (rows.size and (rows.min() < 0 or rows.max() >= len(self.ids)))
                    or np.unique(rows).size != rows.size):
                raise ProtocolError("psi_result: row positions out of range, repeated or miscounted")
            self.rows = rows.copy()
            return []
        raise ProtocolError(f"unexpected message {kind!r} during row alignment")

    def common_ids(self) -> list[str]:
        """This party's common IDs in the agreed order (after :attr:`done`); stays local."""
        if self.rows is None:
            raise ProtocolError("the alignment has not finished")
        return [self.ids[int(i)] for i in self.rows]


class AlignmentCoordinator:
    """Coordinator side: relays the point lists round the ring, intersects the fully blinded ones, orders them.

    ``n_rows[j]``: party j's registered ID count (its lists must have exactly that many points). ``min_rows``:
    public minimum intersection size; fewer common rows raise :class:`IntersectionTooSmall`.
    """

    def __init__(self, n_rows: Sequence[int], *, min_rows: int = 1) -> None:
        if not n_rows:
            raise ValueError("at least one party")
        self.n_rows = [int(n) for n in n_rows]
        self.n_parties = len(self.n_rows)
        self.min_rows = max(1, int(min_rows))
        self._final: dict[int, list[bytes]] = {}
        self._seen: set[tuple[int, int]] = set()
        self.n_common: int | None = None
        self.venn: dict[tuple[int, ...], int] | None = None

    @property
    def done(self) -> bool:
        return self.n_common is not None

    def plan_messages(self) -> list[Out]:
        """The messages that open the phase (PSI_START to every party; named like the other phases' openers so
        :meth:`vfl.net.coordinator.Coordinator._run_phase` drives every phase the same way)."""
        return [Out(type=PSI_START, body={"index": j, "parties": self.n_parties}, to=j)
                for j in range(self.n_parties)]

    def handle(self, sender: int, msg: Any) -> list[Out]:
        """Handle a PSI_POINTS from party ``sender``: relay it, or store a fully blinded list (all received:
        intersect and answer every party)."""
        if _type(msg) != PSI_POINTS:
            raise ProtocolError(f"unexpected message {_type(msg)!r} during row alignment")
        K = self.n_parties
        body = getattr(msg, "body", {})
        origin = _int_field(body, "origin", 0, K - 1, "psi_points")
        hops = _int_field(body, "hops", 1, K, "psi_points")
        # the list of `origin` after `hops` keys must come from the party that applied the last one
        if (origin + hops - 1) % K != sender or (origin, hops) in self._seen:
            raise ProtocolError(f"psi_points: party {sender} sent an unexpected list (origin {origin}, hops {hops})")
        self._seen.add((origin, hops))
        blob = _blob(msg)
        if len(blob) != self.n_rows[origin] * POINT_BYTES:
            raise ProtocolError(f"psi_points: list of party {origin} has {len(blob) // POINT_BYTES} points, "
                                f"{self.n_rows[origin]} registered")
        if hops < K:
            return [Out(type=PSI_POINTS, body={"origin": origin, "hops": hops}, payload=[blob], to=(origin + hops) % K)]
        self._final[origin] = split_points(blob, self.n_rows[origin])
        if len(self._final) < K:
            return []
        return self._finish()

    def _finish(self) -> list[Out]:
        K = self.n_parties
        positions: list[dict[bytes, int]] = []
        for j in range(K):
            pos = {p: i for i, p in enumerate(self._final[j])}
            if len(pos) != len(self._final[j]):
                raise ProtocolError(f"psi_points: party {j}'s fully blinded list repeats a point (duplicate IDs)")
            positions.append(pos)
        smallest = min(range(K), key=lambda j: len(positions[j]))
        common = sorted(p for p in positions[smallest] if all(p in positions[j] for j in range(K)))
        self.venn = _venn_sizes(positions)
        self._final.clear()
        self.n_common = len(common)
        if self.n_common < self.min_rows:
            raise IntersectionTooSmall(f"the parties' row IDs have {self.n_common} in common, fewer than the "
                                       f"public minimum --min-rows {self.min_rows}; run stopped, no model written")
        return [Out(type=PSI_RESULT, body={"n_common": self.n_common},
                    payload=[np.fromiter((positions[j][p] for p in common), dtype=np.int64, count=len(common))], to=j)
                for j in range(K)]


def _venn_sizes(positions: list[dict[bytes, int]]) -> dict[tuple[int, ...], int]:
    """How many fully blinded points exactly each subset of parties holds (what the coordinator learns; for
    docs and tests, never sent)."""
    owners: dict[bytes, list[int]] = {}
    for j, pos in enumerate(positions):
        for p in pos:
            owners.setdefault(p, []).append(j)
    sizes: dict[tuple[int, ...], int] = {}
    for who in owners.values():
        sizes[tuple(who)] = sizes.get(tuple(who), 0) + 1
    return sizes


def align_in_process(id_lists: Sequence[Sequence[Any]], *, min_rows: int = 1) -> list[np.ndarray]:
    """Run the whole alignment for K parties in one process (tests, benchmarks/psi.py): party j's common row
    positions in the agreed order. Messages pass through the same state machines as over the network."""
    parties = [AlignmentParty(ids) for ids in id_lists]
    coordinator = AlignmentCoordinator([len(p.ids) for p in parties], min_rows=min_rows)
    queue = [(o.to, o) for o in coordinator.plan_messages()]
    while queue:
        to, out = queue.pop(0)
        if to is None:
            raise ProtocolError("alignment message without a recipient")
        for reply in parties[to].on_message(out):
            queue.extend((o.to, o) for o in coordinator.handle(to, reply))
    if not coordinator.done or not all(p.done for p in parties):
        raise ProtocolError("alignment did not finish")
    return [p.rows for p in parties]  # type: ignore[misc]
