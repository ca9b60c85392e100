"""The PSI membership oracle (issue 20, item 5): a hostile coordinator posing as a PSI party, real `vfl party`.

On 9ac3130 the fake coordinator (tests/helpers/fake_coordinator.py, :func:`fake_coordinator.psi_probe`) sent a real
`vfl party --id` process 100 000 guessed IDs blinded under its own key as "party 1's list"; the party re-blinded all
of them and the prober learned the membership of every guess (40/40 of the party's IDs among them). Now the party
re-blinds only a list from a member of the signed ring, of exactly the ID count its origin signed at registration,
signed by its sender (vfl.protocols.alignment); anything else stops it with one line, exit code 4, and no
re-blinded list leaves it.

The party has a throwaway identity (`vfl keys`-style files) and pins "bob"; the test holds bob's key only to sign
bob's registration (what the coordinator received from the real bob), never to sign a probe.
FAST TESTS: 1024-bit INSECURE Paillier test keys (no product is ever reached).
"""

from __future__ import annotations

import pytest
from helpers.fake_coordinator import psi_probe
from helpers.psi_victim import BOB_COUNT, IDS, bob_registration, one_error_line, psi_victim

from vfl.net.messages import MessageType
from vfl.protocols.roster import sign_registration
from vfl.secure.identity import SigningIdentity

pytestmark = [pytest.mark.network, pytest.mark.timeout(180)]


@pytest.fixture
def victim(tmp_path):
    """A real `vfl party --id` process (alice) against a fake coordinator; yields (fake, process, bob identity)."""
    with psi_victim(tmp_path) as started:
        yield started


@pytest.mark.parametrize("case,guesses,expected", [
    # 100 000 guesses as "bob's list": bob signed 40 (refused on the count, before any signature or EC work)
    ("count", 100_000, "the list of party 'bob' holds 100000 points but 'bob' signed 40 row IDs at registration"),
    # bob's signed count, but the prober cannot sign as bob
    ("unsigned", BOB_COUNT, "the PSI list of party 'bob' after 1 hop(s) from 'bob' carries no valid signature"),
    ("forged", BOB_COUNT, "bad signature on the PSI list of party 'bob' after 1 hop(s) from 'bob'"),
    # an invented party with 100 000 IDs signed by a key nobody pinned: refused at PSI_START
    ("invented", 100_000, "party 'mallory' has no pinned identity"),
    # bob's real registration with its count raised: the signature no longer verifies
    ("inflated", 100_000, "bad signature on registration from 'bob'"),
])
def test_psi_prober_gets_nothing_reblinded(victim, case, guesses, expected):
    fake, proc, bob = victim
    peer, alice_reg = fake.register(timeout=60)
    assert alice_reg["n_rows"] == len(IDS) and alice_reg["row_ids"] and "auth" in alice_reg
    second = {"invented": sign_registration(SigningIdentity.generate("mallory"), {
                  "name": "mallory", "n_rows": guesses, "features": ["m1"], "label_owner": False, "row_ids": True}),
              "inflated": {**bob_registration(bob), "n_rows": guesses}}.get(case, bob_registration(bob))
    # the prober's 40 true members hidden among its guesses (cheap stand-ins beyond the first 2 000: the party must
    # refuse on the count alone, so their content never matters)
    guessed = IDS[20:] + [f"guess{i:06d}" for i in range(min(guesses, 2_000) - 40)]
    result = psi_probe(fake, peer, guessed, registrations=[alice_reg, second], pad_to=guesses,
                       sign=SigningIdentity.generate("bob") if case == "forged" else None)
    assert result["reblinded"] is None and result["learned"] == []
    assert expected in (result["error"] or ""), result
    # the only PSI list alice ever sent is her own (origin 0); none at all if the ring itself was refused
    lists = fake.sent_by_party(MessageType.PSI_POINTS)
    assert all(m.body["origin"] == 0 and m.body["hops"] == 1 for m in lists)
    assert len(lists) == (0 if case in ("invented", "inflated") else 1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, err
    line = one_error_line(err)
    assert expected in line and ("'bob'" in line or "'mallory'" in line)
    assert not any(u in err for u in IDS)


P = 2**255 - 19


@pytest.mark.parametrize("case,point,expected", [
    # u = 0 (order 2) and the order-8 point of RFC 7748's list: X25519 gives the neutral element whatever the key
    ("small order", (0).to_bytes(32, "little"), "point of small order"),
    ("order 8", (325606250916557431795983626356110631294008115727848805560023387167927233504).to_bytes(32, "little"),
     "point of small order"),
    ("twist", (2).to_bytes(32, "little"), "not on Curve25519 (a twist point)"),
    ("non-canonical", (P + 5).to_bytes(32, "little"), "non-canonical Curve25519 point encoding"),
])
def test_a_pinned_party_cannot_have_invalid_points_reblinded(victim, case, point, expected):
    """A colluding, pinned bob (the test holds its key) sends its signed count of points, one of them invalid: a
    small-order point (its re-blinding would be the neutral element, or would leak the key modulo the cofactor
    without X25519's clamping), a twist point or a second encoding of a point. alice stops with one line, exit
    code 4, and re-blinds nothing of the list (on main, P-256's 33-byte points: these 32-byte lists were refused
    for their length, a different line)."""
    assert case != "twist" or pow((8 + 486662 * 4 + 2) % P, (P - 1) // 2, P) == P - 1   # u = 2 is on the twist
    fake, proc, bob = victim
    peer, alice_reg = fake.register(timeout=60)
    guessed = IDS[20:]
    result = psi_probe(fake, peer, guessed, registrations=[alice_reg, bob_registration(bob)], sign=bob,
                       replace={7: point})
    assert result["reblinded"] is None and result["learned"] == []
    assert expected in (result["error"] or ""), result
    lists = fake.sent_by_party(MessageType.PSI_POINTS)
    assert len(lists) == 1 and lists[0].body["origin"] == 0
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, err
    assert expected in one_error_line(err)
