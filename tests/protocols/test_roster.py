"""The signed roster (vfl.protocols.roster) driven in one process through the real encoder and decoder: an honest FM
run with every relayed message sealed and checked, and each way a relay could cheat refused with one line naming
the party. Real Ed25519 identities; FAST TEST: 1024-bit INSECURE Paillier test keys."""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import pytest

from vfl.exceptions import IdentityError, ProtocolError
from vfl.net.messages import Message, MessageType, decode, encode, message_of
from vfl.protocols.contracts import Out, PlanBody, RegisterBody, Registration
from vfl.protocols.fm_release import FMCoordinator, FMParty
from vfl.protocols.local_data import LocalData
from vfl.protocols.roster import (
    RELAYED,
    Roster,
    RosterCoordinator,
    entry_digest,
    plan_digest,
    sign_registration,
)
from vfl.protocols.settings import RunSettings
from vfl.secure.identity import SigningIdentity, load_party_identity, write_identities
from vfl.secure.keys import generate_keypair, public_key_to_bytes

RUN = "ab" * 16


def _wire(out: Out, sender: str = "") -> Message:
    msg = message_of(out)
    msg.sender = sender
    return decode(encode(msg))


def _datas(n: int = 60):
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, (n, 3))
    y = np.clip(X @ np.array([0.4, -0.3, 0.2]), -1, 1)
    return [LocalData.build("alice", X[:, :2], y, bounds=(-1, 1), label_bounds=(-1, 1)),
            LocalData.build("bob", X[:, 2:], bounds=(-1, 1))]


class Run:
    """Two parties with identities pinned by each other, the coordinator's phases, and every party's roster."""

    def __init__(self, tmp_path, mechanism: str = "gaussian-fm", run: str = RUN) -> None:
        if not (tmp_path / "alice.sign.secret").exists():
            write_identities(tmp_path, ["alice", "bob"])
        self.creds = {n: load_party_identity(tmp_path, n) for n in ("alice", "bob")}
        self.datas = _datas()
        self.bodies = [sign_registration(self.creds[d.name][0], RegisterBody(
            name=d.name, n_rows=d.n_rows, features=d.feature_names, label_owner=d.y is not None, order=i).to_body())
            for i, d in enumerate(self.datas)]
        self.regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                                  label_owner=d.y is not None, order=i) for i, d in enumerate(self.datas)]
        settings = RunSettings(n_parties=2, model="linear", mechanism=mechanism, epsilon=2.0, key_bits=1024,
                               allow_insecure_keys=True, precision_bits=24)
        self.fm = FMCoordinator(settings, self.regs)
        self.plans = [_wire(o).body for o in self.fm.plan_messages()]
        self.parties = [FMParty(d, PlanBody.from_body(self.plans[i]), rng=np.random.default_rng(i), seeded=True,
                                allow_insecure_keys=True) for i, d in enumerate(self.datas)]
        self.rosters = []
        for i, d in enumerate(self.datas):
            key = self.parties[i].paillier_key()
            identity, pinned = self.creds[d.name]
            self.rosters.append(Roster(name=d.name, run=run, plan_body=self.plans[i], registration=self.bodies[i],
                                       identity=identity, pinned=pinned,
                                       paillier=None if key is None else hashlib.sha256(key).hexdigest()))
        self.coordinator = RosterCoordinator(["alice", "bob"], run, self.plans, self.bodies)

    def entries(self) -> list[Message]:
        return [_wire(r.entry(), r.name) for r in self.rosters]

    def roster_message(self) -> Message:
        out: list[Out] = []
        for i, m in enumerate(self.entries()):
            out = self.coordinator.handle(i, m)
        assert self.coordinator.done and [o.to for o in out] == [0, 1]
        return _wire(out[0])


def test_honest_run_checks_every_relayed_message_and_releases(tmp_path):
    run = Run(tmp_path)
    roster = run.roster_message()
    for r in run.rosters:
        r.verify(roster)
    assert run.rosters[0].digest == run.rosters[1].digest is not None
    assert run.rosters[1].keys == {n: run.creds[n][0].public_hex for n in ("alice", "bob")}
    checked, shares = [], []
    queue = [(i, _wire(r.seal(o), r.name)) for i, (p, r) in enumerate(zip(run.parties, run.rosters, strict=True))
             for o in p.start()]
    while queue:
        i, msg = queue.pop(0)
        if msg.type is MessageType.SHARE:   # collected, never relayed: nothing of the roster's concern
            shares.append((i, msg.body["block"]))
            continue
        for out in run.fm.handle(i, msg):
            relayed = _wire(out)
            party, roster = run.parties[out.to], run.rosters[out.to]
            if relayed.type.value in RELAYED:
                sender = party.sender_of(relayed)
                roster.check(relayed, sender)
                if relayed.type is MessageType.ENC_REQUEST:
                    roster.check_paillier(relayed.blob(0), sender, relayed.body["block"])
                checked.append(relayed.type.value)
            queue += [(out.to, _wire(roster.seal(o), roster.name)) for o in party.handle(relayed)()]
    assert sorted(shares) == sorted((i, b.name) for b in run.fm.plan.cross_blocks() for i in (0, 1))
    assert {"enc_request", "enc_chunk", "credit", "masked_response"} <= set(checked)


def test_plan_with_an_invented_party_is_refused_naming_it(tmp_path):
    run = Run(tmp_path)
    plan = copy.deepcopy(run.plans[1])
    plan["parties"].append({"name": "ghost", "n_features": 1, "features": ["g"], "label_owner": False,
                            "intercept": False})
    bob = Roster(name="bob", run=RUN, plan_body=plan, registration=run.bodies[1], identity=run.creds["bob"][0],
                 pinned=run.creds["bob"][1])
    ghost = {"party": "ghost", "plan": plan_digest(plan).hex(), "registration": {"name": "ghost"},
             "paillier": None, "auth": SigningIdentity.generate("ghost").sign(b"x")}
    entries = [e.body for e in run.entries()][:1] + [bob.entry().body, ghost]
    with pytest.raises(IdentityError, match="party 'ghost' has no pinned identity"):
        bob.verify(_wire(Out(type="roster", body={"entries": entries})))


@pytest.mark.parametrize("cheat,text", [
    ("unsigned", "roster entry from 'alice' carries no valid signature"),
    ("forged", "bad signature on roster entry from 'alice'"),
    ("foreign_identity", "'alice' registered without its pinned identity"),
    ("other_plan", "'alice' was sent a different plan"),
    ("wider", "does not describe party 'alice' as it registered"),
    ("other_run", "bad signature on roster entry from 'alice'"),
])
def test_a_cheating_roster_is_refused(tmp_path, cheat, text):
    run = Run(tmp_path)
    entries = [m.body for m in run.entries()]
    alice = entries[0]
    mallory = SigningIdentity.generate("alice")   # the coordinator's own key under alice's name
    if cheat == "unsigned":
        del alice["auth"]
    elif cheat == "forged":
        alice["paillier"] = "00" * 32
        alice["auth"] = mallory.sign(b"anything")
    elif cheat == "foreign_identity":
        alice["registration"] = sign_registration(mallory, {k: v for k, v in alice["registration"].items()
                                                            if k not in ("identity", "auth")})
    elif cheat == "other_plan":
        alice["plan"] = "11" * 32
    elif cheat == "wider":   # the plan bob got says alice has 3 columns
        plan = copy.deepcopy(run.plans[1])
        plan["parties"][0]["n_features"] += 1
        plan["parties"][0]["features"] = [*plan["parties"][0]["features"], "extra"]
        run.rosters[1] = Roster(name="bob", run=RUN, plan_body=plan, registration=run.bodies[1],
                                identity=run.creds["bob"][0], pinned=run.creds["bob"][1],
                                paillier=run.rosters[1].paillier)
        entries[1] = run.rosters[1].entry().body
        alice["plan"] = plan_digest(plan).hex()
        alice["auth"] = run.creds["alice"][0].sign(entry_digest(RUN, plan_digest(plan), alice["registration"],
                                                                alice["paillier"], alice["nonce"]))
    elif cheat == "other_run":
        run.rosters[1].run = "cd" * 16
        entries[1] = run.rosters[1].entry().body
    with pytest.raises(IdentityError, match=text):
        run.rosters[1].verify(_wire(Out(type="roster", body={"entries": entries})))
    assert run.rosters[1].digest is None


def _verified(tmp_path) -> Run:
    run = Run(tmp_path)
    roster = run.roster_message()
    for r in run.rosters:
        r.verify(roster)
    return run


def test_relayed_messages_bound_to_sender_roster_and_content(tmp_path):
    run = _verified(tmp_path)
    alice, bob = run.rosters
    request = next(o for o in run.parties[0].start() if o.type == "enc_request")
    sealed = alice.seal(request)
    relayed = _wire(run.fm.handle(0, _wire(sealed, "alice"))[0])   # the coordinator adds "origin"
    bob.check(relayed, "alice")
    bob.check_paillier(relayed.blob(0), "alice", relayed.body["block"])
    # tampered header field, tampered frame, wrong sender, no signature, another roster
    body = {**relayed.body, "wire": {**relayed.body["wire"], "n_rows": 1}}
    with pytest.raises(IdentityError, match="bad signature on enc_request from 'alice'"):
        bob.check(_wire(Out(type="enc_request", body=body, payload=relayed.payload)), "alice")
    with pytest.raises(IdentityError, match="bad signature"):
        bob.check(_wire(Out(type="enc_request", body=relayed.body, payload=[relayed.blob(0) + b"\0"])), "alice")
    with pytest.raises(IdentityError, match="from 'bob'"):
        bob.check(relayed, "bob")
    with pytest.raises(IdentityError, match="carries no valid signature"):
        bob.check(_wire(Out(type="enc_request", body={k: v for k, v in relayed.body.items() if k != "auth"},
                            payload=relayed.payload)), "alice")
    other = Run(tmp_path, run="cd" * 16)   # the same identities in another run: a replay is refused
    roster = other.roster_message()
    for r in other.rosters:
        r.verify(roster)
    with pytest.raises(IdentityError, match="bad signature on enc_request from 'alice'"):
        other.rosters[1].check(relayed, "alice")
    with pytest.raises(ProtocolError, match="addressed to 'bob' reached 'alice'"):
        alice.check(relayed, "alice")


def test_substituted_paillier_key_is_refused(tmp_path):
    run = _verified(tmp_path)
    own = public_key_to_bytes(generate_keypair(1024, allow_insecure=True)[0])
    with pytest.raises(IdentityError, match="not alice's roster key"):
        run.rosters[1].check_paillier(own, "alice", "M01")


def test_coordinator_side_names_a_broken_entry_and_the_unsigned_parties(tmp_path):
    run = Run(tmp_path)
    entries = run.entries()
    bad = copy.deepcopy(entries[0].body)
    bad["auth"] = "00" * 64
    with pytest.raises(IdentityError, match="roster entry from 'alice'"):
        run.coordinator.handle(0, _wire(Out(type="roster_entry", body=bad), "alice"))
    unsigned = {k: v for k, v in entries[0].body.items() if k != "auth"}
    with pytest.raises(IdentityError, match="alice registered with an identity but its roster entry is unsigned"):
        run.coordinator.handle(0, _wire(Out(type="roster_entry", body=unsigned), "alice"))
    run.coordinator.handle(0, entries[0])
    with pytest.raises(ProtocolError, match="where its one roster entry was expected"):
        run.coordinator.handle(0, entries[0])
    assert run.coordinator.unsigned == []


def test_without_identities_nothing_is_signed_and_the_coordinator_says_so(tmp_path):
    datas = _datas()
    bodies = [RegisterBody(name=d.name, n_rows=d.n_rows, features=d.feature_names, label_owner=d.y is not None,
                           order=i).to_body() for i, d in enumerate(datas)]
    regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None, order=i) for i, d in enumerate(datas)]
    fm = FMCoordinator(RunSettings(n_parties=2, model="linear", mechanism="gaussian-fm", epsilon=2.0, key_bits=1024,
                                   allow_insecure_keys=True), regs)
    plans = [_wire(o).body for o in fm.plan_messages()]
    rosters = [Roster(name=d.name, run=RUN, plan_body=plans[i], registration=bodies[i], identity=None, pinned=None)
               for i, d in enumerate(datas)]
    coordinator = RosterCoordinator(["alice", "bob"], RUN, plans, bodies)
    out = [o for i, r in enumerate(rosters) for o in coordinator.handle(i, _wire(r.entry(), r.name))]
    assert coordinator.unsigned == ["alice", "bob"]
    for r in rosters:
        r.verify(_wire(out[0]))
    credit = Out(type="credit", body={"block": "M01", "to": "alice", "upto": 1})
    assert "auth" not in rosters[1].seal(credit).body
    rosters[0].check(_wire(rosters[1].seal(credit)), "bob")


def test_a_roster_listing_a_party_twice_is_refused(tmp_path):
    """A relay duplicates bob in the plan (bob's signed entry copied to a new index; its signature still verifies,
    since it covers the run, the plan digest and bob's registration only): every party refuses the roster, bob
    included, before anything data-dependent. Fails without the duplicate-name check (both accept)."""
    run = Run(tmp_path)
    plans = [copy.deepcopy(p) for p in run.plans]
    for p in plans:
        p["parties"].append(copy.deepcopy(p["parties"][1]))
    rosters = [Roster(name=r.name, run=RUN, plan_body=plans[i], registration=run.bodies[i], identity=r.identity,
                      pinned=r.pinned, paillier=r.paillier) for i, r in enumerate(run.rosters)]
    entries = [r.entry().body for r in rosters]
    entries.append(copy.deepcopy(entries[1]))
    for r in rosters:
        with pytest.raises(IdentityError, match="the plan lists party 'bob' twice"):
            r.verify(_wire(Out(type="roster", body={"entries": entries})))
        assert r.digest is None


def test_a_reused_run_id_does_not_let_a_message_of_the_old_run_replay(tmp_path):
    """A hostile coordinator reuses a run id with the same plan and registrations and no Paillier keys (a BCD run):
    each party's fresh nonce in its signed entry still makes the roster digest new, so a BCD_REMAINDER sealed in the
    old run is refused in the new one (without the nonce both digests were equal and the replay verified)."""
    run = Run(tmp_path)

    def checked_rosters() -> list[Roster]:
        rosters = [Roster(name=n, run=RUN, plan_body=run.plans[i], registration=run.bodies[i],
                          identity=run.creds[n][0], pinned=run.creds[n][1]) for i, n in enumerate(("alice", "bob"))]
        coordinator, out = RosterCoordinator(["alice", "bob"], RUN, run.plans, run.bodies), []
        for i, r in enumerate(rosters):
            out = coordinator.handle(i, _wire(r.entry(), r.name))
        for r in rosters:
            r.verify(_wire(out[0]))
        return rosters

    old, new = checked_rosters(), checked_rosters()
    assert old[0].digest == old[1].digest and new[0].digest == new[1].digest
    assert old[0].digest != new[0].digest and old[0].nonce != new[0].nonce
    remainder = Out(type="bcd_remainder", body={"to": "bob", "round": 1},
                    payload=[np.array([0.5, -0.25])])
    replayed = _wire(old[0].seal(remainder), "alice")
    old[1].check(replayed, "alice")                      # valid in the run it was sealed in
    with pytest.raises(IdentityError, match="bad signature on bcd_remainder from 'alice'"):
        new[1].check(replayed, "alice")


def test_a_malformed_nonce_in_an_entry_is_refused(tmp_path):
    run = Run(tmp_path)
    entry = run.entries()[0]
    entry.body["nonce"] = 5
    with pytest.raises(ProtocolError, match="missing or malformed nonce"):
        run.coordinator.handle(0, entry)


def test_a_live_roster_refuses_an_entry_signed_without_a_nonce(tmp_path):
    """Only model files written before entries carried a nonce may lack one: in a live run, a co-party's entry
    re-signed the old way (no nonce) is a downgrade a hostile coordinator could replay, and is refused."""
    run = Run(tmp_path)
    entries = [m.body for m in run.entries()]
    alice = entries[0]
    del alice["nonce"]
    alice["auth"] = run.creds["alice"][0].sign(entry_digest(RUN, run.rosters[0].plan, alice["registration"],
                                                            alice["paillier"]))
    with pytest.raises(ProtocolError, match="missing or malformed nonce"):
        run.rosters[1].verify(_wire(Out(type="roster", body={"entries": entries})))
    assert run.rosters[1].digest is None
