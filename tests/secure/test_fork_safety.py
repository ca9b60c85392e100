"""Issue 30: the worker layer must not deadlock.

Invariant: a pool worker never starts with a lock some *other* thread of the party held at the moment the pool was
created. ``vfl.fit`` runs every party as a thread of one process, and a network party has background threads (the
responder's re-randomisers); when a pool was *forked* from such a process while another thread held
``executors._TASK_LOCK`` (building an :class:`~vfl.secure.fastmath.Encrypter` under it), the worker inherited the
lock held and waited for it forever, and so did the run (issue 30: 4 of 30 garment fits, until
``max_run_seconds``, one day by default).

* :func:`test_a_pool_created_while_another_thread_holds_the_task_lock_still_runs` is the direct reproduction: a
  thread holds the lock while a :class:`PinnedPool` starts its workers and they run a task that takes the lock. On
  a fork-started pool it hangs every time (the test fails within its outer limit).
* :func:`test_two_party_fits_never_stall_on_busy_cores` (slow) is the stress test of the issue: many two-party
  ``vfl.fit`` runs while other processes keep every core busy; a run that prints nothing for ``STALL_SECONDS`` is
  a stall (the child is killed and the next runs go on in a fresh one).

``python tests/secure/test_fork_safety.py --runs 30`` prints the same count for a measurement.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: one line per finished fit; the data are garment-shaped (1197 rows, 11 + 6 columns, 2048-bit keys), which makes
#: every fit open one 2-worker pool for its secure product (as the garment fits of the issue did)
FITS = r"""
import json, sys, time, warnings
import numpy as np
import vfl

warnings.simplefilter("ignore")
rng = np.random.default_rng(int(sys.argv[2]))
n = 1197
Xa, Xb = rng.uniform(-1, 1, (n, 11)), rng.uniform(0, 1, (n, 6))
y = np.clip(0.2 * Xa[:, 0] - 0.3 * Xb[:, 1] + rng.normal(0, 0.1, n), -2, 2)
for i in range(int(sys.argv[1])):
    t = time.monotonic()
    alice = vfl.Party("alice", Xa, y, bounds=[(-1, 1)] * 11, label_bounds=(-2, 2))
    bob = vfl.Party("bob", Xb, bounds=[(0, 1)] * 6)
    vfl.fit([alice, bob], model="linear", mechanism="gaussian-fm", epsilon=1.0, delta=1e-5)
    print(json.dumps({"seconds": round(time.monotonic() - t, 3)}), flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _lines(proc: subprocess.Popen, out: queue.Queue) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        out.put(line)
    out.put(None)


def stress(runs: int, stall_seconds: float, busy: int, seed: int = 0, log=None) -> dict:
    """``runs`` two-party fits with ``busy`` busy-looping processes beside them: finished, stalled and failed runs.

    A fit that prints nothing for ``stall_seconds`` is a stall: its process is killed and the remaining runs go on
    in a new one. A child that exits non-zero fails its current run (its last stderr line is kept)."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    seconds: list[float] = []
    stalls, failures, errors = 0, 0, []
    try:
        while len(seconds) + stalls + failures < runs:
            left = runs - len(seconds) - stalls - failures
            proc = subprocess.Popen([sys.executable, "-c", FITS, str(left), str(seed + len(seconds))],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                                    start_new_session=True)
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=_lines, args=(proc, lines), daemon=True).start()
            while True:
                try:
                    line = lines.get(timeout=stall_seconds)
                except queue.Empty:
                    stalls += 1
                    if log:
                        log(f"run {len(seconds) + stalls + failures}: STALLED (nothing for {stall_seconds:.0f} s)")
                    os.killpg(proc.pid, 9)
                    proc.wait()
                    break
                if line is None:
                    if proc.wait() != 0:
                        failures += 1
                        assert proc.stderr is not None
                        errors.append((proc.stderr.read().strip().splitlines() or ["?"])[-1])
                        if log:
                            log(f"run {len(seconds) + stalls + failures}: FAILED {errors[-1]}")
                    break
                seconds.append(json.loads(line)["seconds"])
                if log:
                    log(f"run {len(seconds) + stalls + failures}: {seconds[-1]:.2f} s")
    finally:
        for b in burners:
            b.kill()
            b.wait()
    ordered = sorted(seconds) or [0.0]
    return {"runs": runs, "finished": len(seconds), "stalled": stalls, "failed": failures, "errors": errors,
            "busy_processes": busy, "stall_seconds": stall_seconds, "median_seconds": ordered[len(ordered) // 2],
            "max_seconds": ordered[-1]}


def test_a_pool_created_while_another_thread_holds_the_task_lock_still_runs():
    """Fails (times out) when a pool is forked while another thread holds ``_TASK_LOCK``: its workers inherit the
    lock held and never get it (every time on main before issue 30's fix)."""
    code = r"""
import threading, time
import numpy as np
from vfl.secure import executors
from vfl.secure.fastmath import Encrypter
from vfl.secure.keys import generate_keypair

pk, _ = generate_keypair(512, allow_insecure=True)
state = Encrypter(pk.n, randomness="standard").task_state()
held = threading.Event()

def hold():
    with executors._TASK_LOCK:   # as a re-randomiser thread building its Encrypter does, for a second
        held.set()
        time.sleep(1.0)

threading.Thread(target=hold, daemon=True).start()
held.wait()
with executors.open_executor(None, 2) as pool:
    futures = [pool.submit_to(i, executors.residues_task, state, [3, 5]) for i in range(2)]
    print([len(f.result()) for f in futures], flush=True)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[2, 2]"


LOCK_FACTORIES = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"}


def _module_level_locks(tree: ast.Module) -> list[int]:
    """Lines of module-level statements that create a threading lock directly (not through fork_safe_lock)."""
    lines = []
    for stmt in tree.body:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            continue
        for node in ast.walk(stmt.value):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in LOCK_FACTORIES:
                    lines.append(stmt.lineno)
    return lines


def test_every_module_level_lock_is_fork_safe():
    """A worker forked from a party runs module-level code of vfl; any module-level lock must come from
    :func:`vfl.secure.forksafe.fork_safe_lock` (forksafe's own registry lock is held around every fork)."""
    offenders = []
    for path in sorted((REPO / "vfl").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for line in _module_level_locks(ast.parse(path.read_text(), rel)):
            if rel != "vfl/secure/forksafe.py":
                offenders.append(f"{rel}:{line}")
    assert not offenders, f"module-level locks not made by fork_safe_lock(): {offenders}"
    assert _module_level_locks(ast.parse("import threading\nL = threading.Lock()\n")) == [2]   # the check can fail


def test_the_fork_guard_holds_the_locks_around_a_fork_and_releases_them_in_both_processes():
    from vfl.secure import executors, fastmath, forksafe

    assert executors._TASK_LOCK in forksafe._LOCKS and fastmath._ENCRYPTER_LOCK in forksafe._LOCKS
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: every guarded lock is free
        ok = all(lock.acquire(timeout=5) for lock in forksafe._LOCKS)
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    assert not any(lock.locked() for lock in forksafe._LOCKS)   # and free again in the parent


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_two_party_fits_never_stall_on_busy_cores():
    runs = int(os.environ.get("VFL_FORK_STRESS_RUNS", "200"))
    result = stress(runs, stall_seconds=120.0, busy=os.cpu_count() or 2)
    assert result["stalled"] == 0 and result["failed"] == 0, result
    assert result["finished"] == runs


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="count stalled two-party vfl.fit runs on busy cores")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--stall-seconds", type=float, default=60.0)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the counts as JSON here")
    args = parser.parse_args()
    result = stress(args.runs, args.stall_seconds, args.busy, args.seed, log=lambda m: print(m, flush=True))
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
