"""Where the heavy big-number work of a streamed secure product runs: any :class:`concurrent.futures.Executor`.

* ``executor=None``: in the calling thread (``workers == 1``) or ``workers`` local worker processes
  (:class:`~vfl.secure.workers.PinnedPool`, ``workers > 1``: the one worker layer, with its stall detector);
* ``executor="tcp://SCHEDULER:8786"``: a Dask cluster through ``dask.distributed.Client(address)``, its worker
  processes as pinned slots (:class:`~vfl.secure.dask_pool.DaskPinnedPool`, issue 34: buckets kept across chunks,
  a lost worker named) (optional extra ``vfl[dask]``; the workers need vfl and gmpy2 installed and run inside the
  party's own trust domain: they see its packed plaintexts and, for ``randomness="standard"``, the factors of its
  key; as responder, its exponent blocks (its own data) and the ``r`` of its response re-randomisers);
* an ``Executor`` instance: used as given (never shut down here; ``client.get_executor()`` gets pure per-chunk tasks,
  ``DaskPinnedPool(client)`` keeps buckets).

Tasks are the module-level pure functions below (:func:`encrypt_rows_task`, :func:`multiexp_rows_task`): every
input, including the encryption randomness (drawn by the caller from :mod:`secrets`), travels in the arguments,
so the result of a task does not depend on where it runs, and results are bit-identical between executors.
:func:`bounded_map` keeps at most ``max_in_flight`` tasks submitted, so memory stays bounded by the chunk size.

A :class:`PinnedPool` can also send a task to one chosen process (:meth:`PinnedPool.submit_to`): the responder's
fold keeps each worker's Pippenger buckets in that worker across all chunks (:func:`bucket_add_task`,
:func:`bucket_result_task`; Pippenger 1976 / Bernstein et al.'s bucket method as in :mod:`vfl.secure.fastmath`), so
two local workers count the same multiplications as one instead of one multi-exponentiation per chunk each.
A :class:`~vfl.secure.dask_pool.DaskPinnedPool` does the same in each Dask worker process (:data:`PINNED_EXECUTORS`).
The value of a product does not depend on how its rows were bucketed, so results stay bit-identical.
:func:`residues_task` computes the responder's re-randomisers ``r^n mod n^2`` from ``r`` drawn by the caller.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.secure import native
from vfl.secure.bigint import mpz
from vfl.secure.dask_pool import DaskPinnedPool, current_slot
from vfl.secure.fastmath import Encrypter, best_bucket_window, bucket_accumulator, frame_bases, multiexp
from vfl.secure.forksafe import fork_safe_lock
from vfl.secure.packing import pack
from vfl.secure.workers import DEFAULT_STALL_SECONDS, STALL_VARIABLE, PinnedPool, stall_limit

__all__ = ["InlineExecutor", "PinnedPool", "open_executor", "bounded_map", "encrypt_rows_task",
           "multiexp_rows_task", "residues_task", "bucket_add_task", "bucket_result_task", "bucket_discard_task",
           "DASK_SCHEMES", "STALL_VARIABLE", "DEFAULT_STALL_SECONDS", "stall_limit", "DaskPinnedPool",
           "PINNED_EXECUTORS"]

DASK_SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")
PINNED_EXECUTORS = (PinnedPool, DaskPinnedPool)
"""Executors that can send a task to one chosen worker process (``submit_to``), where a fold keeps its buckets."""


class InlineExecutor(Executor):
    """Runs each task immediately in the calling thread (``workers=1``): no processes, no pickling."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # delivered through the future, like any executor
            future.set_exception(exc)
        return future


def executor_workers(executor: Any, workers: int) -> int:
    """Parallelism to plan chunk splits for: ``workers`` locally, the cluster's thread count for Dask."""
    if isinstance(executor, PINNED_EXECUTORS):
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
            slots = DaskPinnedPool(client, own_client=True)
        except BaseException:
            client.close()
            raise
        try:
            yield slots
        except BaseException:
            slots.kill()   # cancel its unfinished tasks on the cluster, then close the client
            raise
        slots.shutdown(wait=True)
        return
    if executor is not None:
        raise ConfigurationError(f"executor must be None, a Dask address or a concurrent.futures.Executor, "
                                 f"got {type(executor).__name__}")
    if workers <= 1:
        yield InlineExecutor()
        return
    # workers die with this process however it ends (issue 14, item 6: workers.die_with_parent)
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
                      draws: list[Any], precomputed: bool, width: int, planned: int = 0) -> bytes:
    """Pack and encrypt rows: ``Enc(sum_{j in g} x'_ij 2^(w slot(j)))`` per row ``i`` and group ``g`` (row-major).

    ``encoded`` holds offset-encoded non-negative ints; ``draws[t]`` is the randomness of ciphertext ``t``
    (:meth:`Encrypter.draw`, or the ``n``-th residue itself when ``precomputed``). ``planned``: the encryptions of
    the whole stream this task belongs to; the process's cached fixed-base tables are sized for them (issue 34), not
    for this task alone. Returns the fixed-width big-endian ciphertexts, ready to be a wire frame.
    """
    enc = _task_encrypter(state, max(len(draws), planned))
    n, n2 = enc.n, enc.n2
    plaintexts = [pack(row[lo:hi], slot_bits) for row in np.asarray(encoded).tolist() for lo, hi in groups]
    if not precomputed:
        return enc.encrypt_frame(plaintexts, draws, width)
    out = bytearray()
    for m, rho in zip(plaintexts, draws, strict=True):
        out += int((1 + mpz(m) * n) * mpz(rho) % n2).to_bytes(width, "big")
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
    together = _ifma_columns(int(m), frame, width, n_groups, bases, np.asarray(exponents), columns)
    if together is not None:
        return together
    out: list[int] = []
    mults = 0
    for exps in columns:
        for g in range(n_groups):
            value, count = multiexp(bases[g], exps, m)
            out.append(int(value))
            mults += count
    return out, mults


def _ifma_columns(m: int, frame: bytes, width: int, n_groups: int, bases: list[list[Any]], block: np.ndarray,
                  columns: list[list[int]]) -> tuple[list[int], int] | None:
    """:func:`multiexp_rows_task`'s products with the columns that share :func:`multiexp`'s window in one C bucket
    set, so that their products run eight at a time on AVX-512 IFMA (issue 34): per column the same window, buckets
    and multiplications as :func:`multiexp`, hence the same values and count. ``None`` where the IFMA buckets do not
    apply (no IFMA, even modulus, a base not below it, exponents over 64 bits)."""
    if not native.ifma_buckets() or not m % 2 or any(int(b) >= m for group in bases for b in group):
        return None
    n_rows = len(bases[0]) if bases else 0
    bits = [max((int(e).bit_length() for e in col), default=0) for col in columns]
    if n_rows == 0 or max(bits, default=0) > native.MAX_EXPONENT_BITS:
        return None
    out: list[int] = [1] * (len(columns) * n_groups)
    mults = 0
    by_window: dict[tuple[int, int], list[int]] = {}
    for k, b in enumerate(bits):
        if b:   # an all-zero column: multiexp's (1, 0)
            by_window.setdefault((best_bucket_window(n_rows, b), b), []).append(k)
    if any(c > 16 for c, _ in by_window):
        return None
    for (c, b), ks in by_window.items():
        acc = native.CBucketAccumulator(len(ks) * n_groups, b, c, m)
        acc.add_frame(frame, width, n_groups, block[:, ks])
        for j, k in enumerate(ks):
            for g in range(n_groups):
                out[k * n_groups + g] = int(acc.result(j * n_groups + g))
        mults += acc.mults + int(acc._c.combination_mults)
    return out, mults


def residues_task(state: tuple, draws: list[Any]) -> list[int]:
    """``[rho(draw) for draw in draws]``: for the responder's re-randomisers ``r^n mod n^2`` with ``r`` uniform in
    ``Z*_n`` drawn by the caller from :mod:`secrets` (:meth:`Encrypter.draw`; state without the factors)."""
    enc = _task_encrypter(state, len(draws))
    return [int(enc.residue_from(d)) for d in draws]


# ----------------------------------------------------------------------------- buckets kept in a pinned worker
_FOLD_BUCKETS: dict[tuple[str, int | None], Any] = {}   # by (run token, slot: two Dask slots may share a process)
_FOLD_CHUNKS: dict[tuple[str, int | None], int] = {}


def bucket_add_task(token: str, modulus: int, window: int, exponent_bits: int, frame: bytes, width: int,
                    n_groups: int, exponents: np.ndarray) -> None:
    """Put a chunk's bases into this worker's buckets of fold ``token`` (created on first use): product
    ``k * n_groups + g`` gets ``c_ig`` by the digits of ``exponents[i, k]`` (:func:`bucket_accumulator`, in C when
    built). Only for ``submit_to`` of a :data:`PINNED_EXECUTORS` pool (state stays in the worker process until
    :func:`bucket_result_task`)."""
    exps = np.asarray(exponents)
    key = (token, current_slot())
    with _TASK_LOCK:
        entry = _FOLD_BUCKETS.get(key)
        if entry is None:
            products = exps.shape[1] * n_groups
            entry = _FOLD_BUCKETS[key] = (bucket_accumulator(products, exponent_bits, window, modulus), products,
                                            threading.Lock())
    with entry[2]:   # a Dask worker with several threads may run two chunks of one fold at once
        entry[0].add_frame(frame, width, n_groups, exps)
        with _TASK_LOCK:
            _FOLD_CHUNKS[key] = _FOLD_CHUNKS.get(key, 0) + 1


def bucket_result_task(token: str) -> tuple[list[int], int, int]:
    """The products of fold ``token`` in this worker (ordered ``k * n_groups + g``), their multiplication count and
    the number of chunks put into them, releasing its buckets (``([], 0, 0)`` if no chunk reached this worker: the
    caller checks the count against the chunks it sent, so lost buckets can never pass as an empty product)."""
    key = (token, current_slot())
    with _TASK_LOCK:
        entry = _FOLD_BUCKETS.pop(key, None)
        chunks = _FOLD_CHUNKS.pop(key, 0)
    if entry is None:
        return [], 0, 0
    acc, products, lock = entry
    with lock:   # after any add of this fold still running in another thread
        pass
    values = [int(acc.result(t)) for t in range(products)]
    return values, acc.mults, chunks


def bucket_discard_task(token: str) -> None:
    """Drop fold ``token``'s buckets (an abandoned fold on an executor that outlives it)."""
    key = (token, current_slot())
    with _TASK_LOCK:
        _FOLD_BUCKETS.pop(key, None)
        _FOLD_CHUNKS.pop(key, None)
