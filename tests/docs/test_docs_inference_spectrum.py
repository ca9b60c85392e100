"""docs/inference.md's "The spectrum-matched world" equals the committed measurement (issue 31).

The section quotes docs/data/inference_spectrum.json, written by benchmarks/inference_spectrum.py (the commands are in
its docstring): every row of the JSON (main run, and the confirmation run on disjoint seeds) is a row of the
section's table with the same numbers to the digits shown, and the sentences under it (how many cells each world
puts inside the target, the widths they name) follow from the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.docs_tables import load_benchmark
from helpers.docs_tables import same_to_shown_digits as _same
from helpers.docs_tables import table_rows as _rows

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "data" / "inference_spectrum.json"
REAL = ROOT / "docs" / "data" / "inference_spectrum_real.json"
LONG = ROOT / "docs" / "data" / "inference_spectrum_500.json"
HEADING = "## The spectrum-matched world"


def _section() -> str:
    text = (ROOT / "docs" / "inference.md").read_text(encoding="utf-8")
    assert HEADING in text
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def differences(section: str, doc: dict) -> list[str]:
    bench = load_benchmark("inference_spectrum")
    rows, problems = _rows(section), []
    for key, mark in bench.MARKS:
        for r in doc.get(key, []):
            label = bench.label(r) + mark
            if label not in rows:
                problems.append(f"no table row {label!r}")
                continue
            cells = rows[label]
            want = [(cells[0], r["sets"])]
            for at, k in ((1, "deflated"), (3, "matched")):
                mean, span = cells[at].split(", ")
                lo, hi = span.split("-")
                want += [(mean, r[k]["coverage_mean"]), (lo, r[k]["coverage_min"]), (hi, r[k]["coverage_max"]),
                         (cells[at + 1], r[k]["width_ratio_to_ols"])]
            want.append((cells[5], r["ols"]["coverage_mean"]))
            problems += [f"{label}: {c} shown, the JSON has {v!r}" for c, v in want if not _same(c, float(v))]
    return problems


def test_the_spectrum_table_of_inference_md_is_the_committed_measurement() -> None:
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    assert doc["rows"] and doc["confirm"]
    assert {r["first_seed"] for r in doc["rows"]} == {2024} and {r["first_seed"] for r in doc["confirm"]} == {9000000}
    assert differences(_section(), doc) == []
    real = json.loads(REAL.read_text(encoding="utf-8"))
    assert len(real["real"]) == 4 and len(real["real_confirm"]) == 4
    assert differences(_section(), real) == []
    long = json.loads(LONG.read_text(encoding="utf-8"))
    assert [r["sets"] for r in long["long"]] == [500, 500, 500]
    assert differences(_section(), long) == []


def test_a_changed_number_is_caught() -> None:
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    doc["rows"][0]["matched"]["coverage_mean"] += 0.01
    doc["confirm"][-1]["deflated"]["width_ratio_to_ols"] *= 1.2
    assert len(differences(_section(), doc)) == 2


def test_the_reading_follows_from_the_json() -> None:
    bench = load_benchmark("inference_spectrum")
    doc = json.loads(JSON.read_text(encoding="utf-8"))
    text = " ".join(_section().split())
    for key, run in (("rows", "main run"), ("confirm", "confirmation run")):
        n = len(doc[key])
        inside = {k: sum(bench.in_target(r, k) for r in doc[key]) for k in ("deflated", "matched")}
        assert (f"In the {run} the matched world is inside the target in {inside['matched']} of {n} cells, "
                f"the deflated one in {inside['deflated']} of {n}") in text

    key = lambda r: (r["model"], r["n"], r["epsilon"])  # noqa: E731
    confirm = {key(r): r for r in doc["confirm"]}
    diff = max(abs(r["matched"]["coverage_mean"] - confirm[key(r)]["matched"]["coverage_mean"]) for r in doc["rows"])
    assert f"differ by at most {diff:.3f} per cell" in text
    same = [r for k in ("rows", "confirm") for r in doc[k] if (r["n"] >= 10_000 and r["epsilon"] >= 1)
            or r["n"] == 100_000]
    assert all(abs(r["matched"]["coverage_mean"] - r["deflated"]["coverage_mean"]) <= 0.005 and
               abs(r["matched"]["median_width_mean"] / r["deflated"]["median_width_mean"] - 1) <= 0.02 for r in same)
    assert "coverages differ by at most 0.005 and their widths by at most 2 %" in text
    by = {key(r): r for r in doc["rows"]}
    for cell in (("linear", 1000, 0.5), ("linear", 1000, 4.0), ("logistic", 1000, 0.5), ("logistic", 10000, 0.5)):
        r = by[cell]
        assert f"from {r['deflated']['coverage_mean']:.3f}" in text
        assert f"to {r['matched']['coverage_mean']:.3f}" in text
    wide = [by[("linear", 1000, 0.5)], by[("logistic", 1000, 0.5)]]
    for r in wide:
        assert f"{r['matched']['width_ratio_to_ols']:.2f} times" in text
        assert f"(deflated {r['deflated']['width_ratio_to_ols']:.2f})" in text
    rest = [r for k in ("rows", "confirm") for r in doc[k] if r not in wide and key(r) not in {key(w) for w in wide}]
    assert all(r["matched"]["median_width_mean"] <= 1.25 * r["deflated"]["median_width_mean"] for r in rest)
    short = [r for k in ("rows", "confirm") for r in doc[k] if not bench.in_target(r, "matched")]
    assert all(0.92 <= r["matched"]["coverage_mean"] < 0.93 and r["model"] == "logistic" for r in short)
    real = json.loads(REAL.read_text(encoding="utf-8"))
    rr = {(r["model"], r["epsilon"]): r for r in real["real"]}
    for cell in (("garment", 1.0), ("forestfires", 4.0)):
        r = rr[cell]
        assert f"from {r['deflated']['coverage_mean']:.3f} to {r['matched']['coverage_mean']:.3f}" in text
    long = {key(r): r for r in json.loads(LONG.read_text(encoding="utf-8"))["long"]}
    for cell, words in ((("linear", 1000, 0.5), "at linear N = 10³, ε = 0.5 ({:.3f})"),
                        (("logistic", 1000, 0.5), "logistic N = 10³, ε = 0.5 ({:.3f})"),
                        (("logistic", 1000, 1.0), "stays short ({:.3f})")):
        assert words.format(long[cell]["matched"]["coverage_mean"]) in text
    assert 0.93 <= long[("linear", 1000, 0.5)]["matched"]["coverage_mean"] <= 0.975
    assert long[("logistic", 1000, 1.0)]["matched"]["coverage_mean"] < 0.93
