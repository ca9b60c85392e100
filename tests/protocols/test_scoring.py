"""The scoring phase without sockets (vfl.protocols.scoring): both sides in one process through the real wire
encoder and decoder, with real Diffie-Hellman values and Ed25519 identities."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, DataValidationError, IdentityError, ProtocolError
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
            assert np.isnan(res.z[pos]) and res.missing[pos]
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


# ------------------------------------------------------------------ issue 29: whatever the hub sends
def _parties_for(tmp_path, plans, identities=True):
    """Parties of ``_session``'s data, each given its own plan (a hub may send each party a different one)."""
    import secrets

    tmp_path = tmp_path / secrets.token_hex(4)             # fresh identities per call
    _, base, data, ids = _session(tmp_path)
    out = []
    for k, (name, plan) in enumerate(zip(NAMES, plans, strict=True)):
        identity, pinned = load_party_identity(tmp_path, name) if identities else (None, None)
        out.append(ScoringParty(name=name, plan=plan, index=k, ids=base[k].rows, X=base[k].X, block=base[k].block,
                                identity=identity, pinned=pinned))
    return out, data, ids


def test_plans_that_differ_are_refused_at_the_signed_keys(tmp_path):
    """The hub gives bob a different precision (or cap): alice's and carol's signatures, made over their own plan
    transcripts, fail at bob, and bob's fail at them -- nothing data-dependent has been sent."""
    plan = ScorePlan("ab" * 16, "cd" * 32, NAMES, 1000)
    for other in (ScorePlan(plan.session, plan.model, NAMES, 1000, 20),
                  ScorePlan(plan.session, plan.model, NAMES, 999)):
        parties, _, _ = _parties_for(tmp_path, [plan, other, plan])
        with pytest.raises(IdentityError, match="bad signature on scoring key"):
            _agree(ScoringHub(plan), parties)


def _raw(hub_plan, parties, per_party_ids):
    """A hostile hub: round 1 with a different ID list per party; returns the raw sum of the masked vectors."""
    total = None
    for k, p in enumerate(parties):
        o = ScoringHub(hub_plan)
        o._keys, o._ready = {0: {}, 1: {}, 2: {}}, {0, 1, 2}     # only its query() encoder is used
        out = o.query(per_party_ids[k])[k]
        v = p.on_query(wire(out))[0].payload[0]
        total = v.copy() if total is None else total + v
    return total


def test_different_id_lists_or_precisions_do_not_cancel(tmp_path):
    """Without identities too (no signatures to check), the masks carry the plan and the ID list: a hub that gives
    carol another ID list, or bob another precision, gets uniform words, not carol's p(a_i) - p(b_i) or a
    separable sum; the check word tells it the answers do not add up."""
    plan = ScorePlan("ab" * 16, "cd" * 32, NAMES, 1000)
    parties, data, ids = _parties_for(tmp_path, [plan] * 3, identities=False)
    hub = ScoringHub(plan)
    _agree(hub, parties)
    la, lb = ids[2:12], ids[12:22]
    total = _raw(plan, parties, [la, la, lb])
    assert total[-1] != 0                                           # the hub sees that they do not add up
    carol_x, carol_block = data["carol"]
    diff = carol_block.partial(carol_x[12:22]) - carol_block.partial(carol_x[2:12])
    honest = sum(data[n][1].partial(data[n][0][2:12]) for n in NAMES)
    got = np.ldexp(total[:10].view(np.int64).astype(float), -plan.precision_bits)
    assert not np.any(np.abs(got - honest - diff) < 1e-3)
    # the next round's honest query sums exactly; a hub that mixes precisions gets nothing separable either
    hub.round = 1
    for o in hub.query(la):
        hub.handle(o.to, wire(parties[o.to].on_query(wire(o))[0]))
    np.testing.assert_allclose(hub.result().z, honest, atol=1e-9)
    # alice at 52 fractional bits, bob and carol at 8: were the masks to cancel, total / 2^52 would be alice's
    # partial score to ~1e-13 (the others' add < 2^-40)
    fine, coarse = (ScorePlan(plan.session, plan.model, NAMES, 1000, f) for f in (52, 8))
    parties, _, _ = _parties_for(tmp_path, [fine, coarse, coarse], identities=False)
    _agree(ScoringHub(plan), parties)
    total = _raw(plan, parties, [la, la, la])
    assert total[-1] != 0
    alice = data["alice"][1].partial(data["alice"][0][2:12])
    assert not np.any(np.abs(np.ldexp(total[:10].view(np.int64).astype(float), -52) - alice) < 1e-3)


def test_missing_reveals_one_bit_not_which_or_how_many_parties(tmp_path):
    """u0 is missing at bob and carol, u1 at carol only, 'nobody' at all three: the raw flag sums the hub sees are
    non-zero words, none of them a count (1, 2, 3)."""
    plan, parties, _, ids = _session(tmp_path)
    hub = ScoringHub(plan)
    _agree(hub, parties)
    query = ["u0", "u1", "nobody", "u5"]
    words = [parties[o.to].on_query(wire(o))[0].payload[0] for o in hub.query(query)]
    flags = sum(w[4:8] for w in words[1:]) + words[0][4:8]
    assert flags[3] == 0 and all(int(f) > 2**32 for f in flags[:3])
    assert sum(w[8:9] for w in words[1:]) + words[0][8:9] == 0


def test_a_party_caps_a_query_before_allocating_it(tmp_path):
    """A frame announcing more IDs than the party's cap is refused before it is read; a frame whose lengths do not
    add up (a hub that hides 10^6 IDs behind a count of 3) is refused before any ID is decoded."""
    from vfl.protocols.scoring import id_frame, parse_id_frame

    assert parse_id_frame(id_frame(["a", "é", "c"]), 3, 3) == ["a", "é", "c"]
    with pytest.raises(ProtocolError, match="at most 100 per query"):
        parse_id_frame(b"", 5_000_000, 100)
    hidden = id_frame(["a", "b", "c"]) + id_frame([f"x{i}" for i in range(10**6)])
    with pytest.raises(ProtocolError, match="does not hold 3 IDs|do not add up"):
        parse_id_frame(hidden, 3, 100)
    with pytest.raises(ProtocolError, match="do not add up"):
        parse_id_frame(id_frame(["a", "b"])[:8] + b"abc", 2, 100)
    plan = ScorePlan("ab" * 16, "cd" * 32, NAMES, 1000)
    with pytest.raises(ConfigurationError, match="it serves at most 100"):
        _parties_for(tmp_path, [plan] * 3)[0][0].__class__(
            name="alice", plan=plan, index=0, ids=["u1"], X=np.zeros((1, 2)),
            block=ScoringBlock(("f0", "f1"), np.ones(2), -np.ones(2), np.ones(2)), identity=None, pinned=None,
            max_ids=100)


@pytest.mark.parametrize("lower,coef,reason", [
    ([np.nan, -1.0], [1.0, 1.0], "without public bounds"),
    ([-1.0, -1.0], [1e9, 1.0], "does not fit 36-bit fixed point"),
])
def test_a_block_that_could_overflow_is_never_served(lower, coef, reason):
    """Decided from the public bounds and coefficients before any query: an overflow can never depend on a row."""
    from vfl.protocols.scoring import check_servable

    block = ScoringBlock(("f0", "f1"), np.array(coef), np.array(lower), np.ones(2))
    with pytest.raises(ConfigurationError, match=reason):
        check_servable(block, 3, 36)
    check_servable(ScoringBlock(("f0", "f1"), np.ones(2), -np.ones(2), np.ones(2)), 3, 36)
