"""Signed Diffie-Hellman values of the CAPE sites (vfl.protocols.cape_keys), socket-free with real Ed25519 identities.

A hostile aggregator that substitutes its own Diffie-Hellman value for a co-site in the table it sends site 0 knows
every pair mask of site 0 and unmasks its noise share e^_s. Each test plays such an aggregator against real
:class:`CapeSiteRound` sessions behind their :class:`SignedCapeSite`: the attacked site raises IdentityError naming
the co-site and produces no ``masked`` message. ``test_without_the_check_the_substitution_unmasks_the_share``
shows what the check prevents (the attack recovers e^_0 exactly when the check is skipped).
"""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import IdentityError, ProtocolError
from vfl.protocols.cape_aggregation import CapeAggregatorRound, CapeBlock, CapeMessage, CapeSiteRound, drive
from vfl.protocols.cape_keys import CapeKeyBook, SignedCapeSite, key_digest
from vfl.secure.aggregation import SecAggSite, decode_fixed_point, encode_fixed_point, pair_mask
from vfl.secure.identity import PinnedKeys, SigningIdentity

NAMES = ["site0", "site1", "site2"]
RUN = "ab" * 16
ROUND = 77
PLAN = {"plan": {"model": "linear", "epsilon": 1.0}, "fit_intercept": True}
IDS = {n: SigningIdentity.generate(n) for n in NAMES}
PINNED = PinnedKeys({n: i.key.verify_key for n, i in IDS.items()})


def _body(index: int, names: list[str] = NAMES, plan: dict = PLAN) -> dict:
    return {"index": index, "sites": list(names), **plan}


def _book(index: int, *, run: str = RUN, names: list[str] = NAMES, plan: dict = PLAN, signed: bool = True,
          pinned: PinnedKeys = PINNED) -> CapeKeyBook:
    name = names[index]
    return CapeKeyBook(name=name, run=run, plan_body=_body(index, names, plan),
                       identity=IDS[name] if signed else None, pinned=pinned if signed else None)


def _sites(round_id: int = ROUND, signed=(True, True, True), S: int = 3) -> list[SignedCapeSite]:
    blocks = [CapeBlock("v", np.zeros(4), tau=1.0)]
    return [SignedCapeSite(CapeSiteRound(i, S, round_id, blocks, random_state=10 + i),
                           _book(i, signed=signed[i], names=NAMES[:S])) for i in range(S)]


def _keys(sites: list[SignedCapeSite]) -> tuple[list[CapeMessage], CapeAggregatorRound]:
    """Every site's (signed) key message, fed to an honest aggregator round; its ``keys`` messages."""
    agg = CapeAggregatorRound(len(sites), [("v", (4,))], sites[0].session.round_id)
    out: list[CapeMessage] = []
    for site in sites:
        for msg in site.seal_all(site.session.start()):
            out += agg.handle(msg)
    assert len(out) == len(sites) and all(m.kind == "keys" for m in out)
    return out, agg


def _attacker_value() -> np.ndarray:
    return np.frombuffer(SecAggSite(1, 3, 4).public_key().to_bytes(256, "big"), dtype=np.uint8).copy()


def test_honest_signed_round_completes_and_the_shares_cancel():
    sites = _sites()
    agg = CapeAggregatorRound(3, [("v", (4,))], ROUND)
    drive(agg, sites, [m for s in sites for m in s.seal_all(s.session.start())])
    total = sum(s.session.zero_sum_["v"] for s in sites)
    assert np.abs(total).max() < 1e-9
    assert all(isinstance(a, str) and len(a) == 128 for a in agg._auths.values())


def test_the_aggregator_relays_every_signature_in_index_order():
    sites = _sites()
    keys, _ = _keys(sites)
    auths = keys[0].body["auths"]
    for t, site in enumerate(sites):
        value = keys[0].array[t].tobytes()
        PINNED.verify(NAMES[t], key_digest(RUN, site.book.plan, ROUND, t, NAMES[t], value), auths[t])


def _refused(site: SignedCapeSite, msg: CapeMessage, match: str) -> None:
    with pytest.raises(IdentityError, match=match):
        site.handle(msg)
    assert site.session.phase == "keys"   # nothing masked: the session never saw the table


def test_a_substituted_value_is_refused_before_masking():
    sites = _sites()
    keys, _ = _keys(sites)
    table = keys[0].array.copy()
    table[1] = _attacker_value()   # site1's signature kept, value replaced
    _refused(sites[0], CapeMessage("keys", 0, dict(keys[0].body), table),
             r"bad signature on the Diffie-Hellman value of site 1 .* from 'site1'")


def test_a_value_signed_by_the_aggregator_s_own_key_is_refused():
    sites = _sites()
    keys, _ = _keys(sites)
    table = keys[0].array.copy()
    table[1] = _attacker_value()
    mallory = SigningIdentity.generate("site1")   # claims to be site1, not its pinned key
    auths = list(keys[0].body["auths"])
    auths[1] = mallory.sign(key_digest(RUN, sites[0].book.plan, ROUND, 1, "site1", table[1].tobytes()))
    _refused(sites[0], CapeMessage("keys", 0, {"round": ROUND, "auths": auths}, table), "from 'site1'")


@pytest.mark.parametrize("auths", [None, "drop-one", "short"])
def test_a_missing_signature_is_refused(auths):
    sites = _sites()
    keys, _ = _keys(sites)
    body = {"round": ROUND}
    if auths == "drop-one":
        body["auths"] = [a if t != 2 else None for t, a in enumerate(keys[0].body["auths"])]
    elif auths == "short":
        body["auths"] = keys[0].body["auths"][:2]
    _refused(sites[0], CapeMessage("keys", 0, body, keys[0].array.copy()),
             "no valid signature|no signature list")


def test_a_value_replayed_from_another_round_is_refused():
    """capeDJICA runs two CAPE rounds (r, r + 1): site1's value signed for round r cannot enter round r + 1."""
    earlier = _sites(ROUND)
    old_keys, _ = _keys(earlier)
    now = _sites(ROUND + 1)
    keys, _ = _keys(now)
    table = keys[0].array.copy()
    auths = list(keys[0].body["auths"])
    table[1], auths[1] = old_keys[0].array[1], old_keys[0].body["auths"][1]
    _refused(now[0], CapeMessage("keys", 0, {"round": ROUND + 1, "auths": auths}, table), "site 1 of round 78")


def test_a_value_replayed_from_another_run_or_plan_is_refused():
    sites = _sites()
    keys, _ = _keys(sites)
    for book in (_book(0, run="cd" * 16), _book(0, plan={**PLAN, "fit_intercept": False})):
        other = SignedCapeSite(sites[0].session, book)
        _refused(other, CapeMessage("keys", 0, dict(keys[0].body), keys[0].array.copy()), "from 'site1'")


def test_a_value_moved_to_another_index_is_refused():
    sites = _sites()
    keys, _ = _keys(sites)
    table, auths = keys[0].array.copy(), list(keys[0].body["auths"])
    table[[1, 2]], auths[1], auths[2] = table[[2, 1]], auths[2], auths[1]
    _refused(sites[0], CapeMessage("keys", 0, {"round": ROUND, "auths": auths}, table), "site 1")


def test_an_unpinned_or_invented_site_is_refused_at_the_plan():
    with pytest.raises(IdentityError, match="site 'mallory' has no pinned identity"):
        _book(0, names=["site0", "mallory", "site2"])


def test_a_duplicated_site_or_a_wrong_index_is_refused_at_the_plan():
    with pytest.raises(IdentityError, match="lists site 'site1' twice"):
        _book(0, names=["site0", "site1", "site1"])
    with pytest.raises(IdentityError, match="names 'site1' at this site's index 0"):
        CapeKeyBook(name="site0", run=RUN, plan_body=_body(0, ["site1", "site0", "site2"]), identity=IDS["site0"],
                    pinned=PINNED)
    with pytest.raises(ProtocolError, match="names no sites"):
        CapeKeyBook(name="site0", run=RUN, plan_body={"index": 0, **PLAN}, identity=IDS["site0"], pinned=PINNED)


def test_a_signed_site_refuses_a_co_site_without_identity_and_the_unsigned_site_runs():
    sites = _sites(signed=(True, False, True))
    keys, _ = _keys(sites)
    assert keys[0].body["auths"][1] is None
    _refused(sites[0], keys[0], "from 'site1' carries no valid signature")
    out = sites[1].handle(keys[1])   # --insecure-no-identity: checks nothing, masks (loopback experiments only)
    assert [m.kind for m in out] == ["masked"]


def test_without_the_check_the_substitution_unmasks_the_share():
    """The attack the check stops: with a 2-site table whose other value is the aggregator's, the aggregator knows
    site 0's only pair mask and recovers its noise share e^_0 exactly from the masked message."""
    blocks = [CapeBlock("v", np.zeros(4), tau=1.0)]
    victim = CapeSiteRound(0, 2, ROUND, blocks, random_state=3)
    victim.start()
    mallory = SecAggSite(1, 2, 4, victim.precision_bits, ROUND)
    table = np.stack([np.frombuffer(v.to_bytes(256, "big"), dtype=np.uint8)
                      for v in (victim._secagg.public_key(), mallory.public_key())])
    masked = victim.handle(CapeMessage("keys", 0, {"round": ROUND}, table))[0].array   # unchecked session
    mallory.receive_public_keys({0: victim._secagg.public_key()})
    mask = pair_mask(mallory._pair_keys[0], ROUND, 0, 1, 4)
    recovered = decode_fixed_point(masked - mask, victim.precision_bits)
    assert np.array_equal(recovered, victim.e_hat_["v"])
    assert np.array_equal(encode_fixed_point(recovered, victim.precision_bits, 2), masked - mask)
    signed = SignedCapeSite(CapeSiteRound(0, 2, ROUND, blocks, random_state=3), _book(0, names=NAMES[:2]))
    signed.seal_all(signed.session.start())
    table[0] = np.frombuffer(signed.session._secagg.public_key().to_bytes(256, "big"), dtype=np.uint8)
    _refused(signed, CapeMessage("keys", 0, {"round": ROUND, "auths": [None, None]}, table), "site1")
