"""vfl.protocols.psi_stream and the chunked ring (issue 34): compact IDs, chunks checked in order, bucketed
intersection -- exact against Python sets, without sockets (the wire: tests/net/test_psi_network.py and
tests/net/test_psi_oracle.py)."""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pytest

from vfl.data.id_column import IdColumn
from vfl.exceptions import DataValidationError, ProtocolError
from vfl.protocols.alignment import PSI_POINTS, AlignmentCoordinator, AlignmentParty, Out, align_in_process
from vfl.protocols.psi_stream import N_BUCKETS, BucketStore, id_array
from vfl.protocols.roster import sign_registration
from vfl.secure.identity import PinnedKeys, SigningIdentity
from vfl.secure.psi import POINT_BYTES, normalise_ids


def test_id_array_normalises_like_normalise_ids_and_shares_a_normal_column():
    cells = ["  Zo\u0065\u0301 ", "abc", "x y", "\u00e9t\u00e9"]
    arr = id_array(cells)
    assert [bytes(b).decode() for b in arr] == normalise_ids(cells)
    column = IdColumn.from_cells(iter(["u1", "u2", "u3"]))
    assert isinstance(column, IdColumn) and list(column) == ["u1", "u2", "u3"] and column[1] == "u2"
    assert id_array(column) is column.data                       # already normal: no copy
    assert list(column.take(np.array([2, 0]))) == ["u3", "u1"]
    padded = IdColumn.from_cells(iter(["u1", " u2", "u3"]))
    assert list(id_array(padded)) == [b"u1", b"u2", b"u3"] and list(padded)[1] == " u2"
    assert IdColumn.from_cells(iter(["a", "b\x00", "c"])) == ["a", "b\x00", "c"]   # kept as a list


@pytest.mark.parametrize("cells,message", [
    (["a", "b", "c", " b "], "duplicate row ID in data rows 2 and 4"),
    (["a", "b", "a", "b"], "duplicate row ID in data rows 1 and 3"),
    (["a", unicodedata.normalize("NFD", "\u00e9"), "\u00e9"], "duplicate row ID in data rows 2 and 3"),
    (["a", "  ", "c"], "empty row ID in data row 2"),
    (["a", "b\x00"], "NUL character in data row 2"),
    ([], "no rows"),
])
def test_id_array_refuses_bad_ids_naming_rows_not_ids(cells, message):
    with pytest.raises(DataValidationError, match=message):
        id_array(cells)
    if "NUL" not in message and cells:
        with pytest.raises(DataValidationError, match=message):   # the same line as before issue 34
            normalise_ids(cells)


@pytest.mark.parametrize("seed", [1, 2])
def test_bucket_store_intersects_exactly_in_bucket_then_byte_order(seed):
    rng = np.random.default_rng(seed)
    pool = np.array([rng.bytes(POINT_BYTES) for _ in range(3000)], dtype=f"S{POINT_BYTES}")
    lists = [rng.permutation(pool[rng.random(pool.size) < p]) for p in (0.7, 0.6, 0.8)]
    store = BucketStore(3)
    for j, pts in enumerate(lists):
        for off in range(0, pts.size, 97):   # chunks
            store.add(j, off, pts[off:off + 97])
    venn: dict = {}
    positions = store.intersect(venn)
    store.close()
    assert not store.dir.exists()
    common = set.intersection(*(set(p.tolist()) for p in lists))
    got = [lists[j][positions[j]] for j in range(3)]
    assert all(np.array_equal(got[0], g) for g in got) and set(got[0].tolist()) == common
    keys = [(p[POINT_BYTES - 32], p) for p in got[0].tolist()]
    assert keys == sorted(keys) and len({k[0] for k in keys}) > N_BUCKETS // 2
    assert venn[(0, 1, 2)] == len(common) and sum(venn.values()) == len(set().union(*(set(p.tolist()) for p in lists)))


def test_bucket_store_refuses_a_repeated_point():
    pts = np.array([bytes([i + 1]) * POINT_BYTES for i in range(5)], dtype=f"S{POINT_BYTES}")
    store = BucketStore(2)
    store.add(0, 0, pts)
    store.add(1, 0, np.concatenate([pts[:3], pts[1:2]]))
    with pytest.raises(ProtocolError, match="party 1's fully blinded list repeats a point"):
        store.intersect({})


@pytest.mark.parametrize("seed,sizes,chunk", [(3, (50, 41, 37), 3), (4, (23, 64), 1)])
def test_chunked_ring_equals_python_sets(monkeypatch, seed, sizes, chunk):
    """Tiny chunks (3 or 1 points a message, positions too): every party ends with exactly the common IDs, in one
    order."""
    monkeypatch.setenv("VFL_PSI_CHUNK_POINTS", str(chunk))
    r = random.Random(seed)
    common = [f"c{r.getrandbits(48):x}" for _ in range(15)]
    lists = []
    for k, n in enumerate(sizes):
        own = common + [f"p{k}-{r.getrandbits(48):x}" for _ in range(n - 15)]
        r.shuffle(own)
        lists.append(own)
    rows = align_in_process(lists)
    joined = [[lists[j][i] for i in rows[j]] for j in range(len(lists))]
    assert all(j == joined[0] for j in joined) and set(joined[0]) == set(common)


def _pair(chunk: int):
    ids = [[f"u{i}" for i in range(10)], [f"u{i}" for i in range(5, 17)]]
    identities = [SigningIdentity.generate(n) for n in ("a", "b")]
    pinned = PinnedKeys({i.name: i.key.verify_key for i in identities})
    parties = [AlignmentParty(x, identity=i, pinned=pinned, chunk=chunk) for x, i in zip(ids, identities, strict=True)]
    regs = [sign_registration(i, {"name": i.name, "n_rows": len(x), "features": ["f"], "label_owner": False,
                                  "row_ids": True}) for x, i in zip(ids, identities, strict=True)]
    return parties, AlignmentCoordinator(regs, chunk=chunk)


def test_the_coordinator_takes_chunks_only_in_order_and_never_ahead_of_the_hop_before():
    parties, coordinator = _pair(4)
    starts = coordinator.plan_messages()
    own = [list(parties[o.to].on_message(o)) for o in starts]
    assert [[m.body["offset"] for m in lists] for lists in own] == [[0, 4, 8], [0, 4, 8]]
    with pytest.raises(ProtocolError, match=r"at point 4, not 0 \(missing, repeated or out of order\)"):
        coordinator.handle(0, own[0][1])
    [relay] = coordinator.handle(0, own[0][0])
    [back] = parties[1].on_message(relay)              # bob re-blinds points 0..3 of alice's list
    assert coordinator.handle(1, back) == []            # hop 2, fully blinded: stored
    early = Out(type=PSI_POINTS, body={**back.body, "offset": 4}, payload=back.payload)
    with pytest.raises(ProtocolError, match="8 points, 10 registered and 4 sent to party 1"):
        coordinator.handle(1, early)                     # more of hop 2 than hop 1 ever relayed
    coordinator.close()


def test_the_coordinator_refuses_a_fully_blinded_list_piled_into_one_bucket():
    """Review of issue 34: the party applying the last key sends the coordinator a co-party's fully blinded list,
    and on e71c55e nothing stopped it from putting every point in one bucket (first byte 7): the coordinator then
    held the whole list in one bucket while intersecting, not ~1/256 of it. Now a bucket may hold at most
    bucket_cap(n) points (a 2^-40 tail of pseudorandom points); the skewed list is refused at its first chunk, before
    anything is written, naming the party that sent it, and random points of the same count pass (two seeds)."""
    from vfl.protocols.psi_stream import bucket_cap

    n = 4096
    assert n / N_BUCKETS < bucket_cap(n) < 4 * n / N_BUCKETS
    regs = [{"name": name, "n_rows": n, "row_ids": True} for name in ("a", "b")]
    for seed in (5, 6):
        rng = np.random.default_rng(seed)

        def points(rng, first_byte=None):
            raw = rng.integers(0, 256, size=(n, POINT_BYTES), dtype=np.uint8)
            raw[:, -1] &= 0x3F   # canonical u < p
            if first_byte is not None:
                raw[:, POINT_BYTES - 32] = first_byte
            return raw.tobytes()

        for skewed in (False, True):
            coordinator = AlignmentCoordinator(regs, chunk=1024)
            first = Out(type=PSI_POINTS, body={"origin": 0, "hops": 1, "offset": 0}, payload=[points(rng)])
            coordinator.handle(0, first)
            last = Out(type=PSI_POINTS, body={"origin": 0, "hops": 2, "offset": 0},
                       payload=[points(rng, 7 if skewed else None)])
            if skewed:
                with pytest.raises(ProtocolError, match=r"the list of party 0 fully blinded by party 1: 4096 of its "
                                                        r"points fall in one of the 256 buckets, more than \d+"):
                    coordinator.handle(1, last)
                assert coordinator._store is not None and not any(coordinator._store.dir.iterdir())
            else:
                assert coordinator.handle(1, last) == []
            coordinator.close()
