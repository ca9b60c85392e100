"""docs/serving.md "Performance" shows the numbers of docs/data/serving.json, which
``python benchmarks/serving.py --rows 100000 --parties 2 3 --latency-requests 300 --out docs/data/serving.json``
writes (issues 22 and 29), and they meet the targets the section states."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.docs_tables import same_to_shown_digits, section, table_rows

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "serving.md"
DATA = ROOT / "docs" / "data" / "serving.json"
COMMAND = ("python benchmarks/serving.py --rows 100000 --parties 2 3 --latency-requests 300 --out\n"
           "docs/data/serving.json")


def _number(cell: str) -> str:
    return cell.split("(")[0].replace(",", "").strip()


def _seconds(cell: str) -> str:
    return cell.split("(")[1].split("s)")[0].strip()


def test_the_performance_table_is_the_committed_run():
    text = section(DOC, "## Performance")
    assert COMMAND in text
    runs = {str(r["parties"]): r for r in json.loads(DATA.read_text())["runs"]}
    rows = table_rows(text)
    assert set(runs) <= set(rows), (sorted(runs), sorted(rows))
    for k, run in runs.items():
        cells = rows[k]
        lat, batch, pred = run["latency_one_id_ms"], run["batch"], run["vfl_predict_joined"]
        assert same_to_shown_digits(cells[0], lat["p50"]) and same_to_shown_digits(cells[1], lat["p99"]), cells
        for cell, size in zip(cells[2:5], ("1000", "10000", "100000"), strict=True):
            assert int(_number(cell)) == batch[size]["scores_per_s"], (k, size, cell)
        assert int(_number(cells[5])) == pred["cli_rows_per_s"]
        assert same_to_shown_digits(_seconds(cells[5]), pred["cli_seconds"])
        assert int(_number(cells[6])) == pred["in_process_rows_per_s"]
        assert same_to_shown_digits(_seconds(cells[6]), pred["in_process_seconds"])


def test_the_committed_run_meets_the_targets():
    """Targets (issue 22, re-measured after the issue 29 checks): p99 <= 50 ms for one ID, >= 20,000 scores/s for a
    10^5-ID batch, with identities and CURVE on."""
    doc = json.loads(DATA.read_text())
    assert {r["parties"] for r in doc["runs"]} == {2, 3}
    for run in doc["runs"]:
        assert run["curve"] and run["identities"] and run["rows"] == 100_000
        assert run["latency_one_id_ms"]["p99"] <= 50
        assert run["batch"]["100000"]["scores_per_s"] >= 20_000
        # "a 10^5-ID batch takes less time than `vfl predict` run as a process on the joined table"
        assert run["batch"]["100000"]["seconds"] < run["vfl_predict_joined"]["cli_seconds"]
