"""docs/benchmarks_utility.md's section on noisy gradients and the rule, and docs/privacy.md's "Choosing the release",
equal the two committed runs of benchmarks/utility_gd.py (issue 33): the split seeds of the first run fixed the rule,
the second run (disjoint split seeds, after the rule was fixed) confirms it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from docs_tables import load_benchmark

from vfl.privacy.release_choice import CLIP_THRESHOLD, GRADIENT_THRESHOLD, NOISE_THRESHOLD, choose_release

ROOT = Path(__file__).resolve().parents[1]
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
