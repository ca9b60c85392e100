"""docs/audit.md equals the committed audit measurement (issue 24): ``python benchmarks/privacy_audit.py --out
docs/data/audit.json --update-docs docs/audit.md`` writes the JSON and the page's generated tables; the page must
show exactly the tables of the committed JSON, and the prose's claims must hold in it."""

from __future__ import annotations

import copy
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "audit.json"
PAGE = ROOT / "docs" / "audit.md"
SCRIPT = ROOT / "benchmarks" / "privacy_audit.py"


def _benchmark():
    return load_benchmark("privacy_audit")


def _doc() -> dict:
    return json.loads(JSON.read_text(encoding="utf-8"))


def missing_tables(page: str, doc: dict) -> list[str]:
    bench = _benchmark()
    problems = [name for name, table in bench.markdown(doc).items()
                if f"<!-- generated: {name} -->\n{table}\n" not in page]
    if f"<!-- run line -->\n{bench.run_line(doc)}\n" not in page:
        problems.append("run line")
    return problems


def test_the_page_shows_the_committed_tables() -> None:
    doc = _doc()
    assert doc["runs"] == 1_000_000
    assert missing_tables(PAGE.read_text(encoding="utf-8"), doc) == []


def test_a_changed_number_is_caught() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for section, key in (("worst_case", "mu_lower_bound"), ("laplace_maxima", "found"),
                         ("coparty", "epsilon_lower_bound")):
        doc = copy.deepcopy(_doc())
        doc[section][0][key] *= 1.01
        assert section in missing_tables(page, doc)


def test_the_prose_claims_hold_in_the_json() -> None:
    doc = _doc()
    for r in doc["worst_case"]:   # sound mechanisms: bound <= pair <= claim, and the bound comes close
        assert r["mu_lower_bound"] <= r["mu_pair"] < r["mu_claimed"]
        assert r["epsilon_lower_bound"] <= r["epsilon_gdp_lower_bound"] <= r["epsilon_pair"] < r["epsilon_claimed"]
        if r["pair"] == "worst":
            assert r["mu_lower_bound"] > 0.9 * r["mu_pair"]
            assert 0.86 < r["mu_pair"] / r["mu_claimed"] <= math.sqrt(25 / 32) + 1e-9
            if r["budget_shares"]["alpha"] == 0.5:
                assert r["mu_pair"] / r["mu_claimed"] == pytest.approx(math.sqrt(25 / 32), rel=1e-6)
    rows = {r["mechanism"]: r for r in doc["miscalibrated"]}
    caught = {name: r["mu_lower_bound"] > r["mu_claimed"] for name, r in rows.items()}
    assert caught["tau x 0.5"] and caught["tau x 0.8"] and caught["paper calibration, beta released"]
    assert not caught["tau x 0.9"] and rows["tau x 0.9"]["mu_pair"] < rows["tau x 0.9"]["mu_claimed"]
    assert all(r["mu_lower_bound"] <= r["mu_pair"] for r in rows.values())   # never above the truth
    paper_small_delta = [r for r in doc["paper_threshold"] if r["delta"] == 1e-5 and "paper" in r["setting"]]
    assert paper_small_delta and all(r["epsilon_lower_bound"] < r["epsilon_claimed"] for r in paper_small_delta)
    for r in doc["laplace_maxima"]:
        assert r["found"] <= r["tight"] <= r["paper"]
    assert doc["float_note"]["naive_epsilon_lower_bound"] > 4 * doc["float_note"]["epsilon_pair"]


def test_privacy_md_quotes_the_continuous_maxima() -> None:
    """docs/privacy.md's Known limitations quote the searched maxima and the declared values of the JSON."""
    text = (ROOT / "docs" / "privacy.md").read_text(encoding="utf-8")
    flat = " ".join(text.split())
    for model, suffix in (("linear", " (linear, d = 1..4), against declared values of "),
                          ("logistic", ", against ")):
        rows = sorted((r for r in _doc()["laplace_maxima"] if r["model"] == model), key=lambda r: r["d"])
        found = ", ".join(f"{r['found']:.4g}" for r in rows[:-1]) + f" and {rows[-1]['found']:.4g}"
        tight = ", ".join(f"{r['tight']:g}" for r in rows[:-1]) + f" and {rows[-1]['tight']:g}"
        assert found + suffix + tight in flat, (model, found, tight)


def test_update_docs_regenerates_the_same_page(tmp_path: Path) -> None:
    """The one command's docs step, run on a copy from the committed JSON, changes nothing."""
    page, out = tmp_path / "audit.md", tmp_path / "audit.json"
    shutil.copy(PAGE, page)
    shutil.copy(JSON, out)
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--from-json", "--update-docs", str(page)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert page.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")
