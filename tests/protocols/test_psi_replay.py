"""A PSI list replayed into a later run under a reused run id (review of issue 34).

The ring digest every chunk signature is bound to is the run id and the K signed registrations. The run id is the
coordinator's, and a registration carries no fresh value, so a hostile coordinator that reuses a run id, with
parties whose registrations did not change, can replay a co-party's signed chunks of an earlier run (under a fresh
run id they are refused: tests/protocols/test_alignment.py). Invariant: the replay gains nothing. Every party draws a
fresh key per run, so the replayed list re-blinded in the new run carries the old run's key of its origin with the
new run's key of the re-blinding party, a combination no other list of either run carries: it matches no point the
coordinator or anyone holds (docs/psi.md "Bounded re-blinding", 4). The real protocol state machines, in process.
"""

from __future__ import annotations

import secrets

from vfl.protocols.alignment import PSI_POINTS, AlignmentCoordinator, AlignmentParty
from vfl.protocols.contracts import Out
from vfl.protocols.roster import sign_registration
from vfl.secure.identity import PinnedKeys, SigningIdentity
from vfl.secure.psi import split_points

ALICE = [f"user{i:04d}" for i in range(50)]
BOB = [f"user{i:04d}" for i in range(25, 75)]


def _run(identities, pinned, run):
    """One honest run alice/bob under run id ``run``; every PSI_POINTS message the coordinator saw, and the
    registrations (signed again: Ed25519 signatures are deterministic, so they are the same bytes every run)."""
    parties = [AlignmentParty(ids, identity=i, pinned=pinned, run=run) for ids, i in zip((ALICE, BOB), identities,
                                                                                           strict=True)]
    regs = [sign_registration(i, {"name": i.name, "n_rows": len(p.ids), "features": [], "label_owner": False,
                                  "row_ids": True}) for p, i in zip(parties, identities, strict=True)]
    coordinator = AlignmentCoordinator(regs)
    seen: list[Out] = []
    queue = [(o.to, o) for o in coordinator.plan_messages()]
    while queue:
        to, out = queue.pop(0)
        for reply in parties[to].on_message(out):
            seen.append(reply)
            queue.extend((o.to, o) for o in coordinator.handle(to, reply))
    assert coordinator.done
    return seen, regs


def test_a_list_replayed_under_a_reused_run_id_matches_nothing():
    identities = [SigningIdentity.generate(n) for n in ("alice", "bob")]
    pinned = PinnedKeys({i.name: i.key.verify_key for i in identities})
    run = secrets.token_hex(16)
    first, regs = _run(identities, pinned, run)
    second, regs2 = _run(identities, pinned, run)
    assert regs == regs2
    # the coordinator replays bob's signed hop-1 list of the first run to a new alice of a third run, same run id
    alice = AlignmentParty(ALICE, identity=identities[0], pinned=pinned, run=run)
    own = list(alice.on_message(Out(type="psi_start", body={"index": 0, "parties": 2, "registrations": regs})))
    [old] = [m for m in first if m.body["origin"] == 1 and m.body["hops"] == 1]
    [replayed] = alice.on_message(Out(type=PSI_POINTS, body=old.body, payload=old.payload))   # accepted
    got = set(split_points(replayed.payload[0]))
    assert len(got) == len(BOB)
    every = {p for m in first + second + own for p in split_points(m.payload[0])}
    assert not got & every   # no point of either run: not bob's, not alice's, at no hop
