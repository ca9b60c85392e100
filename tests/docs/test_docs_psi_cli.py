"""docs/psi.md's CLI measurement (issue 34) is benchmarks/psi_cli.py's rendering of docs/data/psi_cli.json.

``nice -n 10 python benchmarks/psi_cli.py --ids ... --json docs/data/psi_cli.json`` wrote the JSON (each run records
its own command).
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.docs_tables import load_benchmark, section

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "psi.md"
JSON = ROOT / "docs" / "data" / "psi_cli.json"
HEADING = "## Through the CLI: CPU, wall and memory per process (issue 34)"


def test_the_psi_cli_table_is_the_committed_runs() -> None:
    bench, doc = load_benchmark("psi_cli"), json.loads(JSON.read_text())
    text = section(DOC, HEADING)
    assert bench.markdown(doc["runs"]) in text
    assert {r["ids_per_party"] for r in doc["runs"]} >= {10**5, 10**6}
    for r in doc["runs"]:
        assert r["command"].split(" python ", 1)[1] in text, "every run's command is shown"
        assert r["date"][:10] in text and r["code"] in text, "every run's date and tree are stated"
        assert r["whole_run"] is None or r["at_alignment"]["wall_s"] <= r["whole_run"]["wall_s"]
        assert all(v > 0 for v in r["at_alignment"]["peak_rss_mb"].values())


def test_the_scaling_sentence_is_the_json() -> None:
    """The per-ID slopes and the 10^7 extrapolation the docs quote are the JSON's two largest runs."""
    bench, doc = load_benchmark("psi_cli"), json.loads(JSON.read_text())
    text = " ".join(section(DOC, HEADING).split())
    assert bench.scaling_text(doc["runs"]) in text


STREAM_JSON = ROOT / "docs" / "data" / "psi_cli_stream.json"
STREAM_HEADING = "## Streamed through the CLI: bounded memory per process (issue 34)"


def test_the_streamed_table_is_the_committed_runs_and_every_process_stays_below_1_gb() -> None:
    """The streamed ring's table is psi_cli.py's rendering of its JSON, and the claim it supports holds in it."""
    bench, doc = load_benchmark("psi_cli"), json.loads(STREAM_JSON.read_text())
    text = section(DOC, STREAM_HEADING)
    assert bench.markdown(doc["runs"]) in text
    assert {r["ids_per_party"] for r in doc["runs"]} >= {10**6}
    for r in doc["runs"]:
        assert r["command"].split("python ", 1)[1] in text, "every run's command is shown"
        assert r["date"][:10] in text and r["code"] in text, "every run's date and tree are stated"
        assert all(0 < v <= 1024 for v in r["at_alignment"]["peak_rss_mb"].values())
    peak = max(max(r["at_alignment"]["peak_rss_mb"].values()) for r in doc["runs"])
    assert f"largest peak RSS of any process: {peak:.0f} MB" in " ".join(text.split())
    if len(doc["runs"]) > 1:   # the per-ID slopes and the 10^7 extrapolation quoted are the JSON's two largest runs
        assert bench.scaling_text(doc["runs"]) in " ".join(text.split())


TEN_MILLION_JSON = ROOT / "docs" / "data" / "psi_cli_stream_1e7.json"
TEN_MILLION_HEADING = "## 10^7 IDs per party through the CLI (issue 34)"


def test_the_ten_million_id_run_is_the_committed_json_and_stays_below_1_gb() -> None:
    """The 10^7 x 10^7 table is psi_cli.py's rendering of its JSON; every process stayed <= 1 GB and the peak and
    wall the prose quotes are the JSON's."""
    bench, doc = load_benchmark("psi_cli"), json.loads(TEN_MILLION_JSON.read_text())
    text = section(DOC, TEN_MILLION_HEADING)
    assert bench.markdown(doc["runs"]) in text
    (run,) = doc["runs"]
    assert run["ids_per_party"] == 10**7 and run["command"].split("python ", 1)[1] in text
    assert run["date"][:10] in text and run["code"] in text
    peaks = run["at_alignment"]["peak_rss_mb"]
    assert all(0 < v <= 1024 for v in peaks.values())
    flat = " ".join(text.split())
    assert f"every process at most {max(peaks.values()):.0f} MB" in flat
    assert f"coordinator at {peaks['coordinator']:.0f} MB" in flat
    assert f"{run['at_alignment']['wall_s']:.1f} s of wall time" in flat


def test_a_role_that_fails_to_start_is_one_line_and_a_non_zero_exit(tmp_path) -> None:
    """The coordinator refuses its --key-bits at once, the benchmark kills the two waiting parties: on bbf5d54 a
    ChildProcessError traceback (``Popen.kill`` polled, so reaped, a party before ``os.wait4``); now one line naming
    the role and its error, exit 1."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "psi_cli.py"), "--ids", "50", "--key-bits", "7",
                           "--timeout", "600", "--workdir", str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc
    assert "failed: coordinator exited 2 (vfl: error: --key-bits must be" in lines[0], lines
