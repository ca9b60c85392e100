"""docs/psi.md's table of candidate groups (issue 34) is benchmarks/psi.py's rendering of
docs/data/psi_primitives.json, and the choice it states is the cheapest row.

``python benchmarks/psi.py --primitives 20000 --json docs/data/psi_primitives.json`` wrote the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.docs_tables import load_benchmark, section

ROOT = Path(__file__).resolve().parents[2]
DOC, HEADING = ROOT / "docs" / "psi.md", "## Choice of group and library (measured, issue 34)"
JSON = ROOT / "docs" / "data" / "psi_primitives.json"


def test_the_primitives_table_is_the_json_and_the_chosen_row_is_the_cheapest() -> None:
    bench, doc = load_benchmark("psi"), json.loads(JSON.read_text())
    text = section(DOC, HEADING)
    assert bench.primitives_markdown(doc) in text
    assert doc["command"].split("python ", 1)[1] in text and doc["code"] in text and doc["date"][:10] in text
    ours = next(r for r in doc["rows"] if r["backend"].startswith("vfl:"))
    others = [r for r in doc["rows"] if r is not ours]
    assert len(others) >= 3   # the checked conversion, the RFC 9380 RO shape and Ed25519 at least
    # the ring's cost per ID and party is one hash + mult and one mult (K = 2)
    assert all(ours["hash_and_mult_us"] + ours["mult_us"] < r["hash_and_mult_us"] + r["mult_us"] for r in others)
