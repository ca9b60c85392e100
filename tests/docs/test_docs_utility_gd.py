"""docs/benchmarks_utility.md's section on noisy gradients and the rule, and docs/privacy.md's "Choosing the release",
equal the two committed runs of benchmarks/utility_gd.py (issue 33): the split seeds of the first run fixed the rule,
the second run (disjoint split seeds, after the rule was fixed) confirms it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark

from vfl.privacy.release_choice import CLIP_THRESHOLD, GRADIENT_THRESHOLD, NOISE_THRESHOLD, choose_release

ROOT = Path(__file__).resolve().parents[2]
RUNS = {"rule": ROOT / "docs" / "data" / "utility_gd.json",
        "confirm": ROOT / "docs" / "data" / "utility_gd_confirm.json"}
PAGE = ROOT / "docs" / "benchmarks_utility.md"


def _doc(which: str) -> dict:
    return json.loads(RUNS[which].read_text(encoding="utf-8"))


def _flat(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


@pytest.mark.parametrize("which", ["rule", "confirm"])
def test_page_tables_are_the_committed_json(which: str) -> None:
    doc, page = _doc(which), PAGE.read_text(encoding="utf-8")
    assert load_benchmark("utility_gd").markdown(doc) in page
    assert f"({doc['seconds']} s on 2 shared cores at commit {doc['vfl_commit']}, {doc['splits']} splits, " \
           f"seed {doc['seed']})" in page
    assert doc["delta"] == 1e-5 and doc["splits"] >= 20


def test_the_two_runs_use_disjoint_splits() -> None:
    assert _doc("rule")["seed"] != _doc("confirm")["seed"]
    assert [(r["dataset"], r["epsilon"]) for r in _doc("rule")["rows"]] == \
        [(r["dataset"], r["epsilon"]) for r in _doc("confirm")["rows"]]


def test_a_changed_number_is_caught() -> None:
    doc = _doc("confirm")
    doc["rows"][0]["r2_auto"] += 0.0001
    assert load_benchmark("utility_gd").markdown(doc) not in PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize("which", ["rule", "confirm"])
def test_the_rule_recorded_in_the_json_is_the_library_rule(which: str) -> None:
    for r in _doc(which)["rows"]:
        c = choose_release("linear", r["n_train"], r["d"], r["epsilon"], 1e-5)
        assert r["auto_choice"] == f"{c.mechanism}/{c.row_norm}"


def test_privacy_md_states_the_threshold() -> None:
    text = _flat(ROOT / "docs" / "privacy.md")
    section = text.split("### Choosing the release from public facts", 1)[1].split("### ", 1)[0]
    assert f"| q < {CLIP_THRESHOLD:g} | Gaussian FM (matrix) | scaled" in section
    assert f"| {CLIP_THRESHOLD:g} ≤ q < {GRADIENT_THRESHOLD:g} | Gaussian FM (matrix) | clipped" in section
    assert f"| q = d·λ_floor ≥ {GRADIENT_THRESHOLD:g} and q < {NOISE_THRESHOLD:g} | noisy gradients" in section
    assert f"| q ≥ {NOISE_THRESHOLD:g} | Gaussian FM (matrix) | scaled" in section


def _summary(doc: dict) -> dict:
    """The counts the page's reading quotes, computed from one run's JSON."""
    rows = doc["rows"]
    cand = ("gfm", "gfm_clip", "ngd_once_clip")   # the rule's three candidates (linear)
    return {
        "garment_eps1": next(r["r2_auto"] for r in rows if r["dataset"] == "garment" and r["epsilon"] == 1.0),
        "le_peer": sum(r["auto_over_best_peer"] <= 1.0 for r in rows),
        "best_of_three": sum(r["r2_auto"] >= max(r[f"r2_{c}"] for c in cand) for r in rows),
        "relaxed_floor_wins": sum(r["r2_relaxed_floor"] >= r["r2_relaxed_adaptive"] for r in rows),
        "cells": len(rows),
    }


def test_the_reading_quotes_both_runs() -> None:
    page = _flat(PAGE)
    reading = page.split("## Noisy gradients and the release rule (issue 33)", 1)[1]
    a, b = _summary(_doc("rule")), _summary(_doc("confirm"))
    assert (f"garment at ε = 1: {a['garment_eps1']:.4f} (first set) and {b['garment_eps1']:.4f} (second set)"
            .replace("-", "−")) in reading
    assert (f"excess MSE at most the best peer's in {a['le_peer']} of {a['cells']} cells (first set) and "
            f"{b['le_peer']} of {b['cells']} (second set)") in reading
    assert (f"the best of its three candidates in {a['best_of_three']} of {a['cells']} cells (first set) and "
            f"{b['best_of_three']} of {b['cells']} (second set)") in reading
    assert (f"Relaxed FM with the floor is at least as good as with the adaptive solve in {a['relaxed_floor_wins']} "
            f"of {a['cells']} cells (first set) and {b['relaxed_floor_wins']} of {b['cells']} (second set)") in reading
    met = a["garment_eps1"] >= 0 and b["garment_eps1"] >= 0
    assert ("garment ε = 1 target (test R² ≥ 0) is met" if met else "garment ε = 1 target (test R² ≥ 0) is not met") \
        in reading


def test_the_cells_where_a_peer_is_ahead_are_the_ones_named() -> None:
    named = {"rule": {("garment", 1.0), ("garment", 2.0), ("synthetic n=1000", 1.0), ("synthetic n=1000", 2.0)},
             "confirm": {("garment", 1.0), ("garment", 2.0), ("garment", 4.0), ("synthetic n=1000", 1.0),
                         ("synthetic n=1000", 2.0)}}
    for which, cells in named.items():
        rows = _doc(which)["rows"]
        ahead = {(r["dataset"], r["epsilon"]) for r in rows if r["auto_over_best_peer"] > 1.0}
        assert {c for c in ahead if c[0] != "forestfires"} == cells
        assert all(next(r for r in rows if (r["dataset"], r["epsilon"]) == c)["best_peer"] == "ngd_peer" for c in cells)
        for r in rows:
            if r["dataset"] == "forestfires" and r["epsilon"] in (4.0, 8.0):
                assert r["r2_auto"] > max(r["r2_adassp"], r["r2_ngd_peer"])
                assert (r["auto_over_best_peer"] > 1.0) == (which == "confirm")


def test_relaxed_fm_keeps_the_adaptive_default_as_measured() -> None:
    """The reading: the floor alone wins at synthetic n = 10^3 (eps = 1, 2, 4), loses on garment (eps <= 4) and on
    forest fires (eps >= 1), in both runs; the library default follows (vfl.fm.solver.default_regularization)."""
    from vfl.fm.solver import default_regularization

    for which in ("rule", "confirm"):
        for r in _doc(which)["rows"]:
            gain = r["r2_relaxed_floor"] - r["r2_relaxed_adaptive"]
            if r["dataset"] == "synthetic n=1000" and r["epsilon"] in (1.0, 2.0, 4.0):
                assert gain > 0
            if (r["dataset"] == "garment" and r["epsilon"] <= 4) or (r["dataset"] == "forestfires"
                                                                      and r["epsilon"] >= 1):
                assert gain < 0
    assert default_regularization("linear", "relaxed-fm") == "adaptive"
