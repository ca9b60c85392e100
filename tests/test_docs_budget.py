"""docs/privacy.md, "A lifetime budget": the averaging-attack numbers equal docs/data/budget_averaging.json
(written by ``python benchmarks/budget_averaging.py``)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).parents[1]


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
