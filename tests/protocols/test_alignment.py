"""vfl.protocols.alignment: PSI row alignment, both sides, without sockets."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from vfl.exceptions import DataValidationError, IdentityError, ProtocolError
from vfl.protocols.alignment import (
    PSI_POINTS,
    AlignmentCoordinator,
    AlignmentParty,
    IntersectionTooSmall,
    Out,
    align_in_process,
)
from vfl.protocols.roster import sign_registration
from vfl.secure.identity import PinnedKeys, SigningIdentity
from vfl.secure.psi import POINT_BYTES, BlindingKey, split_points


def _id_sets(seed: int, sizes: tuple[int, ...], shared: int) -> list[list[str]]:
    rng = random.Random(seed)
    common = [f"c{rng.getrandbits(40):x}" for _ in range(shared)]
    lists = []
    for k, n in enumerate(sizes):
        own = common + [f"p{k}-{rng.getrandbits(40):x}" for _ in range(n - shared)]
        rng.shuffle(own)
        lists.append(own)
    return lists


def _ring(id_lists, min_rows=1, names=None):
    """K parties with throwaway Ed25519 identities pinning each other, and a coordinator holding their signed
    registrations (what each REGISTER carries)."""
    names = names or [f"party{j}" for j in range(len(id_lists))]
    identities = [SigningIdentity.generate(n) for n in names]
    pinned = PinnedKeys({i.name: i.key.verify_key for i in identities})
    parties = [AlignmentParty(ids, identity=i, pinned=pinned) for ids, i in zip(id_lists, identities, strict=True)]
    regs = [sign_registration(i, _registration(i.name, len(p.ids))) for p, i in zip(parties, identities, strict=True)]
    return parties, AlignmentCoordinator(regs, min_rows=min_rows), identities


def _registration(name, n_ids):
    return {"name": name, "n_rows": n_ids, "features": ["f"], "label_owner": False, "row_ids": True}


def _run(id_lists, min_rows=1):
    """Drive both sides by hand, recording every message each party sent and everything the coordinator got."""
    parties, coordinator, _ = _ring(id_lists, min_rows)
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
    parties, coordinator, _ = _ring(lists)
    with pytest.raises(ProtocolError, match="not started"):
        parties[0].on_message(Out(type=PSI_POINTS, body={"origin": 1, "hops": 1}, payload=[b""]))
    starts = coordinator.plan_messages()
    first = [list(parties[o.to].on_message(o))[0] for o in starts]
    # party 2 pretends to send party 0's list
    with pytest.raises(ProtocolError, match="unexpected list"):
        coordinator.handle(2, first[0])
    relayed = coordinator.handle(0, first[0])
    assert relayed[0].to == 1 and relayed[0].body == first[0].body
    assert set(first[0].body) == {"origin", "hops", "offset", "auth"}
    with pytest.raises(ProtocolError, match="unexpected list"):       # replay
        coordinator.handle(0, first[0])
    with pytest.raises(ProtocolError, match="unexpected list"):       # party 2 is not the next hop of list 0
        parties[2].on_message(relayed[0])
    # chunks (issue 34): a 9-point chunk is a valid start; repeated, it is refused, and so is one past the count
    whole = first[1].payload[0]
    short = Out(type=PSI_POINTS, body={"origin": 1, "hops": 1, "offset": 0}, payload=[whole[:-POINT_BYTES]])
    assert coordinator.handle(1, short)[0].body["offset"] == 0
    with pytest.raises(ProtocolError, match=r"at point 0, not 9 \(missing, repeated or out of order\)"):
        coordinator.handle(1, short)
    over = Out(type=PSI_POINTS, body={"origin": 1, "hops": 1, "offset": 9}, payload=[whole[:2 * POINT_BYTES]])
    with pytest.raises(ProtocolError, match="11 points, 10 registered"):
        coordinator.handle(1, over)
    with pytest.raises(ProtocolError, match="unexpected message"):
        coordinator.handle(1, Out(type="block"))


def _solo() -> AlignmentParty:
    party = AlignmentParty(["a", "b", "c"], name="solo")
    list(party.on_message(Out(type="psi_start", body={"index": 0, "parties": 1,
                                                      "registrations": [_registration("solo", 3)]})))
    return party


def test_party_validates_the_result():
    for rows in (np.array([0, 0], dtype=np.int64), np.array([0, 3], dtype=np.int64), np.array([0.0, 1.0])):
        with pytest.raises(ProtocolError, match="psi_result"):
            _solo().on_message(Out(type="psi_result", body={"n_common": 2, "offset": 0}, payload=[rows]))
    party = _solo()
    party.on_message(Out(type="psi_result", body={"n_common": 2, "offset": 0},
                         payload=[np.array([2, 0], dtype=np.int64)]))
    assert party.common_ids() == ["c", "a"]


# ---------------------------------------------------------------- PSI oracle (issue 20, item 5)
class CountingKey(BlindingKey):
    """A real blinding key that counts the points it re-blinds (to show a refused list costs no EC work)."""

    def __init__(self) -> None:
        super().__init__()
        self.reblinded = 0

    def reblind(self, blob: bytes, count: int | None = None) -> bytes:
        self.reblinded += len(blob) // POINT_BYTES
        return super().reblind(blob, count)


def _victim_and_bob(n_alice=60, n_bob=40):
    """alice (victim) and bob pin each other; bob registered (signed) n_bob IDs. Returns what a hostile coordinator
    holds: alice's party, bob's identity (only used where the test says bob colludes), the signed ring, alice's
    hop-1 list."""
    alice_id, bob_id = SigningIdentity.generate("alice"), SigningIdentity.generate("bob")
    pinned = PinnedKeys({"alice": alice_id.key.verify_key, "bob": bob_id.key.verify_key})
    ids = [f"user{i:05d}" for i in range(n_alice)]
    alice = AlignmentParty(ids, identity=alice_id, pinned=pinned, key=CountingKey())
    regs = [sign_registration(alice_id, _registration("alice", n_alice)),
            sign_registration(bob_id, _registration("bob", n_bob))]
    start = Out(type="psi_start", body={"index": 0, "parties": 2, "registrations": regs})
    [own] = alice.on_message(start)
    return alice, bob_id, start, own


def _probe(guesses):
    """The prober's own blinded guesses H(g)^k_P and its key."""
    key = BlindingKey()
    return key, key.blind(guesses)


def _as_bob(blob, *, sign=None, ring=None, hops=1):
    body = {"origin": 1, "hops": hops, "offset": 0}
    if sign is not None:
        body["auth"] = sign.sign(ring.list_digest(body, blob))
    return Out(type=PSI_POINTS, body=body, payload=[blob])


def test_a_prober_cannot_use_a_party_as_a_membership_oracle():
    """A hostile coordinator sends alice 1000 guessed IDs as "bob's list" (40 of them alice's real IDs): every
    variant it can build without bob's key is refused with one line naming bob, before any re-blinding."""
    alice, bob_id, start, _ = _victim_and_bob()
    guesses = [f"user{i:05d}" for i in range(20, 60)] + [f"guess{i}" for i in range(960)]
    _, probe = _probe(guesses)
    with pytest.raises(ProtocolError, match=r"list of party 'bob' holds 1000 points but 'bob' signed 40 row IDs"):
        alice.on_message(_as_bob(probe))                                    # 1000 guesses, bob signed 40
    forty = probe[:40 * POINT_BYTES]
    with pytest.raises(IdentityError, match=r"PSI list of party 'bob' after 1 hop\(s\) from 'bob' carries no valid"):
        alice.on_message(_as_bob(forty))                                    # the signed count, unsigned
    with pytest.raises(IdentityError, match="bad signature on the PSI list of party 'bob'"):
        alice.on_message(_as_bob(forty, sign=SigningIdentity.generate("bob"), ring=alice.ring))  # not bob's key
    other_run = AlignmentParty(alice.ids, name="alice", run="another run")
    other_run.on_message(start)
    with pytest.raises(IdentityError, match="bad signature"):     # bob's real signature, same ring, another run
        alice.on_message(_as_bob(forty, sign=bob_id, ring=other_run.ring))
    with pytest.raises(ProtocolError, match="unexpected list of party 'alice'"):   # alice's own list reflected
        alice.on_message(Out(type=PSI_POINTS, body={"origin": 0, "hops": 1}, payload=[forty]))
    assert alice._key.reblinded == 0 and not alice._next


def test_the_ring_must_be_signed_by_pinned_parties():
    """PSI_START must carry every party's registration signed by its pinned identity, and alice's own."""
    alice_id, bob_id = SigningIdentity.generate("alice"), SigningIdentity.generate("bob")
    pinned = PinnedKeys({"alice": alice_id.key.verify_key, "bob": bob_id.key.verify_key})
    own = sign_registration(alice_id, _registration("alice", 3))
    bob = sign_registration(bob_id, _registration("bob", 40))
    mallory = sign_registration(SigningIdentity.generate("mallory"), _registration("mallory", 100_000))
    cases = [
        ({"index": 0, "parties": 2}, ProtocolError, "signed registration of every party"),       # the old PSI_START
        ({"registrations": [own, mallory]}, IdentityError, "'mallory' has no pinned identity"),   # invented party
        ({"registrations": [own, {**bob, "n_rows": 100_000}]}, IdentityError, "bad signature on registration from "
                                                                              "'bob'"),          # count inflated
        ({"registrations": [own, {k: v for k, v in bob.items() if k != "auth"}]}, IdentityError, "no valid signature"),
        ({"registrations": [own, own]}, ProtocolError, "repeated party name"),
        ({"registrations": [bob, own]}, ProtocolError, "ring entry 0 is 'bob'"),                   # wrong index
        ({"registrations": [sign_registration(alice_id, _registration("alice", 4)), bob]}, ProtocolError,
         "'alice', 3 IDs"),                                                                       # not its count
    ]
    for body, error, message in cases:
        party = AlignmentParty(["a", "b", "c"], identity=alice_id, pinned=pinned)
        with pytest.raises(error, match=message):
            party.on_message(Out(type="psi_start", body={"index": 0, "parties": 2, **body}))
        assert party.ring is None and party.index is None


def test_a_colluding_pinned_party_tests_at_most_its_signed_count():
    """What remains: with bob's key the prober gets exactly bob's signed count of guesses re-blinded, once, and
    learns their membership (the oracle the bound limits); a second list from bob is refused."""
    alice, bob_id, _, own = _victim_and_bob()
    guesses = [f"user{i:05d}" for i in range(20, 60)]                       # 40 guesses, all alice's
    key, probe = _probe(guesses)
    [back] = alice.on_message(_as_bob(probe, sign=bob_id, ring=alice.ring))
    assert back.body["origin"] == 1 and back.body["hops"] == 2 and alice._key.reblinded == 40
    mine = set(split_points(key.reblind(own.payload[0])))                  # H(a)^(k_A k_P)
    learned = sum(p in mine for p in split_points(back.payload[0]))
    assert learned == 40
    with pytest.raises(ProtocolError, match="unexpected list of party 'bob'"):
        alice.on_message(_as_bob(probe, sign=bob_id, ring=alice.ring))
    assert alice._key.reblinded == 40
