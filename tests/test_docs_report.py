"""docs/report.md's planner-vs-benchmark table is the committed measurement (issue 31):
``python benchmarks/planner_check.py --out docs/data/planner_check.json`` writes the JSON and prints the table; the
page must contain exactly that table, and a changed number must be caught."""

from __future__ import annotations

import json
from pathlib import Path

from docs_tables import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
JSON = ROOT / "docs" / "data" / "planner_check.json"
PAGE = ROOT / "docs" / "report.md"


def _doc() -> dict:
    return json.loads(JSON.read_text(encoding="utf-8"))


def test_page_table_is_the_committed_json() -> None:
    doc = _doc()
    assert load_benchmark("planner_check").markdown(doc) in PAGE.read_text(encoding="utf-8")
    assert doc["splits"] >= 50 and doc["tolerance"] == 0.25
    assert {r["n_train"] for r in doc["rows"]} == {1_000, 10_000, 100_000}


def test_a_changed_number_is_caught() -> None:
    doc = _doc()
    doc["rows"][0]["predicted_r2_lost"] += 0.001
    assert load_benchmark("planner_check").markdown(doc) not in PAGE.read_text(encoding="utf-8")


def test_every_resolvable_cell_is_within_25_percent() -> None:
    """The issue's target, on the committed run: the prediction within +-25 % of the measurement wherever the
    measurement resolves it (docs/report.md says how the rest are judged)."""
    for r in _doc()["rows"]:
        if r["resolvable"]:
            assert abs(r["predicted_r2_lost"] - r["measured_r2_lost"]) <= 0.25 * r["measured_r2_lost"], r
