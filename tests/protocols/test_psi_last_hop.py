"""The last hop of a PSI list is trusted (review of issue 34): a limitation of the ECDH ring, stated and measured.

Whoever applies the last key to a co-party's list sends the coordinator that list's fully blinded points, and
nothing proves that it raised each point to its key in place: the signature says who sent the chunk, not that the
chunk is ``[k] P`` of what it received. Attacker: a pinned co-party (alice, the last hop of bob's list for K = 2)
that re-blinds bob's points at the positions of a set S of bob's rows it chooses and sends random points of the
group elsewhere. Nothing refuses it (the counts, order and signatures are its own, all valid), bob keeps only his
rows in S, and alice's PSI_RESULT tells her which of her IDs bob holds at a position in S: one bit about bob's row
order per common ID and run, a subset of the rows chosen for bob, never an ID outside the intersection.
The real protocol state machines, in process (the same as over the network); docs/psi.md "What remains" (f).
"""

from __future__ import annotations

import random
import secrets

import numpy as np

from vfl.protocols.alignment import AlignmentCoordinator, AlignmentParty
from vfl.protocols.contracts import Out
from vfl.protocols.roster import sign_registration
from vfl.secure.identity import PinnedKeys, SigningIdentity
from vfl.secure.psi import POINT_BYTES, BlindingKey


def _run(alice_ids: list[str], bob_ids: list[str], keep: set[int], *, chunk: int = 7):
    """One ring alice (0, hostile last hop of bob's list), bob (1, honest) through the real state machines; alice
    re-blinds only bob's positions in ``keep`` and sends random group points elsewhere, signed as herself."""
    ids = [SigningIdentity.generate(n) for n in ("alice", "bob")]
    pinned = PinnedKeys({i.name: i.key.verify_key for i in ids})
    run = secrets.token_hex(16)
    parties = [AlignmentParty(x, identity=i, pinned=pinned, run=run, chunk=chunk)
               for x, i in zip((alice_ids, bob_ids), ids, strict=True)]
    regs = [sign_registration(i, {"name": i.name, "n_rows": len(p.ids), "features": [], "label_owner": False,
                                  "row_ids": True}) for p, i in zip(parties, ids, strict=True)]
    coordinator = AlignmentCoordinator(regs, chunk=chunk)
    filler = BlindingKey()   # random points of the group: H(random)^k' under a key nobody else holds

    def tamper(out: Out) -> Out:
        origin, offset = out.body["origin"], out.body["offset"]
        if origin != 1:
            return out
        blob = bytearray(out.payload[0])
        for j in range(len(blob) // POINT_BYTES):
            if offset + j not in keep:
                blob[j * POINT_BYTES:(j + 1) * POINT_BYTES] = filler.blind([secrets.token_hex(8)])
        body = {k: v for k, v in out.body.items() if k != "auth"}
        return parties[0]._signed(body, bytes(blob))

    queue = [(o.to, o) for o in coordinator.plan_messages()]
    while queue:
        to, out = queue.pop(0)
        for reply in parties[to].on_message(out):
            reply = tamper(reply) if to == 0 else reply
            queue.extend((o.to, o) for o in coordinator.handle(to, reply))
    assert coordinator.done and all(p.done for p in parties)
    return [p.rows for p in parties], [p.common_ids() for p in parties]


def test_the_last_hop_of_a_list_chooses_which_of_its_rows_are_common():
    """Alice keeps bob's first half S honest: the run completes, bob keeps exactly his common rows in S, and alice
    learns which of her IDs bob holds in S (the true intersection is twice as large). Two seeds."""
    for seed in (11, 12):
        rng = random.Random(seed)
        common = [f"c{seed}-{i}" for i in range(40)]
        alice_ids = common + [f"a{seed}-{i}" for i in range(30)]
        bob_ids = common + [f"b{seed}-{i}" for i in range(30)]
        rng.shuffle(alice_ids)
        rng.shuffle(bob_ids)
        keep = set(range(len(bob_ids) // 2))
        (a_rows, b_rows), (a_common, b_common) = _run(alice_ids, bob_ids, keep)
        in_s = {bob_ids[i] for i in keep} & set(common)
        assert 0 < len(in_s) < len(common)
        assert set(b_rows.tolist()) <= keep and set(b_common) == in_s        # bob keeps only rows alice chose
        assert a_common == b_common and set(a_common) == in_s                 # alice: which IDs bob holds in S
        assert np.array_equal(np.sort(a_rows), np.sort([alice_ids.index(x) for x in in_s]))
