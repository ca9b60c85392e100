"""A party's lifetime privacy budget over the network (issue 23): real processes and a socket-level coordinator.

FAST TESTS: 1024-bit INSECURE Paillier test keys.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from helpers.fake_coordinator import FakeCoordinator

from vfl.demo import free_port, make_demo_data
from vfl.exceptions import BudgetError
from vfl.net.messages import MessageType
from vfl.net.party import LocalData, PartyNode
from vfl.privacy.ledger import Budget, DatasetKey, Ledger

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]

N = 40
PARAMS = {"epsilon": 1.0, "delta": 1e-5, "precision_bits": 24, "key_bits": 1024, "allow_insecure_keys": True,
          "domain": "linf", "mechanism_options": {}, "randomness": "short-exponent"}
PARTIES = [{"name": "alice", "n_features": 2, "features": ["a0"], "label_owner": True, "intercept": True},
           {"name": "bob", "n_features": 3, "features": ["bob_x0", "bob_x1", "bob_x2"], "label_owner": False,
            "intercept": False}]
GENEROUS = 120
TEST_KEYS = ["--insecure-test-keys"]


def _bob() -> LocalData:
    return LocalData.build("bob", np.random.default_rng(3).uniform(-1, 1, (N, 3)), bounds=(-1, 1))


def _plan_to_bob(ledger: Ledger, identity_dir: Path) -> tuple[FakeCoordinator, list[str], dict]:
    """A fresh coordinator (a new run) sends bob a laplace-fm plan at epsilon 1 (true epsilon 0.714 for bob: the
    tight block table); bob's budget is 1.2, which one such run fits and two do not."""
    fake = FakeCoordinator()
    lines: list[str] = []
    outcome: dict = {}
    node = PartyNode(_bob(), fake.endpoint, timeout=30, allow_insecure_keys=True, log=lines.append,
                     identity_dir=identity_dir, ledger=ledger, budget=Budget(1.2))

    def run() -> None:
        try:
            node.run()
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    peer, _ = fake.register(timeout=60)
    fake.plan(peer, index=1, parties=PARTIES, mechanism="laplace-fm", params=PARAMS, n_samples=N, label_owner=0)
    outcome["thread"], outcome["peer"] = thread, peer
    return fake, lines, outcome


def _first_data_dependent(fake: FakeCoordinator, timeout: float) -> MessageType | None:
    """The type of the first message after the roster that is derived from the party's data (or an ERROR)."""
    got = fake.wait_for(*(t for t in MessageType if t not in (MessageType.REGISTER, MessageType.ROSTER_ENTRY,
                                                              MessageType.HEARTBEAT)), timeout=timeout)
    return None if got is None else got[1].type


def test_a_plan_over_budget_is_refused_before_anything_data_dependent_leaves(tmp_path, identity_dir):
    """First plan: checked (nothing recorded) when it arrives, the ROSTER_ENTRY sent; reserved once the roster
    verifies, before the first data-dependent message; the run is aborted later and stays counted (issue 29).
    Second plan (another run): ERROR with spent/requested/left, and nothing else after the PLAN (no ROSTER_ENTRY,
    no READY, no BLOCK); the ledger has one run."""
    ledger = Ledger(tmp_path / "bob.sqlite", party="bob")
    fake, lines, outcome = _plan_to_bob(ledger, identity_dir)

    def nothing_reserved_at_the_roster_entry(entries: list[dict]) -> None:
        assert ledger.runs() == []

    try:
        assert fake.roster(outcome["peer"], identity_dir, cheat=nothing_reserved_at_the_roster_entry,
                           timeout=60) is not None
        first = _first_data_dependent(fake, timeout=60)
        assert first is not None and first is not MessageType.ERROR, first
        (run,) = ledger.runs()   # committed before that message left
        assert (run.run_id, run.state, run.mechanism) == (fake.run_id, "reserved", "laplace-fm")
        assert run.epsilon == pytest.approx(0.714, abs=1e-3)
        fake.send(outcome["peer"], MessageType.ABORT, {"reason": "test over", "error": "E"})
        outcome["thread"].join(60)
    finally:
        fake.close()
    assert ledger.runs()[0].state == "aborted"
    assert any("reserved epsilon" in line for line in lines), lines
    assert any("fits" in line and "reserved only once the run starts" in line for line in lines), lines

    fake, lines, outcome = _plan_to_bob(ledger, identity_dir)
    try:
        error = fake.wait_for(MessageType.ERROR, MessageType.ROSTER_ENTRY, timeout=60)
        outcome["thread"].join(60)
    finally:
        fake.close()
    assert error is not None and error[1].type is MessageType.ERROR
    reason = error[1].body["reason"]
    assert "spent epsilon" in reason and "requests" in reason and "left" in reason, reason
    assert [m.type for _, m in fake.received] == [MessageType.REGISTER, MessageType.ERROR]
    assert type(outcome["error"]).__name__ == "BudgetError"
    assert [r.state for r in ledger.runs()] == ["aborted"]


# ---------------------------------------------------------------------------------------------- the real CLI
@pytest.fixture
def data(tmp_path):
    return make_demo_data(tmp_path / "data", 300, seed=1)


def _run(procs, data, url, out, *, ledgers: dict[str, Path], budget: str | None):
    coord = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                        "--timeout", str(GENEROUS), "--mechanism", "laplace-fm", "--epsilon", "1",
                        "--fm-sensitivity", "tight", *TEST_KEYS)
    extra = ["--no-progress", "--timeout", str(GENEROUS), *TEST_KEYS]
    alice = procs.start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                        "age:tenure", "--label", "score", "--id", "id", "--bounds", str(data["bounds"]),
                        "--ledger", str(ledgers["alice"]), *extra)
    bob = procs.start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                      "visits,spend", "--id", "id", "--bounds", str(data["bounds"]), "--ledger", str(ledgers["bob"]),
                      *(["--budget", budget] if budget else []), *extra)
    return coord, alice, bob


def test_cli_budget_first_run_succeeds_second_is_refused(procs, data, tmp_path):
    """`vfl party --budget 1.5`: a laplace-fm run at (true) epsilon 1 succeeds; the next is refused by bob with one line
    (exit non-zero, no model), and bob's ledger shows one completed run."""
    ledgers = {"alice": tmp_path / "alice.sqlite", "bob": tmp_path / "bob.sqlite"}
    out1 = tmp_path / "m1.json"
    coord, alice, bob = _run(procs, data, f"tcp://127.0.0.1:{free_port()}", out1, ledgers=ledgers, budget="1.5")
    codes = [procs.finish(p)[0] for p in (coord, alice, bob)]
    assert codes == [0, 0, 0], [procs.finish(p)[2][-800:] for p in (coord, alice, bob)]
    assert out1.exists()
    (first,) = Ledger(ledgers["bob"]).runs()
    assert first.state == "completed" and first.epsilon == pytest.approx(1.0)   # tight: the true epsilon is 1

    out2 = tmp_path / "m2.json"
    coord, alice, bob = _run(procs, data, f"tcp://127.0.0.1:{free_port()}", out2, ledgers=ledgers, budget="1.5")
    code, _, err = procs.finish(bob)
    assert code == 2   # a policy refusal, as a plan above --max-epsilon (docs/reliability.md)
    lines = [ln for ln in err.splitlines() if ln.startswith("vfl: error:")]
    assert len(lines) == 1 and "spent epsilon" in lines[0] and "left" in lines[0], err[-1500:]
    assert procs.finish(coord)[0] != 0 and procs.finish(alice)[0] != 0
    assert not out2.exists()
    assert [(r.run_id, r.state) for r in Ledger(ledgers["bob"]).runs()] == [(first.run_id, "completed")]
    # alice has no budget and is not charged for bob's refusal: he refused before the roster, so she never reserved
    assert [r.state for r in Ledger(ledgers["alice"]).runs()] == ["completed"]


def test_cli_party_killed_mid_run_leaves_its_spend_reserved(procs, data, tmp_path):
    ledgers = {"alice": tmp_path / "alice.sqlite", "bob": tmp_path / "bob.sqlite"}
    _, _, bob = _run(procs, data, f"tcp://127.0.0.1:{free_port()}", tmp_path / "m.json", ledgers=ledgers,
                     budget="1.5")
    procs.wait_for_line(bob, "reserved epsilon")
    bob.kill()   # SIGKILL: no cleanup runs
    bob.wait(60)
    (run,) = Ledger(ledgers["bob"], party="bob").runs()
    assert run.state == "reserved" and run.epsilon == pytest.approx(1.0)
    # the spend still counts: another epsilon-1 plan of that dataset does not fit in 1.5
    with pytest.raises(BudgetError, match="spent epsilon 1 in 1 run"):
        Ledger(ledgers["bob"]).reserve(DatasetKey(run.fingerprint), "again", run.spend, budget=Budget(1.5))


def test_cli_party_refuses_a_corrupted_ledger_with_one_line(procs, data, tmp_path):
    ledger = tmp_path / "bob.sqlite"
    ledger.write_bytes(b"\x00garbage" * 512)
    bob = procs.start("party", "--connect", f"tcp://127.0.0.1:{free_port()}", "--name", "bob", "--data",
                      str(data["bob"]), "--features", "visits,spend", "--bounds", str(data["bounds"]), "--ledger",
                      str(ledger), "--budget", "1.5", "--no-progress", "--timeout", "5", *TEST_KEYS)
    code, out, err = procs.finish(bob, timeout=120)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("vfl: warning")]
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith("vfl: error: privacy ledger") and "never reset" in lines[0]
    assert "connecting to" not in out
    assert ledger.read_bytes() == b"\x00garbage" * 512
