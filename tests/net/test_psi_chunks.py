"""Chunked PSI lists against a real `vfl party --id` process (issue 34): a hostile coordinator holding a co-party's
honestly signed chunks sends them out of order, twice, moved, past the signed count, or stops early and answers a
result; the party stops with one line (exit code 4) before re-blinding the bad chunk.

The party (alice) has a throwaway identity and pins "bob"; the test holds bob's key to sign what an honest (or, for
the count, a colluding) bob would send. FAST TESTS: 1024-bit INSECURE Paillier test keys (no product is reached).
"""

from __future__ import annotations

import pytest
from helpers.psi_victim import BOB_COUNT, IDS, bob_registration, one_error_line, psi_victim

from vfl.net.messages import MessageType

pytestmark = [pytest.mark.network, pytest.mark.timeout(180)]


@pytest.fixture
def victim(tmp_path):
    """A real `vfl party --id` process (alice) against a fake coordinator; yields (fake, process, bob identity)."""
    with psi_victim(tmp_path) as started:
        yield started


def _bob_chunks(fake, peer, bob, alice_reg, *, size=7):
    """Open the ring (alice index 0, bob 1), take alice's own list, and return bob's 40 blinded points cut into
    chunks of ``size`` points, each signed by bob's real key at its true offset: what an honest bob sends."""
    from vfl.protocols.alignment import PsiRing
    from vfl.secure.psi import POINT_BYTES, BlindingKey

    start = {"index": 0, "parties": 2, "registrations": [alice_reg, bob_registration(bob)]}
    fake.send(peer, MessageType.PSI_START, start)
    got = fake.wait_for(MessageType.PSI_POINTS, timeout=60)
    assert got is not None and got[1].body["offset"] == 0 and len(got[1].blob(0)) == POINT_BYTES * len(IDS)
    ring = PsiRing.from_start(start, index=1, name=None, n_ids=BOB_COUNT, pinned=None, run=fake.run_id)
    points = BlindingKey().blind([f"bob{i:03d}" for i in range(BOB_COUNT)])
    chunks = []
    for off in range(0, BOB_COUNT, size):
        body = {"origin": 1, "hops": 1, "offset": off}
        blob = points[off * POINT_BYTES:(off + size) * POINT_BYTES]
        chunks.append((body | {"auth": bob.sign(ring.list_digest(body, blob))}, blob))
    return ring, chunks


@pytest.mark.parametrize("case,expected,reblinded", [
    # bob's second chunk first: a chunk is re-blinded only where the list stands
    ("reordered", "a chunk of the list of party 'bob' starts at point 7, not at 0", 0),
    # the first chunk again (a replay): refused, only the first copy was re-blinded
    ("repeated", "a chunk of the list of party 'bob' starts at point 0, not at 7", 1),
    # bob's signed second chunk relabelled as the first: the offset is signed
    ("moved", "bad signature on the PSI list of party 'bob' after 1 hop(s) from 'bob'", 0),
    # 5 chunks (35 points), then 12 points signed at offset 35 (bob's key: a colluding bob): past the signed count
    ("overlong", "the list of party 'bob' holds 47 points but 'bob' signed 40 row IDs", 5),
    # 5 of bob's 6 chunks, then a PSI_RESULT: the ring did not finish, the result is refused
    ("truncated", "psi_result: sent before the ring finished", 5),
])
def test_hostile_chunk_sequences_are_refused(victim, case, expected, reblinded):
    """A hostile coordinator holding bob's honestly signed chunks sends them out of order, twice, moved, past the
    count, or stops early and answers a result: the real party stops with one line before re-blinding the bad
    chunk (on main, before issue 34, lists were one message and any partial list was refused on its count)."""
    import numpy as np

    fake, proc, bob = victim
    peer, alice_reg = fake.register(timeout=60)
    ring, chunks = _bob_chunks(fake, peer, bob, alice_reg)
    if case == "reordered":
        sequence = [chunks[1]]
    elif case == "repeated":
        sequence = [chunks[0], chunks[0]]
    elif case == "moved":
        sequence = [({**chunks[1][0], "offset": 0}, chunks[1][1])]
    elif case == "overlong":
        extra, twelve = {"origin": 1, "hops": 1, "offset": 35}, chunks[5][1] + chunks[0][1]
        sequence = [*chunks[:5], (extra | {"auth": bob.sign(ring.list_digest(extra, twelve))}, twelve)]
    else:
        sequence = chunks[:5]
    for body, blob in sequence:
        fake.send(peer, MessageType.PSI_POINTS, body, [blob])
    if case == "truncated":
        for _ in range(5):   # the 5 chunks re-blinded (valid so far), then the early result
            got = fake.wait_for(MessageType.PSI_POINTS, MessageType.ERROR, timeout=60)
            assert got is not None and got[1].type is MessageType.PSI_POINTS, got
        fake.send(peer, MessageType.PSI_RESULT, {"n_common": 1, "offset": 0}, [np.array([0], dtype=np.int64)])
    got = fake.wait_for(MessageType.ERROR, timeout=60)
    assert got is not None and expected in got[1].body["reason"], got
    back = [m for m in fake.sent_by_party(MessageType.PSI_POINTS) if m.body["origin"] == 1]
    # the bad chunk is refused on the party's receive thread, so the valid ones before it may not all have been
    # re-blinded by then: what came back is a prefix of them (all of them when the test waited for them)
    exact = case == "truncated"
    assert len(back) == reblinded if exact else len(back) <= reblinded
    assert [m.body["offset"] for m in back] == [c[0]["offset"] for c in chunks[:len(back)]]
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, err
    assert expected in one_error_line(err) and not any(u in err for u in IDS)
