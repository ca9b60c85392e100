"""A party's Dask workers as pinned slots (issue 34): buckets kept across chunks on Dask, and a lost worker named.

:class:`DaskPinnedPool` gives a Dask cluster the interface of the local :class:`~vfl.secure.workers.PinnedPool`
(``workers``, :meth:`~DaskPinnedPool.submit_to`, :meth:`~DaskPinnedPool.submit`), so the responder's fold keeps each
worker's Pippenger buckets (Pippenger 1976; Bernstein et al.'s bucket method, :mod:`vfl.secure.fastmath`) in that
worker's process across every chunk (:func:`vfl.secure.executors.bucket_add_task`, keyed by the fold's run token),
instead of one multi-exponentiation per chunk task. Slot ``i`` is one worker process of the cluster, fixed when the
pool opens; a task for slot ``i`` is submitted with Dask's documented worker restrictions
(``Client.submit(..., workers=[address], allow_other_workers=False)``), so it runs in that process or nowhere.

Failure: Dask re-runs a task whose worker died elsewhere, but a task restricted to a worker that left waits (state
``no-worker``) until a worker of that address returns, and a worker that returns has lost its buckets. So a
watcher thread asks the scheduler every :data:`POLL_SECONDS` which workers it has; when a slot's worker has left
or was replaced (same address, new worker id), or the scheduler cannot be reached, every unfinished task fails
with :class:`~vfl.exceptions.WorkerStalled` and one line naming the worker, and the pool takes no more work. A
product is never computed without the lost buckets: the fold also compares the chunks each worker holds with the
chunks sent to it (:meth:`vfl.secure.products.responder.ResponderFold`). No Dask import here: the caller passes a
connected ``distributed.Client``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from vfl.exceptions import ConfigurationError, WorkerStalled
from vfl.secure.workers import _deliver, _deliver_exception

__all__ = ["DaskPinnedPool", "POLL_SECONDS", "run_in_slot", "current_slot"]

POLL_SECONDS = 1.0
"""How often the watcher asks the scheduler for its workers (one small message)."""


_SLOT = threading.local()


def run_in_slot(slot: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in the worker of slot ``slot``, which :func:`current_slot` names meanwhile: two slots
    may share one process (a Dask worker with several threads, or threaded workers), so state kept across tasks is
    keyed by the slot as well as by the run token."""
    _SLOT.value = slot
    try:
        return fn(*args, **kwargs)
    finally:
        _SLOT.value = None


def current_slot() -> int | None:
    """The slot the running task was sent to (:func:`run_in_slot`), or ``None`` (a local pool's own process)."""
    return getattr(_SLOT, "value", None)


class DaskPinnedPool(Executor):
    """The worker processes of a Dask cluster (as the scheduler lists them when the pool opens) as pinned slots.

    ``client``: a connected ``distributed.Client`` (closed by :meth:`shutdown` only if ``own_client``).
    ``wait_seconds``: how long to wait for a first worker when the cluster has none yet.
    """

    def __init__(self, client: Any, *, own_client: bool = False, poll_seconds: float = POLL_SECONDS,
                 wait_seconds: float = 60.0) -> None:
        self._client, self._own = client, own_client
        self.address = str(getattr(getattr(client, "scheduler", None), "address", "") or "")
        workers = self._scheduler_workers()
        if not workers:
            try:
                client.wait_for_workers(1, timeout=wait_seconds)
            except Exception:
                raise ConfigurationError(f"the Dask cluster at {self.address} has no workers "
                                         f"(waited {wait_seconds:g} s)") from None
            workers = self._scheduler_workers()
        self._slots = sorted(workers)
        self._ids = [workers[a].get("id") for a in self._slots]
        self._lock = threading.Lock()
        self._waiting: dict[Future, Any] = {}   # future handed out -> its Dask future, until delivered
        self._fetchers = ThreadPoolExecutor(4, thread_name_prefix="vfl-dask-results")
        self._closed = threading.Event()
        self.stalled: str | None = None   # the failure line, once a worker was lost
        self._poll = float(poll_seconds)
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="vfl-dask-watcher")
        self._watcher.start()

    @property
    def workers(self) -> int:
        return len(self._slots)

    def worker_address(self, index: int) -> str:
        """The Dask address of slot ``index``."""
        return self._slots[index]

    def _scheduler_workers(self) -> dict[str, dict]:
        info = self._client.scheduler_info(n_workers=-1)
        return dict(info.get("workers", {}))

    def submit_to(self, index: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` in the worker process of slot ``index`` (and nowhere else)."""
        key = f"{getattr(fn, '__name__', 'task')}-{uuid.uuid4().hex}"   # named after fn, not the wrapper
        return self._track(lambda: self._client.submit(run_in_slot, index, fn, *args, key=key,
                                                       workers=[self._slots[index]], allow_other_workers=False,
                                                       pure=False, **kwargs))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` on whichever worker the scheduler picks (a pure task)."""
        return self._track(lambda: self._client.submit(fn, *args, pure=False, **kwargs))

    def _track(self, start: Callable[[], Any]) -> Future:
        outer: Future = Future()
        with self._lock:
            if self.stalled is not None:
                raise WorkerStalled(self.stalled)
            if self._closed.is_set():
                raise RuntimeError("cannot schedule new futures after shutdown")
            inner = start()
            self._waiting[outer] = inner
        outer.add_done_callback(lambda f: inner.cancel() if f.cancelled() else None)
        inner.add_done_callback(lambda f: self._finished(f, outer))
        return outer

    def _finished(self, inner: Any, outer: Future) -> None:
        """A Dask future is done (in Dask's one callback thread, which must never block): fetch its result in this
        pool's own threads. The future handed out stays unfinished (and the watcher can fail it) until delivered:
        fetching the result of a task whose worker died waits for a re-run that, pinned to that worker, never
        comes."""
        if inner.status == "finished":
            self._fetchers.submit(self._deliver_from, inner, outer)
        else:
            self._deliver_from(inner, outer)

    def _deliver_from(self, inner: Any, outer: Future) -> None:
        done: Future = Future()
        try:
            if inner.status == "finished":
                done.set_result(inner.result())
            elif inner.status == "error":
                done.set_exception(inner.exception())
            else:   # cancelled by Dask (not by us: then ``outer`` is done already) or lost
                done.set_exception(WorkerStalled(self.stalled or f"a Dask task ended {inner.status} "
                                                 f"(scheduler {self.address}); the run is stopped"))
        except BaseException as exc:   # the result could not be fetched (worker or scheduler gone meanwhile)
            done.set_exception(WorkerStalled(self.stalled or f"a Dask task's result was lost "
                                             f"({type(exc).__name__}); the run is stopped"))
        with self._lock:
            self._waiting.pop(outer, None)
        _deliver(done, outer)

    def _lost_line(self) -> str | None:
        """The failure line if a slot's worker left or was replaced, or the scheduler is unreachable; else None."""
        try:
            now = self._scheduler_workers()
        except Exception as exc:
            return (f"lost the Dask scheduler at {self.address} ({type(exc).__name__}: {exc}); "
                    f"the run is stopped")
        for index, (address, wid) in enumerate(zip(self._slots, self._ids, strict=True)):
            got = now.get(address)
            if got is None or got.get("id") != wid:
                how = "left the cluster" if got is None else "was replaced by a new process"
                return (f"Dask worker {index} ({address}) {how} (killed, crashed or restarted); its part of "
                        f"this run is lost, the run is stopped")
        return None

    def _watch(self) -> None:
        while not self._closed.wait(self._poll):
            line = self._lost_line()
            if line is not None and not self._closed.is_set():
                self.fail(line)
                return

    def fail(self, line: str) -> None:
        """Fail every unfinished task with ``WorkerStalled(line)`` (the first line wins); no more work is taken."""
        with self._lock:
            if self.stalled is None:
                self.stalled = line
            line = self.stalled
            waiting = list(self._waiting.items())
            self._waiting.clear()
        for future, inner in waiting:
            _deliver_exception(future, WorkerStalled(line))
            inner.cancel()   # releases the task on the scheduler (and a thread waiting for its result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the watcher, cancel what is unfinished (``cancel_futures``) and close the client if it is ours."""
        self._closed.set()
        with self._lock:
            waiting = list(self._waiting) if cancel_futures else []
        for future in waiting:
            future.cancel()
        self._fetchers.shutdown(wait=False, cancel_futures=cancel_futures)
        if self._own:
            self._client.close()

    def kill(self) -> None:
        """Interrupt or failure: cancel every unfinished task (the cluster's workers stay up: they are not ours)."""
        self.shutdown(wait=False, cancel_futures=True)
