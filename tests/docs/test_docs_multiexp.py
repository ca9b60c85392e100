"""docs/secure_products.md's multi-output multi-exponentiation section (issue 34) against the committed floor run
(``python benchmarks/secure_products.py --floor --large --repeats 3 --out docs/data/secure_products_floor.json``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark, section

ROOT = Path(__file__).resolve().parents[2]
FLOOR_JSON = ROOT / "docs" / "data" / "secure_products_floor.json"
SECTION = "## Multi-output multi-exponentiation (issue 34)"


def check_multiexp_section(text: str, doc: dict) -> list[str]:
    """Every table line the benchmark prints from the JSON must be in the section, every decimal of the prose must
    be one of them, and the floor's multi-exponentiation part must be the best counted method priced at the
    cheapest measured multiplication modulo n^2."""
    bench = load_benchmark("secure_products")
    tables = bench.markdown_multiexp(doc)
    problems = [f"missing table line {line!r}" for line in tables.splitlines() if line and line not in text]
    cells = set(re.findall(r"\d+\.\d+", tables))
    prose = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    problems += [f"the prose quotes {x}, which no table shows" for x in re.findall(r"\d+\.\d+", prose)
                 if x not in cells]
    mul = bench.cheapest_mulmod(doc["units_us"], "n2")
    for r in doc["shapes"]:
        want = r["multiexp_per_row_col"]["best"] * r["d_resp"] * r["groups"] * mul
        if abs(want - r["floor_parts_us_per_row"]["multiexp"]) > 0.05 + 1e-3 * want:
            problems.append(f"{r['shape']}: the floor's multi-exp. part is not the best counted method")
    return problems


def _doc() -> dict:
    doc = json.loads(FLOOR_JSON.read_text(encoding="utf-8"))
    if "multiexp_sorted" not in doc:
        pytest.skip("the committed floor run predates issue 34")
    return doc


def test_the_multiexp_section_shows_the_committed_floor_run() -> None:
    doc = _doc()
    assert check_multiexp_section(section(ROOT / "docs" / "secure_products.md", SECTION), doc) == []
    assert doc["multiexp_sorted"]["exact"]


def test_a_changed_multiexp_number_is_noticed() -> None:
    doc = _doc()
    text = section(ROOT / "docs" / "secure_products.md", SECTION)
    best = f"{doc['shapes'][-1]['multiexp_per_row_col']['best']:.2f}"
    assert best in text
    changed = text.replace(f"| {best} |", f"| {float(best) + 0.01:.2f} |")
    assert check_multiexp_section(changed, doc) != []
