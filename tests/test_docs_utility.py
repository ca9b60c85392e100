"""docs/benchmarks_utility.md and docs/privacy.md's budget-split paragraph equal the committed measurement
(issue 24): ``python benchmarks/utility.py --out docs/data/utility.json`` writes the JSON and prints the tables; the
page must contain exactly those tables, its run line (seconds, commit), and the numbers privacy.md quotes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JSON = ROOT / "docs" / "data" / "utility.json"
PAGE = ROOT / "docs" / "benchmarks_utility.md"


def _benchmark():
    spec = importlib.util.spec_from_file_location("utility_benchmark", ROOT / "benchmarks" / "utility.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _doc() -> dict:
    return json.loads(JSON.read_text(encoding="utf-8"))


def test_page_tables_are_the_committed_json() -> None:
    doc, page = _doc(), PAGE.read_text(encoding="utf-8")
    assert _benchmark().markdown(doc) in page
    assert f"({doc['seconds']} s on 2 shared cores at commit {doc['vfl_commit']};" in page
    assert f"over {doc['splits']} random 80/20 splits" in page
    assert doc["splits"] >= 50 and doc["delta"] == 1e-5


def test_a_changed_number_is_caught() -> None:
    doc = _doc()
    doc["rows"][0]["gfm_risk"] += 0.001
    assert _benchmark().markdown(doc) not in PAGE.read_text(encoding="utf-8")


def test_privacy_md_quotes_the_json() -> None:
    """The budget-split section's measured sentence: forest fires eps = 0.5 (risk vs equal), the cells where the
    default loses, and 'never worse beyond MC error' on the synthetic cells."""
    doc = _doc()
    text = (ROOT / "docs" / "privacy.md").read_text(encoding="utf-8")
    section = " ".join(text.split("### Budget split between the blocks", 1)[1].split("\n### ", 1)[0].split())
    rows = {(r["dataset"], r["epsilon"]): r for r in doc["rows"]}
    ff = rows[("forestfires", 0.5)]
    assert f"forest fires ε = 0.5: {ff['gfm_risk']:.3f} against {ff['gfm_equal']:.3f}".replace("-", "−") in section
    real = [r["risk_minus_equal"] for k, r in rows.items() if not k[0].startswith("synthetic")]
    assert f"(by {min(real):.3f} to {max(real):.3f} in median test R²" in section
    assert not any(r["worse_beyond_mc_error"] for k, r in rows.items() if k[0].startswith("synthetic"))


def test_targets_are_reported_with_reasons() -> None:
    doc = _doc()
    cells = {t["cell"]: t for t in doc["targets"]}
    for cell in ("garment, eps=1", "garment, eps=0.5", "forestfires, eps=1"):
        assert cell in cells
        t = cells[cell]
        assert t["met"] == (t["reason"] is None)
    assert sum(c.startswith("synthetic") for c in cells) == 15


@pytest.mark.slow
def test_quick_run_writes_the_same_kind_of_json(tmp_path) -> None:
    out = tmp_path / "u.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "utility.py"), "--quick", "--out", str(out)],
                   check=True, capture_output=True, timeout=600)
    quick = json.loads(out.read_text(encoding="utf-8"))
    assert {r["dataset"] for r in quick["rows"]} == {"garment", "forestfires", "synthetic n=1000"}
    assert set(_doc()["rows"][0]) == set(quick["rows"][0])


def test_paired_fits_share_their_noise_draws() -> None:
    """The risk and equal split fits of one split use the same standard normal draws (the benchmark's paired
    comparison): fitting twice from the same seeds gives the same model; only the taus differ between splits."""
    import numpy as np

    bench = _benchmark()
    table = bench.synthetic_table(1000, 1)
    fm = bench.VerticalFM(table, np.arange(1000))
    pair = tuple(np.random.SeedSequence(3).spawn(2))
    first, again = fm.fit(1.0, pair, "risk"), fm.fit(1.0, pair, "risk")
    np.testing.assert_array_equal(first[0], again[0])
    other = fm.fit(1.0, tuple(np.random.SeedSequence(4).spawn(2)), "risk")
    assert not np.array_equal(first[0], other[0])
