"""Fake-coordinator suite (issue 14, items 1 and 5): a real party against a hostile coordinator on real sockets.

The coordinator is :class:`fake_coordinator.FakeCoordinator` (socket-level, wire protocol only); the party is a
real :class:`~vfl.net.party.PartyNode` (threads) or the real CLI (one process). Each test reproduces one attack of
the red team and fails on the code before the fix.

FAST TESTS: 1024-bit INSECURE Paillier test keys.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from fake_coordinator import FakeCoordinator, echo_response_wire

from vfl.net.messages import MessageType
from vfl.net.party import LocalData, PartyNode

pytestmark = [pytest.mark.network, pytest.mark.timeout(90)]

N = 40
PARAMS = {"epsilon": 1.0, "delta": 1e-5, "precision_bits": 24, "key_bits": 1024, "allow_insecure_keys": True,
          "domain": "l2", "mechanism_options": {}, "randomness": "short-exponent"}


def _bob() -> LocalData:
    rng = np.random.default_rng(3)
    return LocalData.build("bob", rng.uniform(-1, 1, (N, 3)), bounds=(-1, 1))


def _parties(bob_columns: int = 3) -> list[dict]:
    return [{"name": "alice", "n_features": 2, "features": ["a0", "intercept"], "label_owner": True,
             "intercept": True},
            {"name": "bob", "n_features": bob_columns, "features": ["b0", "b1", "b2"], "label_owner": False,
             "intercept": False}]


class PartyThread(threading.Thread):
    def __init__(self, data: LocalData, endpoint: str, **kw) -> None:
        super().__init__(daemon=True)
        self.lines: list[str] = []
        self.node = PartyNode(data, endpoint, timeout=20, allow_insecure_keys=True, log=self.lines.append, **kw)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.node.run()
        except BaseException as exc:  # noqa: BLE001 - asserted by the tests
            self.error = exc


@pytest.fixture()
def fake():
    f = FakeCoordinator()
    yield f
    f.close()


def test_echoed_request_over_the_wire_is_refused_and_no_share_leaves_the_party(fake):
    """Item 1: the red team echoed bob's own ENC_REQUEST ciphertexts back as a MASKED_RESPONSE declaring
    n_resp_cols = N; bob decrypted them and his SHARE carried his whole table. Now bob refuses before decrypting
    and reports an error; no SHARE is ever sent for the block."""
    party = PartyThread(_bob(), fake.endpoint)
    party.start()
    peer, _ = fake.register()
    fake.plan(peer, index=1, parties=_parties(), mechanism="gaussian-fm", params=PARAMS, n_samples=N,
              label_owner=0)
    got = fake.wait_for(MessageType.ENC_REQUEST)
    assert got is not None
    request = got[1]
    block, wire = request.body["block"], request.body["wire"]
    assert wire["n_rows"] == N
    fake.send(peer, MessageType.MASKED_RESPONSE,
              {"block": block, "to": "bob", "origin": "alice", "wire": echo_response_wire(wire, N)},
              [request.blob(1)])
    error = fake.wait_for(MessageType.ERROR, timeout=30)
    party.join(30)
    assert error is not None and "refused without decrypting" in error[1].body["reason"]
    assert [m for m in fake.sent_by_party(MessageType.SHARE) if m.body["block"] == block] == []
    assert party.error is not None and "refused without decrypting" in str(party.error)


@pytest.mark.parametrize("mechanism,epsilon", [("gaussian-fm", 1e200), ("relaxed-fm", 1e155),
                                               ("laplace-fm", 1e-300)])
def test_absurd_epsilon_in_a_plan_fails_fast_instead_of_freezing_the_party(fake, mechanism, epsilon):
    """Item 5: a PLAN with epsilon = 1e200 froze the party's main thread in the Gaussian calibration past its own
    timeout; laplace-fm with 1e-300 crashed in the sampler. Now the party reports a one-line error at once."""
    party = PartyThread(_bob(), fake.endpoint)
    party.start()
    peer, _ = fake.register()
    t0 = time.monotonic()
    fake.plan(peer, index=1, parties=_parties(), mechanism=mechanism,
              params={**PARAMS, "epsilon": epsilon, "domain": "linf" if mechanism == "laplace-fm" else "l2"},
              n_samples=N, label_owner=0)
    error = fake.wait_for(MessageType.ERROR, timeout=30)
    assert error is not None and time.monotonic() - t0 < 10
    assert "epsilon" in error[1].body["reason"]
    party.join(30)
    assert not party.is_alive() and party.error is not None
    assert fake.sent_by_party(MessageType.BLOCK) == []
