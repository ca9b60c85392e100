"""Issue 29, items 5 and 6: a refused plan costs nothing, and a budget belongs to the people in the data.

Invariants (docs/privacy.md, "A lifetime budget"; docs/threat_model.md):

* a plan a party refuses costs nothing, and a run that started costs its whole plan: the party checks a plan's
  spend read-only when it arrives (a plan over budget is refused before its ROSTER_ENTRY, so no co-party has
  reserved), and reserves after the roster verifies, before its first data-dependent message;
* one budget per party: a run on the same table minus its last row, with another label, or with ``--id`` on a
  subset of its rows composes with every earlier run (only ``--dataset-name`` keeps a separate budget).

Attackers: a hostile coordinator (:class:`fake_coordinator.FakeCoordinator`, it sends whatever it likes) that
makes a real ``vfl party`` refuse plans at the roster to burn its budget; a co-party whose budget refusal used to
charge every other party; an analyst who re-runs on a changed table to get a fresh budget. On main at f437015 each
test here fails (checked): the reservation was committed when the PLAN arrived (three roster refusals at epsilon 1
composed to 1.835 of bob's 2.0, and the honest plan, 2.155 composed, was then refused for budget; alice was charged
for bob's refusal), and the budget was keyed by a fingerprint of columns, bounds, label and row count (the table
minus its last row was accepted with a fresh budget).

FAST TESTS: 1024-bit INSECURE Paillier test keys.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.fake_coordinator import FakeCoordinator

from vfl.demo import free_port, make_demo_data
from vfl.net.messages import MessageType
from vfl.privacy.ledger import Ledger
from vfl.protocols.roster import entry_digest, plan_digest
from vfl.secure.identity import SigningIdentity
from vfl.secure.keys import generate_keypair, public_key_to_bytes

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(900)]   # slow: .ci/run runs it in its own step

N = 40
PARAMS = {"epsilon": 1.0, "delta": 1e-5, "precision_bits": 24, "key_bits": 1024, "allow_insecure_keys": True,
          "domain": "l2", "mechanism_options": {}, "randomness": "short-exponent"}
GENEROUS = 120
TEST_KEYS = ["--insecure-test-keys"]


def _party(name: str, n_features: int, features: list[str], *, label: bool = False) -> dict:
    return {"name": name, "n_features": n_features, "features": features, "label_owner": label, "intercept": label}


#: alice (label + intercept) and bob (3 columns): bob encrypts M[0,1], so his first data-dependent message is an
#: ENC_REQUEST right after the roster
PARTIES = [_party("alice", 2, ["a0"], label=True), _party("bob", 3, ["b0", "b1", "b2"])]


def _cli_bob(fake: FakeCoordinator, tmp_path: Path, identity_dir: Path, ledger: Path) -> subprocess.Popen:
    data = tmp_path / "bob.csv"
    rows = np.random.default_rng(3).uniform(-1, 1, (N, 3))
    data.write_text("b0,b1,b2\n" + "".join(",".join(f"{v:.4f}" for v in row) + "\n" for row in rows))
    bounds = tmp_path / "bounds.toml"
    bounds.write_text("[bounds]\nb0 = [-1, 1]\nb1 = [-1, 1]\nb2 = [-1, 1]\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "vfl.cli", "party", "--connect", fake.endpoint, "--name", "bob",
                             "--data", str(data), "--features", "b0,b1,b2", "--bounds", str(bounds), "--no-progress",
                             "--timeout", "60", "--identity-dir", str(identity_dir), "--ledger", str(ledger),
                             "--budget", "2.0", "--rows-aligned", *TEST_KEYS], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            text=True, env=env)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=GENEROUS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def _cheat(kind: str, fake: FakeCoordinator, peer: bytes):  # noqa: ANN202
    """How the hostile coordinator makes bob refuse at the roster: alice's entry unsigned, or re-signed with the
    coordinator's own key around its own Paillier key (key substitution)."""
    def tamper(entries: list[dict]) -> None:
        alice = entries[0]
        if kind == "unsigned":
            del alice["auth"]
        else:
            pub = generate_keypair(1024, allow_insecure=True)[0]
            alice["paillier"] = hashlib.sha256(public_key_to_bytes(pub)).hexdigest()
            digest = entry_digest(fake.run_id, plan_digest(fake.plans[peer]), alice["registration"],
                                  alice["paillier"])
            alice["auth"] = SigningIdentity.generate("alice").sign(digest)
    return tamper


def test_plans_refused_at_the_roster_cost_nothing_and_an_honest_plan_is_then_accepted(tmp_path, identity_dir):
    """Three plans that a real `vfl party` (bob, --budget 2.0) refuses at the roster -- an invented party, alice's
    entry unsigned, alice's entry re-signed by the coordinator around its own Paillier key -- each end with exit 4
    and nothing data-dependent sent, and bob's ledger stays empty (spent 0; on main each reserved bob's true
    epsilon 1, and the honest plan was then refused for budget). The fourth, honest plan is accepted: bob reserves
    its spend once the roster verifies, then sends his first data-dependent message (ENC_REQUEST)."""
    ledger = tmp_path / "bob.sqlite"
    ghost = _party("ghost0", 3, ["g0", "g1", "g2"])
    refusals = {"invented party": "party 'ghost0' has no pinned identity",
                "unsigned": "roster entry from 'alice' carries no valid signature",
                "substituted key": "bad signature on roster entry from 'alice'"}
    for attack, text in refusals.items():
        fake = FakeCoordinator()
        try:
            proc = _cli_bob(fake, tmp_path, identity_dir, ledger)
            peer, _ = fake.register(timeout=GENEROUS)
            parties = [*PARTIES, ghost] if attack == "invented party" else PARTIES
            fake.plan(peer, index=1, parties=parties, mechanism="gaussian-fm", params=PARAMS, n_samples=N,
                      label_owner=0)
            got = fake.roster(peer, identity_dir, timeout=GENEROUS,
                              identities={"ghost0": SigningIdentity.generate("ghost0")},
                              cheat=None if attack == "invented party" else _cheat(attack, fake, peer))
            assert got is not None, (attack, [m.body for _, m in fake.received if m.type is MessageType.ERROR])
            code, out, err = _finish(proc)
        finally:
            fake.close()
        assert code == 4 and text in err, (attack, err[-1500:])
        sent = {m.type for _, m in fake.received}
        assert sent <= {MessageType.REGISTER, MessageType.ROSTER_ENTRY, MessageType.ERROR, MessageType.HEARTBEAT}
        assert Ledger(ledger).runs() == [], (attack, [(r.run_id, r.epsilon) for r in Ledger(ledger).runs()])
        assert Ledger(ledger).summary() == []   # spent 0

    fake = FakeCoordinator()
    try:
        proc = _cli_bob(fake, tmp_path, identity_dir, ledger)
        peer, _ = fake.register(timeout=GENEROUS)
        fake.plan(peer, index=1, parties=PARTIES, mechanism="gaussian-fm", params=PARAMS, n_samples=N, label_owner=0)
        assert fake.roster(peer, identity_dir, timeout=GENEROUS) is not None
        first = fake.wait_for(MessageType.ENC_REQUEST, MessageType.ERROR, timeout=GENEROUS)
        assert first is not None and first[1].type is MessageType.ENC_REQUEST, first
        (run,) = Ledger(ledger).runs()   # reserved before the ENC_REQUEST left
        assert run.run_id == fake.run_id and run.state == "reserved" and 0 < run.epsilon < 2.0
        fake.send(peer, MessageType.ABORT, {"reason": "test over", "error": "E"})
        code, out, err = _finish(proc)
    finally:
        fake.close()
    assert "reserved epsilon" in out and code != 0
    assert [r.state for r in Ledger(ledger).runs()] == ["aborted"]   # a run that started costs its whole plan


# ---------------------------------------------------------------------------------------------- real processes
def _start(procs, data: dict[str, Path], url: str, out: Path, *, alice: list[str], bob: list[str]):  # noqa: ANN001
    """A real `vfl coordinator` (laplace-fm, epsilon 1, tight: true epsilon 1 for each party) and two parties
    aligned by --id; ``alice``/``bob``: their table and ledger options."""
    coord = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                        "--timeout", str(GENEROUS), "--mechanism", "laplace-fm", "--epsilon", "1",
                        "--fm-sensitivity", "tight", *TEST_KEYS)
    extra = ["--no-progress", "--timeout", str(GENEROUS), "--id", "id", "--bounds", str(data["bounds"]), *TEST_KEYS]
    a = procs.start("party", "--connect", url, "--name", "alice", *alice, *extra)
    b = procs.start("party", "--connect", url, "--name", "bob", *bob, *extra)
    return coord, a, b


def _refusal(procs, party) -> str:  # noqa: ANN001
    code, _, err = procs.finish(party)
    lines = [ln for ln in err.splitlines() if ln.startswith("vfl: error:")]
    assert code != 0 and len(lines) == 1 and "privacy budget of dataset default" in lines[0], err[-1500:]
    return lines[0]


def test_changing_the_table_never_opens_a_fresh_budget_and_a_refusal_charges_no_co_party(procs, tmp_path):
    """After one epsilon-1 run at --budget 1.5 (spent 1, left 0.5), each of these is refused with the one line,
    by the party whose table changed: bob's table minus its last row; alice's table with another label (income
    instead of score); bob's table cut to a subset of its IDs (--id, 200 of 300 rows). The co-party (a ledger,
    no budget) is not charged for the refusal: its ledger keeps only the first run. No model is written."""
    data = make_demo_data(tmp_path / "data", 300, seed=1)
    rows = data["bob"].read_text().splitlines(keepends=True)
    minus = tmp_path / "data" / "bob_minus_last_row.csv"
    minus.write_text("".join(rows[:-1]))
    subset = tmp_path / "data" / "bob_subset.csv"
    subset.write_text("".join(rows[:201]))
    ledgers = {"alice": tmp_path / "alice.sqlite", "bob": tmp_path / "bob.sqlite"}
    alice_t = ["--data", str(data["alice"]), "--features", "age:tenure", "--label", "score"]
    bob_t = ["--data", str(data["bob"]), "--features", "visits,spend"]

    def ledger_of(name: str, budget: bool) -> list[str]:
        return ["--ledger", str(ledgers[name]), *(["--budget", "1.5"] if budget else [])]

    out = tmp_path / "m0.json"
    coord, a, b = _start(procs, data, f"tcp://127.0.0.1:{free_port()}", out,
                         alice=[*alice_t, *ledger_of("alice", True)], bob=[*bob_t, *ledger_of("bob", True)])
    assert [procs.finish(p)[0] for p in (coord, a, b)] == [0, 0, 0], procs.finish(b)[2][-1500:]
    first = {name: Ledger(path).runs() for name, path in ledgers.items()}
    assert [(r.state, r.epsilon) for r in first["bob"]] == [("completed", pytest.approx(1.0))]
    assert [(r.state, r.epsilon) for r in first["alice"]] == [("completed", pytest.approx(1.0))]
    assert first["bob"][0].covers == {"files": [str(data["bob"].resolve())], "columns": ["visits", "spend"],
                                      "label": None, "rows": 300}

    variants = {
        "bob: the same table minus its last row": ("bob", [*alice_t, *ledger_of("alice", False)],
                                                   ["--data", str(minus), "--features", "visits,spend",
                                                    *ledger_of("bob", True)]),
        "alice: another label": ("alice", ["--data", str(data["alice"]), "--features", "age,tenure", "--label",
                                           "income", *ledger_of("alice", True)], [*bob_t, *ledger_of("bob", False)]),
        "bob: --id on a subset of his rows": ("bob", [*alice_t, *ledger_of("alice", False)],
                                              ["--data", str(subset), "--features", "visits,spend",
                                               *ledger_of("bob", True)]),
    }
    for i, (what, (refuser, alice_args, bob_args)) in enumerate(variants.items(), start=1):
        out = tmp_path / f"m{i}.json"
        coord, a, b = _start(procs, data, f"tcp://127.0.0.1:{free_port()}", out, alice=alice_args, bob=bob_args)
        line = _refusal(procs, a if refuser == "alice" else b)
        assert "spent epsilon 1 in 1 run(s)" in line and "left 0.5 of 1.5" in line, (what, line)
        assert procs.finish(coord)[0] != 0 and procs.finish(a if refuser == "bob" else b)[0] != 0, what
        assert not out.exists(), what
        for name, path in ledgers.items():   # neither the refuser nor its co-party recorded the refused plan
            assert [r.run_id for r in Ledger(path).runs()] == [r.run_id for r in first[name]], (what, name)
