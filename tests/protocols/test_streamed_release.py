"""Streamed secure products inside the FM release: chunks within credit, relayed in order, bit-identical results.

Socket-free (messages through the real encoder/decoder), 1024-bit INSECURE test keys (fast tests only).
"""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ProtocolError
from vfl.net.messages import Message, MessageType, decode, encode, message_of
from vfl.protocols.contracts import PlanBody, Registration
from vfl.protocols.fm_release import CREDIT_WINDOW, MAX_CREDIT_WINDOW, FMCoordinator, FMParty
from vfl.protocols.local_data import LocalData
from vfl.protocols.settings import RunSettings
from vfl.secure import ProductEncryptor, generate_keypair, public_key_to_bytes


def _wire(out, sender=""):
    msg = message_of(out)
    msg.sender = sender
    return decode(encode(msg))


def _datas(n=150, seed=4):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 4))
    y = np.clip(X @ np.array([0.5, -0.2, 0.3, 0.1]) + 0.05 * rng.normal(size=n), -1, 1)
    return [LocalData.build("a", X[:, :2], y, bounds=(-1, 1), label_bounds=(-1, 1)),
            LocalData.build("b", X[:, 2:], bounds=(-1, 1))], X, y


def _settings(mechanism="gaussian-fm"):
    return RunSettings(n_parties=2, model="linear", mechanism=mechanism, epsilon=None if mechanism == "none" else 2.0,
                       key_bits=1024, allow_insecure_keys=True, precision_bits=24)


def run(settings, datas, seeds, max_frame_bytes):
    regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None, order=i) for i, d in enumerate(datas)]
    coordinator = FMCoordinator(settings, regs)
    parties = {out.to: FMParty(datas[out.to], PlanBody.from_body(_wire(out).body), rng=np.random.default_rng(s),
                               seeded=True, allow_insecure_keys=True, max_frame_bytes=max_frame_bytes)
               for out, s in zip(coordinator.plan_messages(), seeds, strict=True)}
    queue = [(i, _wire(o, regs[i].name)) for i, party in parties.items() for o in party.start()]
    counts: dict[str, int] = {}
    while queue:
        i, msg = queue.pop(0)
        for out in coordinator.handle(i, msg):
            counts[out.type] = counts.get(out.type, 0) + 1
            queue += [(out.to, _wire(o, regs[out.to].name)) for o in parties[out.to].handle(_wire(out))()]
    assert coordinator.done
    return coordinator.finish(), counts


def test_many_chunks_give_the_bit_identical_release_of_one_chunk():
    """150 rows in chunks of 16 rows (4096-byte frames of 256-byte ciphertexts): every product streams 10 chunks
    under credit, and the released coefficients equal those of the single-chunk run bit for bit (same seeds)."""
    datas, _, _ = _datas()
    small, counts = run(_settings(), datas, (1, 2), 4096)
    whole, whole_counts = run(_settings(), datas, (1, 2), 16 * 2**20)
    assert counts["enc_chunk"] == 2 * 10 and whole_counts["enc_chunk"] == 2
    assert counts["credit"] == 2 * (1 + 10 - CREDIT_WINDOW)   # first window, then one chunk per folded chunk
    assert np.array_equal(small.w, whole.w)


def test_streamed_mechanism_none_is_least_squares_on_the_prepared_data():
    datas, X, y = _datas(n=120, seed=6)
    release, _ = run(_settings("none"), datas, (3, 4), 4096)
    from vfl.fm.domain import fixed_point_shrink, round_to_grid

    d = 5
    joined = np.hstack([X, np.ones((len(y), 1))])
    if release.domain == "l2":
        joined = fixed_point_shrink(d, 24) * joined / np.sqrt(d)
    U = round_to_grid(joined, 24)
    ref = np.linalg.lstsq(U, round_to_grid(y, 24), rcond=None)[0]
    np.testing.assert_allclose(release.w, ref[[0, 1, 4, 2, 3]], atol=1e-6)


def _coordinator_with_request():
    regs = [Registration(peer=b"A", name="a", n_rows=10, features=["a0"], label_owner=True),
            Registration(peer=b"B", name="b", n_rows=10, features=["b0", "b1"], label_owner=False)]
    coordinator = FMCoordinator(RunSettings(n_parties=2, model="linear", mechanism="none", key_bits=1024,
                                            allow_insecure_keys=True, fit_intercept=False), regs)
    # alpha[1] = y (party 0) . X_1: party 1 encrypts and streams (10 chunks of one row), party 0 folds and grants
    # credit; the coordinator parses the real stream header and public key (it combines the shares with them)
    pk, sk = generate_keypair(1024, allow_insecure=True)
    header = ProductEncryptor(sk, np.zeros((10, 2)), response_cols=1, precision_bits=coordinator.precision_bits,
                              max_frame_bytes=256).stream_header()
    req = Message(MessageType.ENC_REQUEST, {"block": "alpha[1]", "to": "a", "wire": header.to_wire()[0]},
                  [public_key_to_bytes(pk)])
    coordinator.handle(1, req)
    assert coordinator.streams["alpha[1]"]["n_chunks"] == 10
    return coordinator


def chunk(index):
    return Message(MessageType.ENC_CHUNK, {"block": "alpha[1]", "to": "a", "wire": {"index": index}}, [b"c"])


def credit(upto):
    return Message(MessageType.CREDIT, {"block": "alpha[1]", "to": "b", "upto": upto})


def test_the_coordinator_relays_chunks_only_within_credit_in_order_and_once():
    coordinator = _coordinator_with_request()
    with pytest.raises(ProtocolError, match="without credit"):
        coordinator.handle(1, chunk(0))
    with pytest.raises(ProtocolError, match="may not send"):
        coordinator.handle(1, credit(2))                  # credit comes from the responder only
    assert [o.to for o in coordinator.handle(0, credit(2))] == [1]
    assert [o.to for o in coordinator.handle(1, chunk(0))] == [0]
    with pytest.raises(ProtocolError, match="out of order"):
        coordinator.handle(1, chunk(0))                   # a replayed chunk
    with pytest.raises(ProtocolError, match="out of order"):
        coordinator.handle(1, chunk(2))
    coordinator.handle(1, chunk(1))
    with pytest.raises(ProtocolError, match="without credit"):
        coordinator.handle(1, chunk(2))
    with pytest.raises(ProtocolError, match="not ahead"):
        coordinator.handle(0, credit(2))
    with pytest.raises(ProtocolError, match=f"more than {MAX_CREDIT_WINDOW} chunks ahead"):
        coordinator.handle(0, credit(2 + MAX_CREDIT_WINDOW + 1))   # the coordinator never buffers more
    with pytest.raises(ProtocolError, match="before its request"):
        coordinator.handle(1, Message(MessageType.ENC_CHUNK, {"block": "M[0,1]", "to": "a", "wire": {"index": 0}},
                                      [b"c"]))


def test_a_party_refuses_chunks_and_credit_outside_an_open_stream():
    datas, _, _ = _datas(n=20)
    coordinator = FMCoordinator(_settings(), [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows,
                                                           features=d.feature_names, label_owner=d.y is not None)
                                              for i, d in enumerate(datas)])
    party = FMParty(datas[0], PlanBody.from_body(coordinator.plan_messages()[0].body), rng=np.random.default_rng(0),
                    allow_insecure_keys=True)
    with pytest.raises(ProtocolError, match="unexpected enc_chunk"):   # no request for alpha[1] was opened
        party.handle(Message(MessageType.ENC_CHUNK, {"block": "alpha[1]", "to": "a", "wire": {}}, [b"c"]))
    with pytest.raises(ProtocolError, match="unexpected credit"):      # party 0 streams nothing for alpha[1]
        party.handle(Message(MessageType.CREDIT, {"block": "alpha[1]", "to": "a", "upto": 1}))


def test_default_frames_shrink_to_the_coordinators_limit_and_explicit_ones_are_refused():
    """A party without --max-frame-bytes fits its frames under the PLAN's message limit (header room included);
    a party that asked for bigger frames stops with the limit and both fixes named."""
    from vfl.exceptions import ConfigurationError
    from vfl.protocols.fm_release import FRAME_HEADROOM
    from vfl.secure.products import DEFAULT_MAX_FRAME_BYTES

    datas, _, _ = _datas(n=20)
    regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None, order=i) for i, d in enumerate(datas)]
    out = FMCoordinator(_settings("none"), regs).plan_messages()[0]
    for limit, expected in ((1 << 20, (1 << 20) - FRAME_HEADROOM), (256 << 20, DEFAULT_MAX_FRAME_BYTES)):
        body = _wire(out).body
        body["params"]["max_message_bytes"] = limit
        party = FMParty(datas[0], PlanBody.from_body(body), rng=np.random.default_rng(0), allow_insecure_keys=True)
        assert party.max_frame_bytes == expected
    with pytest.raises(ConfigurationError, match=r"limit of 1048576 bytes.*at most 983040.*--max-message-bytes"):
        FMParty(datas[0], PlanBody.from_body(body | {"params": body["params"] | {"max_message_bytes": 1 << 20}}),
                rng=np.random.default_rng(0), allow_insecure_keys=True, max_frame_bytes=2 << 20)
