"""docs/privacy.md's utility cost of two-sided noise equals the committed measurement (issue 20).

The section "Noise shared by both parties of a cross block" quotes docs/data/two_sided_noise.json, written by
``python benchmarks/two_sided_noise.py --out docs/data/two_sided_noise.json``: every row of the JSON is a row of the
section's table with the same numbers (to the digits printed), and the section states the number of splits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.docs_tables import same_to_shown_digits as _same
from helpers.docs_tables import table_rows as _rows

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "two_sided_noise.json"
DATA_DIR = ROOT.parent / "shared" / "data"
HEADING = "## Noise shared by both parties of a cross block"


def _section() -> str:
    text = (ROOT / "docs" / "privacy.md").read_text(encoding="utf-8")
    assert HEADING in text
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def differences(section: str, doc: dict) -> list[str]:
    rows, problems = _rows(section), []
    for r in doc["rows"]:
        label = f"{r['dataset']}, {r['epsilon']:g}"
        if label not in rows:
            problems.append(f"no table row {label!r}")
            continue
        want = [r["none"]["mse"]["median"], r["one_sided"]["mse"]["median"], r["two_sided"]["mse"]["median"],
                r["mse_ratio"], r["none"]["r2"]["median"], r["one_sided"]["r2"]["median"],
                r["two_sided"]["r2"]["median"]]
        problems += [f"{label}: cell {i + 1} is {c}, the JSON has {v!r}"
                     for i, (c, v) in enumerate(zip(rows[label], want, strict=True)) if not _same(c, v)]
    if f"{doc['splits']} random train/test" not in section:
        problems.append(f"the section does not state the {doc['splits']} splits")
    return problems


def test_the_two_sided_noise_numbers_in_privacy_md_are_the_committed_measurement() -> None:
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    assert doc["splits"] >= 50 and doc["epsilons"] == [0.5, 1.0, 2.0] and len(doc["rows"]) == 9
    assert {r["dataset"] for r in doc["rows"]} == {"synthetic", "forestfires", "garment"}
    assert differences(_section(), doc) == []


def test_a_changed_number_is_caught() -> None:
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    doc["rows"][4]["two_sided"]["mse"]["median"] *= 1.01
    assert any("cell 3" in p for p in differences(_section(), doc))


@pytest.mark.skipif(not (DATA_DIR / "forestfires.csv").is_file(), reason="../shared/data absent")
def test_the_benchmark_prints_the_table_it_writes(tmp_path: Path) -> None:
    """The script runs (a 2-split smoke run on ../shared/data)."""
    out = tmp_path / "two_sided.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "two_sided_noise.py"), "--splits", "2",
                          "--data-dir", str(DATA_DIR), "--out", str(out)], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert len(doc["rows"]) == 9 and "| synthetic, 0.5 |" in run.stdout
    assert all(r["two_sided"]["mse"]["median"] > 0 for r in doc["rows"])
