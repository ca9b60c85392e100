"""Issue 30: a local pool worker that makes no progress fails the run with one line naming it.

Invariant: a worker with unfinished tasks that for ``stall_seconds`` finishes none and uses no CPU time is reported
(:class:`~vfl.exceptions.WorkerStalled`, worker index and pid) and killed, instead of the run waiting for
``max_run_seconds`` (a day by default). A worker that is busy for longer than the limit is not a stall.
The stuck workers here are stuck exactly as in the issue: blocked on a lock that the parent held when it forked them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vfl.exceptions import ConfigurationError, WorkerStalled
from vfl.secure.executors import PinnedPool, open_executor, stall_limit

REPO = Path(__file__).resolve().parents[2]
_NOT_FORK_SAFE = threading.Lock()   # deliberately a plain lock: a forked worker inherits it held


def blocked_on_inherited_lock() -> str:
    with _NOT_FORK_SAFE:
        return "never"


def test_a_worker_blocked_on_an_inherited_lock_fails_with_one_line_naming_it():
    pool = PinnedPool(2, stall_seconds=1.5)
    with _NOT_FORK_SAFE:   # held while the pool forks its workers
        stuck = pool.submit_to(0, blocked_on_inherited_lock)
        healthy = pool.submit_to(1, sum, [1, 2, 3])
        assert healthy.result(timeout=120) == 6
        pid = pool.worker_pid(0)
    start = time.monotonic()
    with pytest.raises(WorkerStalled) as info:
        stuck.result(timeout=120)
    message = str(info.value)
    assert "\n" not in message and f"local pool worker 0 (pid {pid}) made no progress" in message
    assert "VFL_WORKER_STALL_SECONDS" in message
    assert time.monotonic() - start < 60
    with pytest.raises(WorkerStalled):   # the pool takes no more work
        pool.submit_to(1, sum, [1])
    deadline = time.monotonic() + 60
    while pool.pools[0]._processes is not None and time.monotonic() < deadline:   # the detector's kill() is done
        time.sleep(0.05)
    pool.kill()   # again, as open_executor does on the way out: no second error
    pool.shutdown(wait=True)


def test_the_stall_line_is_what_leaves_open_executor(monkeypatch):
    """The detector has killed the pool already; open_executor kills it again on the way out, which must not
    replace the stall line by another error."""
    monkeypatch.setenv("VFL_WORKER_STALL_SECONDS", "1.5")
    with pytest.raises(WorkerStalled, match=r"local pool worker 0 \(pid \d+\)"):
        with open_executor(None, 2) as pool, _NOT_FORK_SAFE:
            stuck = pool.submit_to(0, blocked_on_inherited_lock)
            stuck.result(timeout=120)


def busy_for(seconds: float) -> int:
    """Burn CPU for ``seconds`` of wall time (however loaded the machine is); returns the loop count."""
    end, count = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        count += 1
    return count


def test_a_worker_busy_for_longer_than_the_limit_is_not_a_stall():
    pool = PinnedPool(1, stall_seconds=1.0)
    assert pool.submit(busy_for, 3.0).result(timeout=600) > 0   # three times the limit, no task finished meanwhile
    assert pool.stalled is None
    pool.shutdown(wait=True)


def test_the_limit_comes_from_the_environment_and_bad_values_are_one_line(monkeypatch):
    monkeypatch.delenv("VFL_WORKER_STALL_SECONDS", raising=False)
    assert stall_limit() == 300.0
    monkeypatch.setenv("VFL_WORKER_STALL_SECONDS", "42.5")
    assert stall_limit() == 42.5 and PinnedPool(1).stall_seconds == 42.5
    for bad in ("0", "-3", "soon", "inf", "nan"):
        monkeypatch.setenv("VFL_WORKER_STALL_SECONDS", bad)
        with pytest.raises(ConfigurationError, match="VFL_WORKER_STALL_SECONDS must be a positive number"):
            stall_limit()


FIT_WITH_A_STUCK_WORKER = r"""
import threading, time, warnings
import numpy as np
import vfl
from vfl.secure.products import responder

warnings.simplefilter("ignore")
HELD = threading.Lock()
HELD.acquire()   # held by this process for ever: every forked worker inherits it held


def stuck_bucket_add(*args):
    with HELD:
        pass


responder.bucket_add_task = stuck_bucket_add
rng = np.random.default_rng(1)
n = 1197
Xa, Xb = rng.uniform(-1, 1, (n, 11)), rng.uniform(0, 1, (n, 6))
y = np.clip(0.2 * Xa[:, 0] + rng.normal(0, 0.1, n), -2, 2)
start = time.monotonic()
try:
    vfl.fit([vfl.Party("alice", Xa, y, bounds=[(-1, 1)] * 11, label_bounds=(-2, 2)),
             vfl.Party("bob", Xb, bounds=[(0, 1)] * 6)], epsilon=1.0, delta=1e-5)
    print("FINISHED")
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
    print(f"after {time.monotonic() - start:.1f} s")
"""


@pytest.mark.network
def test_a_fit_whose_worker_is_stuck_ends_with_the_stall_line_instead_of_waiting_a_day():
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "VFL_WORKER_STALL_SECONDS": "3"}
    proc = subprocess.run([sys.executable, "-c", FIT_WITH_A_STUCK_WORKER], capture_output=True, text=True, env=env,
                          timeout=280)
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[0].startswith("WorkerStalled: local pool worker"), (proc.stdout, proc.stderr[-2000:])
    assert "made no progress for" in lines[0] and "(pid " in lines[0]
    assert float(lines[1].split()[1]) < 200
