"""The one worker layer of :mod:`vfl.secure` (issue 30): every local parallel job runs on a :class:`PinnedPool`.

Its callers: the streamed products (:mod:`vfl.secure.executors`, :func:`~vfl.secure.executors.open_executor`), the
encryption batches (:func:`vfl.secure.fastmath.encrypt_many`), the randomness refill
(:meth:`vfl.secure.fastmath.RandomnessPool.fill`) and the multi-exponentiation columns
(:func:`vfl.secure.fastmath.multiexp_columns`) through :func:`run_pool`. A Dask executor is any other
:class:`concurrent.futures.Executor` and keeps its own scheduler's failure handling (it has no local workers to watch).

One place starts workers: each worker is its own single-process pool, forked (:func:`start_context`; no module lock
of vfl is inherited held, :mod:`vfl.secure.forksafe`) and made to die with this process (:func:`die_with_parent`).
One stall detector: a worker with unfinished tasks that for ``stall_seconds`` (default
:data:`DEFAULT_STALL_SECONDS`, or ``VFL_WORKER_STALL_SECONDS``) finishes none and whose main thread uses no CPU time
(``/proc``; where that cannot be read, finishing tasks is the only sign of progress) has stalled. One error: a
stalled worker, or one that died (killed, crashed), fails every unfinished task with :class:`WorkerStalled` and one
line naming the worker and its pid, and the pool is killed. One shutdown path: :meth:`PinnedPool.shutdown` /
:meth:`PinnedPool.kill`.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, InvalidStateError, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from vfl.exceptions import ConfigurationError, WorkerStalled

__all__ = ["PinnedPool", "run_pool", "die_with_parent", "start_context", "stall_limit", "STALL_VARIABLE",
           "DEFAULT_STALL_SECONDS", "WATCHDOG_SECONDS"]

STALL_VARIABLE = "VFL_WORKER_STALL_SECONDS"
DEFAULT_STALL_SECONDS = 300.0
"""A local worker with unfinished tasks that neither finishes one nor uses CPU time for this long has stalled."""
WATCHDOG_SECONDS = 0.5
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def start_context() -> multiprocessing.context.BaseContext:
    """How workers start: ``fork`` where available (a 2-worker pool in ~0.05 s; ``forkserver``/``spawn`` took ~2 s
    and re-import the user's ``__main__``, :mod:`vfl.secure.forksafe`), else ``spawn``."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def die_with_parent(parent_pid: int) -> None:
    """Make this (worker) process end when ``parent_pid`` does, however the parent dies (issue 14, item 6).

    A daemon thread polls ``os.getppid()`` every :data:`WATCHDOG_SECONDS`: re-parenting means the parent process
    is gone (even by SIGKILL), and the worker exits. ``prctl(PR_SET_PDEATHSIG)`` is deliberately *not* used: Linux
    sends that signal when the *thread* that forked the worker exits, and a ``ProcessPoolExecutor`` forks its
    workers from whichever thread submits first — a party's short-lived message thread — so healthy workers were
    killed mid-run (BrokenProcessPool at 10^6 rows; regression test in tests/secure/test_secure_pool_lifetime.py).
    """
    import signal

    if os.getppid() != parent_pid:
        os._exit(1)

    def watchdog() -> None:
        while True:
            threading.Event().wait(WATCHDOG_SECONDS)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watchdog, daemon=True, name="vfl-parent-watchdog").start()
    # a terminal's Ctrl-C / SIGTERM goes to the parent, which ends the pool; workers must not print tracebacks
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start_worker(parent_pid: int, initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    die_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


class PinnedPool(Executor):
    """``workers`` local worker processes, each its own single-process pool, so a task can be sent to one chosen
    process (:meth:`submit_to`) and find there the state earlier tasks left (a fold's buckets); :meth:`submit`
    picks the process with the fewest unfinished tasks. ``initializer(*initargs)`` runs once in each worker.
    Stall detection, the dead-worker line and shutdown: see the module docstring.
    """

    def __init__(self, workers: int, *, stall_seconds: float | None = None,
                 initializer: Callable[..., Any] | None = None, initargs: tuple = ()) -> None:
        self.stall_seconds = (stall_limit() if stall_seconds is None
                              else _positive_seconds(stall_seconds, "stall_seconds"))
        self.pools = [ProcessPoolExecutor(max_workers=1, mp_context=start_context(), initializer=_start_worker,
                                          initargs=(os.getpid(), initializer, initargs))
                      for _ in range(max(1, workers))]
        self._unfinished = [0] * len(self.pools)
        self._lock = threading.Lock()
        self._waiting: list[set[Future]] = [set() for _ in self.pools]   # the futures handed out, not yet done
        self._progress = [time.monotonic()] * len(self.pools)   # last sign of progress of each worker
        self._cpu: list[float | None] = [None] * len(self.pools)
        self._procs: list[Any] = [None] * len(self.pools)   # each worker's Process, once started
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        self.stalled: str | None = None   # the failure line, once a worker stalled or died

    @property
    def workers(self) -> int:
        return len(self.pools)

    def _finished(self, index: int, inner: Future, outer: Future) -> None:
        with self._lock:
            self._unfinished[index] -= 1
            self._progress[index] = time.monotonic()
            self._waiting[index].discard(outer)
        if not inner.cancelled() and isinstance(inner.exception(), BrokenProcessPool) and not self._closed.is_set():
            threading.Thread(target=self._fail_dead, args=(index,), daemon=True, name="vfl-pool-dead").start()
            return
        _deliver(inner, outer)

    def submit_to(self, index: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` in worker process ``index`` (tasks to one worker run in order)."""
        outer: Future = Future()
        with self._lock:
            if self.stalled is not None:
                raise WorkerStalled(self.stalled)
            if not self._unfinished[index]:
                self._progress[index] = time.monotonic()   # idle time is not a stall
            self._unfinished[index] += 1
            self._waiting[index].add(outer)
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, daemon=True, name="vfl-pool-stall-detector")
                self._watcher.start()
        try:
            inner = self.pools[index].submit(fn, *args, **kwargs)
        except BaseException:
            with self._lock:
                self._unfinished[index] -= 1
                self._waiting[index].discard(outer)
            raise
        if self._procs[index] is None:
            self._procs[index] = next(iter((getattr(self.pools[index], "_processes", None) or {}).values()), None)
        inner.add_done_callback(lambda f: self._finished(index, f, outer))
        outer.add_done_callback(lambda f: inner.cancel() if f.cancelled() else None)
        return outer

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        with self._lock:
            index = min(range(len(self.pools)), key=self._unfinished.__getitem__)
        return self.submit_to(index, fn, *args, **kwargs)

    def worker_pid(self, index: int) -> int | None:
        """The pid of worker process ``index`` (``None`` before its first task)."""
        if self._procs[index] is not None:
            return int(self._procs[index].pid)
        procs = list(getattr(self.pools[index], "_processes", None) or {})
        return procs[0] if procs else None

    def _fail_dead(self, index: int) -> None:
        try:
            self._procs[index].join(5)   # reaped, so its exit code can be named
        except Exception:  # pragma: no cover - reaped by the pool's own thread meanwhile
            pass
        self._fail(self._died_line(index))

    def _died_line(self, index: int) -> str:
        proc = self._procs[index]
        code = getattr(proc, "exitcode", None)
        how = (f"was killed by signal {-code}" if isinstance(code, int) and code < 0
               else f"exited with code {code}" if code is not None else "ended unexpectedly")
        return (f"local pool worker {index} (pid {self.worker_pid(index)}) {how} with a task unfinished; "
                f"the run is stopped")

    def _fail(self, line: str) -> None:
        """Fail every unfinished task with ``WorkerStalled(line)`` (the first line wins) and kill the workers."""
        with self._lock:
            if self.stalled is None:
                self.stalled = line
            line = self.stalled
            waiting = [f for futures in self._waiting for f in futures]
        for future in waiting:
            _deliver_exception(future, WorkerStalled(line))
        threading.Thread(target=self.kill, daemon=True, name="vfl-pool-kill").start()   # not from a pool callback

    def _watch(self) -> None:
        """The stall detector's thread (see the module docstring)."""
        interval = max(0.05, min(2.0, self.stall_seconds / 20))
        while not self._closed.wait(interval):
            for index in range(len(self.pools)):
                pid = self.worker_pid(index)
                cpu = _main_thread_cpu_seconds(pid) if pid is not None else None
                now = time.monotonic()
                with self._lock:
                    if cpu is not None and cpu != self._cpu[index]:
                        self._cpu[index] = cpu
                        self._progress[index] = now
                    idle = now - self._progress[index]
                    if not self._unfinished[index] or idle < self.stall_seconds:
                        continue
                    line = (f"local pool worker {index} (pid {pid}) made no progress for {idle:.0f} s with "
                            f"{self._unfinished[index]} task(s) unfinished (none finished, no CPU time used); "
                            f"the run is stopped ({STALL_VARIABLE} sets this limit, now {self.stall_seconds:g} s)")
                self._fail(line)
                return

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed.set()
        for pool in self.pools:
            pool.shutdown(wait=wait, cancel_futures=cancel_futures)

    def kill(self) -> None:
        """Kill every worker now (interrupt or failure) instead of waiting for their tasks."""
        self._closed.set()
        for pool in self.pools:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):   # None once shut down
                proc.kill()
        self.shutdown(wait=False, cancel_futures=True)


def run_pool(func: Callable[[Any], Any], tasks: Sequence[Any], workers: int, payload: dict[str, Any],
             progress: Callable[[int], None] | None = None, weights: Sequence[int] | None = None,
             initializer: Callable[[dict[str, Any]], None] | None = None) -> list[Any]:
    """``[func(t) for t in tasks]`` on a :class:`PinnedPool` of ``min(workers, len(tasks))`` workers, each
    initialised with ``initializer(payload)`` (order kept). A task goes to whichever worker is free next (as in a
    shared-queue pool), keeping one task queued per worker. ``progress(weights[i])`` (default weight 1) is called as
    the results are collected in order.
    """
    if workers <= 1:
        raise ValueError("run_pool is for workers > 1; run serial work in the calling thread")
    weights = [1] * len(tasks) if weights is None else list(weights)
    pool = PinnedPool(max(1, min(workers, len(tasks))), initializer=initializer, initargs=(payload,))
    try:
        results = _dispatch(pool, func, list(tasks), progress, weights)
    except BaseException:
        pool.kill()   # interrupted (Ctrl-C / SIGTERM) or failed: do not wait for their tasks
        raise
    pool.shutdown(wait=True)
    return results


def _dispatch(pool: PinnedPool, func: Callable[[Any], Any], tasks: list[Any],
              progress: Callable[[int], None] | None, weights: list[int]) -> list[Any]:
    futures: list[Future | None] = [None] * len(tasks)
    where: dict[Future, int] = {}
    nxt = 0
    for _ in range(2):   # two per worker: one running, one queued
        for index in range(pool.workers):
            if nxt < len(tasks):
                futures[nxt] = pool.submit_to(index, func, tasks[nxt])
                where[futures[nxt]] = index   # type: ignore[index]
                nxt += 1
    reported = 0
    out: list[Any] = []
    pending = set(where)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            future.result()   # the first failure (a task's error or the worker line) ends the run
            if nxt < len(tasks):
                futures[nxt] = nxt_future = pool.submit_to(where[future], func, tasks[nxt])
                where[nxt_future] = where[future]
                pending.add(nxt_future)
                nxt += 1
        while reported < len(tasks) and futures[reported] is not None and futures[reported].done():  # type: ignore[union-attr]
            out.append(futures[reported].result())   # type: ignore[union-attr]
            if progress:
                progress(weights[reported])
            reported += 1
    return out


def _deliver(inner: Future, outer: Future) -> None:
    """Copy the outcome of a worker's future to the future handed out (unless that one is already done)."""
    if outer.done():
        return
    try:
        if inner.cancelled():
            outer.cancel()
        elif inner.exception() is not None:
            outer.set_exception(inner.exception())
        else:
            outer.set_result(inner.result())
    except InvalidStateError:   # cancelled or failed by the stall detector meanwhile
        pass


def _deliver_exception(future: Future, exc: BaseException) -> None:
    try:
        future.set_exception(exc)
    except InvalidStateError:
        pass


def _main_thread_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of the main thread of process ``pid`` (Linux ``/proc``), or ``None``."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (IndexError, ValueError):
        return None


def _positive_seconds(value: Any, name: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
    return seconds


def stall_limit() -> float:
    """Seconds without progress after which a local worker counts as stalled: ``VFL_WORKER_STALL_SECONDS`` or
    :data:`DEFAULT_STALL_SECONDS`."""
    value = os.environ.get(STALL_VARIABLE, "").strip()
    return DEFAULT_STALL_SECONDS if not value else _positive_seconds(value, STALL_VARIABLE)
