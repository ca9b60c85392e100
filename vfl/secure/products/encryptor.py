"""The key holder's role of the packed secure product: encrypt packed rows, decrypt the masked response into its share
(see :mod:`vfl.secure.products`)."""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from phe import paillier

from vfl.data.rows import RowCursor
from vfl.exceptions import (
    ConfigurationError,
    KeyValidationError,
    ProtocolError,
)
from vfl.secure.encoding import encode_offset_chunk
from vfl.secure.executors import (
    PinnedPool,
    bounded_map,
    encrypt_rows_task,
    executor_workers,
    open_executor,
)
from vfl.secure.fastmath import (
    RandomnessPool,
    cached_encrypter,
    resolve_workers,
    warn_if_slow_backend,
)
from vfl.secure.keys import (
    ciphertext_byte_length,
    key_fingerprint,
)
from vfl.secure.packing import DEFAULT_GUARD_BITS, SlotLayout, default_noise_bits
from vfl.secure.products.common import _check_noise, _encoded_source, _progress_bar, _task_rows
from vfl.secure.products.shares import pack_slots
from vfl.secure.products.wire import (
    _TAG_MASK,
    DEFAULT_MAX_FRAME_BYTES,
    MAX_COLS,
    MAX_ECHO_TAGS,
    EchoTags,
    EncryptedBlock,
    EncryptedChunk,
    MaskedResponse,
    ProductStreamHeader,
    pipeline_chunk_rows,
    stream_chunk_rows,
)


class ProductEncryptor:
    """Key-holder role: encrypts packed rows of ``A`` and decrypts the masked response into its share.

    ``A`` is an array or a row source (:mod:`vfl.data.rows`: read in chunks, never held whole). The request
    is streamed: :meth:`stream_header` then :meth:`encrypted_chunks` (frames of at most ``max_frame_bytes``);
    :meth:`request` collects them into one :class:`EncryptedBlock` for small in-process runs.
    ``executor``: where encryption runs (:mod:`vfl.secure.executors`: ``None`` = local, ``workers`` processes;
    a Dask address; or any ``concurrent.futures.Executor``).
    ``on_decrypt(plaintext: int)`` is called with every plaintext this object ever decrypts (audit
    hook). ``randomness``: ``"short-exponent"`` (default) or ``"standard"``; see
    :mod:`vfl.secure.fastmath`. ``noise_bits`` (default ``2p + 32``) bounds the responder's noise.
    ``response_cols`` is the number of responder columns ``d_b`` the key holder expects, derived by the caller
    from the agreed plan (never from the response itself): :meth:`decrypt` refuses any response that does not
    hold exactly ``response_cols x n_groups`` ciphertexts, so whoever relays the response can make the key holder
    decrypt at most that many plaintexts (issue 14, item 1).
    """

    def __init__(self, private_key: paillier.PaillierPrivateKey, A: Any, *, response_cols: int, precision_bits: int,
                 value_bound: float = 1.0, noise_bits: int | None = None, guard_bits: int = DEFAULT_GUARD_BITS,
                 randomness: str = "short-exponent", workers: int | None = None, progress: bool = False,
                 on_decrypt: Callable[[int], None] | None = None, executor: Any = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        warn_if_slow_backend()
        if isinstance(response_cols, bool) or not isinstance(response_cols, (int, np.integer)) or not (
                1 <= int(response_cols) <= MAX_COLS):
            raise ConfigurationError(f"response_cols must be an int in [1, {MAX_COLS}], got {response_cols!r}")
        self.response_cols = int(response_cols)
        self._private_key = private_key
        self.public_key: paillier.PaillierPublicKey = private_key.public_key
        self._source, self._encoded, self._col_sums = _encoded_source(A, "A", precision_bits, float(value_bound))
        self.n_rows, self.n_cols = self._source.n_rows, self._source.n_cols
        self.layout = SlotLayout(
            key_bits=int(self.public_key.n).bit_length(), n_rows=self.n_rows, precision_bits=precision_bits,
            value_bound=float(value_bound),
            noise_bits=default_noise_bits(precision_bits) if noise_bits is None else noise_bits,
            guard_bits=guard_bits,
        )
        self.chunk_rows = min(stream_chunk_rows(self.public_key, self.n_groups, max_frame_bytes),
                              pipeline_chunk_rows(self.n_rows))
        # one encrypter per key in this process: h_s, its table and any precomputed pool are reused
        self._encrypter = cached_encrypter(self.public_key.n, p=private_key.p, q=private_key.q,
                                           randomness=randomness)
        self.session = secrets.token_hex(16)
        self.workers = workers
        self.executor = executor
        self.progress = progress
        self.on_decrypt = on_decrypt
        self._requested = False
        self._streamed = False
        self._complete = False
        self._decrypted = False
        #: low 64 bits of every request ciphertext (echo check in decrypt); kept up to MAX_ECHO_TAGS ciphertexts
        self._request_tags = EchoTags(MAX_ECHO_TAGS)
        self.stats: dict[str, int] = {}

    @property
    def n_groups(self) -> int:
        return self.layout.n_groups(self.n_cols)

    def precompute_randomness(self, count: int | None = None, workers: int | None = None) -> None:
        """Offline phase: precompute the encryption randomness for ``count`` (default: one request)."""
        count = self.n_rows * self.n_groups if count is None else count
        RandomnessPool.fill(self._encrypter, count, resolve_workers(workers, count * 3.0))

    def stream_header(self) -> ProductStreamHeader:
        """Step 1a: the public layout of the request. One request per encryptor (sessions are single-use)."""
        if self._requested:
            raise ProtocolError("this encryptor already produced its request; create a new one per product")
        self._requested = True
        return ProductStreamHeader(self.session, self.public_key, self.layout, self.n_cols, self.chunk_rows)

    def encrypted_chunks(self) -> Iterator[EncryptedChunk]:
        """Step 1b: encrypt and yield the packed rows chunk by chunk (at most a few chunks in memory)."""
        if not self._requested or self._streamed:
            raise ProtocolError("encrypted_chunks() needs a prior stream_header() and runs once")
        self._streamed = True
        lay, G, enc = self.layout, self.n_groups, self._encrypter
        n_items = self.n_rows * G
        per_item_ms = 0.25 if enc.randomness == "short-exponent" else 3.2
        workers = resolve_workers(self.workers, n_items * per_item_ms) if self.executor is None else 1
        groups = [(r.start, r.stop) for r in (lay.group_columns(self.n_cols, g) for g in range(G))]
        width = ciphertext_byte_length(self.public_key)
        # the party's own process or local workers (a PinnedPool, also when a CLI party passes its own) may use its
        # factors (CRT short-exponent encryption, issue 25); other executors (a Dask cluster) never receive them for
        # short-exponent randomness
        state = enc.task_state(with_factors=self.executor is None or isinstance(self.executor, PinnedPool))
        header = ProductStreamHeader(self.session, self.public_key, lay, self.n_cols, self.chunk_rows)
        col_sums = np.zeros(self.n_cols, dtype=object)
        with open_executor(self.executor, workers) as ex, _progress_bar(self.progress, n_items,
                                                                          "encrypting rows", "values") as bar:
            parallel = executor_workers(ex, workers)
            task_rows = _task_rows(self.chunk_rows, header.n_chunks, parallel)
            tasks_per_chunk = [math.ceil(header.chunk_size(t) / task_rows) for t in range(header.n_chunks)]

            def arguments() -> Iterator[tuple]:
                nonlocal col_sums
                cursor = RowCursor(self._source.iter_chunks(self.chunk_rows), self.n_cols)
                for t in range(header.n_chunks):
                    rows = header.chunk_size(t)
                    block = cursor.take(rows)
                    if self._encoded is None:  # a row source: encode (and check the bound) chunk by chunk
                        block, sums = encode_offset_chunk(block, lay.precision_bits, lay.value_bound)
                        col_sums = col_sums + sums
                    for lo in range(0, rows, task_rows):
                        part = block[lo:lo + task_rows]
                        count = part.shape[0] * G
                        if len(enc.pool) >= count:
                            draws, pre = [enc.pool.popleft() for _ in range(count)], True
                        else:
                            draws, pre = enc.draw_many(count), False
                        yield (state, part, groups, lay.slot_bits, draws, pre, width, n_items)

            results = bounded_map(ex, encrypt_rows_task, arguments(), 2 * parallel + 1)
            for t in range(header.n_chunks):
                frame = b"".join(next(results) for _ in range(tasks_per_chunk[t]))
                self._request_tags.add_frame(frame, width)
                bar.update(header.chunk_size(t) * G)
                yield EncryptedChunk(self.session, t, t * self.chunk_rows, header.chunk_size(t), frame)
        if self._encoded is None:
            self._col_sums = col_sums
        self.stats["encryptions"] = n_items
        self.stats["workers"] = parallel
        self.stats["chunks"] = header.n_chunks
        # encryptions of the largest executor task: it sets the fixed-base table a task builds (Encrypter.prepare)
        self.stats["max_task_encryptions"] = min(task_rows, self.n_rows) * G
        self._complete = True

    def request(self) -> EncryptedBlock:
        """Encrypt the packed rows (step 1) into one message: :meth:`stream_header` + all chunks, collected."""
        self.stream_header()
        width = ciphertext_byte_length(self.public_key)
        cts = [int.from_bytes(chunk.frame[i:i + width], "big")
               for chunk in self.encrypted_chunks() for i in range(0, len(chunk.frame), width)]
        return EncryptedBlock(self.session, self.public_key, self.layout, self.n_cols, cts)

    def expected_response(self) -> dict[str, int]:
        """The response shape this key holder derived itself (request + agreed ``response_cols``)."""
        return {"slot_bits": self.layout.slot_bits, "n_enc_cols": self.n_cols, "n_resp_cols": self.response_cols,
                "n_groups": self.n_groups}

    def response_from_wire(self, header: dict[str, Any], frames: list[bytes]) -> MaskedResponse:
        """Parse a response only if its declared shape is the expected one (checked before any ciphertext)."""
        if isinstance(header, dict):
            expected = self.expected_response()
            declared = {k: header.get(k) for k in expected}
            if declared != expected:
                raise ProtocolError(f"response declares shape {declared}, this key holder expects {expected} "
                                    "(derived from the agreed plan); refused without decrypting")
        return MaskedResponse.from_wire(header, frames, self.public_key)

    def decrypt(self, response: MaskedResponse, noise: np.ndarray | None = None) -> np.ndarray:
        """Decrypt the masked response (step 3): the key holder's packed share, ``d_b x n_groups`` ints in ``[0, n)``.

        ``S^A_kg = D_kg - pack_g(O sum_i a_int_ij) + pack_g(noise_jk) mod n`` with ``D_kg`` the decrypted plaintext
        (uniform on ``[0, n)``: nothing is unpacked here) and ``noise`` this party's own noise share, an integer
        array ``d_a x d_b`` in units ``2^-2p`` with ``|noise| < 2^noise_bits`` (two-sided noise; default none).
        Only ``response_cols x n_groups`` ciphertexts of this session, none of them one of this key holder's own
        request ciphertexts, are ever decrypted; anything else raises :class:`ProtocolError` before the first
        decryption.
        """
        if not self._complete or self._decrypted:
            raise ProtocolError("decrypt() needs exactly one prior, completed request() and may run once")
        if response.session != self.session:
            raise ProtocolError("response belongs to another session")
        if key_fingerprint(response.public_key) != key_fingerprint(self.public_key):
            raise KeyValidationError("response was encrypted under a different public key")
        if (response.slot_bits, response.n_enc_cols, response.n_groups) != (
            self.layout.slot_bits, self.n_cols, self.n_groups
        ):
            raise ProtocolError("response layout does not match the request")
        expected = self.response_cols * self.n_groups
        if response.n_resp_cols != self.response_cols or len(response.ciphertexts) != expected:
            raise ProtocolError(f"response has {response.n_resp_cols} columns ({len(response.ciphertexts)} "
                                f"ciphertexts); the agreed plan gives {self.response_cols} ({expected}) — refused "
                                "without decrypting")
        if self._request_tags.contains_any(int(c) & _TAG_MASK for c in response.ciphertexts):
            raise ProtocolError("response contains this key holder's own request ciphertexts (echo); refused "
                                "without decrypting")
        d_b, G, O = self.response_cols, self.n_groups, self.layout.offset
        own = _check_noise(noise, (self.n_cols, d_b), self.layout.noise_offset)
        self._decrypted = True
        self.stats["decryptions"] = len(response.ciphertexts)
        modulus = int(self.public_key.n)
        for j in range(self.n_cols):
            own[j, :] = own[j, :] - O * self._col_sums[j]
        packed = pack_slots(own, self.layout, modulus)
        share = np.empty((d_b, G), dtype=object)
        for k in range(d_b):
            for g in range(G):
                plaintext = self._private_key.raw_decrypt(int(response.ciphertexts[k * G + g]))
                if self.on_decrypt is not None:
                    self.on_decrypt(plaintext)
                share[k, g] = (int(plaintext) + int(packed[k, g])) % modulus
        return share
