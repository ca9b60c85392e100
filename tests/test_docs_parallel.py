"""docs/secure_products.md, "Parallel workers (issue 25)": its tables are the committed measurements of
``python benchmarks/parallel_scaling.py --dask --out docs/data/parallel_scaling.json``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from docs_tables import section

ROOT = Path(__file__).resolve().parents[1]
JSON = ROOT / "docs" / "data" / "parallel_scaling.json"
HEADING = "## Parallel workers (issue 25)"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_parallel_scaling", ROOT / "benchmarks" / "parallel_scaling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
