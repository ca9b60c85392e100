"""docs/performance.md quotes the scale runs committed beside it (issue 25).

``nice -n 10 python benchmarks/scale.py --rows 10000,100000,1000000 --out docs/data/scale`` writes the runs and
``python benchmarks/scale.py --rows "" --out docs/data/scale --extrapolate 10000000,50,50`` the extrapolation
into docs/data/scale.json; ``--step LABEL --steps-out docs/data/scale_steps.json`` records one change at a time
(and docs/data/scale_1e6.json the 10^6 run in other configurations).
The tables, the targets and the extrapolation in the docs are the benchmark's own rendering of that JSON, so a
number in them cannot drift from the measurement, and a verdict ("met") cannot disagree with its number.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.docs_tables import load_benchmark, section

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "performance.md"
SCALE_JSON = ROOT / "docs" / "data" / "scale.json"
STEPS_JSON = ROOT / "docs" / "data" / "scale_steps.json"
VARIANTS_JSON = ROOT / "docs" / "data" / "scale_1e6.json"


def _bench():
    return load_benchmark("scale")


def test_the_scale_table_and_targets_are_the_committed_runs() -> None:
    bench, doc = _bench(), json.loads(SCALE_JSON.read_text())
    text = section(DOC, "## Results")
    assert bench.markdown(doc["runs"]) in text
    assert bench.targets_markdown(doc["runs"], doc["extrapolation"]) in text
    assert any(r["n"] == 10**6 for r in doc["runs"]), "the 10^6 run is the one the targets are about"
    for run in doc["runs"]:
        assert run["date"][:10] in text, "every run's date is stated"
        assert all(code == 0 for code in run["exit_codes"].values())


def test_the_changes_table_is_the_committed_steps() -> None:
    bench, steps = _bench(), json.loads(STEPS_JSON.read_text())["steps"]
    assert len(steps) >= 2
    assert bench.steps_markdown(steps) in section(DOC, "## Results")


def test_the_extrapolation_is_the_committed_one() -> None:
    bench, doc = _bench(), json.loads(SCALE_JSON.read_text())
    e = doc["extrapolation"]
    largest = max(doc["runs"], key=lambda r: r["n"])
    assert e["measured_n"] == largest["n"] and e["measured_cpu_ms_per_row"] == 1e3 * largest["cpu_s_per_row"]
    assert bench.extrapolation_text(e) in section(DOC, "## Extrapolation: 10^7 rows, 50 + 50 features")


def test_the_cost_model_recomputes_the_committed_extrapolation() -> None:
    """The JSON's model numbers are what the library's cost model gives for the JSON's unit costs now (a change
    to the layout, the window choice or the plan shows up here, not silently in the docs)."""
    bench, doc = _bench(), json.loads(SCALE_JSON.read_text())
    e = doc["extrapolation"]
    measured = max(doc["runs"], key=lambda r: r["n"])
    again = bench.extrapolate(measured, e["n"], e["d_alice"], e["d_bob"], e["unit_costs"])
    for mode in ("kept", "per_chunk"):
        for key, value in e[mode].items():
            assert abs(again[mode][key] - value) <= 1e-9 * abs(value), (mode, key)


def test_the_10_6_configurations_table_is_the_committed_runs() -> None:
    """The same 10^6 rows in other configurations (--workers 1; the branch without the pinned pool): its first row
    is the main table's 10^6 run."""
    bench, doc = _bench(), json.loads(SCALE_JSON.read_text())
    steps = json.loads(VARIANTS_JSON.read_text())["steps"]
    assert steps[0]["run"] == next(r for r in doc["runs"] if r["n"] == 10**6)
    assert all(s["run"]["n"] == 10**6 for s in steps)
    assert bench.steps_markdown(steps) in section(DOC, "## Results")
