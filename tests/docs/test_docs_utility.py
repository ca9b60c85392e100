"""docs/benchmarks_utility.md and docs/privacy.md's budget-split paragraph equal the committed measurement
(issue 24): ``python benchmarks/utility.py --out docs/data/utility.json`` writes the JSON and prints the tables; the
page must contain exactly those tables, its run line (seconds, commit), and the numbers privacy.md quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "utility.json"
PAGE = ROOT / "docs" / "benchmarks_utility.md"


def _benchmark():
    return load_benchmark("utility")


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


def test_the_reading_of_the_adaptive_default_matches_the_json() -> None:
    """docs/benchmarks_utility.md's 'Reading the results': where adaptive wins and loses against the floor-only
    solve, the unpenalised intercept losing everywhere on real data, and why 0/1 dummies stay off."""
    rows = {(r["dataset"], r["epsilon"]): r for r in _doc()["rows"]}
    gain = {k: r["adaptive_minus_floor"] for k, r in rows.items()}
    assert all(gain[("garment", e)] > 0 for e in (0.5, 1.0, 2.0))
    assert all(gain[("forestfires", e)] > 0 for e in (1.0, 2.0, 4.0, 8.0))
    assert all(gain[(f"synthetic n={n}", e)] > 0 for n, e in [(1000, e) for e in (0.5, 1, 2, 4, 8)] + [(10000, 0.5)])
    losses = sorted(k for k, r in rows.items() if not k[0].startswith("synthetic") and gain[k] < 0)
    assert losses == [("forestfires", 0.5), ("garment", 4.0), ("garment", 8.0)]
    assert not any(r["adaptive_worse_beyond_mc_error"] for k, r in rows.items() if k[0].startswith("synthetic"))
    real = [k for k in rows if not k[0].startswith("synthetic")]
    assert all(rows[k]["gfm_free_icpt"] < rows[k]["gfm_risk"] for k in real + [("synthetic n=1000", 0.5)])
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    assert "0/1 dummies stay off" in page
    assert rows[("garment", 0.5)]["gfm_adaptive_01"] >= -0.03 and rows[("garment", 1.0)]["gfm_adaptive_01"] >= 0.0
    ff = [rows[("forestfires", e)] for e in (0.5, 1.0, 2.0, 4.0, 8.0)]
    assert all(r["gfm_adaptive_01"] < r["gfm_adaptive"] for r in ff)
    assert all(r["gfm_adaptive"] - r["gfm_adaptive_01"] > 0.5 for r in ff[:2])


def test_privacy_md_adaptive_and_intercept_sections_quote_the_json() -> None:
    doc = _doc()
    rows = {(r["dataset"], r["epsilon"]): r for r in doc["rows"]}
    text = " ".join((ROOT / "docs" / "privacy.md").read_text(encoding="utf-8").split())
    adaptive = text.split("### Adaptive regularisation", 1)[1].split("### ", 1)[0]
    g, f = rows[("garment", 1.0)], rows[("forestfires", 1.0)]
    assert (f"garment ε = 1: {g['gfm_adaptive']:.3f} against {g['gfm_risk']:.3f} median test R²; forest fires ε = 1: "
            f"{f['gfm_adaptive']:.3f} against {f['gfm_risk']:.3f}").replace("-", "−") in adaptive
    intercept = text.split("### Unpenalised intercept (measured, not a default)", 1)[1].split("### ", 1)[0]
    assert f"(forest fires ε = 1: {f['gfm_free_icpt']:.1f} median test R²)".replace("-", "−") in intercept


def test_readme_quotes_the_utility_and_real_data_json() -> None:
    """README's real-data bullet: in-sample medians (examples' results.json) and out-of-sample medians (utility)."""
    rows = {(r["dataset"], r["epsilon"]): r for r in _doc()["rows"]}
    f, g = rows[("forestfires", 1.0)], rows[("garment", 1.0)]
    ins = [json.loads((ROOT / "docs" / "data" / "real_data" / n / "results.json").read_text(encoding="utf-8"))
           ["by_epsilon"]["1"]["gaussian-fm"]["r2_median"] for n in ("forestfires", "garment")]
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"{ins[0]:.3f} / {ins[1]:.3f} against OLS's (with intercept)" in readme
    assert (f"noise) {f['gfm_adaptive']:.3f} / {g['gfm_adaptive']:.3f} against the constant predictor's "
            f"{f['constant']:.3f} / {g['constant']:.3f} and AdaSSP's {f['adassp']:.3f} / {g['adassp']:.3f}") in readme
