"""vfl.protocols.alignment: PSI row alignment, both sides, without sockets."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from vfl.exceptions import DataValidationError, ProtocolError
from vfl.protocols.alignment import (
    PSI_POINTS,
    AlignmentCoordinator,
    AlignmentParty,
    IntersectionTooSmall,
    Out,
    align_in_process,
)


def _id_sets(seed: int, sizes: tuple[int, ...], shared: int) -> list[list[str]]:
    rng = random.Random(seed)
    common = [f"c{rng.getrandbits(40):x}" for _ in range(shared)]
    lists = []
    for k, n in enumerate(sizes):
        own = common + [f"p{k}-{rng.getrandbits(40):x}" for _ in range(n - shared)]
        rng.shuffle(own)
        lists.append(own)
    return lists


def _run(id_lists, min_rows=1):
    """Drive both sides by hand, recording every message each party sent and everything the coordinator got."""
    parties = [AlignmentParty(ids) for ids in id_lists]
    coordinator = AlignmentCoordinator([len(p.ids) for p in parties], min_rows=min_rows)
    sent_by_party: list[list[Out]] = [[] for _ in parties]
    queue = list(coordinator.plan_messages())
    while queue:
        out = queue.pop(0)
        for reply in parties[out.to].on_message(out):
            sent_by_party[out.to].append(reply)
            queue.extend(coordinator.handle(out.to, reply))
    return parties, coordinator, sent_by_party


@pytest.mark.parametrize("sizes", [(60, 45), (50, 70, 40)])
def test_every_party_ends_with_the_common_ids_in_one_order(sizes):
    lists = _id_sets(1, sizes, shared=20)
    # a few IDs shared by some but not all parties (not in the K-party intersection)
    lists[0].append("pair-only")
    lists[1].append("pair-only")
    parties, coordinator, _ = _run(lists)
    common = [p.common_ids() for p in parties]
    assert all(c == common[0] for c in common)
    expected = 21 if len(sizes) == 2 else 20     # "pair-only" is common to all only when K = 2
    assert set(common[0]) == set.intersection(*(set(x) for x in lists)) and len(common[0]) == expected
    assert coordinator.n_common == expected
    # the agreed order does not follow any party's row order or the IDs' sort order
    assert common[0] != sorted(common[0])
    rows = align_in_process(lists)
    assert [len(r) for r in rows] == [expected] * len(sizes)


def test_normalised_ids_match_across_parties():
    a = ["caf\u00e9", " x1", "Y2", "z"]
    b = ["cafe\u0301", "x1 ", "y2", "w"]
    ra, rb = align_in_process([a, b])
    assert sorted(a[i].strip() for i in ra) == ["caf\u00e9", "x1"]       # "Y2" != "y2": case-sensitive
    assert [a[i].strip() for i in ra] == [b[i].strip().replace("cafe\u0301", "caf\u00e9") for i in rb]


def test_no_message_carries_a_non_intersecting_id_and_the_coordinator_sees_no_id():
    lists = _id_sets(2, (80, 60, 50), shared=15)
    parties, coordinator, sent = _run(lists)
    common = set(parties[0].common_ids())
    every_id = set().union(*(set(x) for x in lists))
    outside = every_id - common
    assert len(outside) > 100

    def fingerprints(x: str) -> list[bytes]:
        raw = x.encode()
        digests = [h(raw).digest() for h in (hashlib.sha256, hashlib.md5, hashlib.sha1, hashlib.sha512)]
        return [raw] + [d[:8] for d in digests] + [d.hex()[:16].encode() for d in digests]

    def wire(out: Out) -> bytes:
        parts = [repr(out.body).encode()]
        parts += [p.tobytes() if isinstance(p, np.ndarray) else bytes(p) for p in out.payload]
        return b"|".join(parts)

    party_wire = b"||".join(wire(o) for msgs in sent for o in msgs)
    for x in outside:
        assert not any(f in party_wire for f in fingerprints(x)), "a party sent a non-intersecting ID"
    # everything the coordinator received (= party_wire) holds no ID at all, common ones included
    for x in common:
        assert not any(f in party_wire for f in fingerprints(x)), "the coordinator saw an ID"
    # all party messages are point lists, and every point is keyed (never seen with fewer keys by the coordinator)
    assert all(o.type == PSI_POINTS for msgs in sent for o in msgs)


def test_coordinator_learns_only_subset_sizes():
    lists = _id_sets(3, (30, 30, 30), shared=10)
    lists[0].append("ab")
    lists[1].append("ab")
    _, coordinator, _ = _run(lists)
    venn = coordinator.venn
    assert venn[(0, 1, 2)] == 10 and venn[(0, 1)] == 1
    assert sum(venn.values()) == len(set().union(*(set(x) for x in lists)))


@pytest.mark.parametrize("min_rows,shared", [(1, 0), (25, 20)])
def test_too_small_intersection_stops_the_run(min_rows, shared):
    lists = _id_sets(4, (30, 30), shared=shared)
    with pytest.raises(IntersectionTooSmall, match=rf"{shared} in common, fewer than .*--min-rows {min_rows}"):
        align_in_process(lists, min_rows=min_rows)


def test_bad_ids_fail_locally_before_anything_is_sent():
    with pytest.raises(DataValidationError, match="duplicate row ID"):
        AlignmentParty(["a", "b", "a "])
    with pytest.raises(DataValidationError, match="empty row ID in data row 2"):
        AlignmentParty(["a", " ", "c"])


def test_roles_refuse_out_of_order_or_misrouted_messages():
    lists = _id_sets(5, (10, 10, 10), shared=5)
    parties = [AlignmentParty(ids) for ids in lists]
    coordinator = AlignmentCoordinator([10, 10, 10])
    with pytest.raises(ProtocolError, match="not started"):
        parties[0].on_message(Out(type=PSI_POINTS, body={"origin": 1, "hops": 1}, payload=[b""]))
    starts = coordinator.plan_messages()
    first = [parties[o.to].on_message(o)[0] for o in starts]
    # party 2 pretends to send party 0's list
    with pytest.raises(ProtocolError, match="unexpected list"):
        coordinator.handle(2, first[0])
    relayed = coordinator.handle(0, first[0])
    assert relayed[0].to == 1 and relayed[0].body == {"origin": 0, "hops": 1}
    with pytest.raises(ProtocolError, match="unexpected list"):       # replay
        coordinator.handle(0, first[0])
    with pytest.raises(ProtocolError, match="unexpected list"):       # party 2 is not the next hop of list 0
        parties[2].on_message(relayed[0])
    short = Out(type=PSI_POINTS, body={"origin": 1, "hops": 1}, payload=[first[1].payload[0][:-33]])
    with pytest.raises(ProtocolError, match="9 points, 10 registered"):
        coordinator.handle(1, short)
    with pytest.raises(ProtocolError, match="unexpected message"):
        coordinator.handle(1, Out(type="block"))


def test_party_validates_the_result():
    party = AlignmentParty(["a", "b", "c"])
    party.on_message(Out(type="psi_start", body={"index": 0, "parties": 1}))
    for rows in (np.array([0, 0], dtype=np.int64), np.array([0, 3], dtype=np.int64), np.array([0.0, 1.0])):
        with pytest.raises(ProtocolError, match="psi_result"):
            party.on_message(Out(type="psi_result", body={"n_common": 2}, payload=[rows]))
    party.on_message(Out(type="psi_result", body={"n_common": 2}, payload=[np.array([2, 0], dtype=np.int64)]))
    assert party.common_ids() == ["c", "a"]
