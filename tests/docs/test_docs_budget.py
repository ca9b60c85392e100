"""docs/privacy.md, "A lifetime budget": the averaging-attack numbers equal docs/data/budget_averaging.json
(written by ``python benchmarks/budget_averaging.py``)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_budget_section_quotes_the_committed_measurement():
    doc = json.loads((ROOT / "docs" / "data" / "budget_averaging.json").read_text())
    text = (ROOT / "docs" / "privacy.md").read_text()
    section = text[text.index("## A lifetime budget"):text.index("## Known limitations")]
    section = " ".join(section.split())
    quoted = [f"RMS error of {doc['single_run_rms_error']:.3f}",
              f"average of {doc['runs_to_one_tenth_of_single_run_error']} runs reaches a tenth",
              f"{doc['runs_to_rms_error_0.01']} runs reach 0.01",
              f"near {doc['bias_floor_rms_error']:.2g}",
              f"ε = {doc['ledger_epsilon_of_k_runs']['64']:.1f} after 64 runs",
              f"{doc['ledger_epsilon_of_k_runs']['256']:.1f} after 256",
              f"ε = {doc['ledger_epsilon_of_k_runs']['2']:.3f} (not 2)"]
    for q in quoted:
        assert q in section, q


def test_the_refusal_line_in_the_docs_is_the_ledgers_own(tmp_path):
    """docs/privacy.md, "When a plan is charged": the quoted refusal is what the ledger says after one laplace-fm
    run at (true) epsilon 1 under --budget 1.5 when a second one arrives (regenerated here, not typed)."""
    import pytest

    from vfl.exceptions import BudgetError
    from vfl.privacy.ledger import Budget, Ledger, Spend, dataset_key

    ledger = Ledger(tmp_path / "l.sqlite", party="bob")
    spend = Spend("laplace-fm", 1.0, 0.0, {"kind": "laplace", "epsilon": 1.0})
    key = dataset_key(["visits", "spend"], 300)
    ledger.reserve(key, "run-1", spend, budget=Budget(1.5))
    with pytest.raises(BudgetError) as refused:
        ledger.check(key, "run-2", spend, budget=Budget(1.5))
    text = " ".join((ROOT / "docs" / "privacy.md").read_text().split())
    assert f"vfl: error: {refused.value}" in text, str(refused.value)


def test_the_threat_models_budget_numbers_are_the_ledgers_composition():
    """docs/threat_model.md (the coordinator burning a budget with refused plans): three and four Gaussian runs at
    (1, 1e-5), the true epsilon bob's ledger reserved on f437015 for each refused plan, compose to the quoted
    1.835 and 2.155 (dp-accounting PLD at the budget's delta)."""
    import pytest

    from vfl.privacy.calibration import calibrate_mu
    from vfl.privacy.ledger import compose, gaussian_spend

    pytest.importorskip("dp_accounting")
    run = gaussian_spend("gaussian-fm", 1.0, 1e-5, calibrate_mu(1.0, 1e-5))
    three, four = (compose([run] * k, 1e-5).epsilon for k in (3, 4))
    text = " ".join((ROOT / "docs" / "threat_model.md").read_text().split())
    assert f"three such plans at ε = 1 composed to {three:.3f} of bob's 2.0" in text, three
    assert f"his next honest plan, {four:.3f} composed, was refused for budget" in text, four
