"""docs/benchmarks_logistic.md and docs/privacy.md's logistic-floor paragraph equal the committed measurement
(issue 24): ``python benchmarks/logistic_utility.py --out docs/data/logistic_utility.json`` writes the JSON and
prints the tables; the page must contain exactly those tables and its run line, and privacy.md the numbers it
quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers.docs_tables import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "logistic_utility.json"
PAGE = ROOT / "docs" / "benchmarks_logistic.md"
SECTION = "### Logistic regression: the eigenvalue floor selected from the release"


def _benchmark():
    return load_benchmark("logistic_utility")


def _doc() -> dict:
    return json.loads(JSON.read_text(encoding="utf-8"))


def _rows() -> dict[tuple[str, float], dict]:
    return {(r["data"], r["epsilon"]): r for r in _doc()["rows"]}


def test_page_tables_are_the_committed_json() -> None:
    doc, page = _doc(), PAGE.read_text(encoding="utf-8")
    assert _benchmark().markdown(doc) in page
    assert f"({doc['seconds']} s on 2 shared cores at commit {doc['vfl_commit']};" in page
    assert f"over {doc['splits']} random 80/20 splits" in page
    assert doc["splits"] >= 50 and doc["delta"] == 1e-5
    assert doc["epsilons"] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]


def test_a_changed_number_is_caught() -> None:
    doc = _doc()
    doc["rows"][0]["gfm"] += 0.0001
    assert _benchmark().markdown(doc) not in PAGE.read_text(encoding="utf-8")


def test_target_is_reported_with_its_reason() -> None:
    cells = {t["cell"]: t for t in _doc()["targets"]}
    assert set(cells) == {"synthetic, eps=0.25", "synthetic, eps=0.5", "synthetic, eps=1"}
    for t in cells.values():
        assert t["met"] == (t["value"] <= 0.01) == (t["reason"] is None)


def test_privacy_md_quotes_the_json() -> None:
    text = (ROOT / "docs" / "privacy.md").read_text(encoding="utf-8")
    assert SECTION in text
    section = " ".join(text.split(SECTION, 1)[1].split("\n### ", 1)[0].split())
    rows = _rows()
    for eps in (0.5, 1.0):
        r = rows[("synthetic", eps)]
        assert (f"ε = {eps:g}: {r['gfm']:.4f} against {r['gfm_before']:.4f} (objective perturbation "
                f"{r['objpert']:.4f})") in section
    for eps in (0.5, 1.0, 8.0):
        r = rows[("synthetic-aniso", eps)]
        assert f"ε = {eps:g}: {r['gfm']:.4f} against {r['gfm_before']:.4f}" in section


def test_quick_run_writes_the_same_kind_of_json(tmp_path) -> None:
    """The smoke run (5 splits, one cell; about 7 s on the busy shared cores) writes JSON of the committed shape."""
    out = tmp_path / "l.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "logistic_utility.py"), "--quick", "--out", str(out)],
                   check=True, capture_output=True, timeout=600)
    quick = json.loads(out.read_text(encoding="utf-8"))
    assert {r["data"] for r in quick["rows"]} == {"synthetic"}
    assert set(_doc()["rows"][0]) == set(quick["rows"][0])
