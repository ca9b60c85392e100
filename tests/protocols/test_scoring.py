"""The scoring phase without sockets (vfl.protocols.scoring): both sides in one process through the real wire
encoder and decoder, with real Diffie-Hellman values and Ed25519 identities."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import DataValidationError, IdentityError, ProtocolError
from vfl.net.messages import decode, encode, message_of
from vfl.protocols.scoring import ScorePlan, ScoringBlock, ScoringHub, ScoringParty, check_query
from vfl.secure.aggregation import encode_fixed_point
from vfl.secure.identity import SigningIdentity, load_party_identity, write_identities

NAMES = ("alice", "bob", "carol")


def wire(out):
    return decode(encode(message_of(out)))


def _session(tmp_path, n_rows: int = 30):
    rng = np.random.default_rng(5)
    write_identities(tmp_path, NAMES)
    plan = ScorePlan("ab" * 16, "cd" * 32, NAMES, 1000)
    ids = [f"u{i}" for i in range(n_rows)]
    parties, data = [], {}
    for k, name in enumerate(NAMES):
        X = rng.uniform(-1, 1, size=(n_rows, 2))
        block = ScoringBlock(("f0", "f1"), rng.normal(size=2), np.full(2, -1.0), np.full(2, 1.0))
        own = ids[k:]                                  # alice holds every ID, bob lacks u0, carol u0 and u1
        identity, pinned = load_party_identity(tmp_path, name)
        parties.append(ScoringParty(name=name, plan=plan, index=k, ids=own, X=X[k:], block=block,
                                    identity=identity, pinned=pinned))
        data[name] = (X, block)
    return plan, parties, data, ids


def _agree(hub: ScoringHub, parties: list[ScoringParty], tamper=None) -> None:
    outs = []
    for k, p in enumerate(parties):
        outs += hub.handle(k, wire(p.key_message()))
    for o in outs:
        msg = wire(o)
        if tamper is not None:
            tamper(o.to, msg)
        for r in parties[o.to].on_keys(msg):
            hub.handle(o.to, wire(r))


def _ask(hub: ScoringHub, parties: list[ScoringParty], ids: list[str], keep: list | None = None):
    for o in hub.query(ids):
        for r in parties[o.to].on_query(wire(o)):
            m = wire(r)
            if keep is not None:
                keep.append(m.array(0))
            hub.handle(o.to, m)
    return hub.result()


def test_totals_missing_counts_and_masked_vectors(tmp_path):
    plan, parties, data, ids = _session(tmp_path)
    hub = ScoringHub(plan)
    _agree(hub, parties)
    assert hub.ready
    vectors: list = []
    query = ids[::-1] + ["nobody"]
    res = _ask(hub, parties, query, vectors)
    expected = sum(data[n][1].partial(data[n][0]) for n in NAMES)
    for pos, pid in enumerate(query):
        if pid in ("u0", "u1", "nobody"):
            assert np.isnan(res.z[pos]) and res.missing_parties[pos] == {"u0": 2, "u1": 1, "nobody": 3}[pid]
        else:
            assert abs(res.z[pos] - expected[int(pid[1:])]) < 1e-9
    # no vector the hub receives is its sender's clear encoding (nor any other party's)
    clear = encode_fixed_point(data["alice"][1].partial(data["alice"][0][::-1]), plan.precision_bits, 3)
    for v in vectors:
        assert not np.any(v[:len(clear)] == clear)
    # a second round of the same IDs is masked afresh: same totals, different vectors
    again: list = []
    res2 = _ask(hub, parties, query, again)
    np.testing.assert_array_equal(np.isnan(res2.z), np.isnan(res.z))
    assert all(not np.array_equal(a, b) for a, b in zip(vectors, again, strict=True))


def test_a_hub_substituting_a_partys_key_is_refused(tmp_path):
    """The hub puts its own Diffie-Hellman value (signed by a key nobody pinned) in bob's entry: alice refuses."""
    plan, parties, _, _ = _session(tmp_path)
    hub = ScoringHub(plan)
    mallory = SigningIdentity.generate("bob")
    from vfl.protocols.scoring import key_digest
    from vfl.secure.aggregation import SecAggSite

    fake = SecAggSite(1, 3, 1).public_key().to_bytes(256, "big").hex()

    def tamper(to, msg):
        entry = msg.body["entries"][1]
        entry["key"] = fake
        entry["auth"] = mallory.sign(key_digest(plan, "bob", 1, fake))

    with pytest.raises(IdentityError, match="bad signature on scoring key from 'bob'"):
        _agree(hub, parties, tamper)


def test_rounds_are_never_reused_and_bad_queries_refused(tmp_path):
    plan, parties, _, ids = _session(tmp_path)
    hub = ScoringHub(plan)
    _agree(hub, parties)
    outs = hub.query(ids[:3])
    first = wire(outs[0])
    parties[0].on_query(first)
    with pytest.raises(ProtocolError, match="masks are never reused"):
        parties[0].on_query(wire(outs[0]))                   # a replayed round
    with pytest.raises(DataValidationError, match="duplicate"):
        check_query(["a", " a"], 10)
    with pytest.raises(DataValidationError, match="no IDs"):
        check_query([], 10)
    with pytest.raises(DataValidationError, match="more than --max-query-ids 2"):
        check_query(["a", "b", "c"], 2)
