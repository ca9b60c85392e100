"""docs/performance.md, section "Noisy-gradient rounds across parties", quotes docs/data/gd_rounds_cost.json, written
by ``python benchmarks/gd_rounds_cost.py --out docs/data/gd_rounds_cost.json``: its table is the benchmark's own table
of that JSON, and the JSON is a full (not ``--quick``) run at 2048-bit keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark, section, table_rows

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "gd_rounds_cost.json"
HEADING = "## Noisy-gradient rounds across parties"


def test_docs_table_is_the_benchmarks_table_of_the_committed_json():
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    assert not doc["quick"] and doc["command"].startswith("python benchmarks/gd_rounds_cost.py")
    shown = table_rows(section(ROOT / "docs" / "performance.md", HEADING))
    expected = table_rows(load_benchmark("gd_rounds_cost").markdown(doc))
    assert shown == expected
    for row in doc["rows"].values():
        assert row["key_bits"] == 2048 and row["steps"] == 25
    big = doc["rows"]["10^5 x (10 + 10)"]
    assert big["n_rows"] == 100_000 and big["widths"] == [10, 10]
    assert doc["rows"]["forest-fires shape"]["rounds_measured"] == 25


def test_quoted_reading_matches_the_json():
    text = section(ROOT / "docs" / "performance.md", HEADING)
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    big, forest = doc["rows"]["10^5 x (10 + 10)"], doc["rows"]["forest-fires shape"]
    assert f"{big['bytes_per_round'] / 1e6:.0f} MB per round" in text
    assert f"{big['bytes_run'] / 1e9:.1f} GB for 25 rounds" in text
    run = big["cpu_seconds_run"]
    assert f"about {round(run['party A'] + run['party B (label)'], -1):.0f} s" in text
    frun = forest["cpu_seconds_run"]
    assert f"cost {frun['party A'] + frun['party B (label)']:.0f} CPU s and {forest['bytes_run'] / 1e6:.0f} MB" in text


@pytest.mark.slow
def test_benchmark_quick_run_writes_its_json(tmp_path):
    out = tmp_path / "gd.json"
    doc = load_benchmark("gd_rounds_cost").main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == doc and doc["quick"]
    for row in doc["rows"].values():
        assert row["messages_per_round"] == 14 and row["rounds_measured"] == 3


def test_privacy_page_quotes_the_same_costs():
    text = " ".join((ROOT / "docs" / "privacy.md").read_text(encoding="utf-8").split())
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    big, forest = doc["rows"]["10^5 x (10 + 10)"], doc["rows"]["forest-fires shape"]
    cpu = {k: r["cpu_seconds_run"]["party A"] + r["cpu_seconds_run"]["party B (label)"] for k, r in doc["rows"].items()}
    assert (f"send {big['bytes_run'] / 1e9:.1f} GB and take about {round(cpu['10^5 x (10 + 10)'], -1):.0f} CPU s"
            in text)
    assert f"against {cpu['forest-fires shape']:.0f} CPU s and {forest['bytes_run'] / 1e6:.0f} MB" in text
