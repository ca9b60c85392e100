"""The persistent privacy ledger (vfl.privacy.ledger, issue 23): reservations, composition, integrity, the race."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vfl.cli import main
from vfl.exceptions import BudgetError, PrivacyParameterError
from vfl.privacy.accounting import PrivacyReport
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.ledger import (
    Budget,
    Ledger,
    LedgerError,
    Spend,
    compose,
    dataset_key,
    default_ledger_path,
    spend_of_report,
)

KEY = dataset_key(["age", "tenure"], 300, label="score", label_bounds=(0, 1))


def laplace(eps: float = 1.0) -> Spend:
    return Spend("laplace-fm", eps, 0.0, {"kind": "laplace", "epsilon": eps})


def gaussian(eps: float = 1.0, delta: float = 1e-5) -> Spend:
    return Spend("gaussian-fm", eps, delta, {"kind": "gaussian", "mu": calibrate_mu(eps, delta)})


def test_a_budget_admits_a_first_run_and_refuses_the_second_with_spent_requested_left(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite", party="bob")
    ledger.reserve(KEY, "run-1", laplace(), budget=Budget.parse("1.5"))
    ledger.finish("run-1", "completed")
    with pytest.raises(BudgetError) as err:
        ledger.reserve(KEY, "run-2", laplace(), budget=Budget.parse("1.5"))
    line = str(err.value)
    assert "\n" not in line
    for text in ("spent epsilon 1 in 1 run(s)", "requests 1", "left 0.5 of 1.5", "composition:"):
        assert text in line, line
    runs = ledger.runs()
    assert [(r.run_id, r.state) for r in runs] == [("run-1", "completed")]
    # another dataset has its own budget; a declared name keys the budget whatever the table's fingerprint
    other = dataset_key(["age", "tenure"], 301, name="crm-2026")
    ledger.reserve(other, "run-3", laplace(), budget=Budget.parse("1.5"))
    refreshed = dataset_key(["age", "tenure", "visits"], 400, name="crm-2026")
    with pytest.raises(BudgetError):
        ledger.reserve(refreshed, "run-4", laplace(), budget=Budget.parse("1.5"))


def test_an_aborted_or_reserved_run_stays_counted(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite", party="bob")
    ledger.reserve(KEY, "run-1", laplace(0.6), budget=Budget(1.5))
    ledger.finish("run-1", "aborted", "PartyFailure: the coordinator aborted the run")
    ledger.reserve(KEY, "run-2", laplace(0.6), budget=Budget(1.5))   # never finished: a killed process
    with pytest.raises(BudgetError, match=r"spent epsilon 1.2 in 2 run"):
        ledger.reserve(KEY, "run-3", laplace(0.6), budget=Budget(1.5))
    (row,) = ledger.summary()
    assert (row["aborted"], row["reserved"], row["completed"]) == (1, 1, 0)
    assert row["left_epsilon"] == pytest.approx(0.3, abs=1e-3)


def test_composition_uses_dp_accounting_pld_and_never_exceeds_basic():
    """Two Gaussian runs at (1, 1e-5) compose to about 1.465 (Gaussian DP: mu sqrt 2), not 2; two Laplace runs at
    epsilon 1 stay at about 2 (pure DP composes additively up to the delta slack)."""
    two_gauss = compose([gaussian(), gaussian()], 1e-5)
    assert "dp-accounting" in two_gauss.method
    assert two_gauss.epsilon == pytest.approx(1.4652, abs=2e-3)
    two_lap = compose([laplace(), laplace()], 1e-5)
    assert 1.99 < two_lap.epsilon <= 2.0
    mixed = compose([laplace(), Spend("relaxed-fm", 0.5, 1e-6, {"kind": "approx", "epsilon": 0.5, "delta": 1e-6})],
                    1e-5)
    assert mixed.method.startswith("basic") and mixed.epsilon == pytest.approx(1.5)
    assert compose([laplace(), Spend("none", float("inf"), 0.0, {"kind": "non-private"})], 1e-5).epsilon == float("inf")
    # basic composition needs the deltas to fit: 20 runs at delta 1e-6 exceed a delta budget of 1e-5
    approx = [Spend("relaxed-fm", 0.1, 1e-6, {"kind": "approx", "epsilon": 0.1, "delta": 1e-6})] * 20
    assert compose(approx, 1e-5).epsilon == float("inf")


def test_a_run_without_noise_is_refused_under_a_budget_and_recorded_without(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    none = Spend("none", float("inf"), 0.0, {"kind": "non-private"})
    with pytest.raises(BudgetError):
        ledger.reserve(KEY, "r", none, budget=Budget(10))
    ledger.reserve(KEY, "r", none, budget=None)
    assert ledger.summary()[0]["spent_epsilon"] is None


def test_spend_of_a_privacy_report_is_its_true_epsilon_with_the_gaussian_mu():
    mu = calibrate_mu(1.0, 1e-5)
    report = PrivacyReport("gaussian-fm", "linear", 0.8, 1.0, 1e-5, extra={"mu": mu})
    spend = spend_of_report(report)
    assert (spend.epsilon, spend.accounting) == (1.0, {"kind": "gaussian", "mu": mu})
    assert spend_of_report(PrivacyReport("laplace-fm", "linear", 1.0, 0.7, None)).accounting == {
        "kind": "laplace", "epsilon": 0.7}
    assert not spend_of_report(PrivacyReport("none", "linear", None, None, None)).private


def test_budget_parsing():
    assert Budget.parse("1.5") == Budget(1.5, 1e-5)
    assert Budget.parse("2,1e-6") == Budget(2.0, 1e-6)
    for bad in ("", "x", "1,2,3", "-1", "1,0", "inf"):
        with pytest.raises(PrivacyParameterError):
            Budget.parse(bad)


def test_the_default_ledger_is_under_vfl_ledger_in_tests(ledger_home):
    assert default_ledger_path("bob") == Path(ledger_home) / "ledger-bob.sqlite"


# ---------------------------------------------------------------------------------------------- integrity
def _filled(tmp_path: Path) -> Path:
    ledger = Ledger(tmp_path / "l.sqlite", party="bob")
    for i in range(3):
        ledger.reserve(KEY, f"run-{i}", laplace(0.1), budget=None)
        ledger.finish(f"run-{i}", "completed")
    return ledger.path


@pytest.mark.parametrize("damage", ["garbage", "edited epsilon", "deleted entry", "truncated tail", "schema"])
def test_a_damaged_ledger_is_refused_and_never_reset(tmp_path, damage):
    path = _filled(tmp_path)
    if damage == "garbage":
        path.write_bytes(b"this is not a database" * 100)
    else:
        conn = sqlite3.connect(path)
        if damage == "edited epsilon":
            body = conn.execute("SELECT body FROM entries WHERE seq = 1").fetchone()[0]
            edited = body.replace('"epsilon":0.1', '"epsilon":0.01')
            assert edited != body
            conn.execute("UPDATE entries SET body = ? WHERE seq = 1", (edited,))
        elif damage == "deleted entry":
            conn.execute("DELETE FROM entries WHERE seq = 2")
        elif damage == "truncated tail":
            conn.execute("DELETE FROM entries WHERE seq = 6")
        else:
            conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        conn.commit()
        conn.close()
    before = path.read_bytes()
    with pytest.raises(LedgerError) as err:
        Ledger(path, party="bob")
    assert "\n" not in str(err.value) and "never reset" in str(err.value)
    assert path.read_bytes() == before


def test_a_ledger_of_another_party_is_refused(tmp_path):
    path = _filled(tmp_path)
    with pytest.raises(LedgerError, match="belongs to party 'bob'"):
        Ledger(path, party="alice")


# ---------------------------------------------------------------------------------------------- concurrency
RACER = textwrap.dedent("""
    import os, sys, time
    from vfl.exceptions import BudgetError
    from vfl.privacy.ledger import Budget, Ledger, Spend, dataset_key
    path, go, run = sys.argv[1:4]
    ledger = Ledger(path, party="bob")
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        ledger.reserve(dataset_key(["age", "tenure"], 300), run, Spend("laplace-fm", 1.0, 0.0,
                       {"kind": "laplace", "epsilon": 1.0}), budget=Budget(1.5))
        print("reserved", flush=True)
    except BudgetError as exc:
        print("refused", exc, flush=True)
""")


def test_two_processes_racing_on_one_ledger_cannot_both_pass_the_check(tmp_path):
    """Two real processes of one party reserve epsilon 1 of a 1.5 budget at the same instant: exactly one passes.
    Three rounds, each on a fresh ledger (with a deferred transaction instead of BEGIN IMMEDIATE the loser crashes
    on SQLITE_BUSY; with none both pass)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                                         os.environ.get("PYTHONPATH", "")])}
    for round_ in range(3):
        path, go = tmp_path / f"race-{round_}.sqlite", tmp_path / f"go-{round_}"
        Ledger(path, party="bob")
        racers = [subprocess.Popen([sys.executable, "-c", RACER, str(path), str(go), f"run-{i}"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
        try:
            for p in racers:
                assert p.stdout.readline().strip() == "ready", p.stderr.read()
            go.touch()
            outs = [p.communicate(timeout=120) for p in racers]
        finally:
            for p in racers:
                if p.poll() is None:
                    p.kill()
        results = sorted(out.split()[0] for out, _ in outs)
        assert results == ["refused", "reserved"], outs
        assert len(Ledger(path).runs()) == 1


# ---------------------------------------------------------------------------------------------- vfl budget
def test_vfl_budget_show_history_export(tmp_path, capsys):
    path = tmp_path / "l.sqlite"
    ledger = Ledger(path, party="bob")
    ledger.reserve(dataset_key(["a"], 10, name="crm"), "0123456789abcdef", laplace(), budget=Budget(1.5),
                   coordinator="tcp://127.0.0.1:5555")
    ledger.finish("0123456789abcdef", "completed")
    ledger.reserve(KEY, "fedcba9876543210", gaussian(0.5), budget=None)
    assert main(["budget", "show", "--ledger", str(path)]) == 0
    table = capsys.readouterr().out
    assert "crm" in table and "1.5,1e-05" in table and "0.5" in table
    assert main(["budget", "history", "--ledger", str(path)]) == 0
    history = capsys.readouterr().out
    assert "0123456789" in history and "completed" in history and "reserved" in history
    assert "tcp://127.0.0.1:5555" in history
    assert main(["budget", "show", "--ledger", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["crm", "default"]
    assert rows[0]["left_epsilon"] == pytest.approx(0.5, abs=1e-3)
    out = tmp_path / "export.json"
    assert main(["budget", "export", "--ledger", str(path), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["party"] == "bob" and doc["entries"] == 3 and len(doc["runs"]) == 2
    assert doc["runs"][0]["state"] == "completed" and doc["runs"][1]["state"] == "reserved"
    # a missing ledger is not created by reading it
    assert main(["budget", "show", "--ledger", str(tmp_path / "missing.sqlite")]) == 1
    assert "no privacy ledger" in capsys.readouterr().err
    assert not (tmp_path / "missing.sqlite").exists()


def test_a_reservation_is_fast(tmp_path):
    """Reserving reads, verifies and composes the whole history: 100 runs stay well under a second each."""
    ledger = Ledger(tmp_path / "l.sqlite")
    for i in range(100):
        ledger.reserve(KEY, f"run-{i}", laplace(0.001), budget=None)
    t0 = time.perf_counter()
    ledger.reserve(KEY, "last", laplace(0.001), budget=Budget(10))
    assert time.perf_counter() - t0 < 5.0


def test_estimators_spend_from_the_persistent_ledger(tmp_path):
    """accountant=LedgerAccountant: fits of a named dataset share its lifetime budget across processes."""
    import numpy as np

    from vfl import LinearRegression
    from vfl.privacy.ledger import LedgerAccountant

    rng = np.random.default_rng(0)
    X, y = rng.uniform(-0.5, 0.5, (200, 2)), rng.uniform(-1, 1, 200)
    path = tmp_path / "l.sqlite"
    acc = LedgerAccountant(path, "crm", "2.5,1e-4")
    for _ in range(2):
        LinearRegression(epsilon=1.0, bounds=(-0.5, 0.5), y_bounds=(-1, 1), accountant=acc).fit(X, y)
    again = LedgerAccountant(path, "crm", "2.5,1e-4")   # a new process would see the same
    assert again.total()[0] == pytest.approx(2.0, abs=1e-3)
    with pytest.raises(BudgetError, match="fit refused before it touches the data"):
        LinearRegression(epsilon=1.0, bounds=(-0.5, 0.5), y_bounds=(-1, 1), accountant=again).fit(X, y)
    assert [r.state for r in Ledger(path).runs()] == ["completed", "completed"]
    assert again.remaining()[0] == pytest.approx(0.5, abs=1e-3)
