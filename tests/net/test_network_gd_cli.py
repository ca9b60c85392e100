"""noisy-gd with real `vfl` processes: the CLI run writes the model with its mechanism and privacy report and charges
each party's ledger its epsilon; a hostile coordinator (tests/helpers/fake_coordinator.py) that sends a round outside
the plan, an iterate outside the public ball or a plan with less noise than its epsilon asks for is refused by a
real `vfl party` before anything computed from its data leaves it.

FAST TESTS: 1024-bit INSECURE Paillier test keys.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.fake_coordinator import FakeCoordinator

from vfl.demo import free_port, make_demo_data
from vfl.models.modelio import load_model
from vfl.net.messages import MessageType
from vfl.privacy.ledger import Ledger
from vfl.protocols.gd_phase import gd_params, plan_params
from vfl.protocols.model_signing import verify_model_signatures
from vfl.secure.identity import load_pinned

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner

GENEROUS = 120
TEST_KEYS = ["--insecure-test-keys"]
N = 40


def test_cli_noisy_gd_run_writes_the_model_and_charges_both_ledgers(procs, tmp_path, identity_dir):
    data = make_demo_data(tmp_path / "data", 200, seed=1)
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "m.json"
    ledgers = {"alice": tmp_path / "alice.sqlite", "bob": tmp_path / "bob.sqlite"}
    coord = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                        "--timeout", str(GENEROUS), "--mechanism", "noisy-gd", "--epsilon", "1", "--steps", "3",
                        "--iterate-radius", "2", *TEST_KEYS)
    extra = ["--no-progress", "--timeout", str(GENEROUS), "--allow-mechanisms", "noisy-gd", *TEST_KEYS]
    alice = procs.start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                        "age:tenure", "--label", "score", "--id", "id", "--bounds", str(data["bounds"]),
                        "--ledger", str(ledgers["alice"]), *extra)
    bob = procs.start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                      "visits,spend", "--id", "id", "--bounds", str(data["bounds"]), "--ledger", str(ledgers["bob"]),
                      *extra)
    results = [procs.finish(p) for p in (coord, alice, bob)]
    assert [r[0] for r in results] == [0, 0, 0], [r[2][-800:] for r in results]
    doc = json.loads(out.read_text())
    assert doc["mechanism"] == "noisy-gd" and sorted(doc["signatures"]) == ["alice", "bob"]
    rep = doc["privacy_report"]
    assert rep["mechanism"] == "noisy-gd" and rep["formal_dp"] is True and rep["extra"]["steps"] == 3
    assert not any("UNSIGNED" in note for note in rep["notes"]) and "signed by all 2 parties" in results[0][1]
    assert doc["extra"]["iterate_radius"] == 2.0
    assert len(doc["w"]) == sum(len(p["features"]) for p in doc["parties"]) + 1   # + the intercept
    assert np.linalg.norm(doc["w"]) <= 2.0 + 1e-12                         # an average of iterates in the ball
    for name in ("alice", "bob"):
        (run,) = Ledger(ledgers[name]).runs()
        assert run.state == "completed" and run.epsilon == pytest.approx(rep["epsilon"], rel=1e-12)
    # each party replayed the rounds and signed (vfl.net.round_check): the model, the coordinator's file and each
    # party's stored copy, verifies under the pinned keys and `vfl predict` uses it without --allow-unsigned-model
    pinned = load_pinned(identity_dir)
    for name in ("alice", "bob"):
        (stored,) = tmp_path.glob(f"model-{name}-*.json")
        assert json.loads(stored.read_text()) == doc
        assert verify_model_signatures(load_model(stored), pinned=pinned) == ["alice", "bob"]
    a, b = (np.genfromtxt(data[k], delimiter=",", names=True, dtype=None, encoding="utf-8") for k in ("alice", "bob"))
    joined = tmp_path / "joined.csv"
    joined.write_text("age,income,tenure,visits,spend\n" + "".join(
        f"{r['age']},{r['income']},{r['tenure']},{s['visits']},{s['spend']}\n" for r, s in zip(a, b, strict=True)))
    served = procs.start("predict", "--model", str(out), "--data", str(joined), "--out", str(tmp_path / "p.csv"))
    code, _, err = procs.finish(served)
    assert code == 0 and "UNSIGNED" not in err.upper() and (tmp_path / "p.csv").exists(), err[-800:]


# ------------------------------------------------------------------ hostile coordinator
def _plan(steps: int = 3) -> tuple[list[dict], dict]:
    """The honest plan of a 2-party run: alice (label, 1 column + intercept), bob (3 columns, the rounds' party A)."""
    parties = [{"name": "alice", "n_features": 2, "features": ["a0"], "label_owner": True, "intercept": True},
               {"name": "bob", "n_features": 3, "features": ["b0", "b1", "b2"], "label_owner": False,
                "intercept": False}]
    release, params = gd_params("linear", N, (3, 2), epsilon=1.0, delta=1e-5, steps=steps, radius=1.0,
                                learning_rate=None, precision_bits=40, key_bits=1024)
    return parties, plan_params(release, params, True)


def _bob_process(procs, tmp_path, url: str):
    rng = np.random.default_rng(5)
    data = tmp_path / "bob.csv"
    data.write_text("b0,b1,b2\n" + "".join(",".join(f"{v:.4f}" for v in row) + "\n"
                                           for row in rng.uniform(-1, 1, (N, 3))))
    bounds = tmp_path / "bounds.toml"
    bounds.write_text("[bounds]\nb0 = [-1, 1]\nb1 = [-1, 1]\nb2 = [-1, 1]\n")
    return procs.start("party", "--connect", url, "--name", "bob", "--data", str(data), "--features", "b0,b1,b2",
                       "--bounds", str(bounds), "--no-progress", "--timeout", "60", "--allow-mechanisms", "noisy-gd",
                       *TEST_KEYS)


@pytest.mark.parametrize("attack,text", [
    ({"t": 0, "w": [2.0, 0.0, 0.0, 0.0, 0.0]}, "outside the public ball"),
    ({"t": 3, "w": [0.0] * 5}, "the plan has 3 rounds"),
    ({"t": 1, "w": [0.0] * 5}, "the next is 0"),
    ({"t": 0, "w": [0.1] * 4}, "must be 5 finite numbers"),
])
def test_party_refuses_a_round_outside_the_plan_or_the_ball_before_any_request(procs, tmp_path, identity_dir,
                                                                                attack, text):
    """A coordinator that sends w outside ||w|| <= R (the operand bound and the sensitivity then fail) or a round
    the plan does not have (more rounds than epsilon paid for): the real `vfl party` answers ERROR and exits 4
    without a GD_REQUEST (nothing computed from its columns) ever leaving it."""
    fake = FakeCoordinator()
    try:
        bob = _bob_process(procs, tmp_path, fake.endpoint)
        peer, _ = fake.register(timeout=GENEROUS)
        parties, params = _plan()
        fake.plan(peer, index=1, parties=parties, mechanism="noisy-gd", params=params, n_samples=N, label_owner=0)
        assert fake.roster(peer, identity_dir, timeout=GENEROUS) is not None
        ready = fake.wait_for(MessageType.READY, MessageType.ERROR, timeout=GENEROUS)
        assert ready is not None and ready[1].type is MessageType.READY, ready   # bob prepared his columns
        fake.send(peer, MessageType.GD_ROUND, attack)
        error = fake.wait_for(MessageType.ERROR, timeout=GENEROUS)
        code, _, err = procs.finish(bob)
        assert error is not None and text in error[1].body["reason"], err[-1500:]
        assert fake.sent_by_party(MessageType.GD_REQUEST) == [] and fake.sent_by_party(MessageType.GD_SHARE) == []
        assert code != 0 and "Traceback" not in err and text in err
    finally:
        fake.close()


@pytest.mark.parametrize("key,factor", [("sigma", 0.5), ("sensitivity", 0.5), ("party_radii", 0.9),
                                        ("party_sensitivities", 0.5)])
def test_party_refuses_a_plan_whose_numbers_it_cannot_rederive(procs, tmp_path, key, factor):
    """A plan with less noise (or a smaller sensitivity or radius) than its epsilon, T, R and columns give is refused
    before the roster entry: the party re-derives every number it signs."""
    fake = FakeCoordinator()
    try:
        bob = _bob_process(procs, tmp_path, fake.endpoint)
        peer, _ = fake.register(timeout=GENEROUS)
        parties, params = _plan()
        value = params[key]
        params[key] = [v * factor for v in value] if isinstance(value, list) else value * factor
        fake.plan(peer, index=1, parties=parties, mechanism="noisy-gd", params=params, n_samples=N, label_owner=0)
        got = fake.wait_for(MessageType.ERROR, MessageType.ROSTER_ENTRY, timeout=GENEROUS)
        code, _, err = procs.finish(bob)
        assert got is not None and got[1].type is MessageType.ERROR, err[-1500:]
        assert f"refused noisy-gd plan: its {key}" in got[1].body["reason"]
        assert code != 0 and "Traceback" not in err
    finally:
        fake.close()


def test_more_than_two_parties_is_refused_in_one_line(procs, tmp_path):
    coord = procs.start("coordinator", "--parties", "3", "--mechanism", "noisy-gd", "--epsilon", "1",
                        "--out", str(tmp_path / "m.json"), "--bind", f"tcp://127.0.0.1:{free_port()}")
    code, _, err = procs.finish(coord)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "exactly 2 parties" in lines[0], err
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("bits", [1, 4, 12])
def test_party_refuses_a_plan_with_a_fixed_point_grid_too_coarse_for_the_sensitivity(procs, tmp_path, bits):
    """Review 5 (a): the parties round X_k and v_l / b to the plan's grid 2^-p before any noise, so a coordinator that
    plans a coarse grid inflates the sensitivity of what is actually released (p = 1: an entry of 0.25 rounds to
    0.5, a row of norm r to up to 2r) while sigma stays calibrated to the real-valued Delta. On 2da7dc9 the real
    `vfl party` re-derived every other number, took p from the plan and signed it into its roster entry; now it
    refuses the plan before its ROSTER_ENTRY, naming the minimum."""
    fake = FakeCoordinator()
    try:
        bob = _bob_process(procs, tmp_path, fake.endpoint)
        peer, _ = fake.register(timeout=GENEROUS)
        parties, params = _plan()
        params["precision_bits"] = bits
        fake.plan(peer, index=1, parties=parties, mechanism="noisy-gd", params=params, n_samples=N, label_owner=0)
        got = fake.wait_for(MessageType.ERROR, MessageType.ROSTER_ENTRY, timeout=GENEROUS)
        code, _, err = procs.finish(bob)
        assert got is not None and got[1].type is MessageType.ERROR, err[-1500:]
        assert "precision" in got[1].body["reason"]
        assert code != 0 and "Traceback" not in err
    finally:
        fake.close()


def test_a_party_runs_noisy_gd_rounds_only_when_its_operator_allows_them(procs, tmp_path):
    """noisy-gd is opt-in for a party (vfl.protocols.policy.OPT_IN_MECHANISMS: a hostile co-party can raise the
    per-round sensitivity, docs/threat_model.md): without --allow-mechanisms noisy-gd a real `vfl party` refuses the
    plan in one line before its roster entry, and the run ends without a model."""
    data = make_demo_data(tmp_path / "data", 200, seed=2)
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "m.json"
    coord = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                        "--timeout", str(GENEROUS), "--mechanism", "noisy-gd", "--epsilon", "1", "--steps", "3",
                        *TEST_KEYS)
    extra = ["--no-progress", "--timeout", str(GENEROUS), *TEST_KEYS]
    alice = procs.start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                        "age:tenure", "--label", "score", "--id", "id", "--bounds", str(data["bounds"]), *extra)
    bob = procs.start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                      "visits,spend", "--id", "id", "--bounds", str(data["bounds"]), *extra)
    results = [procs.finish(p) for p in (coord, alice, bob)]
    assert all(code != 0 for code, _, _ in results)
    assert any("noisy-gd" in err and "--allow-mechanisms" in err for _, _, err in results[1:]), results
    assert not out.exists()


@pytest.mark.parametrize("key,value", [("party_sensitivities", [0.1, 0.2, 0.3]), ("party_radii", {"a": 1}),
                                       ("widths", [[3, 2], [3, 2]])])
def test_party_refuses_a_plan_number_of_another_shape_in_one_line(procs, tmp_path, key, value):
    """review6. A plan number of another shape than the one the party derives: a list of three sensitivities, a
    table for the radii, the widths repeated as a matrix. On e5d4639 the first two ended the party with a numpy
    error outside the plan check (ValueError: operands could not be broadcast; TypeError) and the third passed
    by broadcasting; now each is refused as a plan whose number differs, before the roster entry."""
    fake = FakeCoordinator()
    try:
        bob = _bob_process(procs, tmp_path, fake.endpoint)
        peer, _ = fake.register(timeout=GENEROUS)
        parties, params = _plan()
        params[key] = value
        fake.plan(peer, index=1, parties=parties, mechanism="noisy-gd", params=params, n_samples=N, label_owner=0)
        got = fake.wait_for(MessageType.ERROR, MessageType.ROSTER_ENTRY, timeout=GENEROUS)
        code, _, err = procs.finish(bob)
        assert got is not None and got[1].type is MessageType.ERROR, err[-1500:]
        assert f"refused noisy-gd plan: its {key}" in got[1].body["reason"], got[1].body["reason"]
        assert code != 0 and "Traceback" not in err
    finally:
        fake.close()
