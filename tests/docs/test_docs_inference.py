"""docs/inference.md's coverage table equals the committed measurement (issue 31).

The section "Coverage, measured" quotes docs/data/inference_coverage.json, written by benchmarks/inference_coverage.py
(the commands are in its docstring): every row of the JSON (main run and confirmation run on disjoint seeds) is a row
of the section's table with the same numbers, to the digits shown.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers.docs_tables import load_benchmark
from helpers.docs_tables import same_to_shown_digits as _same
from helpers.docs_tables import table_rows as _rows

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "inference_coverage.json"
HEADING = "## Coverage, measured"


def _section() -> str:
    text = (ROOT / "docs" / "inference.md").read_text(encoding="utf-8")
    assert HEADING in text
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def differences(section: str, doc: dict) -> list[str]:
    label_of = load_benchmark("inference_coverage").cell_label
    rows, problems = _rows(section), []
    for key, mark in (("rows", ""), ("confirm", " (confirm)")):
        for r in doc.get(key, []):
            label = label_of(r) + mark
            if label not in rows:
                problems.append(f"no table row {label!r}")
                continue
            cells = rows[label]
            lo, hi = cells[2].split("-")
            want = [(cells[0], r["sets"]), (cells[1], r["coverage_mean"]), (lo, r["coverage_min"]),
                    (hi, r["coverage_max"]), (cells[3], r["median_width_mean"]),
                    (cells[4], r["ols_median_width_mean"]), (cells[5], r["width_ratio_to_ols"]),
                    (cells[6], r["naive_coverage_mean"])]
            problems += [f"{label}: {c} shown, the JSON has {v!r}" for c, v in want if not _same(c, float(v))]
    return problems


def test_the_coverage_table_of_inference_md_is_the_committed_measurement() -> None:
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    assert doc["d"] == 10 and doc["epsilons"] == [0.5, 1.0, 4.0] and doc["sizes"] == [1000, 10000, 100000]
    assert len(doc["rows"]) == 18 and len(doc["confirm"]) == 18
    assert differences(_section(), doc) == []


def test_a_changed_number_is_caught() -> None:
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    doc["rows"][3]["coverage_mean"] += 0.01
    doc["confirm"][5]["median_width_mean"] *= 1.05
    problems = differences(_section(), doc)
    assert len(problems) == 2, problems


def test_the_reading_of_the_table_follows_from_the_json() -> None:
    """The sentences under the table: cells inside [0.93, 0.975] per model, the extremes they name, the run times."""
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    text = " ".join(_section().split())
    by = {(r["model"], r["n"], r["epsilon"]): r for r in doc["rows"]}
    inside = {m: sum(0.93 <= r["coverage_mean"] <= 0.975 for r in doc["rows"] if r["model"] == m)
              for m in ("linear", "logistic")}
    assert "in 7 of 9 cells" in text and inside["linear"] == 7
    assert "only 3 of 9 cells" in text and inside["logistic"] == 3
    assert _same("0.929", by["linear", 1000, 0.5]["coverage_mean"]) and _same("0.985", by["linear", 1000, 4.0][
        "coverage_mean"])
    big = [r["coverage_mean"] for r in doc["rows"] if r["model"] == "linear" and r["n"] >= 10_000]
    assert "within 0.944–0.966" in text and _same("0.944", min(big)) and _same("0.966", max(big))
    assert _same("1.01", by["linear", 100_000, 4.0]["width_ratio_to_ols"])
    assert _same("0.864", by["logistic", 1000, 0.5]["coverage_mean"]) and _same("0.77", by["logistic", 1000, 0.5][
        "coverage_min"])
    assert _same("0.99", by["logistic", 100_000, 4.0]["width_ratio_to_ols"])
    assert _same("0.308", min(r["naive_coverage_mean"] for r in doc["rows"]))
    assert "34 and 36 minutes" in text and [round(r["seconds"] / 60) for r in doc["runs"]] == [34, 36]
    assert all(r["sets"] == 500 for r in doc["rows"]) and all(r["sets"] == 200 for r in doc["confirm"])
    for main, again in zip(doc["rows"], doc["confirm"], strict=True):   # "agree within their binomial error"
        se = math.sqrt(main["binomial_sd"] ** 2 / 11 + again["binomial_sd"] ** 2 / 11)
        assert abs(main["coverage_mean"] - again["coverage_mean"]) <= 4 * max(se, 0.01), (main, again)
    logistic = [r["coverage_mean"] for r in doc["rows"] if r["model"] == "logistic"]
    assert "Six cells sit at 0.92–0.93" in text and sum(0.92 <= c < 0.935 for c in logistic) == 6


# ---------------------------------------------------------------- the comparison with the analytic alternative
COMPARE_JSON = ROOT / "docs" / "data" / "inference_compare.json"
REAL_JSON = ROOT / "docs" / "data" / "inference_real.json"
COMPARE_HEADING = "## Bootstrap against the analytic alternative"
REAL_HEADING = "## Real data: garment and forest fires"
TARGET = (0.93, 0.975)


def _page_section(heading: str) -> str:
    text = (ROOT / "docs" / "inference.md").read_text(encoding="utf-8")
    assert heading in text
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def _inside(value: float) -> bool:
    return TARGET[0] <= round(value, 3) <= TARGET[1]


def compare_sentences(doc: dict) -> list[str]:
    """The sentences of the comparison section, recomputed from its JSON."""
    out = []
    for key, what in (("rows", "main run"), ("confirm", "confirmation run")):
        rows = doc[key]
        boot = sum(_inside(r["coverage_mean"]) for r in rows)
        ana = sum(_inside(r["analytic_coverage_mean"]) for r in rows)
        narrow = sum(r["median_width_mean"] < r["analytic_median_width_mean"] for r in rows)
        out.append(f"In the {what} the bootstrap's mean coverage is inside [0.93, 0.975] in {boot} of {len(rows)} "
                   f"cells, the analytic interval's in {ana} of {len(rows)}; the bootstrap interval is the narrower "
                   f"of the two in {narrow} of {len(rows)} cells.")
    return out


def test_the_comparison_table_is_the_committed_measurement() -> None:
    bench = load_benchmark("inference_coverage")
    doc = json.loads(COMPARE_JSON.read_text(encoding="utf-8"))
    assert all(r["sets"] >= 500 for r in doc["rows"]) and all(r["sets"] >= 200 for r in doc["confirm"])
    assert {(r["model"], r["n"], r["epsilon"]) for r in doc["rows"]} == {
        (m, n, e) for m in ("linear", "logistic") for n in (1000, 10000) for e in (0.5, 1.0, 4.0)}
    section = _page_section(COMPARE_HEADING)
    assert bench.markdown(doc) in section
    text = " ".join(section.split())
    for sentence in compare_sentences(doc):
        assert sentence in text, sentence
    by = {(r["model"], r["n"], r["epsilon"]): r for r in doc["rows"]}
    quoted = [("0.865 at ε = 0.5", by["logistic", 1000, 0.5]["coverage_mean"]),
              ("0.927 at ε = 1", by["logistic", 1000, 1.0]["coverage_mean"]),
              ("0.925 at ε = 4", by["logistic", 1000, 4.0]["coverage_mean"]),
              ("N = 10⁴, ε = 0.5 (0.924)", by["logistic", 10000, 0.5]["coverage_mean"]),
              ("(0.985)", by["linear", 1000, 4.0]["coverage_mean"]),
              ("0.987 and", by["linear", 1000, 0.5]["analytic_coverage_mean"]),
              ("and 0.989", by["linear", 1000, 1.0]["analytic_coverage_mean"]),
              ("ε = 1: 0.982", by["logistic", 1000, 1.0]["analytic_coverage_mean"]),
              ("(0.917,", by["logistic", 1000, 0.5]["analytic_coverage_mean"])]
    for shown, value in quoted:
        assert shown in text and f"{value:.3f}" in shown, (shown, value)
    assert all(_inside(r["analytic_coverage_mean"]) for key in ("rows", "confirm") for r in doc[key]
               if r["n"] * r["epsilon"] >= 4000)   # "From N·ε ≈ 4000 on, it is inside the target in every cell"
    changed = json.loads(COMPARE_JSON.read_text(encoding="utf-8"))
    changed["rows"][2]["analytic_coverage_mean"] += 0.01
    assert bench.markdown(changed) not in section


def test_the_real_data_table_is_the_committed_measurement() -> None:
    bench = load_benchmark("inference_coverage")
    doc = json.loads(REAL_JSON.read_text(encoding="utf-8"))
    section = _page_section(REAL_HEADING)
    assert bench.real_markdown(doc) in section
    assert {r["model"] for r in doc["real"]} == {"garment", "forestfires"} and doc["real_confirm"]
    text = " ".join(section.split())
    worst = min(r["coverage_mean"] for r in doc["real"])
    assert f"as low as {worst:.3f}" in text
    rate = min(r["flagged_rate"] for key in ("real", "real_confirm") for r in doc[key])
    assert f"least {rate:.3f} of the intervals are flagged unreliable" in text
    assert f"({doc['seconds']} s;" in text
    changed = json.loads(REAL_JSON.read_text(encoding="utf-8"))
    changed["real"][1]["flagged_rate"] -= 0.01
    assert bench.real_markdown(changed) not in section
    changed["real"][0]["coverage_mean"] += 0.01
    assert bench.real_markdown(changed) not in section


FLAGS_JSON = ROOT / "docs" / "data" / "inference_flags.json"


def test_the_synthetic_flag_table_and_its_quoted_numbers_are_the_committed_measurement() -> None:
    bench = load_benchmark("inference_coverage")
    doc = json.loads(FLAGS_JSON.read_text(encoding="utf-8"))
    section = _page_section(REAL_HEADING)
    assert bench.flags_markdown(doc) in section and f"({doc['seconds']} s;" in section
    text = " ".join(section.split())
    by = {(r["model"], r["n"], r["epsilon"]): r for r in doc["rows"]}
    linear_big = [r for key in ("rows", "confirm") for r in doc[key] if r["model"] == "linear" and r["n"] == 10_000]
    assert linear_big and all(r["any_flag_rate"] == 0.0 for r in linear_big)   # "silent in every linear N = 10⁴"
    assert by["linear", 1000, 0.5]["any_flag_rate"] == 1.0                     # "fires on every ..."
    assert f"cover ({by['linear', 1000, 0.5]['coverage_mean']:.3f}:" in text
    lg = by["logistic", 10000, 0.5]
    assert f"(coverage {lg['flagged_coverage']:.3f} flagged against {lg['unflagged_coverage']:.3f} unflagged)" in text
    assert all(r["flagged_rate"] == r["any_flag_rate"] for key in ("rows", "confirm") for r in doc[key])
    changed = json.loads(FLAGS_JSON.read_text(encoding="utf-8"))
    changed["confirm"][0]["unflagged_coverage"] = 0.5
    assert bench.flags_markdown(changed) not in section


DATA_DIR = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(not (DATA_DIR / "forestfires.csv").is_file(), reason="../shared/data absent")
def test_the_real_data_cells_run(tmp_path: Path) -> None:
    """A 3-resample smoke run of ``--real`` on ../shared/data writes both data sets' rows."""
    bench = load_benchmark("inference_coverage")
    out = tmp_path / "real.json"
    bench.main(["--real", str(DATA_DIR), "--splits", "3", "--out", str(out)])
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert [r["model"] for r in doc["real"]] == ["garment", "garment", "forestfires", "forestfires"]
    assert all(0.0 <= r["coverage_mean"] <= 1.0 and r["sets"] == 3 for r in doc["real"])


BIAS_JSON = ROOT / "docs" / "data" / "inference_bias_width.json"


def test_the_bias_width_split_and_the_bias_aware_claims_are_the_committed_measurement() -> None:
    """The "Bias, not width" table and sentence, and the bias-aware interval's coverage and width ratios."""
    doc = json.loads(BIAS_JSON.read_text(encoding="utf-8"))
    section = _page_section(REAL_HEADING)
    assert load_benchmark("inference_bias_width").markdown(doc) in section and f"({doc['seconds']} s;" in section
    text = " ".join(section.split())
    ratios = [r["width_ratio_median"] for r in doc["rows"]]
    medians = [r["abs_bias_sd_median"] for r in doc["rows"]]
    assert f"(std err / sd {min(ratios):.2f}–{max(ratios):.2f})" in text
    assert f"{min(medians):.1f}–{max(medians):.1f} standard deviations off" in text
    assert f"up to {max(r['abs_bias_sd_max'] for r in doc['rows']):.1f})" in text
    real = json.loads(REAL_JSON.read_text(encoding="utf-8"))
    rows = real["real"] + real["real_confirm"]
    assert all(r["bias_aware_coverage_min"] == 1.0 for r in rows)          # "covers every coefficient in every row"
    ratio = [r["bias_aware_median_width_mean"] / r["ols_median_width_mean"] for r in rows]
    assert f"at {min(ratio):.0f}–{max(ratio):.0f} times the OLS width" in text


def test_the_bias_aware_sentences_on_the_synthetic_cells_follow_from_the_json() -> None:
    doc = json.loads(FLAGS_JSON.read_text(encoding="utf-8"))
    text = " ".join(_page_section(REAL_HEADING).split())
    count = {k: (sum(_inside(r["bias_aware_coverage_mean"]) for r in doc[k]), sum(_inside(r["coverage_mean"])
                                                                                   for r in doc[k]))
             for k in ("rows", "confirm")}
    assert (f"inside [0.93, 0.975] in {count['rows'][0]} of 12 cells of the main run and {count['confirm'][0]} of 12 "
            f"of the confirmation run (the default's: {count['rows'][1]} and {count['confirm'][1]})") in text
    by = {(r["model"], r["n"], r["epsilon"]): r for r in doc["rows"]}
    lg = by["logistic", 1000, 1.0]
    ratio = lg["bias_aware_median_width_mean"] / lg["median_width_mean"]
    assert f"from {lg['coverage_mean']:.3f} to {lg['bias_aware_coverage_mean']:.3f} at {ratio:.2f} times" in text
    for model in ("linear", "logistic"):
        r = by[model, 1000, 0.5]
        assert r["any_flag_rate"] >= 0.99 and r["bias_aware_coverage_mean"] == 1.0
        assert f"{r['bias_aware_median_width_mean'] / r['median_width_mean']:.2f}" in text
