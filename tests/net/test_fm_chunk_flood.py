"""A hostile coordinator replaying a co-party's signed ENC_CHUNK or GD_REQUEST to a real party (review of the bounded
worker).

Invariant: what a party queues for its worker during a secure product is bounded by the credit window per stream
(:data:`vfl.protocols.fm_release.MAX_CREDIT_WINDOW` chunks), not by the number of messages the hub sends; a chunk
that repeats one already taken (or runs ahead of the credit) is refused on the receive thread, before it is queued.
Attacker: the coordinator, holding alice's honestly signed ENC_REQUEST and first ENC_CHUNK (it relays them), sends
the chunk again and again while bob's worker is busy (a long fold; here a task that waits on an event).

On 622ea3c bob checked only the chunk's signature on his receive thread (valid: alice signed it) and queued every
replay as a task holding its ciphertext frame, up to MAX_PENDING_TASKS = 4,096 of them (4,096 x 4 MB frames by
default), refusing the replay only when his worker reached it: here, with his worker busy, no ERROR at all.

The party is a real :class:`vfl.net.party.PartyNode` over ZeroMQ in a thread (so the test can hold its worker busy
and read its queue); FAST: 1024-bit INSECURE Paillier test keys.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest
from helpers.fake_coordinator import FakeCoordinator

from vfl.data.rows import ArrayRows
from vfl.net.messages import MessageType
from vfl.net.party import LocalData, PartyNode
from vfl.protocols.fm_release import MAX_CREDIT_WINDOW
from vfl.secure.keys import generate_keypair, public_key_to_bytes
from vfl.secure.products import ProductEncryptor

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

N = 40
PARAMS = {"epsilon": 1.0, "delta": 1e-5, "precision_bits": 24, "key_bits": 1024, "allow_insecure_keys": True,
          "domain": "l2", "mechanism_options": {}, "randomness": "short-exponent"}
REPLAYS = 200
#: alice (label, 5 features + the intercept column) encrypts M[0,1]; bob (3 features) responds
PARTIES = [{"name": "alice", "n_features": 6, "features": [f"a{j}" for j in range(5)], "label_owner": True,
            "intercept": True},
           {"name": "bob", "n_features": 3, "features": ["b0", "b1", "b2"], "label_owner": False, "intercept": False}]


class Bob(threading.Thread):
    """bob, a real party node over ZeroMQ (``policy``: the mechanisms it accepts, default the FM ones)."""

    def __init__(self, endpoint: str, identity_dir, policy=None) -> None:  # noqa: ANN001
        super().__init__(daemon=True)
        rows = np.random.default_rng(3).uniform(-1, 1, (N, 3))
        data = LocalData.build("bob", rows, feature_names=["b0", "b1", "b2"], bounds=(-1, 1))
        self.node = PartyNode(data, endpoint, timeout=60, allow_insecure_keys=True, identity_dir=identity_dir,
                              policy=policy)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.node.run()
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            self.error = exc


@pytest.fixture()
def fake():
    f = FakeCoordinator()
    yield f
    f.close()


def test_a_replayed_signed_chunk_is_refused_on_the_receive_thread_while_the_worker_is_busy(fake, identity_dir):
    pub, priv = generate_keypair(1024, allow_insecure=True)
    bob = Bob(fake.endpoint, identity_dir)
    bob.start()
    peer, _ = fake.register(timeout=120)
    fake.plan(peer, index=1, parties=PARTIES, mechanism="gaussian-fm", params=PARAMS, n_samples=N, label_owner=0)
    key = public_key_to_bytes(pub)
    assert fake.roster(peer, identity_dir, paillier={"alice": hashlib.sha256(key).hexdigest()}, timeout=120)
    assert fake.wait_for(MessageType.READY, timeout=120) is not None   # bob's own start is done
    busy = threading.Event()
    pending: list[int] = []

    def long_fold() -> list:   # bob's worker is busy (a long fold of another stream, say)
        busy.wait(240)
        return []

    bob.node._work.submit(long_fold)
    enc = ProductEncryptor(priv, ArrayRows(np.zeros((N, 6))), response_cols=3, precision_bits=24)
    header, _ = enc.stream_header().to_wire()
    fake.send_as(peer, "alice", MessageType.ENC_REQUEST, {"block": "M[0,1]", "to": "bob", "wire": header}, [key])
    chunk_wire, frames = next(iter(enc.encrypted_chunks())).to_wire()
    try:
        for _ in range(1 + REPLAYS):   # alice's chunk 0, signed by her, then the same message again and again
            fake.send_as(peer, "alice", MessageType.ENC_CHUNK, {"block": "M[0,1]", "to": "bob", "wire": chunk_wire},
                         frames)
        error = fake.wait_for(MessageType.ERROR, timeout=60)   # while the worker is still busy
        pending.append(bob.node._work._pending)
    finally:
        busy.set()
        bob.join(120)
    assert error is not None, f"no refusal while bob's worker was busy ({pending[0]} tasks queued)"
    assert "chunk 0 of M[0,1] arrived, expected chunk 1" in error[1].body["reason"], error
    # long_fold, the request and the one admitted chunk: never a task per replay
    assert pending[0] <= 2 + MAX_CREDIT_WINDOW, pending
    assert [m for _, m in fake.received if m.body.get("block") == "M[0,1]"] == []   # nothing answered yet


@pytest.mark.parametrize("kind", [MessageType.GD_REQUEST, MessageType.GD_ROUND])
def test_a_replayed_signed_gd_request_is_refused_on_the_receive_thread_while_the_worker_is_busy(fake, identity_dir,
                                                                                                kind):
    """The same attack on a noisy-gd run: the coordinator replays alice's signed GD_REQUEST of round 0 (N
    ciphertexts each), or its own GD_ROUND 0, while bob's worker is busy. On 622ea3c every replay was queued (no
    ERROR while the worker was busy); now the second one is refused on the receive thread, naming the round."""
    from tests.net.test_network_gd_cli import _plan as gd_plan
    from vfl.protocols.policy import PartyPolicy

    pub, _ = generate_keypair(1024, allow_insecure=True)
    key = public_key_to_bytes(pub)
    bob = Bob(fake.endpoint, identity_dir, PartyPolicy(allow_mechanisms=frozenset({"noisy-gd"})))
    bob.start()
    peer, _ = fake.register(timeout=120)
    parties, params = gd_plan()
    fake.plan(peer, index=1, parties=parties, mechanism="noisy-gd", params=params, n_samples=N, label_owner=0)
    assert fake.roster(peer, identity_dir, paillier={"alice": hashlib.sha256(key).hexdigest()}, timeout=120)
    assert fake.wait_for(MessageType.READY, timeout=120) is not None
    busy = threading.Event()

    def long_round() -> list:
        busy.wait(240)
        return []

    bob.node._work.submit(long_round)
    body = {"t": 0, "w_digest": "0" * 64, "wire": {"kind": "replayed"}, "to": "bob"}
    frame = bytes(256 * N)   # the size of N 1024-bit ciphertexts (never parsed: refused before)
    try:
        for _ in range(1 + REPLAYS):
            if kind is MessageType.GD_REQUEST:
                fake.send_as(peer, "alice", kind, body, [key, frame])
            else:
                fake.send(peer, kind, {"t": 0, "w": [0.0] * 5})   # a valid iterate of round 0 (3 + 2 columns)
        error = fake.wait_for(MessageType.ERROR, timeout=60)
        pending = bob.node._work._pending
    finally:
        busy.set()
        bob.join(120)
    assert error is not None, f"no refusal while bob's worker was busy ({pending} tasks queued)"
    assert f"a second {kind.value} for round 0" in error[1].body["reason"], error
    assert pending <= 3, pending   # long_round and the first request


def test_a_replayed_signed_bcd_remainder_is_refused_on_the_receive_thread_while_the_worker_is_busy(fake,
                                                                                                   identity_dir):
    """The same attack on a BCD run: the coordinator replays alice's signed round-1 remainder (N numbers) while
    bob's worker is busy. On 622ea3c every replay was queued; now the second one is refused on the receive thread."""
    from vfl.protocols.policy import PartyPolicy

    bob = Bob(fake.endpoint, identity_dir, PartyPolicy(allow_mechanisms=frozenset({"bcd"})))
    bob.start()
    peer, _ = fake.register(timeout=120)
    parties = [{"name": "alice", "n_features": 2, "features": ["a0", "a1"], "label_owner": True, "intercept": False},
               {"name": "bob", "n_features": 3, "features": ["b0", "b1", "b2"], "label_owner": False,
                "intercept": False}]
    fake.plan(peer, index=1, parties=parties, mechanism="bcd", params={"gamma": 1.0, "rounds": 3}, n_samples=N,
              label_owner=0)
    assert fake.roster(peer, identity_dir, timeout=120)
    busy = threading.Event()

    def long_step() -> list:
        busy.wait(240)
        return []

    bob.node._work.submit(long_step)
    try:
        for _ in range(1 + REPLAYS):
            fake.send_as(peer, "alice", MessageType.BCD_REMAINDER, {"round": 1, "to": "bob"}, [np.zeros(N)])
        error = fake.wait_for(MessageType.ERROR, timeout=60)
        pending = bob.node._work._pending
    finally:
        busy.set()
        bob.join(120)
    assert error is not None, f"no refusal while bob's worker was busy ({pending} tasks queued)"
    assert "remainder for round 1 after one for round 1" in error[1].body["reason"], error
    assert pending <= 3, pending   # long_step, bob's start (if still queued) and the first remainder
