"""The responder's role of the packed secure product: fold the encrypted chunks into masked, re-randomised products and
keep its packed share (see :mod:`vfl.secure.products`)."""

from __future__ import annotations

import math
import os
import secrets
from collections import deque
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import numpy as np

from vfl.data.rows import RowCursor
from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    ProtocolError,
)
from vfl.secure.encoding import encode_offset_chunk
from vfl.secure.executors import (
    PINNED_EXECUTORS,
    InlineExecutor,
    bucket_add_task,
    bucket_discard_task,
    bucket_result_task,
    executor_workers,
    multiexp_rows_task,
    open_executor,
    residues_task,
)
from vfl.secure.fastmath import (
    RANDOMNESS_MODES,
    BucketAccumulator,
    bucket_accumulator,
    cached_encrypter,
    mpz,
    multiexp_cost,
    persistent_bucket_window,
    resolve_workers,
    warn_if_slow_backend,
)
from vfl.secure.keys import (
    ciphertext_byte_length,
    ciphertexts_to_bytes,
)
from vfl.secure.native import CBucketAccumulator
from vfl.secure.packing import default_noise_bits
from vfl.secure.products.common import _check_noise, _encoded_source, _progress_bar
from vfl.secure.products.shares import centring_constant, pack_slots
from vfl.secure.products.wire import (
    DEFAULT_MAX_FRAME_BYTES,
    MAX_FRAME_BYTES,
    RERANDOMISATION,
    EncryptedBlock,
    EncryptedChunk,
    MaskedResponse,
    ProductStreamHeader,
    stream_chunk_rows,
)


def _kept_window(stream: ProductStreamHeader, n_rows: int, products: int, width: int) -> int | None:
    """The bucket window for ``products`` multi-exponentiations over ``n_rows`` of the stream's rows when buckets kept
    across chunks count fewer multiplications than one multi-exponentiation per chunk (else ``None``)."""
    bits = stream.layout.exponent_bits
    c = persistent_bucket_window(n_rows, bits, products, width)
    kept = math.ceil(bits / c) * (n_rows + (2 << c))
    per_chunk = sum(multiexp_cost(stream.chunk_size(t), bits) for t in range(stream.n_chunks))
    return c if kept < per_chunk * n_rows / stream.layout.n_rows else None


class ResponderFold:
    """The responder's side of one streamed product: folds each :class:`EncryptedChunk` into running
    per-column products ``acc_kg *= prod_{i in chunk} c_ig^{b'_ik} mod n^2`` (Pippenger buckets kept across chunks
    in the calling thread or in each local worker for its columns; one multi-exponentiation per chunk on other
    executors), then masks, noises and re-randomises exactly as :meth:`ProductResponder.respond`.

    The ``d_b x n_groups`` re-randomisers ``r^n mod n^2`` (``r`` uniform in ``Z*_n`` from :mod:`secrets`, one per
    response ciphertext, each used once) do not depend on the data: they are submitted to the executor when the
    fold opens, so they are computed while the key holder encrypts (issue 25), not after the last chunk.

    Chunks must arrive in order (index 0, 1, ...); at most ``2 x workers + 1`` chunk tasks are pending, so the
    responder never holds more than a few chunks of ciphertexts. Use :meth:`add` per chunk, then :meth:`finish`.
    """

    def __init__(self, responder: ProductResponder, stream: ProductStreamHeader, noise_int: np.ndarray) -> None:
        self.responder = responder
        self.stream = stream
        self._noise = noise_int
        lay, d_b = stream.layout, responder.n_cols
        self._G = stream.n_groups
        self._n2 = int(stream.public_key.nsquare)
        self._width = ciphertext_byte_length(stream.public_key)
        self._acc = [mpz(1)] * (d_b * self._G)
        self._mults = 0
        self._next = 0
        self._col_sums = responder._col_sums if responder._encoded is not None else np.zeros(d_b, dtype=object)
        cost = multiexp_cost(lay.n_rows, lay.exponent_bits) * d_b * self._G * 0.006
        workers = resolve_workers(responder.workers, cost) if responder.executor is None else 1
        self._stack = ExitStack()
        self._executor = self._stack.enter_context(open_executor(responder.executor, workers))
        self._parallel = executor_workers(self._executor, workers)
        # few chunks: split the columns so every worker has a task (the old per-column parallelism)
        parts = 1 if stream.n_chunks >= 2 * self._parallel else min(d_b, self._parallel)
        bounds = np.linspace(0, d_b, parts + 1).round().astype(int)
        self._col_parts = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        self._pending: deque[tuple[Future, int | None]] = deque()
        self._cursor = RowCursor(responder._source.iter_chunks(stream.chunk_rows), d_b)
        self._token: str | None = None   # set while this fold's buckets live in PinnedPool workers
        self._pinned = self._pinned_parts(d_b)
        self._buckets = None if self._pinned else self._persistent_buckets(d_b)
        self._rerandomisers = self._start_rerandomisers(d_b * self._G)
        self._bar = _progress_bar(responder.progress, stream.n_chunks, "secure products", "chunks")

    def _pinned_parts(self, d_b: int) -> list[tuple[int, int]]:
        """On a :class:`PinnedPool`, each worker keeps the buckets of its own columns across every chunk (all
        columns, and chunks dealt round-robin, when there are fewer columns than workers); ``[]`` otherwise.
        Sets the window in ``self._window``."""
        ex, G = self._executor, self._G
        if not isinstance(ex, PINNED_EXECUTORS):   # a local PinnedPool or a Dask DaskPinnedPool (issue 34)
            return []
        W = ex.workers
        if d_b >= W:
            bounds = np.linspace(0, d_b, W + 1).round().astype(int)
            parts = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
            rows, widest = self.stream.layout.n_rows, max(b - a for a, b in parts)
        else:
            parts = [(0, d_b)] * W
            rows, widest = math.ceil(self.stream.layout.n_rows / W), d_b
        window = _kept_window(self.stream, rows, widest * G, self._width)
        if window is None:
            return []
        self._window, self._token = window, os.urandom(16).hex()   # an id, not a secret
        self._pinned_chunks = [0] * len(parts)
        return parts

    def _start_rerandomisers(self, count: int) -> list[Future]:
        """Submit the ``count`` re-randomisers ``r^n mod n^2`` now (``r`` drawn here from :mod:`secrets`, uniform
        in ``Z*_n``, full-size: see :meth:`finish`), split over the executor's workers."""
        enc = cached_encrypter(self.stream.public_key.n, randomness=RERANDOMISATION)
        state = enc.task_state()   # no factors: the responder has none
        draws = [enc.draw() for _ in range(count)]
        executor: Executor = self._executor
        if isinstance(executor, InlineExecutor):
            # one worker: a background thread, so they are computed while this party waits for the key holder's
            # chunks (a network party's thread is idle then) instead of delaying the credit or the response
            executor = ThreadPoolExecutor(1, thread_name_prefix="vfl-rerandomisers")
            self._stack.callback(executor.shutdown, wait=False, cancel_futures=True)   # close() never waits on it
        per_task = max(1, math.ceil(count / self._parallel))
        return [executor.submit(residues_task, state, draws[i:i + per_task]) for i in range(0, count, per_task)]

    def _persistent_buckets(self, d_b: int) -> BucketAccumulator | CBucketAccumulator | None:
        """In the calling thread (one local worker): Pippenger buckets kept across all chunks with the window
        chosen for all ``n`` rows (:func:`bucket_accumulator`, in C when built; issue 25), when that counts fewer
        multiplications than one multi-exponentiation per chunk and its buckets fit :data:`PERSISTENT_BUCKET_BYTES`.
        Other executors (Dask) get pure tasks of one chunk; a :class:`PinnedPool` keeps buckets in its workers."""
        if not isinstance(self._executor, InlineExecutor):
            return None
        products = d_b * self._G
        c = _kept_window(self.stream, self.stream.layout.n_rows, products, self._width)
        return None if c is None else bucket_accumulator(products, self.stream.layout.exponent_bits, c, self._n2)

    def add(self, chunk: EncryptedChunk) -> None:
        """Fold one chunk (validated by :meth:`EncryptedChunk.from_wire`) into the running products."""
        if chunk.session != self.stream.session:
            raise ProtocolError("chunk belongs to another session")
        if chunk.index != self._next or chunk.n_rows != self.stream.chunk_size(chunk.index):
            raise ProtocolError(f"chunk {chunk.index} arrived, expected chunk {self._next} (chunks are in order)")
        if len(chunk.frame) != chunk.n_rows * self._G * self._width:
            raise ProtocolError("chunk frame size does not match its rows")
        self._next += 1
        block = self._cursor.take(chunk.n_rows)
        if self.responder._encoded is None:
            lay = self.stream.layout
            block, sums = encode_offset_chunk(block, lay.precision_bits, lay.value_bound)
            self._col_sums = self._col_sums + sums
        if self._buckets is not None:
            self._bucket_chunk(chunk.frame, block)
            self._bar.update(1)
            return
        if self._pinned:
            self._pin_chunk(chunk, block)
            return
        for lo, hi in self._col_parts:
            future = self._executor.submit(multiexp_rows_task, self._n2, chunk.frame, self._width, self._G,
                                           np.ascontiguousarray(block[:, lo:hi]))
            self._pending.append((future, lo))
        while len(self._pending) > 2 * self._parallel + 1:
            self._fold_one()

    def _bucket_chunk(self, frame: bytes, block: np.ndarray) -> None:
        assert self._buckets is not None
        self._buckets.add_frame(frame, self._width, self._G, block)

    def _pin_chunk(self, chunk: EncryptedChunk, block: np.ndarray) -> None:
        """Send the chunk to the workers that keep the buckets of its columns (or, by rows, to one worker)."""
        assert isinstance(self._executor, PINNED_EXECUTORS)
        by_rows = len(self._pinned) > 1 and self._pinned[0] == self._pinned[1]
        bits = self.stream.layout.exponent_bits
        for p, (lo, hi) in enumerate(self._pinned):
            if by_rows and p != chunk.index % len(self._pinned):
                continue
            self._pinned_chunks[p] += 1
            future = self._executor.submit_to(p, bucket_add_task, self._token, self._n2, self._window, bits,
                                              chunk.frame, self._width, self._G, np.ascontiguousarray(block[:, lo:hi]))
            self._pending.append((future, None))
        self._bar.update(1)
        while len(self._pending) > 2 * self._parallel + 1:
            self._fold_one()

    def _collect_pinned(self) -> None:
        """Each worker's products of its buckets, multiplied into the running products."""
        assert isinstance(self._executor, PINNED_EXECUTORS)
        futures = [self._executor.submit_to(p, bucket_result_task, self._token) for p in range(len(self._pinned))]
        self._token = None
        for (lo, _), future, sent in zip(self._pinned, futures, self._pinned_chunks, strict=True):
            values, mults, chunks = future.result()
            if chunks != sent:
                raise ProtocolError(f"a local worker holds {chunks} of the {sent} chunks sent to it (its process "
                                    "was replaced?); the product is refused rather than computed without them")
            if chunks:
                self._multiply_in(values, mults, lo)

    def _multiply_in(self, values: list[int], mults: int, lo: int) -> None:
        G, n2 = self._G, self._n2
        for t, value in enumerate(values):
            idx = lo * G + t  # values are ordered (k - lo) * G + g
            self._acc[idx] = self._acc[idx] * mpz(value) % n2
        self._mults += mults

    def _fold_one(self) -> None:
        future, lo = self._pending.popleft()
        if lo is None:   # a chunk put into a pinned worker's buckets
            future.result()
            return
        self._multiply_in(*future.result(), lo)
        if lo == 0:
            self._bar.update(1)

    def close(self) -> None:
        """Cancel pending work and release the executor (idempotent)."""
        for future, _ in self._pending:
            future.cancel()
        self._pending.clear()
        for future in self._rerandomisers:
            future.cancel()
        if self._token is not None and isinstance(self._executor, PINNED_EXECUTORS):
            for p in range(len(self._pinned)):   # an abandoned fold: free its buckets in a pool that outlives it
                try:
                    self._executor.submit_to(p, bucket_discard_task, self._token)
                except RuntimeError:   # the pool is shut down already
                    break
            self._token = None
        self._bar.close()
        self._stack.close()

    def finish(self) -> tuple[MaskedResponse, np.ndarray]:
        """After the last chunk: the masked, re-randomised response and the responder's packed share.

        Per response ciphertext ``(k, g)``: ``Enc(P_kg + R_kg + pack_g(noise_jk + C))`` re-randomised, with ``R_kg``
        uniform on ``[0, n)``; the share (``d_b x n_groups`` ints in ``[0, n)``) is
        ``S^B_kg = -R_kg - pack_g(O sum_i b_int_ik + n O^2) mod n`` (module docstring).
        """
        try:
            if self._next != self.stream.n_chunks:
                raise ProtocolError(f"stream ended after {self._next} of {self.stream.n_chunks} chunks")
            while self._pending:
                self._fold_one()
            if self._pinned and self._token is not None:
                self._collect_pinned()
            if self._buckets is not None:
                self._acc = [self._buckets.result(t) for t in range(len(self._acc))]
                self._mults += self._buckets.mults
            rerandomisers = [mpz(r) for future in self._rerandomisers for r in future.result()]
            self._rerandomisers = []
        finally:
            self.close()
        stream, lay = self.stream, self.stream.layout
        d_a, d_b, G = stream.n_cols, self.responder.n_cols, self._G
        O, n = lay.offset, lay.n_rows
        # The re-randomiser must hide the product's randomness from the key holder, who knows the factorisation
        # and can extract it: only a uniform n-th residue (full-size r^n) does that unconditionally. A short-exponent
        # h_s^alpha keeps the extracted randomness in a small structured set (e.g. always a quadratic residue mod p
        # when p = q = 1 mod 4) and would rest on short-exponent discrete logs modulo the key holder's own primes.
        enc = cached_encrypter(stream.public_key.n, randomness=RERANDOMISATION)
        self.responder.stats = {"multiexp_mults": self._mults, "response_ciphertexts": d_b * G,
                                "workers": self._parallel, "chunks": stream.n_chunks}
        modulus = int(stream.public_key.n)
        # inside the ciphertext: the noise and the public centring constant, slot by slot ...
        addend = pack_slots(self._noise + centring_constant(lay), lay, modulus)
        # ... and in the share: the offset terms this party knows (its column sums, n O^2)
        corrections = np.empty((d_a, d_b), dtype=object)
        for k in range(d_b):
            corrections[:, k] = -(O * self._col_sums[k] + n * O * O)
        own = pack_slots(corrections, lay, modulus)
        share = np.empty((d_b, G), dtype=object)
        cts = []
        for t, (k, g) in enumerate((k, g) for k in range(d_b) for g in range(G)):
            # one uniform mask over the WHOLE plaintext space: D = P + M mod n is uniform whatever P is, so an
            # encryptor that packed anything outside its declared slots decrypts nothing about B
            mask = secrets.randbelow(modulus)
            c = enc.add_plain(self._acc[t], (mask + int(addend[k, g])) % modulus) * rerandomisers[t] % enc.n2
            cts.append(int(c))
            share[k, g] = (int(own[k, g]) - mask) % modulus
        response = MaskedResponse(stream.session, stream.public_key, lay.slot_bits, d_a, d_b, G, cts)
        return response, share


class ProductResponder:
    """Responder role: multiplies its column exponents into the encrypted rows, adds mask and noise.

    ``B`` is an array or a row source (:mod:`vfl.data.rows`), read in step with the incoming chunks.
    ``precision_bits``, ``value_bound`` and ``noise_bits`` (default ``2p + 32``, as at the key holder) are the
    agreed public parameters; a request that differs is refused. ``randomness`` is validated for symmetry
    with the key holder but does not weaken the re-randomisation: the fresh ``Enc(0)`` multiplied into every
    response always uses a uniform ``r^n`` (:data:`RERANDOMISATION`), because its job is to hide the
    product's randomness from the key holder, who holds the factorisation. ``executor``: where the
    multi-exponentiations run (:mod:`vfl.secure.executors`).
    """

    def __init__(self, B: Any, *, precision_bits: int, value_bound: float = 1.0,
                 noise_bits: int | None = None, randomness: str = "short-exponent", workers: int | None = None,
                 progress: bool = False, executor: Any = None, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        warn_if_slow_backend()
        if randomness not in RANDOMNESS_MODES:
            raise ConfigurationError(f"randomness must be one of {RANDOMNESS_MODES}, got {randomness!r}")
        self.precision_bits = precision_bits
        self.value_bound = float(value_bound)
        self._source, self._encoded, self._col_sums = _encoded_source(B, "B", precision_bits, self.value_bound)
        self.n_rows, self.n_cols = self._source.n_rows, self._source.n_cols
        self.noise_bits = default_noise_bits(precision_bits) if noise_bits is None else noise_bits
        self.randomness = randomness
        self.workers = workers
        self.executor = executor
        self.max_frame_bytes = max_frame_bytes
        self.progress = progress
        self._answered: set[str] = set()
        self.stats: dict[str, int] = {}

    def open(self, stream: ProductStreamHeader, noise: np.ndarray | None = None) -> ResponderFold:
        """Step 2a: check a stream header against the agreed parameters and start folding its chunks."""
        lay = stream.layout
        if (lay.precision_bits, lay.value_bound, lay.noise_bits) != (
            self.precision_bits, self.value_bound, self.noise_bits
        ):
            raise ProtocolError("request precision_bits/value_bound/noise_bits differ from the agreed parameters")
        if lay.n_rows != self.n_rows:
            raise DataValidationError(f"request has {lay.n_rows} rows, the responder holds {self.n_rows}")
        if stream.session in self._answered:
            raise ProtocolError("this session was already answered; a second masked view is refused")
        if stream.frame_bytes > self.max_frame_bytes:
            raise ProtocolError(f"stream chunks of {stream.frame_bytes} B exceed this responder's frame limit of "
                                f"{self.max_frame_bytes} B; the key holder must send smaller chunks")
        noise_int = _check_noise(noise, (stream.n_cols, self.n_cols), lay.noise_offset)
        self._answered.add(stream.session)
        return ResponderFold(self, stream, noise_int)

    def respond(self, request: EncryptedBlock, noise: np.ndarray | None = None) -> tuple[MaskedResponse, np.ndarray]:
        """Step 2 for a whole request: the masked, re-randomised response and the responder's share (``d_a x d_b``
        ints). Runs the streamed fold over the request's rows in chunks."""
        G = request.n_groups
        chunk_rows = stream_chunk_rows(request.public_key, G, min(DEFAULT_MAX_FRAME_BYTES, self.max_frame_bytes))
        stream = ProductStreamHeader(request.session, request.public_key, request.layout, request.n_cols, chunk_rows)
        fold = self.open(stream, noise)
        try:
            for t in range(stream.n_chunks):
                lo = t * chunk_rows * G
                frame = ciphertexts_to_bytes(request.public_key,
                                             request.ciphertexts[lo:lo + stream.chunk_size(t) * G])
                fold.add(EncryptedChunk(request.session, t, t * chunk_rows, stream.chunk_size(t), frame))
        except BaseException:
            fold.close()
            raise
        return fold.finish()
