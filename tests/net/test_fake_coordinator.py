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
from helpers.fake_coordinator import FakeCoordinator, echo_response_wire

from vfl.net.messages import MessageType
from vfl.net.party import LocalData, PartyNode
from vfl.protocols.policy import PartyPolicy

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner

N = 40
PARAMS = {"epsilon": 1.0, "delta": 1e-5, "precision_bits": 24, "key_bits": 1024, "allow_insecure_keys": True,
          "domain": "l2", "mechanism_options": {}, "randomness": "short-exponent"}


def _bob() -> LocalData:
    rng = np.random.default_rng(3)
    return LocalData.build("bob", rng.uniform(-1, 1, (N, 3)), bounds=(-1, 1))


def _parties(bob_columns: int = 3) -> list[dict]:
    # as the coordinator describes parties: their registered features, plus the label owner's public intercept
    # column in n_features (the roster checks that the plan describes each party as it registered)
    return [{"name": "alice", "n_features": 2, "features": ["a0"], "label_owner": True, "intercept": True},
            {"name": "bob", "n_features": bob_columns, "features": ["bob_x0", "bob_x1", "bob_x2"],
             "label_owner": False, "intercept": False}]


class PartyThread(threading.Thread):
    def __init__(self, data: LocalData, endpoint: str, identity_dir, **kw) -> None:  # noqa: ANN001
        super().__init__(daemon=True)
        self.lines: list[str] = []
        self.node = PartyNode(data, endpoint, timeout=20, allow_insecure_keys=True, log=self.lines.append,
                              identity_dir=identity_dir, **kw)
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


def test_echoed_request_over_the_wire_is_refused_and_no_share_leaves_the_party(fake, identity_dir):
    """Item 1: the red team echoed bob's own ENC_REQUEST ciphertexts back as a MASKED_RESPONSE declaring
    n_resp_cols = N; bob decrypted them and his SHARE carried his whole table. Now bob refuses before decrypting
    and reports an error; no SHARE is ever sent for the block -- even when the echo comes signed by alice herself
    (a malicious responder; a relay alone cannot sign it: tests/net/test_roster_attacks.py)."""
    party = PartyThread(_bob(), fake.endpoint, identity_dir)
    party.start()
    peer, _ = fake.register()
    fake.plan(peer, index=1, parties=_parties(), mechanism="gaussian-fm", params=PARAMS, n_samples=N,
              label_owner=0)
    assert fake.roster(peer, identity_dir) is not None
    got = fake.wait_for(MessageType.ENC_REQUEST)
    assert got is not None
    request = got[1]
    block, wire = request.body["block"], request.body["wire"]
    assert wire["n_rows"] == N and wire["n_chunks"] == 1
    # streamed request (issue 8): the ciphertexts follow in ENC_CHUNKs once the "responder" grants credit
    fake.send_as(peer, "alice", MessageType.CREDIT, {"block": block, "to": "bob", "upto": 1})
    chunk = fake.wait_for(MessageType.ENC_CHUNK)
    assert chunk is not None
    fake.send_as(peer, "alice", MessageType.MASKED_RESPONSE,
                 {"block": block, "to": "bob", "wire": echo_response_wire(wire, N)}, [chunk[1].blob(0)])
    error = fake.wait_for(MessageType.ERROR, timeout=30)
    party.join(30)
    assert error is not None and "refused without decrypting" in error[1].body["reason"]
    assert [m for m in fake.sent_by_party(MessageType.SHARE) if m.body["block"] == block] == []
    assert party.error is not None and "refused without decrypting" in str(party.error)


@pytest.mark.parametrize("mechanism,epsilon", [("gaussian-fm", 1e200), ("relaxed-fm", 1e155),
                                               ("laplace-fm", 1e-300)])
def test_absurd_epsilon_in_a_plan_fails_fast_instead_of_freezing_the_party(fake, mechanism, epsilon, identity_dir):
    """Item 5: a PLAN with epsilon = 1e200 froze the party's main thread in the Gaussian calibration past its own
    timeout; laplace-fm with 1e-300 crashed in the sampler. Now the party reports a one-line error at once."""
    party = PartyThread(_bob(), fake.endpoint, identity_dir)
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


def test_plan_declaring_n_columns_for_the_responder_cannot_widen_the_decryption(fake, identity_dir):
    """The same attack through the PLAN: the key holder's expected width comes from the plan, so a plan that
    claims alice has N columns must not be accepted (a column count >= N is refused before anything runs)."""
    party = PartyThread(_bob(), fake.endpoint, identity_dir)
    party.start()
    peer, _ = fake.register()
    parties = _parties()
    parties[0]["n_features"] = N
    parties[0]["features"] = [f"a{i}" for i in range(N)]
    fake.plan(peer, index=1, parties=parties, mechanism="gaussian-fm", params=PARAMS, n_samples=N, label_owner=0)
    error = fake.wait_for(MessageType.ERROR, timeout=30)
    party.join(30)
    assert error is not None and f"columns for {N} rows" in error[1].body["reason"]
    assert fake.sent_by_party(MessageType.ENC_REQUEST) == [] and fake.sent_by_party(MessageType.BLOCK) == []


@pytest.mark.parametrize("mechanism", ["none", "bcd"])
def test_party_refuses_an_unprotected_plan_unless_its_operator_opts_in(fake, mechanism, identity_dir):
    """Item 1: a party ran whatever a PLAN named: 'none' sent its blocks un-noised, 'bcd' sent y - X beta exactly.
    By default it now refuses before touching its data; with --allow-mechanisms it runs and says so."""
    party = PartyThread(_bob(), fake.endpoint, identity_dir)
    party.start()
    peer, _ = fake.register()
    params = {**PARAMS, "epsilon": None, "rounds": 2, "gamma": 1.2} if mechanism == "bcd" else PARAMS
    fake.plan(peer, index=1, parties=_parties(), mechanism=mechanism, params=params, n_samples=N, label_owner=0)
    error = fake.wait_for(MessageType.ERROR, timeout=30)
    party.join(30)
    assert error is not None and f"refuses mechanism '{mechanism}'" in error[1].body["reason"]
    assert "--allow-mechanisms" in error[1].body["reason"]
    assert fake.sent_by_party(MessageType.READY) == [] and fake.sent_by_party(MessageType.BLOCK) == []


def test_an_opted_in_party_prints_the_plan_it_runs(fake, identity_dir):
    party = PartyThread(_bob(), fake.endpoint, identity_dir, policy=PartyPolicy.from_options("gaussian-fm,none"))
    party.start()
    peer, _ = fake.register()
    fake.plan(peer, index=1, parties=_parties(), mechanism="none", params=PARAMS, n_samples=N, label_owner=0)
    assert fake.roster(peer, identity_dir) is not None
    assert fake.wait_for(MessageType.READY, timeout=30) is not None
    fake.send(peer, MessageType.ABORT, {"reason": "test over", "error": "E"})
    party.join(30)
    assert any("plan: none (NO noise), linear model, parties alice (1 col + intercept, label), bob (3 cols), "
               "1024-bit keys" in line for line in party.lines), party.lines


@pytest.mark.parametrize("params,text", [({"epsilon": 50.0}, "refuses epsilon 50"),
                                         ({"delta": 0.4}, "refuses delta 0.4"),
                                         ({"epsilon": 8.0, "mechanism_options": {"calibration": "paper"}},
                                          "(true epsilon of the plan)")])
def test_party_refuses_epsilon_above_its_maximum(fake, params, text, identity_dir):
    """Also through calibration="paper", whose nominal epsilon 8 is really about 14: the policy applies to the
    true epsilon of the party's own privacy report."""
    party = PartyThread(_bob(), fake.endpoint, identity_dir)
    party.start()
    peer, _ = fake.register()
    fake.plan(peer, index=1, parties=_parties(), mechanism="gaussian-fm", params={**PARAMS, **params}, n_samples=N,
              label_owner=0)
    error = fake.wait_for(MessageType.ERROR, timeout=30)
    party.join(30)
    assert error is not None and text in error[1].body["reason"], error
    assert fake.sent_by_party(MessageType.BLOCK) == []


def test_cli_party_refuses_a_none_plan_with_one_line(fake, tmp_path, identity_dir):
    """The real CLI process against the fake coordinator: exit code 2, one line naming the option."""
    import os
    import subprocess
    import sys

    data = tmp_path / "bob.csv"
    rng = np.random.default_rng(5)
    data.write_text("b0,b1,b2\n" + "".join(",".join(f"{v:.4f}" for v in row) + "\n"
                                           for row in rng.uniform(-1, 1, (N, 3))))
    bounds = tmp_path / "bounds.toml"
    bounds.write_text("[bounds]\nb0 = [-1, 1]\nb1 = [-1, 1]\nb2 = [-1, 1]\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "vfl.cli", "party", "--connect", fake.endpoint, "--name", "bob",
                             "--data", str(data), "--features", "b0,b1,b2", "--bounds", str(bounds), "--no-progress",
                             "--timeout", "30", "--insecure-test-keys", "--identity-dir", str(identity_dir),
                             "--rows-aligned"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        peer, _ = fake.register(timeout=60)
        fake.plan(peer, index=1, parties=_parties(), mechanism="none", params=PARAMS, n_samples=N, label_owner=0)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "refuses mechanism 'none'" in lines[0] and "--allow-mechanisms" in lines[0]
