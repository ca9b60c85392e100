"""docs/benchmarks_synthetic.md's tables are the committed measurement (issue 24: tables that cannot go stale):
``python benchmarks/privacy_utility.py --no-plots --out DIR --summary-json docs/data/privacy_utility.json`` writes the
JSON, and the page's "All numbers" section must be exactly what ``markdown_tables`` makes of it."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.docs_tables import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks_synthetic.md"
JSON = ROOT / "docs" / "data" / "privacy_utility.json"
HEADING = "## All numbers (results.md of the run)"


def _benchmark():
    return load_benchmark("privacy_utility")


def _tables(report: dict) -> str:
    return _benchmark().markdown_tables(report).replace("### ", "#### ").strip()


def test_all_numbers_section_is_the_committed_json() -> None:
    report = json.loads(JSON.read_text(encoding="utf-8"))
    section = PAGE.read_text(encoding="utf-8").split(HEADING, 1)[1].strip()
    assert section == _tables(report)
    assert report["config"]["repetitions"] == 1000 and report["config"]["delta"] == 1e-5


def test_a_changed_number_is_caught() -> None:
    report = json.loads(JSON.read_text(encoding="utf-8"))
    cell = report["results"]["linear"]["1000"]["gaussian-fm"]["by_epsilon"]["0.5"]
    cell["median"] *= 1.01
    assert PAGE.read_text(encoding="utf-8").split(HEADING, 1)[1].strip() != _tables(report)


def test_readme_quotes_the_gaussian_against_laplace_cell() -> None:
    report = json.loads(JSON.read_text(encoding="utf-8"))
    cells = report["results"]["linear"]["10000"]
    g, lap = (cells[m]["by_epsilon"]["0.5"]["median"] for m in ("gaussian-fm", "laplace-fm-paper"))
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"Gaussian FM test MSE {g:.0f} vs Laplace FM {lap:.0f}, about {g / lap:.1f}×" in readme


def test_key_results_quote_the_logistic_cells() -> None:
    """The logistic numbers of 'Key results' (the Gaussian/Laplace sentence and the floor-selection bullet's current
    values) are the committed JSON's medians."""
    cells = json.loads(JSON.read_text(encoding="utf-8"))["results"]["logistic"]

    def med(n: str, method: str, eps: str) -> float:
        return cells[n][method]["by_epsilon"][eps]["median"]

    text = " ".join(PAGE.read_text(encoding="utf-8").split("## Caveats", 1)[0].split())
    assert (f"Logistic, same setting: accuracy {med('10000', 'gaussian-fm', '0.5'):.3f} (Gaussian) vs "
            f"{med('10000', 'laplace-fm-paper', '0.5'):.3f} / {med('10000', 'laplace-fm-tight', '0.5'):.3f} (Laplace "
            f"paper / tight), non-private {cells['10000']['non-private']['value']:.3f}") in text
    for n, eps in (("10000", "0.5"), ("10000", "1"), ("100000", "0.1"), ("1000", "1"), ("10000", "0.1")):
        assert f"→ {med(n, 'gaussian-fm', eps):.3f}" in text, (n, eps)
