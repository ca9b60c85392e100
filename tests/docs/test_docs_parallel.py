"""docs/secure_products.md, "Parallel workers (issue 25)": its tables are the committed measurements of
``python benchmarks/parallel_scaling.py --dask --out docs/data/parallel_scaling.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark, section

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "parallel_scaling.json"
HEADING = "## Parallel workers (issue 25)"


def _bench():
    return load_benchmark("parallel_scaling")


@pytest.mark.skipif(not JSON.is_file(), reason="docs/data/parallel_scaling.json not committed yet")
def test_the_parallel_tables_are_the_committed_measurements() -> None:
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    text = section(ROOT / "docs" / "secure_products.md", HEADING)
    missing = [line for line in _bench().markdown(doc).splitlines() if line and line not in text]
    assert missing == []
    assert doc["date"] in text and doc["command"] in text
    runs = [r[f"workers_{w}"] for r in doc["shapes"] + doc["dask_shapes"] for w in (1, 2)]
    assert runs and all(run["exact"] for run in runs)
    assert {r["shape"] for r in doc["shapes"]} == {r["shape"] for r in doc["dask_shapes"]}


@pytest.mark.skipif(not JSON.is_file(), reason="docs/data/parallel_scaling.json not committed yet")
def test_the_reading_quotes_the_committed_speed_ups() -> None:
    """The prose under the tables quotes the wall speed-ups of the committed run (2 decimals), not older ones."""
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    text = " ".join(section(ROOT / "docs" / "secure_products.md", HEADING).split())
    forest, large = doc["shapes"]
    dask_forest, dask_large = doc["dask_shapes"]
    for value in (large["speedup_2_over_1"], large["warm_speedup_2_over_1"], dask_large["speedup_2_over_1"],
                  forest["speedup_2_over_1"], forest["warm_speedup_2_over_1"], dask_forest["speedup_2_over_1"]):
        assert f"{value:.2f}×" in text, value
    met = [r["speedup_2_over_1"] >= 1.8 for r in (large, dask_large)]
    assert all(met) == ("≥ 1.8× on two idle cores is met at that size" in text)


@pytest.mark.skipif(not JSON.is_file(), reason="docs/data/parallel_scaling.json not committed yet")
def test_performance_md_quotes_the_same_dask_and_local_speed_ups() -> None:
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    text = " ".join(section(ROOT / "docs" / "performance.md", "## Dask workers").split())
    local, dask = doc["shapes"][1], doc["dask_shapes"][1]
    assert f"{dask['speedup_2_over_1']:.2f}× wall" in text and f"{local['speedup_2_over_1']:.2f}×" in text
    assert f"{dask['cpu_ratio_2_over_1']:.2f}× the CPU" in text


@pytest.mark.skipif(not JSON.is_file(), reason="docs/data/parallel_scaling.json not committed yet")
def test_the_reading_quotes_dask_buckets_kept_against_per_chunk_tasks() -> None:
    """Issue 34: both Dask variants ran in the committed run, exact, and the prose quotes their CPU seconds."""
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    text = " ".join(section(ROOT / "docs" / "secure_products.md", HEADING).split())
    perf = " ".join(section(ROOT / "docs" / "performance.md", "## Dask workers").split())
    large = doc["dask_shapes"][1]
    for w in ("1", "2"):
        kept, per_chunk = large[f"workers_{w}"], large[f"workers_{w}_per_chunk"]
        assert kept["exact"] and per_chunk["exact"]
        assert f"{kept['cpu_s']:.2f}" in text and f"{per_chunk['cpu_s']:.2f}" in text
    kept, per_chunk = large["workers_2"]["cpu_s"], large["workers_2_per_chunk"]["cpu_s"]
    assert f"{kept:.2f} CPU-s on 2 workers against {per_chunk:.2f}" in perf
