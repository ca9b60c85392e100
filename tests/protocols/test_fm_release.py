"""The FM release protocol (vfl.protocols.fm_release) driven in one process, without sockets: both sides exchange
real wire messages (encode/decode of vfl.net.messages), with real 1024-bit INSECURE test Paillier keys (fast test
only), and the result is checked against numpy and against the in-process simulation."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ProtocolError
from vfl.fm.dissection import DissectionPlan
from vfl.fm.domain import prepare_labels, prepare_party_block, resolve_bounds
from vfl.fm.objective import linear_objective
from vfl.fm.solver import solve
from vfl.net.messages import Message, MessageType, decode, encode, message_of
from vfl.privacy.fixed_point import prepare_fixed_point, simulate_release
from vfl.privacy.mechanisms import make_mechanism
from vfl.protocols.contracts import Out, PlanBody, ReadyBody, Registration
from vfl.protocols.fm_release import FMCoordinator, FMParty
from vfl.protocols.local_data import LocalData
from vfl.protocols.settings import RunSettings
from vfl.secure import ProductEncryptor, generate_keypair, public_key_to_bytes

P_BITS = 24


def _wire(out: Out, sender: str = "") -> Message:
    """What the receiving side sees: the message through the real encoder and decoder."""
    msg = message_of(out)
    msg.sender = sender
    return decode(encode(msg))


def _split(n: int = 80, seed: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    y = np.clip(X @ np.array([0.4, -0.3, 0.2]) + 0.05 * rng.normal(size=n), -1, 1)
    return [X[:, :2], X[:, 2:]], y


def _datas(blocks, y):
    return [LocalData.build("a", blocks[0], y, bounds=(-1, 1), label_bounds=(-1, 1)),
            LocalData.build("b", blocks[1], bounds=(-1, 1))]


def _settings(mechanism: str, **kw) -> RunSettings:
    kw = {"key_bits": 1024, "allow_insecure_keys": True, **kw}
    return RunSettings(n_parties=2, model="linear", mechanism=mechanism, epsilon=None if mechanism == "none" else 2.0,
                       precision_bits=P_BITS, **kw)


def _registrations(datas: list[LocalData]) -> list[Registration]:
    return [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None, order=i) for i, d in enumerate(datas)]


def run_in_process(settings: RunSettings, datas: list[LocalData], rngs: list[np.random.Generator]):
    """Drive both sides until the coordinator side is done; returns (coordinator side, parties, messages seen)."""
    regs = _registrations(datas)
    coordinator = FMCoordinator(settings, regs)
    parties: dict[int, FMParty] = {}
    for out in coordinator.plan_messages():
        plan = PlanBody.from_body(_wire(out).body)
        parties[out.to] = FMParty(datas[out.to], plan, rng=rngs[out.to], seeded=True, allow_insecure_keys=True)
    to_coordinator = [(i, _wire(o, regs[i].name)) for i, party in parties.items() for o in party.start()]
    seen = [m.type for _, m in to_coordinator]
    while to_coordinator:
        i, msg = to_coordinator.pop(0)
        for out in coordinator.handle(i, msg):
            relayed = _wire(out)
            seen.append(relayed.type)
            answer = list(parties[out.to].handle(relayed)())
            to_coordinator += [(out.to, _wire(o, regs[out.to].name)) for o in answer]
            seen += [m.type for _, m in to_coordinator[-len(answer):]]
    assert coordinator.done
    return coordinator, parties, seen


def _prepared(blocks, y, plan: DissectionPlan, domain: str):
    total = plan.n_features
    parts = []
    for k, X in enumerate(blocks):
        U, _ = prepare_party_block(X, bounds=resolve_bounds((-1, 1), X), domain=domain, n_features_total=total)
        if k == 0:  # the label owner's public intercept column
            U = np.hstack([U, np.full((len(y), 1), 1 / np.sqrt(total) if domain == "l2" else 1.0)])
        parts.append(prepare_fixed_point(U, precision_bits=P_BITS, domain=domain, n_features_total=total))
    y_unit, _ = prepare_labels(y, "linear", y_bounds=(-1, 1))
    return parts, prepare_fixed_point(y_unit, precision_bits=P_BITS, domain="linf", n_features_total=total)


def test_without_noise_the_assembled_objective_is_the_numpy_objective_of_the_prepared_data(vertical_split,
                                                                                          fast_insecure_keys):
    blocks, y = vertical_split
    rngs = [np.random.default_rng(s) for s in (1, 2)]
    coordinator, _, seen = run_in_process(_settings("none", **fast_insecure_keys), _datas(blocks, y), rngs)
    assert MessageType.ENC_REQUEST in seen and MessageType.MASKED_RESPONSE in seen and MessageType.SHARE in seen
    parts, y_q = _prepared(blocks, y, coordinator.plan, coordinator.mech.domain)
    exact = linear_objective(np.hstack(parts), y_q)
    assembled = coordinator.plan.assemble(coordinator.values)
    # shares are exact integers on the 2^-p grid: only the final float scaling rounds
    np.testing.assert_allclose(assembled.M, exact.M, rtol=0, atol=1e-12)
    np.testing.assert_allclose(assembled.alpha, exact.alpha, rtol=0, atol=1e-12)
    release = coordinator.finish()
    assert release.label_bounds == [-1.0, 1.0] and release.intercept_party == 0
    assert np.all(np.isfinite(release.w)) and release.w.shape == (5,)


def test_the_in_process_protocol_is_bit_identical_to_the_simulated_release():
    blocks, y = _split(seed=5)
    seed = 77
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2)]
    coordinator, _, _ = run_in_process(_settings("gaussian-fm"), _datas(blocks, y), rngs)
    release = coordinator.finish()
    plan = DissectionPlan([3, 1], 0, model="linear")
    mech = make_mechanism("gaussian-fm", plan=plan, n_samples=len(y), epsilon=2.0, delta=1e-5)
    parts, y_q = _prepared(blocks, y, plan, mech.domain)
    sim_rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2)]
    values = simulate_release(plan, mech, parts, y_q, party_rngs=sim_rngs, precision_bits=P_BITS)
    # the networked solve is the library's: linear default "adaptive", with the two-sided release's alpha variances
    assert coordinator.regularization == "adaptive"
    two_sided = make_mechanism("gaussian-fm", plan=plan, n_samples=len(y), epsilon=2.0, delta=1e-5,
                               noise_sharing="two-sided")
    assert np.array_equal(release.w, solve(plan.assemble(values), lambda_floor=mech.lambda_floor,
                                           regularization="adaptive",
                                           alpha_noise_var=two_sided.alpha_noise_variance()))
    assert release.report["seeded"] is True


def _two_party_coordinator() -> FMCoordinator:
    regs = [Registration(peer=b"A", name="a", n_rows=10, features=["a0"], label_owner=True),
            Registration(peer=b"B", name="b", n_rows=10, features=["b0", "b1"], label_owner=False)]
    return FMCoordinator(_settings("none", fit_intercept=False), regs)


def test_the_coordinator_relays_each_secure_product_message_once():
    """Regression: a second ENC_REQUEST for a block was relayed, and the responder answered it with fresh noise."""
    coordinator = _two_party_coordinator()
    # alpha[1] = y (party 0) . X_1: party 1 encrypts, party 0 responds; a real stream header and public key
    pk, sk = generate_keypair(1024, allow_insecure=True)
    header = ProductEncryptor(sk, np.zeros((10, 2)), response_cols=1, precision_bits=P_BITS,
                              max_frame_bytes=5 * 256).stream_header()
    req = Message(MessageType.ENC_REQUEST, {"block": "alpha[1]", "to": "a", "wire": header.to_wire()[0]},
                  [public_key_to_bytes(pk)], sender="b")
    for bad_body, bad_key, match in [({"n_chunks": 2}, public_key_to_bytes(pk), "malformed"),
                                     (header.to_wire()[0], b"key", "malformed"),
                                     ({**header.to_wire()[0], "n_cols": 1, "n_groups": 1}, public_key_to_bytes(pk),
                                      "the plan gives 10 x 2")]:
        bad = _two_party_coordinator()
        with pytest.raises(ProtocolError, match=f"request of b for alpha.1. .*{match}"):
            bad.handle(1, Message(MessageType.ENC_REQUEST, {**req.body, "wire": bad_body}, [bad_key], sender="b"))
    out = coordinator.handle(1, req)
    assert coordinator.streams["alpha[1]"]["n_chunks"] == 2
    assert [(o.to, o.type, o.body["origin"]) for o in out] == [(0, "enc_request", "b")]
    with pytest.raises(ProtocolError, match="second enc_request for alpha"):
        coordinator.handle(1, req)
    with pytest.raises(ProtocolError, match="may not send"):   # only the encryptor sends the request
        coordinator.handle(0, Message(MessageType.ENC_REQUEST, {"block": "alpha[1]", "to": "b", "wire": {}}))


def test_the_coordinator_refuses_blocks_and_shares_a_party_does_not_own():
    coordinator = _two_party_coordinator()
    with pytest.raises(ProtocolError, match="does not own"):
        coordinator.handle(1, Message(MessageType.BLOCK, {"block": "M[0,0]"}, [np.zeros((1, 1))]))
    with pytest.raises(ProtocolError, match="unknown block"):
        coordinator.handle(0, Message(MessageType.BLOCK, {"block": "nope"}, [np.zeros((1, 1))]))
    with pytest.raises(ProtocolError, match="shape"):
        coordinator.handle(0, Message(MessageType.BLOCK, {"block": "M[0,0]"}, [np.zeros((2, 2))]))
    with pytest.raises(ProtocolError, match="invalid bounds"):
        coordinator.handle(1, Message(MessageType.READY, {"bounds": {"pairs": [[0, 1]]}}))
    assert not coordinator.done


def test_a_responder_answers_each_request_once():
    """Party side of the same guard: a replayed request must not produce a second noisy share."""
    blocks, y = _split()
    coordinator = FMCoordinator(_settings("gaussian-fm"), _registrations(_datas(blocks, y)))
    plan = PlanBody.from_body(coordinator.plan_messages()[0].body)
    party = FMParty(_datas(blocks, y)[0], plan, rng=np.random.default_rng(0), allow_insecure_keys=True)
    req = Message(MessageType.ENC_REQUEST, {"block": "alpha[1]", "to": "a", "origin": "b", "wire": {}}, [b"k"])
    assert callable(party.handle(req))   # checked now, answered later (on the party's worker thread)
    with pytest.raises(ProtocolError, match="second enc_request for block alpha"):
        party.handle(req)
    with pytest.raises(ProtocolError, match="unexpected masked_response"):  # party 0 requested no alpha[1]
        party.handle(Message(MessageType.MASKED_RESPONSE, {"block": "alpha[1]", "to": "a", "wire": {}}, [b"k"]))


def test_a_party_refuses_a_plan_that_does_not_describe_it_or_asks_for_weak_keys():
    from vfl.exceptions import ConfigurationError

    blocks, y = _split()
    datas = _datas(blocks, y)
    coordinator = FMCoordinator(_settings("gaussian-fm"), _registrations(datas))
    body = coordinator.plan_messages()[0].body
    with pytest.raises(ConfigurationError, match="1024-bit keys"):
        FMParty(datas[0], PlanBody.from_body(body), rng=np.random.default_rng(0))
    with pytest.raises(ProtocolError, match="does not describe this party"):
        FMParty(datas[1], PlanBody.from_body(body), rng=np.random.default_rng(0), allow_insecure_keys=True)
    with pytest.raises(ProtocolError, match="malformed plan"):
        PlanBody.from_body({**body, "index": 5})


def test_linear_runs_need_valid_label_bounds_from_the_label_owner():
    """Regression: a READY with label_bounds [3] or [2, 1] crashed the coordinator with a ValueError traceback
    (or, without bounds, released a model silently in the wrong units)."""
    assert ReadyBody.from_body({"label_bounds": [0, 100]}).checked_label_bounds("a") == [0.0, 100.0]
    for ready in ({}, {"label_bounds": [3.0]}, {"label_bounds": [2.0, 1.0]}, {"label_bounds": None}):
        with pytest.raises(ProtocolError, match="label bounds"):
            ReadyBody.from_body(ready).checked_label_bounds("a")


def test_register_plan_and_ready_bodies_round_trip_through_the_wire():
    from vfl.protocols.contracts import PlanParty, RegisterBody

    reg = RegisterBody(name="a", n_rows=5, features=["x"], label_owner=True, row_ids=True, order=2)
    assert RegisterBody.from_body(_wire(Out(type="register", body=reg.to_body())).body, "a") == reg
    with pytest.raises(ProtocolError, match="differs from the sender"):
        RegisterBody.from_body(reg.to_body(), "b")
    plan = PlanBody(index=1, parties=[PlanParty(name="a", n_features=2, features=["x"], label_owner=True,
                                                intercept=True),
                                      PlanParty(name="b", n_features=1, features=["z"], label_owner=False)],
                    model="linear", mechanism="none", params={"k": 1}, n_samples=5, label_owner=0)
    assert PlanBody.from_body(_wire(Out(type="plan", body=plan.to_body())).body) == plan
    ready = ReadyBody(seeded=True, bounds=[[0.0, 1.0]], bounds_from_data=True, label_bounds=[0.0, 2.0])
    assert ReadyBody.from_body(_wire(Out(type="ready", body=ready.to_body())).body, n_features=1) == ready
