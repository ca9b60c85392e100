"""Where the heavy big-number work of a streamed secure product runs: any :class:`concurrent.futures.Executor`.

* ``executor=None``: in the calling thread (``workers == 1``) or a local process pool (``workers > 1``);
* ``executor="tcp://SCHEDULER:8786"``: a Dask cluster through ``dask.distributed.Client(address).get_executor()``
  (optional extra ``vfl[dask]``; the workers need vfl and gmpy2 installed and run inside the party's own trust
  domain: they see its packed plaintexts and, for ``randomness="standard"``, the factors of its key);
* an ``Executor`` instance: used as given (never shut down here).

Tasks are the module-level pure functions below (:func:`encrypt_rows_task`, :func:`multiexp_rows_task`): every
input, including the encryption randomness (drawn by the caller from :mod:`secrets`), travels in the arguments,
so the result of a task does not depend on where it runs, and results are bit-identical between executors.
:func:`bounded_map` keeps at most ``max_in_flight`` tasks submitted, so memory stays bounded by the chunk size.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.secure.fastmath import Encrypter, _context, die_with_parent, mpz, multiexp
from vfl.secure.packing import pack

__all__ = ["InlineExecutor", "open_executor", "bounded_map", "encrypt_rows_task", "multiexp_rows_task",
           "DASK_SCHEMES"]

DASK_SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")


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
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=die_with_parent,
                               initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        # interrupted (Ctrl-C / SIGTERM) or failed: kill the workers now instead of waiting for their tasks
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
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
_TASK_LOCK = threading.Lock()


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
    rows = len(frame) // (width * n_groups)
    bases = [[mpz(int.from_bytes(frame[(i * n_groups + g) * width:(i * n_groups + g + 1) * width], "big"))
              for i in range(rows)] for g in range(n_groups)]
    columns = np.asarray(exponents).T.tolist()
    out: list[int] = []
    mults = 0
    for exps in columns:
        for g in range(n_groups):
            value, count = multiexp(bases[g], exps, m)
            out.append(int(value))
            mults += count
    return out, mults
