"""docs/benchmarks_utility.md's "budget split under the adaptive solve" section equals the committed measurement
(issue 24): ``python benchmarks/utility_shares.py --out docs/data/utility_shares.json`` writes the JSON and prints the
tables; the page must contain exactly those tables, its run line, and the numbers its reading quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "utility_shares.json"
PAGE = ROOT / "docs" / "benchmarks_utility.md"
HEADING = "## The budget split under the adaptive solve (measured; the default stays)"


def _benchmark():
    return load_benchmark("utility_shares")


def _doc() -> dict:
    return json.loads(JSON.read_text(encoding="utf-8"))


def _section() -> str:
    return PAGE.read_text(encoding="utf-8").split(HEADING, 1)[1]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_section_tables_are_the_committed_json() -> None:
    doc = _doc()
    assert _benchmark().markdown(doc) in _section()
    assert f"({doc['seconds']} s on 2 shared cores at commit {doc['vfl_commit']};" in _section()
    assert doc["splits"] >= 50 and doc["delta"] == 1e-5


def test_a_changed_number_is_caught() -> None:
    doc = _doc()
    doc["rows"][0]["rules"]["0.9"]["median"] += 0.001
    assert _benchmark().markdown(doc) not in _section()


def test_default_column_is_the_utility_benchmarks_default() -> None:
    """Same cells, splits and noise draws as benchmarks/utility.py: the risk-split adaptive fit is its gfm_adaptive."""
    utility = json.loads((ROOT / "docs" / "data" / "utility.json").read_text(encoding="utf-8"))
    default = {(r["dataset"], r["epsilon"]): r["gfm_adaptive"] for r in utility["rows"]}
    shares = {(r["dataset"], r["epsilon"]): r["rules"]["default"]["median"] for r in _doc()["rows"]}
    assert shares.keys() == default.keys()
    for cell, value in shares.items():
        assert value == pytest.approx(default[cell], abs=1e-12), cell


def test_reading_quotes_the_json() -> None:
    doc = _doc()
    rows = {(r["dataset"], r["epsilon"]): r for r in doc["rows"]}
    fixed = [k for k in doc["rows"][0]["rules"] if k not in ("default", "wiener")]
    g1, g05 = rows[("garment", 1.0)]["rules"], rows[("garment", 0.5)]["rules"]
    assert all(g1[k]["median"] < 0.0 for k in fixed)
    best = max(fixed, key=lambda k: g1[k]["median"])
    meet = [k for k in fixed if g05[k]["median"] >= -0.03]
    verdicts = doc["verdicts"]
    assert not any(v["qualifies"] for v in verdicts.values())
    worse = [len(verdicts[k]["worse_cells"]) for k in fixed]
    s10k = {e: rows[("synthetic n=10000", e)]["rules"]["0.9"]["minus_default"] for e in (0.5, 1.0)}
    ff = rows[("forestfires", 1.0)]
    text = _flat(_section()).replace("−", "-")
    wiener = ff["rules"]["wiener"]["median"]
    for quote in (f"every fixed share from {fixed[0]} to {fixed[-1]}: the best is {g1[best]['median']:.4f} at "
                  f"s = {best}, against {g1['default']['median']:.4f} with the risk split",
                  f"is met from s = {meet[0]} on ({g05[meet[0]]['median']:.4f}), but s = {meet[0]} is worse than the "
                  f"default beyond two standard errors in {len(verdicts[meet[0]]['worse_cells'])} cells",
                  f"(from {min(worse)} to {max(worse)} cells)",
                  f"s = 0.9 gains {s10k[0.5]:.3f} at ε = 0.5 and loses {-s10k[1.0]:.3f} at ε = 1",
                  f"(garment ε = 0.5: {rows[('garment', 0.5)]['shares']['wiener']:.3f}, forest fires ε = 1: "
                  f"{ff['shares']['wiener']:.3f}, median test R² {wiener:.1f}) and is worse in "
                  f"{len(verdicts['wiener']['worse_cells'])} cells"):
        assert quote in text, quote
    assert all(w > 0 for w in worse) and s10k[0.5] > 0 > s10k[1.0]


def test_wiener_rule_is_the_equal_split_when_the_noise_is_negligible() -> None:
    """Small noise: the oracle Wiener residual tends to tau_alpha^2 itself, so the reference is the risk rule's, whose
    small-noise limit is the equal split; large alpha noise is (wrongly) free in the oracle, so the share falls."""
    bench = _benchmark()
    assert bench.wiener_alpha_share(11, 10**9, 1.0) == pytest.approx(0.5, abs=0.002)
    assert bench.wiener_alpha_share(28, 414, 0.2) < 0.1


def test_verdict_needs_both_garment_targets_and_no_worse_cell() -> None:
    bench = _benchmark()

    def row(dataset: str, eps: float, median: float, worse: bool = False) -> dict:
        return {"dataset": dataset, "epsilon": eps,
                "rules": {"r": {"median": median, "minus_default": 0.0, "mc_se": 0.0, "worse_beyond_mc_error": worse}}}

    ok = [row("garment", 0.5, -0.03), row("garment", 1.0, 0.0), row("synthetic n=1000", 1.0, 0.1)]
    assert bench.verdicts(ok)["r"]["qualifies"]
    assert not bench.verdicts([row("garment", 0.5, -0.031)] + ok[1:])["r"]["qualifies"]
    assert not bench.verdicts(ok[:2] + [row("synthetic n=1000", 1.0, 0.1, worse=True)])["r"]["qualifies"]


@pytest.mark.slow
def test_quick_run_writes_the_same_kind_of_json(tmp_path) -> None:
    out = tmp_path / "s.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "utility_shares.py"), "--quick", "--out", str(out)],
                   check=True, capture_output=True, timeout=600)
    quick = json.loads(out.read_text(encoding="utf-8"))
    assert {r["dataset"] for r in quick["rows"]} == {"garment", "forestfires", "synthetic n=1000"}
    assert set(_doc()["rows"][0]["rules"]) == set(quick["rows"][0]["rules"])


def test_privacy_md_pointer_matches_the_verdicts() -> None:
    """docs/privacy.md's budget-split section says no other rule beats the risk rule everywhere or reaches the garment
    eps = 1 target under the adaptive solve: both must hold in the JSON."""
    doc = _doc()
    section = _flat((ROOT / "docs" / "privacy.md").read_text(encoding="utf-8").split(
        "### Budget split between the blocks", 1)[1].split("\n### ", 1)[0])
    assert "no fixed share from 0.5 to 0.95 and no re-derivation with a Wiener-shrunk α" in section
    others = {k: v for k, v in doc["verdicts"].items() if k != "default"}
    assert all(v["worse_cells"] for v in others.values())
    assert all(v["garment"]["eps=1"] < 0.0 for v in others.values())
    fixed = [float(k) for k in others if k != "wiener"]
    assert (min(fixed), max(fixed)) == (0.5, 0.95)
