"""End to end (issue 31): a real networked run (coordinator + two parties whose operators state their rows are
aligned), then `vfl report` and `vfl report --html` on its model file and both parties' ledgers, and the page in a real
headless browser: it renders, shows every coefficient name and logs no console error.

FAST TEST: 1024-bit INSECURE Paillier test keys.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers.browser import load_page

from vfl.demo import free_port, make_demo_data

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(900)]   # slow: .ci/run runs it in its own step
VFL = [sys.executable, "-m", "vfl.cli"]
GENEROUS = "300"


def _vfl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*VFL, *args], capture_output=True, text=True, timeout=600)


def test_networked_run_then_report_text_html_and_browser(procs, tmp_path):
    data = make_demo_data(tmp_path / "data", 300, seed=4)
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    ledger, bob_ledger = tmp_path / "alice.sqlite", tmp_path / "bob.sqlite"
    coord = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                        "--insecure-test-keys", "--epsilon", "1", "--timeout", GENEROUS)
    common = ["--connect", url, "--bounds", str(data["bounds"]), "--rows-aligned", "--no-progress",
              "--insecure-test-keys", "--timeout", GENEROUS]
    alice = procs.start("party", "--name", "alice", "--data", str(data["alice"]), "--features", "age,income,tenure",
                        "--label", "score", "--ledger", str(ledger), *common)
    bob = procs.start("party", "--name", "bob", "--data", str(data["bob"]), "--features", "visits,spend",
                      "--ledger", str(bob_ledger), *common)
    code, stdout, err = procs.finish(coord, timeout=600)
    assert code == 0, err[-2000:]
    assert "training on 300 rows (paired by position" in stdout and "trained on 300 rows)" in stdout
    assert [procs.finish(p)[0] for p in (alice, bob)] == [0, 0]
    doc = json.loads(out.read_text())
    names = [*doc["features"], "intercept"]

    text = _vfl("report", str(out), "--ledger", str(ledger), "--ledger", str(bob_ledger))
    assert text.returncode == 0, text.stderr
    for name, value in zip(names, [*doc["coef"], doc["intercept"]], strict=True):
        row = next(line for line in text.stdout.splitlines() if line.strip().startswith(name + " "))
        assert float(row.split()[1]) == pytest.approx(value, rel=1e-3)
    if "inference" in doc:   # written by the fit when it computes intervals: they must be shown
        assert "confidence intervals" in text.stdout and "P>|z|" in text.stdout
    else:
        assert "no intervals recorded (model written before inference)" in text.stdout
    assert "formal differential privacy: yes" in text.stdout and "against the coordinator alone" in text.stdout
    for path in (ledger, bob_ledger):   # each party's ledger: its dataset spent one run's epsilon
        assert f"Privacy budget (ledger {path})" in text.stdout
    spent = re.findall(r"1 run\(s\) \(1 completed, 0 aborted\), spent epsilon ([0-9.]+) ", text.stdout)
    assert len(spent) == 2 and all(0 < float(e) <= 1.0 + 1e-9 for e in spent), text.stdout   # at most the plan's 1

    page_path = tmp_path / "report.html"
    made = _vfl("report", str(out), "--ledger", str(ledger), "--ledger", str(bob_ledger), "--html", str(page_path),
                "--seed", "3")
    assert made.returncode == 0 and page_path.exists(), made.stderr
    again = _vfl("report", str(out), "--html", str(page_path))
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    html = page_path.read_text()
    assert html.count("<svg") == 3   # coefficients, planner, budget over runs

    page = load_page(page_path, tmp_path, screenshot=True)
    assert page.console_errors == [], page.console_errors
    cells = re.findall(r"<td>([^<]*)</td>", page.dom)
    for name in names:
        assert name in cells, (name, cells[:20])
    assert page.dom.count("<svg") == 3 and "Privacy guarantee" in page.dom
    png = page.screenshot.read_bytes()   # rendered: a PNG of the page, not blank
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    matplotlib_image = pytest.importorskip("matplotlib.image")
    pixels = matplotlib_image.imread(str(page.screenshot))
    assert float(np.std(pixels[..., :3])) > 0.05   # text and figures drawn, not one flat colour
