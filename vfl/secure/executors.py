"""Where the heavy big-number work of a streamed secure product runs: any :class:`concurrent.futures.Executor`.

* ``executor=None``: in the calling thread (``workers == 1``) or ``workers`` local worker processes
  (:class:`PinnedPool`, ``workers > 1``);
* ``executor="tcp://SCHEDULER:8786"``: a Dask cluster through ``dask.distributed.Client(address).get_executor()``
  (optional extra ``vfl[dask]``; the workers need vfl and gmpy2 installed and run inside the party's own trust
  domain: they see its packed plaintexts and, for ``randomness="standard"``, the factors of its key; as responder,
  its exponent blocks (its own data) and the ``r`` of its response re-randomisers);
* an ``Executor`` instance: used as given (never shut down here).

Tasks are the module-level pure functions below (:func:`encrypt_rows_task`, :func:`multiexp_rows_task`): every
input, including the encryption randomness (drawn by the caller from :mod:`secrets`), travels in the arguments,
so the result of a task does not depend on where it runs, and results are bit-identical between executors.
:func:`bounded_map` keeps at most ``max_in_flight`` tasks submitted, so memory stays bounded by the chunk size.

A :class:`PinnedPool` can also send a task to one chosen process (:meth:`PinnedPool.submit_to`): the responder's
fold keeps each worker's Pippenger buckets in that worker across all chunks (:func:`bucket_add_task`,
:func:`bucket_result_task`; Pippenger 1976 / Bernstein et al.'s bucket method as in :mod:`vfl.secure.fastmath`), so
two local workers count the same multiplications as one instead of one multi-exponentiation per chunk each.
The value of a product does not depend on how its rows were bucketed, so results stay bit-identical.
:func:`residues_task` computes the responder's re-randomisers ``r^n mod n^2`` from ``r`` drawn by the caller.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, InvalidStateError, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, WorkerStalled
from vfl.secure.bigint import mpz
from vfl.secure.fastmath import Encrypter, _context, bucket_accumulator, die_with_parent, frame_bases, multiexp
from vfl.secure.forksafe import fork_safe_lock
from vfl.secure.packing import pack

__all__ = ["InlineExecutor", "PinnedPool", "open_executor", "bounded_map", "encrypt_rows_task",
           "multiexp_rows_task", "residues_task", "bucket_add_task", "bucket_result_task", "bucket_discard_task",
           "DASK_SCHEMES", "STALL_VARIABLE", "DEFAULT_STALL_SECONDS", "stall_limit"]

DASK_SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")
STALL_VARIABLE = "VFL_WORKER_STALL_SECONDS"
DEFAULT_STALL_SECONDS = 300.0
"""A local worker with unfinished tasks that neither finishes one nor uses CPU time for this long has stalled."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class InlineExecutor(Executor):
    """Runs each task immediately in the calling thread (``workers=1``): no processes, no pickling."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # delivered through the future, like any executor
            future.set_exception(exc)
        return future


class PinnedPool(Executor):
    """``workers`` local worker processes, each its own single-process pool, so a task can be sent to one chosen
    process (:meth:`submit_to`) and find there the state earlier tasks left (a fold's buckets); :meth:`submit`
    picks the process with the fewest unfinished tasks. Workers die with this process (``die_with_parent``).

    Workers are forked (:func:`fastmath._context`); no module lock of vfl is inherited held
    (:mod:`vfl.secure.forksafe`). A stall detector (issue 30) watches every worker that has unfinished tasks: when
    for ``stall_seconds`` (default :data:`DEFAULT_STALL_SECONDS`, or ``VFL_WORKER_STALL_SECONDS``) none of its tasks
    finished and its main thread used no CPU time (``/proc``; where that cannot be read, finishing tasks is the only
    sign of progress), every unfinished task fails with :class:`WorkerStalled` naming the worker and its pid, and
    the workers are killed: the run ends with that line instead of at ``max_run_seconds``.
    """

    def __init__(self, workers: int, *, stall_seconds: float | None = None) -> None:
        self.stall_seconds = (stall_limit() if stall_seconds is None
                              else _positive_seconds(stall_seconds, "stall_seconds"))
        self.pools = [ProcessPoolExecutor(max_workers=1, mp_context=_context(), initializer=die_with_parent,
                                          initargs=(os.getpid(),)) for _ in range(max(1, workers))]
        self._unfinished = [0] * len(self.pools)
        self._lock = threading.Lock()
        self._waiting: list[set[Future]] = [set() for _ in self.pools]   # the futures handed out, not yet done
        self._progress = [time.monotonic()] * len(self.pools)   # last sign of progress of each worker
        self._cpu: list[float | None] = [None] * len(self.pools)
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        self.stalled: str | None = None   # the stall line, once a worker stalled

    @property
    def workers(self) -> int:
        return len(self.pools)

    def _finished(self, index: int, inner: Future, outer: Future) -> None:
        with self._lock:
            self._unfinished[index] -= 1
            self._progress[index] = time.monotonic()
            self._waiting[index].discard(outer)
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
        inner.add_done_callback(lambda f: self._finished(index, f, outer))
        outer.add_done_callback(lambda f: inner.cancel() if f.cancelled() else None)
        return outer

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        with self._lock:
            index = min(range(len(self.pools)), key=self._unfinished.__getitem__)
        return self.submit_to(index, fn, *args, **kwargs)

    def worker_pid(self, index: int) -> int | None:
        """The pid of worker process ``index`` (``None`` before its first task)."""
        procs = list(getattr(self.pools[index], "_processes", None) or {})
        return procs[0] if procs else None

    def _watch(self) -> None:
        """The stall detector's thread (see the class docstring)."""
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
                    self.stalled = (f"local pool worker {index} (pid {pid}) made no progress for {idle:.0f} s with "
                                    f"{self._unfinished[index]} task(s) unfinished (none finished, no CPU time used); "
                                    f"the run is stopped ({STALL_VARIABLE} sets this limit, now "
                                    f"{self.stall_seconds:g} s)")
                    waiting = [f for futures in self._waiting for f in futures]
                for future in waiting:
                    _deliver_exception(future, WorkerStalled(self.stalled))
                self.kill()
                return

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed.set()
        for pool in self.pools:
            pool.shutdown(wait=wait, cancel_futures=cancel_futures)

    def kill(self) -> None:
        """Kill every worker now (interrupt or failure) instead of waiting for their tasks."""
        for pool in self.pools:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):   # None once shut down
                proc.kill()
        self.shutdown(wait=False, cancel_futures=True)


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


def executor_workers(executor: Any, workers: int) -> int:
    """Parallelism to plan chunk splits for: ``workers`` locally, the cluster's thread count for Dask."""
    if isinstance(executor, PinnedPool):
        return executor.workers
    if isinstance(executor, ProcessPoolExecutor):
        return max(1, int(getattr(executor, "_max_workers", workers)))
    client = getattr(executor, "_client", None)
    if client is not None:
        try:
            return max(1, sum(client.nthreads().values()))
        except Exception:  # pragma: no cover - a cluster that cannot report its size
            return max(1, workers)
    return max(1, workers)


@contextmanager
def open_executor(executor: Executor | str | None, workers: int) -> Iterator[Executor]:
    """The executor to run tasks on (see module docstring); closes what it opened."""
    if isinstance(executor, Executor):
        yield executor
        return
    if isinstance(executor, str):
        if not executor.startswith(DASK_SCHEMES):
            raise ConfigurationError(f"executor must be a Dask scheduler address like tcp://HOST:8786, "
                                     f"got {executor!r}")
        try:
            from dask.distributed import Client
        except ImportError:  # pragma: no cover - depends on the optional extra
            raise ConfigurationError("executor=ADDRESS needs Dask: pip install 'vfl[dask]'") from None
        try:
            client = Client(executor, timeout=30, set_as_default=False)
        except OSError as exc:
            raise ConfigurationError(f"cannot reach the Dask scheduler at {executor}: {exc}") from None
        try:
            yield client.get_executor(pure=False)
        finally:
            client.close()
        return
    if executor is not None:
        raise ConfigurationError(f"executor must be None, a Dask address or a concurrent.futures.Executor, "
                                 f"got {type(executor).__name__}")
    if workers <= 1:
        yield InlineExecutor()
        return
    # workers die with this process however it ends (issue 14, item 6: fastmath.die_with_parent)
    pool = PinnedPool(workers)
    try:
        yield pool
    except BaseException:
        pool.kill()   # interrupted (Ctrl-C / SIGTERM) or failed: do not wait for their tasks
        raise
    pool.shutdown(wait=True)


def bounded_map(executor: Executor, fn: Callable[..., Any], arguments: Iterable[tuple], max_in_flight: int
                ) -> Iterator[Any]:
    """``fn(*args)`` for each argument tuple, results in order, with at most ``max_in_flight`` tasks pending."""
    pending: deque[Future] = deque()
    try:
        for args in arguments:
            pending.append(executor.submit(fn, *args))
            while len(pending) >= max(1, max_in_flight):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


# ----------------------------------------------------------------------------- tasks (pure functions)
_TASK_ENCRYPTERS: dict[tuple, Encrypter] = {}
_TASK_LOCK = fork_safe_lock()   # a forked worker never inherits it held (issue 30)


def _task_encrypter(state: tuple, count: int) -> Encrypter:
    """One :class:`Encrypter` per key in each worker process, its fixed-base table built once."""
    with _TASK_LOCK:
        enc = _TASK_ENCRYPTERS.get(state)
        if enc is None:
            if len(_TASK_ENCRYPTERS) >= 8:
                _TASK_ENCRYPTERS.pop(next(iter(_TASK_ENCRYPTERS)))
            enc = _TASK_ENCRYPTERS[state] = Encrypter.from_state(state)
        enc.prepare(count)
        return enc


def encrypt_rows_task(state: tuple, encoded: np.ndarray, groups: list[tuple[int, int]], slot_bits: int,
                      draws: list[Any], precomputed: bool, width: int) -> bytes:
    """Pack and encrypt rows: ``Enc(sum_{j in g} x'_ij 2^(w slot(j)))`` per row ``i`` and group ``g`` (row-major).

    ``encoded`` holds offset-encoded non-negative ints; ``draws[t]`` is the randomness of ciphertext ``t``
    (:meth:`Encrypter.draw`, or the ``n``-th residue itself when ``precomputed``). Returns the fixed-width
    big-endian ciphertexts, ready to be a wire frame.
    """
    enc = _task_encrypter(state, len(draws))
    n, n2 = enc.n, enc.n2
    out = bytearray()
    t = 0
    for row in np.asarray(encoded).tolist():
        for lo, hi in groups:
            rho = mpz(draws[t]) if precomputed else enc.residue_from(draws[t])
            t += 1
            c = (1 + mpz(pack(row[lo:hi], slot_bits)) * n) * rho % n2
            out += int(c).to_bytes(width, "big")
    return bytes(out)


def multiexp_rows_task(modulus: int, frame: bytes, width: int, n_groups: int, exponents: np.ndarray
                       ) -> tuple[list[int], int]:
    """``prod_i c_ig^{e_ik} mod n^2`` for every column ``k`` of ``exponents`` and group ``g``.

    ``frame`` is a chunk of ciphertexts (row-major, ``n_groups`` per row, validated by the caller). Returns
    the products ordered ``k * n_groups + g`` and the number of modular multiplications.
    """
    m = mpz(modulus)
    bases = frame_bases(frame, width, n_groups)
    columns = np.asarray(exponents).T.tolist()
    out: list[int] = []
    mults = 0
    for exps in columns:
        for g in range(n_groups):
            value, count = multiexp(bases[g], exps, m)
            out.append(int(value))
            mults += count
    return out, mults


def residues_task(state: tuple, draws: list[Any]) -> list[int]:
    """``[rho(draw) for draw in draws]``: for the responder's re-randomisers ``r^n mod n^2`` with ``r`` uniform in
    ``Z*_n`` drawn by the caller from :mod:`secrets` (:meth:`Encrypter.draw`; state without the factors)."""
    enc = _task_encrypter(state, len(draws))
    return [int(enc.residue_from(d)) for d in draws]


# ----------------------------------------------------------------------------- buckets kept in a pinned worker
_FOLD_BUCKETS: dict[str, Any] = {}
_FOLD_CHUNKS: dict[str, int] = {}


def bucket_add_task(token: str, modulus: int, window: int, exponent_bits: int, frame: bytes, width: int,
                    n_groups: int, exponents: np.ndarray) -> None:
    """Put a chunk's bases into this worker's buckets of fold ``token`` (created on first use): product
    ``k * n_groups + g`` gets ``c_ig`` by the digits of ``exponents[i, k]`` (:func:`bucket_accumulator`, in C when
    built). Only for :meth:`PinnedPool.submit_to` (state stays in the worker process until
    :func:`bucket_result_task`)."""
    exps = np.asarray(exponents)
    with _TASK_LOCK:
        entry = _FOLD_BUCKETS.get(token)
        if entry is None:
            products = exps.shape[1] * n_groups
            entry = _FOLD_BUCKETS[token] = (bucket_accumulator(products, exponent_bits, window, modulus), products)
        _FOLD_CHUNKS[token] = _FOLD_CHUNKS.get(token, 0) + 1
    entry[0].add_frame(frame, width, n_groups, exps)


def bucket_result_task(token: str) -> tuple[list[int], int, int]:
    """The products of fold ``token`` in this worker (ordered ``k * n_groups + g``), their multiplication count and
    the number of chunks put into them, releasing its buckets (``([], 0, 0)`` if no chunk reached this worker: the
    caller checks the count against the chunks it sent, so lost buckets can never pass as an empty product)."""
    with _TASK_LOCK:
        entry = _FOLD_BUCKETS.pop(token, None)
        chunks = _FOLD_CHUNKS.pop(token, 0)
    if entry is None:
        return [], 0, 0
    acc, products = entry
    values = [int(acc.result(t)) for t in range(products)]
    return values, acc.mults, chunks


def bucket_discard_task(token: str) -> None:
    """Drop fold ``token``'s buckets (an abandoned fold on an executor that outlives it)."""
    with _TASK_LOCK:
        _FOLD_BUCKETS.pop(token, None)
        _FOLD_CHUNKS.pop(token, None)
