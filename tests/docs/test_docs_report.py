"""docs/report.md's planner-vs-benchmark table is the committed measurement (issue 31):
``python benchmarks/planner_check.py --out docs/data/planner_check.json`` writes the JSON and prints the table; the
page must contain exactly that table, and a changed number must be caught."""

from __future__ import annotations

import json
import math
from pathlib import Path

from helpers.docs_tables import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
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


def test_the_run_line_and_the_target_verdicts_are_the_jsons() -> None:
    """The page states the run (splits, replicates, seconds, commit) and every verdict is recomputed from the numbers:
    +-25 % where the measurement resolves the cell (4 combined standard errors), else 2 combined standard errors."""
    doc, page = _doc(), PAGE.read_text(encoding="utf-8")
    assert (f"({doc['splits']} splits per cell, {doc['planner_replicates']} planner replicates per ε; "
            f"{doc['seconds']} s on 2 shared cores at commit {doc['vfl_commit']}.)") in page
    for r in doc["rows"]:
        diff, se = abs(r["predicted_r2_lost"] - r["measured_r2_lost"]), math.hypot(r["measured_se"], r["predicted_se"])
        assert r["resolvable"] == (r["measured_r2_lost"] > 4 * se)
        assert r["met"] == (diff <= (0.25 * r["measured_r2_lost"] if r["resolvable"] else 2 * se))


def test_logistic_measured_column_is_the_committed_logistic_benchmark() -> None:
    bench = json.loads((ROOT / "docs" / "data" / "logistic_utility.json").read_text(encoding="utf-8"))
    measured = {r["epsilon"]: r["taylor"] - r["gfm"] for r in bench["rows"] if r["data"] == "synthetic"}
    rows = _doc()["logistic"]
    assert rows and all(r["measured_accuracy_lost"] == measured[r["epsilon"]] for r in rows)
