"""docs/inference.md's "Every replicate de-biased by its own world" equals the committed measurements (issue 31).

The section quotes docs/data/inference_replicate_screen.json (benchmarks/inference_spectrum.py, four ``--worlds`` runs
merged with ``merge-worlds``) and docs/data/inference_replicate.json (benchmarks/inference_coverage.py with the new
default, main run and confirmation run on disjoint seeds, merged): every row of each JSON is a row of the section's
tables with the same numbers to the digits shown, and the sentences under them follow from the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.docs_tables import load_benchmark, section
from helpers.docs_tables import same_to_shown_digits as _same
from helpers.docs_tables import table_rows as _rows

ROOT = Path(__file__).resolve().parents[2]
SCREEN = ROOT / "docs" / "data" / "inference_replicate_screen.json"
GRID = ROOT / "docs" / "data" / "inference_replicate.json"
HEADING = "## Every replicate de-biased by its own world"


def _section() -> str:
    return section(ROOT / "docs" / "inference.md", HEADING)


def _text() -> str:
    return " ".join(_section().split())


def screen_differences(section: str, doc: dict) -> list[str]:
    bench = load_benchmark("inference_spectrum")
    rows, problems = _rows(section.split("**The screen**", 1)[1].split("**The full grid", 1)[0]), []
    for r in doc["rows"]:
        label = bench.label(r)
        if label not in rows:
            problems.append(f"no table row {label!r}")
            continue
        cells, want = rows[label], [(rows[label][0], r["sets"])]
        for i, k in enumerate(doc["worlds"]):
            mean, span = cells[1 + 2 * i].split(", ")
            lo, hi = span.split("-")
            want += [(mean, r[k]["coverage_mean"]), (lo, r[k]["coverage_min"]), (hi, r[k]["coverage_max"]),
                     (cells[2 + 2 * i], r[k]["width_ratio_to_ols"])]
        want.append((cells[-1], r["ols"]["coverage_mean"]))
        problems += [f"{label}: {c} shown, the JSON has {v!r}" for c, v in want if not _same(c, float(v))]
    return problems


def grid_differences(section: str, doc: dict) -> list[str]:
    label_of = load_benchmark("inference_coverage").cell_label
    rows, problems = _rows(section.split("**The full grid", 1)[1]), []
    for key, mark in (("rows", ""), ("confirm", " (confirm)")):
        for r in doc.get(key, []):
            label = label_of(r) + mark
            if label not in rows:
                problems.append(f"no table row {label!r}")
                continue
            c = rows[label]
            lo, hi = c[2].split("-")
            a_mean, a_min = c[7].split(", ")
            want = [(c[0], r["sets"]), (c[1], r["coverage_mean"]), (lo, r["coverage_min"]), (hi, r["coverage_max"]),
                    (c[3], r["median_width_mean"]), (c[4], r["ols_median_width_mean"]), (c[5], r["width_ratio_to_ols"]),
                    (c[6], r["naive_coverage_mean"]), (a_mean, r["analytic_coverage_mean"]),
                    (a_min, r["analytic_coverage_min"]), (c[8], r["analytic_median_width_mean"])]
            problems += [f"{label}: {s} shown, the JSON has {v!r}" for s, v in want if not _same(s, float(v))]
    return problems


def test_the_screen_table_is_the_committed_measurement() -> None:
    doc = json.loads(SCREEN.read_text(encoding="utf-8"))
    assert doc["worlds"] == ["matched", "replicate", "replicate-centred", "replicate-spread"]
    assert len(doc["rows"]) == 7 and {r["first_seed"] for r in doc["rows"]} == {2024}
    assert screen_differences(_section(), doc) == []
    doc["rows"][0]["replicate-spread"]["coverage_mean"] += 0.01
    assert len(screen_differences(_section(), doc)) == 1


def test_the_screen_reading_follows_from_the_json() -> None:
    bench = load_benchmark("inference_spectrum")
    doc = json.loads(SCREEN.read_text(encoding="utf-8"))
    text = _text()
    n = len(doc["rows"])
    inside = {k: sum(bench.in_target(r, k) for r in doc["rows"]) for k in ("matched", "replicate-spread")}
    assert (f"the default (replicate-spread) is inside the target in {inside['replicate-spread']} of {n} cells, the "
            f"fixed de-biasing (matched) in {inside['matched']} of {n}") in text
    by = {(r["model"], r["n"], r["epsilon"]): r for r in doc["rows"]}
    for cell, eps in ((("logistic", 1000, 1.0), "1"), (("logistic", 1000, 0.5), "0.5"), (("logistic", 1000, 4.0), "4")):
        r = by[cell]
        assert (f"from {r['matched']['coverage_mean']:.3f} to {r['replicate-spread']['coverage_mean']:.3f} at "
                f"ε = {eps}") in text
    r = by[("logistic", 1000, 1.0)]
    assert (f"{r['replicate-spread']['width_ratio_to_ols']:.2f} times the OLS width against "
            f"{r['matched']['width_ratio_to_ols']:.2f}") in text
    rest = [r for k, r in by.items() if k != ("logistic", 1000, 1.0)]
    worst = max(abs(r["replicate-spread"]["median_width_mean"] / r["matched"]["median_width_mean"] - 1) for r in rest)
    assert worst <= 0.06 and "differ by at most 6 %" in text
    for cell, words in ((("linear", 1000, 0.5), "ε = 0.5: {:.3f}"), (("linear", 1000, 4.0), "ε = 4: {:.3f}")):
        assert words.format(by[cell]["replicate-spread"]["coverage_mean"]) in text
    for cell, values in ((("linear", 1000, 0.5), "0.929 and 0.927"), (("logistic", 1000, 0.5), "0.921 and 0.924")):
        assert values == f"{by[cell]['replicate']['coverage_mean']:.3f} and " \
                         f"{by[cell]['replicate-centred']['coverage_mean']:.3f}" and values in text


def test_the_grid_tables_are_the_committed_measurement() -> None:
    doc = json.loads(GRID.read_text(encoding="utf-8"))
    assert doc["rows"] and doc["confirm"]
    assert {r["first_seed"] for r in doc["rows"]} == {2024}
    assert {r["first_seed"] for r in doc["confirm"]} == {12_000_000}
    assert grid_differences(_section(), doc) == []
    doc["confirm"][-1]["analytic_median_width_mean"] *= 1.2
    assert len(grid_differences(_section(), doc)) == 1


def test_the_grid_reading_follows_from_the_json() -> None:
    doc = json.loads(GRID.read_text(encoding="utf-8"))
    text = _text()
    for key, run in (("rows", "main run"), ("confirm", "confirmation run")):
        rows = doc[key]
        inside = sum(0.93 <= r["coverage_mean"] <= 0.975 for r in rows)
        assert f"In the {run} the default is inside the target in {inside} of {len(rows)} cells" in text
        small = {r["sets"] for r in rows if r["n"] <= 10_000}
        large = {r["sets"] for r in rows if r["n"] > 10_000}
        assert len(small) == 1 and len(large) <= 1
        if large == small:
            sets = small.pop()
            assert f"inside the target in {inside} of {len(rows)} cells ({sets} data sets per cell)" in text
        else:
            assert f"{small.pop()} data sets per cell at N ≤ 10⁴" in text
            assert not large or f"{large.pop()} at N = 10⁵" in text


def test_the_grid_widths_against_the_baseline_follow_from_the_json() -> None:
    doc = json.loads(GRID.read_text(encoding="utf-8"))
    text = _text()
    rows = doc["rows"] + doc["confirm"]
    big = [r["median_width_mean"] / r["analytic_median_width_mean"] for r in rows if r["n"] * r["epsilon"] >= 4000]
    assert 0.965 <= min(big) and max(big) <= 1.005 and "0.97–1.00 times the baseline's" in text
    small = [r["median_width_mean"] / r["analytic_median_width_mean"] for r in rows
             if r["n"] == 1000 and r["epsilon"] <= 1]
    assert 1.135 <= min(small) and max(small) <= 1.615 and "1.14–1.61 times wider than the baseline" in text
    cover = [r["analytic_coverage_mean"] for r in rows if r["n"] * r["epsilon"] >= 4000]
    assert f"the baseline covers {min(cover):.3f}–{max(cover):.3f} there" in text
    edge = [r for r in rows if r["coverage_mean"] > 0.97]
    assert {(r["model"], r["n"], r["epsilon"]) for r in edge} == {("logistic", 1000, 1.0), ("linear", 1000, 1.0)}


REAL = ROOT / "docs" / "data" / "inference_replicate_real.json"


def test_the_real_data_table_with_the_new_default_is_the_committed_measurement() -> None:
    """The "Real data with this default" table is benchmarks/inference_coverage.py's ``--real`` table of the committed
    JSON, and the coverage ranges quoted under it follow from it."""
    bench = load_benchmark("inference_coverage")
    doc = json.loads(REAL.read_text(encoding="utf-8"))
    section = _section()
    assert bench.real_markdown(doc) in section
    rows = doc["real"] + doc["real_confirm"]
    for name, shown in (("garment", "garment stays at {lo}–{hi}"), ("forestfires", "forest fires at {lo}–{hi}")):
        cov = [r["coverage_mean"] for r in rows if r["model"] == name]
        assert shown.format(lo=f"{min(cov):.2f}", hi=f"{max(cov):.2f}") in _text()
    assert all(r["flagged_rate"] == 1.0 for r in rows)
    changed = json.loads(REAL.read_text(encoding="utf-8"))
    changed["real"][0]["coverage_mean"] += 0.01
    assert bench.real_markdown(changed) not in section
