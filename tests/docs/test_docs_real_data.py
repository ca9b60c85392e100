"""docs/benchmarks_real_data.md's tables are generated from the committed results.json of the two examples (issue 24:
tables that cannot go stale): ``python examples/forest_fires.py --repetitions 1000 --no-plots --out
docs/data/real_data/forestfires`` and ``python examples/garment.py ... --out docs/data/real_data/garment`` write the
JSON; the page must contain, for each, exactly the section ``examples/_common.py::docs_section`` makes from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks_real_data.md"
sys.path.insert(0, str(ROOT / "examples"))

from _common import docs_section  # noqa: E402


def _results(name: str) -> dict:
    return json.loads((ROOT / "docs" / "data" / "real_data" / name / "results.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["forestfires", "garment"])
def test_page_sections_are_the_committed_json(name) -> None:
    results = _results(name)
    assert results["repetitions"] == 1000 and results["fm_fit_intercept"] is True
    assert docs_section(results) in PAGE.read_text(encoding="utf-8")


def test_a_changed_number_is_caught() -> None:
    results = _results("garment")
    results["by_epsilon"]["1"]["gaussian-fm"]["r2_median"] += 0.001
    assert docs_section(results) not in PAGE.read_text(encoding="utf-8")


def test_page_says_why_some_fits_have_no_intercept() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert _results("garment")["no_intercept_reason"] in page
    assert "fit_intercept=False" not in page.split("## Setup", 1)[1].split("## ", 1)[0].replace(
        "`fit_intercept=False` before issue 24", "")
