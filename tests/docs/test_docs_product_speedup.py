"""docs/secure_products.md's issue-34 speed-up section against the committed interleaved run
(``python benchmarks/secure_products.py --against 773e389 --large --repeats 3 --out
docs/data/secure_products_speedup.json``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark, section

ROOT = Path(__file__).resolve().parents[2]
SPEEDUP_JSON = ROOT / "docs" / "data" / "secure_products_speedup.json"
SECTION = "## Speed-up of the product (issue 34)"


def check_speedup_section(text: str, doc: dict) -> list[str]:
    """Every table line the benchmark prints from the JSON is in the section, every decimal of the prose is one of
    its cells, the run's date, command and load are named, and each ratio is the ratio of the medians shown."""
    tables = load_benchmark("secure_products_baseline").markdown_speedup(doc)
    problems = [f"missing table line {line!r}" for line in tables.splitlines() if line not in text]
    cells = set(re.findall(r"\d+\.\d+", tables)) | {f"{doc['load_before']:.2f}", f"{doc['load_after']:.2f}"}
    prose = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    problems += [f"the prose quotes {x}, which no table shows" for x in re.findall(r"\d+\.\d+", prose)
                 if x not in cells]
    problems += [f"the section does not name {t!r}" for t in (doc["date"], doc["command"],
                                                               f"{doc['load_before']:.2f}", f"{doc['load_after']:.2f}")
                 if t not in text]
    for r in doc["shapes"]:
        if abs(r["baseline_us_per_row"] / r["current_us_per_row"] - r["speedup"]) > 0.011:
            problems.append(f"{r['shape']}: speed-up {r['speedup']} is not the ratio of the medians")
    return problems


def _doc() -> dict:
    if not SPEEDUP_JSON.is_file():
        pytest.skip("docs/data/secure_products_speedup.json not committed yet")
    return json.loads(SPEEDUP_JSON.read_text(encoding="utf-8"))


def test_the_speedup_section_shows_the_committed_run() -> None:
    doc = _doc()
    assert check_speedup_section(section(ROOT / "docs" / "secure_products.md", SECTION), doc) == []
    assert all(r["exact"] for r in doc["shapes"])


def test_a_changed_speedup_number_is_noticed() -> None:
    doc = _doc()
    text = section(ROOT / "docs" / "secure_products.md", SECTION)
    last = doc["shapes"][-1]
    cell = f"| {last['speedup']:.2f} |"
    assert cell in text
    assert check_speedup_section(text.replace(cell, f"| {last['speedup'] + 0.01:.2f} |"), doc) != []
    assert check_speedup_section(text + "\nIt is 9.87 times faster.\n", doc) != []
