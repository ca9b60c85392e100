"""Streamed secure products between real `vfl coordinator` / `vfl party` processes on loopback ZeroMQ.

1024-bit INSECURE test keys (--insecure-test-keys) and tiny frames (--max-frame-bytes 4096: 16 rows per chunk), so
a few thousand rows make hundreds of credit-controlled chunks.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers.waiting import read_until, start_up_seconds

from vfl.demo import free_port, make_demo_data
from vfl.fm.domain import ColumnBounds, to_unit_interval

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit

VFL = [sys.executable, "-m", "vfl.cli"]


def start(*args):
    return subprocess.Popen([*VFL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def run_procs():
    items: list[subprocess.Popen] = []
    yield items
    for p in items:
        if p.poll() is None:
            p.kill()
            p.communicate()


def _parties(items, url, data, identity_dir, *extra):
    # no --id: the demo rows are aligned, so the parties keep their CSV on disk and stream it in chunks (--id would
    # run the PSI alignment, which loads the table in memory)
    common = ["--no-progress", "--insecure-test-keys", "--bounds", str(data["bounds"]),
              "--identity-dir", str(identity_dir),
              "--allow-mechanisms", "none", "--rows-aligned",   # the operator states it (issue 31)
              *extra]   # mechanism none only by the party's opt-in (issue 14)
    items.append(start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                       "age:tenure", "--label", "score", *common))
    items.append(start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                       "visits,spend", *common))


@pytest.mark.parametrize("n_rows", [1500, pytest.param(100_000, marks=[pytest.mark.slow, pytest.mark.timeout(1200)])])
def test_long_chunked_run_with_a_short_timeout_is_least_squares(tmp_path, run_procs, n_rows, identity_dir):
    """~n/16 chunks per product under credit (1500 rows: ~7 s; the slow 100 000-row run: 164 s, 6 250 chunks per
    product); the parties' --timeout (3 s) is far shorter than the run, the coordinator's (10 s, also the
    registration window on a loaded machine) too: heartbeats keep the run alive while the parties compute, and
    mechanism none equals least squares on the joined data. The coordinator's window is derived from the start-up
    time measured now, and the parties (whose 3 s silence limit runs from their start) start once it listens."""
    data = make_demo_data(tmp_path / "data", n_rows, seed=2)
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    window = round(10 + 4 * start_up_seconds())
    run_procs.append(start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                           "--timeout", str(window), "--insecure-test-keys", "--mechanism", "none",
                           "--precision-bits", "32", "--no-fit-intercept"))
    read_until(run_procs[0], "listening on")
    _parties(run_procs, url, data, identity_dir, "--max-frame-bytes", "4096", "--timeout", "3", "--workers", "1")
    outs = [p.communicate(timeout=500 if n_rows <= 1500 else 1100) for p in run_procs]
    assert run_procs[0].returncode == 0, outs[0][1]
    assert all(p.returncode == 0 for p in run_procs), [o[1][-2000:] for o in outs]
    from vfl.data.config import load_bounds_file, read_party_csv

    b = load_bounds_file(data["bounds"])
    a = read_party_csv(data["alice"], "age,income,tenure", label="score")
    c = read_party_csv(data["bob"], "visits,spend")
    X, names = np.hstack([a.X, c.X]), a.feature_names + c.feature_names
    # no intercept: the pure scaling x / max(|lo|, |hi|) of each column and of the label (issue 13)
    U = to_unit_interval(X, ColumnBounds(np.array([b[n][0] for n in names]), np.array([b[n][1] for n in names])),
                         symmetric=True)
    y = to_unit_interval(a.y[:, None], ColumnBounds(np.array([b["score"][0]]), np.array([b["score"][1]])),
                         symmetric=True)[:, 0]
    doc = json.loads(out.read_text())
    np.testing.assert_allclose(doc["w"], np.linalg.lstsq(U, y, rcond=None)[0], atol=1e-6)
    np.testing.assert_allclose(doc["coef"], np.linalg.lstsq(X, a.y, rcond=None)[0], rtol=0, atol=1e-6)


def test_frames_above_the_coordinators_limit_are_refused_naming_limit_and_fix(tmp_path, run_procs, identity_dir):
    data = make_demo_data(tmp_path / "data", 50, seed=3)
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    run_procs.append(start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                           "--timeout", "120", "--insecure-test-keys", "--mechanism", "none",
                           "--max-message-bytes", "1000000"))
    _parties(run_procs, url, data, identity_dir, "--max-frame-bytes", "2000000", "--timeout", "120")
    outs = [p.communicate(timeout=300) for p in run_procs]
    assert run_procs[0].returncode == 3 and not out.exists()
    line = [ln for ln in outs[0][1].splitlines() if ln.startswith("vfl: error:")][0]
    assert "message limit of 1000000 bytes" in line and "--max-frame-bytes" in line and "--max-message-bytes" in line
    assert "Traceback" not in outs[0][1]
