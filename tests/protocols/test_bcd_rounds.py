"""(DP-)BCD rounds (vfl.protocols.bcd_rounds) driven in one process, without sockets: both sides exchange real wire
messages and give the coefficients of vfl.models.bcd's in-process runs (numpy), or publish nothing on an abort."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import DPBCDAbort, ProtocolError
from vfl.models.bcd import party_generators, run_bcd, run_dp_bcd
from vfl.net.messages import Message, MessageType, decode, encode, message_of
from vfl.protocols.bcd_rounds import BCDCoordinator, BCDParty
from vfl.protocols.contracts import Out, PlanBody, Registration
from vfl.protocols.local_data import LocalData
from vfl.protocols.settings import RunSettings


def _wire(out: Out) -> Message:
    return decode(encode(message_of(out)))


def _data(seed=0, n=200):
    rng = np.random.default_rng(seed)
    Xa, Xb = rng.normal(size=(n, 3)), rng.normal(size=(n, 2))
    y = np.hstack([Xa, Xb]) @ np.array([1.0, 2.0, -1.0, 0.5, 1.5]) + rng.normal(size=n)
    return Xa, Xb, y


def run_in_process(settings: RunSettings, datas: list[LocalData], rngs):
    """Drive both sides until done; returns (coordinator side, the types of every message sent)."""
    regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None, order=i) for i, d in enumerate(datas)]
    coordinator = BCDCoordinator(settings, regs)
    parties = {o.to: BCDParty(datas[o.to], PlanBody.from_body(_wire(o).body), rng=rngs[o.to], seeded=True)
               for o in coordinator.plan_messages()}
    inbox = [(i, _wire(o)) for i, party in parties.items() for o in party.start()]
    seen = [m.type for _, m in inbox]
    while inbox and not coordinator.done:
        i, msg = inbox.pop(0)
        for out in coordinator.handle(i, msg):
            answer = [_wire(o) for o in parties[out.to].handle(_wire(out))()]
            inbox += [(out.to, m) for m in answer]
            seen += [out.type, *(m.type for m in answer)]
    return coordinator, seen


def _settings(mechanism: str, **kw) -> RunSettings:
    return RunSettings(n_parties=2, mechanism=mechanism, key_bits=1024, allow_insecure_keys=True, **kw)


def test_bcd_ring_gives_the_in_process_coefficients():
    Xa, Xb, y = _data()
    datas = [LocalData.build("a", Xa, y, use_bounds=False), LocalData.build("b", Xb, use_bounds=False)]
    coordinator, seen = run_in_process(_settings("bcd", epsilon=None, rounds=4), datas, [None, None])
    release = coordinator.finish()
    np.testing.assert_allclose(release.w, run_bcd([Xa, Xb], y, rounds=4).coef, rtol=0, atol=1e-12)
    assert seen.count(MessageType.BCD_REMAINDER) == 2 * (2 * 4 - 1)   # each sent once, relayed once
    assert release.report["formal_dp"] is False and release.rounds_run == 4


def test_dp_bcd_ring_is_bit_identical_to_run_dp_bcd_and_counts_every_message():
    Xa, Xb, y = _data(seed=2)
    datas = [LocalData.build("a", Xa, y, use_bounds=False), LocalData.build("b", Xb, use_bounds=False)]
    settings = _settings("dp-bcd", epsilon=5.0, gamma=1.5, rounds=3)
    coordinator, _ = run_in_process(settings, datas, party_generators(3, 2))
    release = coordinator.finish()
    ref = run_dp_bcd([Xa, Xb], y, epsilon=5.0, gamma=1.5, rounds=3, random_state=3)
    assert ref.status == "completed"
    np.testing.assert_array_equal(release.w, ref.coef)
    assert release.report["messages_sent"] == len(ref.privacy.ledger) == 2 * 3


def test_tol_stops_the_ring_in_the_same_round_as_in_process():
    Xa, Xb, y = _data(seed=2)
    datas = [LocalData.build("a", Xa, y, use_bounds=False), LocalData.build("b", Xb, use_bounds=False)]
    ref = run_bcd([Xa, Xb], y, rounds=50, tol=1e-6)
    coordinator, seen = run_in_process(_settings("bcd", epsilon=None, rounds=50, tol=1e-6), datas, [None, None])
    release = coordinator.finish()
    assert release.converged and release.rounds_run == ref.rounds_run and MessageType.BCD_STOP in seen
    np.testing.assert_allclose(release.w, ref.coef, rtol=0, atol=1e-12)


def test_an_abort_publishes_nothing_and_its_reason_quotes_no_data():
    Xa, Xb, y = _data(seed=1)
    datas = [LocalData.build("a", Xa, y, use_bounds=False), LocalData.build("b", Xb, use_bounds=False)]
    settings = _settings("dp-bcd", epsilon=0.01, gamma=1.0001, rounds=2)
    with pytest.raises(DPBCDAbort, match="no model is published") as info:
        run_in_process(settings, datas, party_generators(0, 2))
    assert "xi" not in str(info.value) and "||" not in str(info.value)


def test_malformed_remainders_and_out_of_turn_rounds_are_refused():
    Xa, Xb, y = _data()
    datas = [LocalData.build("a", Xa, y, use_bounds=False), LocalData.build("b", Xb, use_bounds=False)]
    settings = _settings("bcd", epsilon=None, rounds=2)
    regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None) for i, d in enumerate(datas)]
    coordinator = BCDCoordinator(settings, regs)
    with pytest.raises(ProtocolError, match="malformed remainder"):   # a short remainder
        coordinator.handle(0, Message(MessageType.BCD_REMAINDER, {"round": 1, "to": "b"}, [np.zeros(3)]))
    with pytest.raises(ProtocolError, match="malformed remainder"):   # addressed to the wrong party
        coordinator.handle(0, Message(MessageType.BCD_REMAINDER, {"round": 1, "to": "a"}, [np.zeros(len(y))]))
    plan = PlanBody.from_body(coordinator.plan_messages()[1].body)
    party_b = BCDParty(datas[1], plan, rng=np.random.default_rng(0))
    with pytest.raises(ProtocolError, match="expected round 1"):
        party_b.handle(Message(MessageType.BCD_REMAINDER, {"round": 2, "to": "b"}, [np.zeros(len(y))]))()
    with pytest.raises(ProtocolError, match="unexpected block"):
        party_b.handle(Message(MessageType.BLOCK, {"block": "M[0,0]"}, [np.zeros((1, 1))]))
