"""docs/privacy.md, paragraph "Noisy gradients against a hostile co-party", quotes docs/data/gd_hostile_noise.json,
written by ``python benchmarks/gd_hostile_noise.py --out docs/data/gd_hostile_noise.json``: its table is the
benchmark's own table of that JSON, the JSON is what the library computes today, and the quoted range is the
JSON's."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.docs_tables import load_benchmark, table_rows

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "gd_hostile_noise.json"
MARK = "*Noisy gradients against a hostile co-party.*"


def _paragraph() -> str:
    text = (ROOT / "docs" / "privacy.md").read_text(encoding="utf-8")
    assert MARK in text
    return text.split(MARK, 1)[1].split("\n### ", 1)[0]


def test_docs_table_is_the_benchmarks_table_of_the_committed_json(tmp_path):
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    assert doc["command"].startswith("python benchmarks/gd_hostile_noise.py")
    bench = load_benchmark("gd_hostile_noise")
    assert table_rows(_paragraph()) == table_rows(bench.markdown(doc))
    fresh = bench.main(["--out", str(tmp_path / "gd.json")])   # public facts: no data
    assert fresh["rows"] == doc["rows"]


def test_quoted_ratio_range_matches_the_json():
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    ratios = [r["sigma_ratio"] for r in doc["rows"].values()]
    text = " ".join(_paragraph().split())
    assert f"σ grows by a factor {min(ratios):.2f}-{max(ratios):.2f}" in text
    tm = " ".join((ROOT / "docs" / "threat_model.md").read_text(encoding="utf-8").split())
    assert f"σ grows by {min(ratios):.1f}-{max(ratios):.1f}×" in tm
