"""Packed, masked Paillier cross-party products ``A^T B`` as pure message-in/message-out roles.

Protocol (one round trip; ``A`` is ``n x d_a`` at the key holder, ``B`` is ``n x d_b`` at the responder;
offset fixed-point encoding of :mod:`vfl.secure.encoding`, slot layout of :mod:`vfl.secure.packing`):

1. Key holder (:class:`ProductEncryptor`) encodes ``a'_ij = round(a_ij 2^p) + O`` and sends
   ``c_ig = Enc(sum_{j in g} a'_ij 2^(w slot(j)))`` for every row ``i`` and column group ``g``
   (:class:`EncryptedBlock`: ``n * ceil(d_a / s)`` ciphertexts instead of ``n d_a``).
2. Responder (:class:`ProductResponder`) computes per column ``k`` and group ``g`` the
   multi-exponentiation ``prod_i c_ig^{b'_ik} = Enc(P_kg)``, ``P_kg = sum_j 2^(w j) sum_i a'_ij b'_ik``, multiplies
   in ``g^M`` with ``M = R_kg + pack_g(noise^B_jk + C) mod n``, where ``R_kg`` is uniform on ``[0, n)`` (the whole
   plaintext space, :func:`secrets.randbelow`), ``noise^B`` its DP noise in units ``2^-2p`` and ``C`` the public
   centring constant (:func:`centring_constant`), and a fresh ``Enc(0) = r^n`` with ``r`` uniform in ``Z*_n``
   (re-randomisation: phe never does this; always full-size, never short-exponent, since the key holder can
   extract the randomness). Its packed share is ``S^B_kg = -R_kg - pack_g(O sum_i b_int_ik + n O^2) mod n``.
3. Key holder decrypts ``D_kg = P_kg + M_kg mod n`` and keeps the packed share
   ``S^A_kg = D_kg - pack_g(O sum_i a_int_ij) + pack_g(noise^A_jk) mod n`` (its own noise share, optional).

Here ``pack_g(x_j) = sum_{j in g} 2^(w slot(j)) x_j`` with signed ``x_j``, reduced mod ``n``. Then
``S^A + S^B = pack_g(sum_i a_int_ij b_int_ik + noise^A_jk + noise^B_jk + C) mod n`` exactly; only whoever holds
both shares (the coordinator) recovers the slots, with :func:`combine_packed_shares`, which also checks that every
slot lies in its declared range and nothing lies above the last slot (else the encryptor's operand was not what its
header declared: :class:`ProtocolError` naming it). What each side sees: the responder only ciphertexts under a key
it does not hold; the key holder only ``D_kg``, exactly uniform on ``[0, n)`` whatever it encrypted (one-time pad
modulo ``n``), so even an encryptor that packs values outside its declared slots learns nothing from it.
The decryption audit hook ``on_decrypt`` sees every plaintext the key holder decrypts.
The responder answers each session once.
"""

from __future__ import annotations

import math
import os
import re
import secrets
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from phe import paillier

from vfl.data.rows import ArrayRows, RowCursor, RowSource
from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    EncodingOverflowError,
    KeyValidationError,
    ProtocolError,
)
from vfl.progress import Progress, progress
from vfl.rng import RandomState, make_rng
from vfl.secure.discrete_noise import discrete_gaussian_array
from vfl.secure.encoding import DEFAULT_PRECISION_BITS, decode_products, encode_offset_chunk
from vfl.secure.executors import (
    InlineExecutor,
    PinnedPool,
    bounded_map,
    bucket_add_task,
    bucket_discard_task,
    bucket_result_task,
    encrypt_rows_task,
    executor_workers,
    multiexp_rows_task,
    open_executor,
    residues_task,
)
from vfl.secure.fastmath import (
    RANDOMNESS_MODES,
    BucketAccumulator,
    RandomnessPool,
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
    ciphertexts_from_bytes,
    ciphertexts_to_bytes,
    generate_keypair,
    key_fingerprint,
)
from vfl.secure.native import CBucketAccumulator
from vfl.secure.packing import DEFAULT_GUARD_BITS, MIN_GUARD_BITS, SlotLayout, default_noise_bits

WIRE_VERSION = 1
RERANDOMISATION = "standard"
"""Randomness of the responder's fresh ``Enc(0)``: always full-size, whatever the encryption mode (see respond)."""
MAX_ROWS = 10_000_000
MAX_ECHO_TAGS = 1 << 21
"""Request ciphertexts whose 64-bit tag the key holder keeps to refuse a literal echo (beyond: the count bound)."""
_TAG_MASK = (1 << 64) - 1

DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024
"""Default bound on one streamed ciphertext frame (8 192 rows of one 2048-bit ciphertext each). What a party holds
in flight is a few frames (credit window, pending multi-exponentiation tasks, their copies sent to the pool), so
this size, not n, sets its memory: at 10^6 rows 16 MiB frames cost 176-240 MB more per party, and 4 MiB frames
6.5% more CPU (smaller bucket multi-exponentiation batches; docs/performance.md)."""
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest ciphertext chunk a responder accepts (the key holder chooses the chunk size up to this)."""
MAX_COLS = 100_000
PIPELINE_CHUNKS = 4
"""Fewest chunks a key holder cuts its request into while each keeps :data:`MIN_PIPELINE_ROWS` rows: the responder
folds chunk ``t`` while the key holder encrypts chunk ``t + 1``, so a product that fits one frame is not encrypted
and then folded in series (issue 25)."""
MIN_PIPELINE_ROWS = 128
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class EchoTags:
    """The low 64 bits of up to ``capacity`` request ciphertexts, kept as a numpy ``uint64`` array (8 bytes per
    ciphertext: 16 MiB at the 2^21 cap, where a Python ``set`` of ints took ~100 bytes each; each party's peak RSS
    at 10^6 rows fell by ~50 MB). Ciphertexts are big-endian on the wire, so the tag of one
    ciphertext is the last 8 bytes of its fixed-width slot in a frame."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._parts: list[np.ndarray] = []
        self._count = 0
        self._sorted: np.ndarray | None = None

    def __len__(self) -> int:
        return self._count

    def add_frame(self, frame: bytes, width: int) -> None:
        """Record the tags of the fixed-width ciphertexts in ``frame`` (until the capacity is reached)."""
        room = self.capacity - self._count
        if room <= 0 or not frame:
            return
        slots = np.frombuffer(frame, dtype=np.uint8).reshape(-1, width)[:room]
        tags = np.ascontiguousarray(slots[:, width - 8:]).view(">u8").ravel().astype(np.uint64)
        self._parts.append(tags)
        self._count += tags.shape[0]
        self._sorted = None

    def contains_any(self, tags: Iterable[int]) -> bool:
        """Whether any of ``tags`` (ints below 2^64) was recorded."""
        if self._sorted is None:
            self._sorted = np.sort(np.concatenate(self._parts)) if self._parts else np.zeros(0, dtype=np.uint64)
            self._parts = [self._sorted]
        query = np.fromiter(tags, dtype=np.uint64)
        if not self._sorted.size or not query.size:
            return False
        at = np.minimum(np.searchsorted(self._sorted, query), self._sorted.size - 1)
        return bool(np.any(self._sorted[at] == query))



def _int_field(header: dict[str, Any], name: str, lo: int, hi: int) -> int:
    value = header.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ProtocolError(f"header field {name!r} must be an int in [{lo}, {hi}], got {value!r}")
    return value


def _str_field(header: dict[str, Any], name: str, pattern: re.Pattern[str]) -> str:
    value = header.get(name)
    if not isinstance(value, str) or not pattern.match(value):
        raise ProtocolError(f"header field {name!r} is malformed")
    return value


def _check_envelope(header: Any, frames: Any, kind: str, public_key: paillier.PaillierPublicKey) -> None:
    if not isinstance(header, dict):
        raise ProtocolError("header must be a dict")
    if header.get("kind") != kind or header.get("version") != WIRE_VERSION:
        raise ProtocolError(f"expected a {kind} v{WIRE_VERSION} message, got {header.get('kind')!r}")
    if not isinstance(frames, (list, tuple)) or len(frames) != 1:
        raise ProtocolError("expected exactly one ciphertext frame")
    if _str_field(header, "key_fingerprint", _HEX64) != key_fingerprint(public_key):
        raise KeyValidationError("message was encrypted under a different public key")
    if _int_field(header, "ciphertext_bytes", 1, 1 << 16) != ciphertext_byte_length(public_key):
        raise ProtocolError("ciphertext width does not match the public key")


def _layout_from_header(header: dict[str, Any], public_key: paillier.PaillierPublicKey) -> tuple[SlotLayout, int]:
    """The slot layout and column count a request header declares, recomputed and cross-checked."""
    value_bound = header.get("value_bound")
    if not isinstance(value_bound, float) or not math.isfinite(value_bound) or value_bound <= 0:
        raise ProtocolError("header field 'value_bound' must be a positive finite float")
    try:
        layout = SlotLayout(
            key_bits=int(public_key.n).bit_length(), n_rows=_int_field(header, "n_rows", 1, MAX_ROWS),
            precision_bits=_int_field(header, "precision_bits", 1, 52), value_bound=value_bound,
            noise_bits=_int_field(header, "noise_bits", 1, 4096),
            guard_bits=_int_field(header, "guard_bits", MIN_GUARD_BITS, 1024),
        )
    except (ConfigurationError, EncodingOverflowError) as exc:
        raise ProtocolError(f"request layout is invalid: {exc}") from None
    n_cols = _int_field(header, "n_cols", 1, MAX_COLS)
    if (header.get("slot_bits"), header.get("slots_per_ciphertext"), header.get("n_groups")) != (
        layout.slot_bits, layout.slots_per_ciphertext, layout.n_groups(n_cols)
    ):
        raise ProtocolError("request slot layout disagrees with its own parameters")
    return layout, n_cols


def _layout_header(kind: str, session: str, public_key: paillier.PaillierPublicKey, lay: SlotLayout,
                   n_cols: int) -> dict[str, Any]:
    return {
        "kind": kind, "version": WIRE_VERSION, "session": session,
        "key_fingerprint": key_fingerprint(public_key),
        "ciphertext_bytes": ciphertext_byte_length(public_key),
        "n_rows": lay.n_rows, "n_cols": n_cols, "precision_bits": lay.precision_bits,
        "value_bound": float(lay.value_bound), "noise_bits": lay.noise_bits, "guard_bits": lay.guard_bits,
        "slot_bits": lay.slot_bits, "slots_per_ciphertext": lay.slots_per_ciphertext,
        "n_groups": lay.n_groups(n_cols),
    }


def stream_chunk_rows(public_key: paillier.PaillierPublicKey, n_groups: int,
                      max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> int:
    """Rows per streamed chunk: as many as fit ``max_frame_bytes`` (``rows * n_groups * bytes(n^2)``)."""
    per_row = n_groups * ciphertext_byte_length(public_key)
    if isinstance(max_frame_bytes, bool) or not isinstance(max_frame_bytes, int) or max_frame_bytes < per_row:
        raise ConfigurationError(f"max_frame_bytes must be an int >= one row of ciphertexts ({per_row} bytes), "
                                 f"got {max_frame_bytes!r}")
    return max(1, min(MAX_ROWS, max_frame_bytes // per_row))


def pipeline_chunk_rows(n_rows: int) -> int:
    """Rows per chunk for ``min(PIPELINE_CHUNKS, n_rows // MIN_PIPELINE_ROWS)`` equal chunks (at least one): an upper
    bound on top of the frame limit of :func:`stream_chunk_rows` (517 rows: 4 chunks of 130; under 256 rows: one)."""
    return math.ceil(n_rows / max(1, min(PIPELINE_CHUNKS, n_rows // MIN_PIPELINE_ROWS)))


@dataclass
class EncryptedBlock:
    """Key holder -> responder: ``Enc(pack(a'_i))`` for every row ``i`` and column group.

    ``ciphertexts[i * n_groups + g]`` encrypts row ``i``'s columns ``layout.group_columns(n_cols, g)``.
    """

    session: str
    public_key: paillier.PaillierPublicKey
    layout: SlotLayout
    n_cols: int
    ciphertexts: list[int] = field(repr=False)

    KIND = "vfl.secure.encrypted_block"

    @property
    def n_groups(self) -> int:
        return self.layout.n_groups(self.n_cols)

    def to_wire(self) -> tuple[dict[str, Any], list[bytes]]:
        header = _layout_header(self.KIND, self.session, self.public_key, self.layout, self.n_cols)
        return header, [ciphertexts_to_bytes(self.public_key, self.ciphertexts)]

    @classmethod
    def from_wire(cls, header: dict[str, Any], frames: list[bytes],
                  public_key: paillier.PaillierPublicKey) -> EncryptedBlock:
        _check_envelope(header, frames, cls.KIND, public_key)
        layout, n_cols = _layout_from_header(header, public_key)
        count = layout.n_rows * layout.n_groups(n_cols)
        cts = ciphertexts_from_bytes(public_key, frames[0], count)
        return cls(_str_field(header, "session", _HEX32), public_key, layout, n_cols, cts)


@dataclass
class MaskedResponse:
    """Responder -> key holder: one re-randomised ciphertext per (responder column ``k``, group ``g``).

    ``ciphertexts[k * n_groups + g]`` decrypts to ``P_kg + R_kg + pack_g(noise_jk + C) mod n``, uniform on
    ``[0, n)`` (``R_kg`` is a uniform mask over the whole plaintext space; module docstring).
    """

    session: str
    public_key: paillier.PaillierPublicKey
    slot_bits: int
    n_enc_cols: int
    n_resp_cols: int
    n_groups: int
    ciphertexts: list[int] = field(repr=False)

    KIND = "vfl.secure.masked_response"

    def to_wire(self) -> tuple[dict[str, Any], list[bytes]]:
        header = {
            "kind": self.KIND, "version": WIRE_VERSION, "session": self.session,
            "key_fingerprint": key_fingerprint(self.public_key),
            "ciphertext_bytes": ciphertext_byte_length(self.public_key), "slot_bits": self.slot_bits,
            "n_enc_cols": self.n_enc_cols, "n_resp_cols": self.n_resp_cols, "n_groups": self.n_groups,
        }
        return header, [ciphertexts_to_bytes(self.public_key, self.ciphertexts)]

    @classmethod
    def from_wire(cls, header: dict[str, Any], frames: list[bytes],
                  public_key: paillier.PaillierPublicKey) -> MaskedResponse:
        _check_envelope(header, frames, cls.KIND, public_key)
        key_bits = int(public_key.n).bit_length()
        n_resp = _int_field(header, "n_resp_cols", 1, MAX_COLS)
        n_groups = _int_field(header, "n_groups", 1, MAX_COLS)
        cts = ciphertexts_from_bytes(public_key, frames[0], n_resp * n_groups)
        slot_bits = _int_field(header, "slot_bits", 2 + MIN_GUARD_BITS, key_bits)
        return cls(_str_field(header, "session", _HEX32), public_key, slot_bits,
                   _int_field(header, "n_enc_cols", 1, MAX_COLS), n_resp, n_groups, cts)


@dataclass
class ProductStreamHeader:
    """Key holder -> responder, first message of a streamed request: the public layout and chunking.

    The ciphertexts follow as :class:`EncryptedChunk` messages of ``chunk_rows`` rows each (the last may be
    shorter), in order; chunk ``t`` holds rows ``[t chunk_rows, (t + 1) chunk_rows)``.
    """

    session: str
    public_key: paillier.PaillierPublicKey
    layout: SlotLayout
    n_cols: int
    chunk_rows: int

    KIND = "vfl.secure.product_stream"

    @property
    def n_groups(self) -> int:
        return self.layout.n_groups(self.n_cols)

    @property
    def n_chunks(self) -> int:
        return math.ceil(self.layout.n_rows / self.chunk_rows)

    @property
    def frame_bytes(self) -> int:
        """Bytes of a full chunk's ciphertext frame."""
        return self.chunk_rows * self.n_groups * ciphertext_byte_length(self.public_key)

    def chunk_size(self, index: int) -> int:
        """Rows of chunk ``index``."""
        return min(self.chunk_rows, self.layout.n_rows - index * self.chunk_rows)

    def to_wire(self) -> tuple[dict[str, Any], list[bytes]]:
        header = _layout_header(self.KIND, self.session, self.public_key, self.layout, self.n_cols)
        header.update(chunk_rows=self.chunk_rows, n_chunks=self.n_chunks)
        return header, []

    @classmethod
    def from_wire(cls, header: dict[str, Any], frames: list[bytes], public_key: paillier.PaillierPublicKey, *,
                  max_frame_bytes: int = MAX_FRAME_BYTES) -> ProductStreamHeader:
        if not isinstance(header, dict):
            raise ProtocolError("header must be a dict")
        if header.get("kind") != cls.KIND or header.get("version") != WIRE_VERSION:
            raise ProtocolError(f"expected a {cls.KIND} v{WIRE_VERSION} message, got {header.get('kind')!r}")
        if not isinstance(frames, (list, tuple)) or len(frames) != 0:
            raise ProtocolError("a stream header carries no frames")
        if _str_field(header, "key_fingerprint", _HEX64) != key_fingerprint(public_key):
            raise KeyValidationError("message was encrypted under a different public key")
        if _int_field(header, "ciphertext_bytes", 1, 1 << 16) != ciphertext_byte_length(public_key):
            raise ProtocolError("ciphertext width does not match the public key")
        layout, n_cols = _layout_from_header(header, public_key)
        out = cls(_str_field(header, "session", _HEX32), public_key, layout, n_cols,
                  _int_field(header, "chunk_rows", 1, MAX_ROWS))
        if _int_field(header, "n_chunks", 1, MAX_ROWS) != out.n_chunks:
            raise ProtocolError("stream header: n_chunks disagrees with n_rows and chunk_rows")
        if out.frame_bytes > max_frame_bytes:
            raise ProtocolError(
                f"stream chunks of {out.chunk_rows} rows make {out.frame_bytes} B ciphertext frames, above this "
                f"responder's limit of {max_frame_bytes} B; the key holder must send smaller chunks "
                f"(max_frame_bytes <= {max_frame_bytes}; default {DEFAULT_MAX_FRAME_BYTES})")
        return out


@dataclass
class EncryptedChunk:
    """Key holder -> responder: the ciphertexts of one chunk of rows (``frame``: fixed-width, row-major)."""

    session: str
    index: int
    row_start: int
    n_rows: int
    frame: bytes = field(repr=False)

    KIND = "vfl.secure.encrypted_chunk"

    def to_wire(self) -> tuple[dict[str, Any], list[bytes]]:
        header = {"kind": self.KIND, "version": WIRE_VERSION, "session": self.session, "index": self.index,
                  "row_start": self.row_start, "n_rows": self.n_rows}
        return header, [self.frame]

    @classmethod
    def from_wire(cls, header: dict[str, Any], frames: list[bytes], stream: ProductStreamHeader) -> EncryptedChunk:
        """Parse and validate a chunk of ``stream``: its place in the stream, size and every ciphertext."""
        if not isinstance(header, dict):
            raise ProtocolError("header must be a dict")
        if header.get("kind") != cls.KIND or header.get("version") != WIRE_VERSION:
            raise ProtocolError(f"expected a {cls.KIND} v{WIRE_VERSION} message, got {header.get('kind')!r}")
        if not isinstance(frames, (list, tuple)) or len(frames) != 1:
            raise ProtocolError("expected exactly one ciphertext frame")
        if _str_field(header, "session", _HEX32) != stream.session:
            raise ProtocolError("chunk belongs to another session")
        index = _int_field(header, "index", 0, stream.n_chunks - 1)
        if _int_field(header, "row_start", 0, MAX_ROWS) != index * stream.chunk_rows:
            raise ProtocolError("chunk row_start disagrees with its index")
        rows = _int_field(header, "n_rows", 1, stream.chunk_rows)
        if rows != stream.chunk_size(index):
            raise ProtocolError(f"chunk {index} has {rows} rows, the stream header implies {stream.chunk_size(index)}")
        frame = frames[0]
        if not isinstance(frame, (bytes, bytearray, memoryview)):
            raise ProtocolError(f"ciphertext frame must be bytes, got {type(frame).__name__}")
        frame = bytes(frame)
        ciphertexts_from_bytes(stream.public_key, frame, rows * stream.n_groups)  # validates length and each c
        return cls(stream.session, index, index * stream.chunk_rows, rows, frame)


# ----------------------------------------------------------------------------- roles
def _as_matrix(X: Any, name: str) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise DataValidationError(f"{name} must be a non-empty 2-D array, got shape {X.shape}")
    return X


def _progress_bar(enabled: bool, total: int, desc: str, unit: str) -> Progress:
    return progress(total, desc, enabled=enabled, unit=unit)   # a bar on a terminal, plain lines in a log


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
                            draws, pre = [enc.draw() for _ in range(count)], False
                        yield (state, part, groups, lay.slot_bits, draws, pre, width)

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


def _check_noise(noise: Any, shape: tuple[int, int], bound: int) -> np.ndarray:
    if noise is None:
        return np.zeros(shape, dtype=object)
    arr = np.asarray(noise)
    if arr.shape != shape:
        raise DataValidationError(f"noise must have shape {shape}, got {arr.shape}")
    if arr.dtype != object and not np.issubdtype(arr.dtype, np.integer):
        raise DataValidationError("noise must be an integer array in fixed-point units 2**-(2*precision_bits)")
    out = np.empty(shape, dtype=object)
    for idx, v in np.ndenumerate(arr):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise DataValidationError("noise entries must be integers")
        if abs(int(v)) >= bound:  # the message never quotes the (secret) noise value
            raise EncodingOverflowError(
                f"a noise entry exceeds the agreed bound 2**noise_bits = 2**{bound.bit_length() - 1}"
            )
        out[idx] = int(v)
    return out


def _encoded_source(X: Any, name: str, precision_bits: int, value_bound: float
                    ) -> tuple[RowSource, np.ndarray | None, np.ndarray | None]:
    """``(source, encoded, col_sums)``: an in-memory array is encoded (and bound-checked) at once; a row source
    is encoded chunk by chunk while streaming (``encoded``/``col_sums`` None until then)."""
    if isinstance(X, RowSource) and not isinstance(X, np.ndarray):
        if X.n_rows < 1 or X.n_cols < 1:
            raise DataValidationError(f"{name} must be non-empty, got {X.n_rows} x {X.n_cols}")
        return X, None, None
    X = _as_matrix(X, name)
    encoded, col_sums = encode_offset_chunk(X, precision_bits, value_bound)
    return ArrayRows(encoded), encoded, col_sums


def _task_rows(chunk_rows: int, n_chunks: int, parallel: int) -> int:
    """Rows per executor task: a whole chunk when there are enough chunks to keep ``parallel`` workers busy,
    else the chunk split so that every worker gets work (small products)."""
    if parallel <= 1 or n_chunks >= 2 * parallel:
        return chunk_rows
    return max(1, math.ceil(chunk_rows / (2 * parallel)))


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
        if not isinstance(ex, PinnedPool):
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
        assert isinstance(self._executor, PinnedPool)
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
        assert isinstance(self._executor, PinnedPool)
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
        if self._token is not None and isinstance(self._executor, PinnedPool):
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


def combine_shares(*shares: np.ndarray, precision_bits: int) -> np.ndarray:
    """``sum(shares) 2^-2p`` as float64 (correctly rounded) for additive integer shares of a product (e.g. the
    exact integers of :meth:`ProductRun.combined`). Packed shares are combined by :func:`combine_packed_shares`."""
    if not shares:
        raise ConfigurationError("combine_shares needs at least one share")
    total = np.asarray(shares[0], dtype=object).copy()
    for s in shares[1:]:
        s = np.asarray(s, dtype=object)
        if s.shape != total.shape:
            raise DataValidationError(f"share shapes differ: {s.shape} vs {total.shape}")
        total = total + s
    return decode_products(total, precision_bits)


# ----------------------------------------------------------------------------- packed shares
def centring_constant(layout: SlotLayout) -> int:
    """``C = 2^v`` (``v`` = :attr:`SlotLayout.value_bits`), added once to every slot of a response.

    Every legitimate slot value ``u = sum_i a_int_ij b_int_ik + noise^A_jk + noise^B_jk (+ local offsets)`` has
    ``|u| < 2^v`` (``|sum_i a_int b_int| <= n O^2``, each noise share ``< N``, an FM offset ``<= n O^2 / 2``, and
    ``v = bitlen(n (2O)^2 + 2N)``), so ``u + C`` lies in ``(0, 2^(v+1))``, inside the ``w = v + g + 1``-bit
    slot: its top ``g`` guard bits (:mod:`vfl.secure.packing`) are 0 in every honest run.
    """
    return 1 << layout.value_bits


def pack_slots(values: Any, layout: SlotLayout, modulus: int) -> np.ndarray:
    """``out[k, g] = pack_g(values[:, k]) = sum_{j in g} 2^(w slot(j)) values[j, k] mod n`` (``d_b x n_groups``).

    ``values`` is a signed integer array ``d_a x d_b``; packing is linear modulo ``n``, which is how each party
    folds its own corrections (column sums, noise share, offsets) into its packed share.
    """
    arr = np.asarray(values, dtype=object)
    if arr.ndim != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                for v in arr.flat):
        raise DataValidationError("packed values must be a 2-D integer array (fixed-point units 2**-(2p))")
    d_a, d_b = arr.shape
    G, w = layout.n_groups(d_a), layout.slot_bits
    out = np.empty((d_b, G), dtype=object)
    for k in range(d_b):
        for g in range(G):
            total = 0
            for slot, j in enumerate(layout.group_columns(d_a, g)):
                total += int(arr[j, k]) << (w * slot)
            out[k, g] = total % modulus
    return out


def add_packed(share: Any, values: Any, *, layout: SlotLayout, modulus: int) -> np.ndarray:
    """``share + pack_slots(values) mod n``: a party adds a local ``d_a x d_b`` integer term to its packed share."""
    return (np.asarray(share, dtype=object) + pack_slots(values, layout, modulus)) % modulus


def _packed_sum(shares: tuple[Any, ...], n_groups: int, modulus: int) -> np.ndarray:
    if not shares:
        raise ConfigurationError("combine_packed_shares needs at least one share")
    total: np.ndarray | None = None
    for s in shares:
        arr = np.asarray(s, dtype=object)
        if arr.ndim != 2 or arr.shape[1] != n_groups or (total is not None and arr.shape != total.shape):
            raise DataValidationError(f"packed shares must all have shape (d_resp, {n_groups}), got {arr.shape}")
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and 0 <= v < modulus
                   for v in arr.flat):
            raise DataValidationError("packed share entries must be integers in [0, n)")
        total = arr.copy() if total is None else total + arr
    assert total is not None
    return total


def combine_packed_shares(*shares: Any, layout: SlotLayout, n_cols: int, modulus: int,
                          encryptor: str = "the encryptor", responder: str | None = None) -> np.ndarray:
    """The product from its packed shares: ``d_a x d_b`` exact integers ``u_jk`` (units ``2^-2p``), range-checked.

    ``Z_kg = sum(shares) mod n`` is unpacked with the public layout (slot width ``w``, ``n_cols = d_a`` columns,
    ``layout.group_columns``); each slot must satisfy ``|slot - C| < 2^v`` (:func:`centring_constant`) and every bit
    of ``Z_kg`` above its last slot must be 0. An honest run always passes; anything the encryptor packed outside
    its declared slots (or an operand entry outside ``[0, 2O]``) lands there with overwhelming probability, so a
    failure raises :class:`ProtocolError` naming ``encryptor`` and, if given, ``responder``: a share corrupted by the
    responder has the same effect, and the coordinator cannot tell the two apart from the shares. The message
    never says which slot failed: it reaches every party (the coordinator's ABORT), and the position of the first
    failing slot would give a probing encryptor more than the one bit of the abort itself.
    """
    G = layout.n_groups(n_cols)
    culprit = "" if responder is None else f", or {responder} corrupted its share"
    refused = ProtocolError(f"secure product refused: {encryptor}'s encrypted operand is not what its request "
                            f"declared{culprit} (the combined block lies outside its declared slots); the run stops")
    total = _packed_sum(shares, G, modulus)
    C, w = centring_constant(layout), layout.slot_bits
    bound, mask = 1 << layout.value_bits, (1 << w) - 1
    out = np.empty((n_cols, total.shape[0]), dtype=object)
    for k in range(total.shape[0]):
        for g in range(G):
            z = int(total[k, g]) % modulus
            for j in layout.group_columns(n_cols, g):
                u = (z & mask) - C
                if not -bound < u < bound:
                    raise refused
                out[j, k] = u
                z >>= w
            if z:
                raise refused
    return out


# ----------------------------------------------------------------------------- who encrypts
_ENC_COST = {"short-exponent": 40, "standard": 530}  # per encryption, in mulmods modulo n^2 (measured)
_RERAND_COST = 1900  # responder's full-size r^n mod n^2 without the factors (~15 ms / ~8 us per mulmod, 2048 bits)
_DEC_COST = 500


def product_cost(n: int, d_enc: int, d_resp: int, *, key_bits: int = 2048,
                 precision_bits: int = DEFAULT_PRECISION_BITS, value_bound: float = 1.0,
                 noise_bits: int | None = None, randomness: str = "short-exponent") -> int:
    """Estimated work (multiplications modulo ``n^2``) when the ``d_enc`` side encrypts."""
    lay = SlotLayout(key_bits, n, precision_bits, float(value_bound),
                     default_noise_bits(precision_bits) if noise_bits is None else noise_bits)
    G = lay.n_groups(d_enc)
    per_column = multiexp_cost(n, lay.exponent_bits) + _RERAND_COST + _DEC_COST
    return G * n * _ENC_COST[randomness] + d_resp * G * per_column


def choose_encryptor(n: int, d_a: int, d_b: int, **layout: Any) -> str:
    """``"a"`` or ``"b"``: which side should hold the key and encrypt so that total work is smallest.

    The encryptor's columns are packed for free (``ceil(d / s)`` ciphertexts per row) while each
    responder column costs a multi-exponentiation, so the wider side encrypts when it fits in one group.
    """
    return "a" if product_cost(n, d_a, d_b, **layout) <= product_cost(n, d_b, d_a, **layout) else "b"


# ----------------------------------------------------------------------------- in-process entry points
@dataclass
class ProductRun:
    """Packed shares and bookkeeping of one in-process run.

    Both shares are ``d_resp x n_groups`` ints modulo ``modulus`` (the Paillier ``n``) in the encryptor's
    orientation, as the two parties send them; :meth:`combined` is what the coordinator computes from them.
    """

    key_holder_share: np.ndarray
    responder_share: np.ndarray
    encryptor: str
    layout: SlotLayout
    n_enc_cols: int
    modulus: int
    extra: dict[str, Any] = field(default_factory=dict)

    def combined(self) -> np.ndarray:
        """``X_a^T X_b + noise`` as exact integers in units ``2^-2p`` (``d_a x d_b``), via
        :func:`combine_packed_shares` (range-checked)."""
        total = combine_packed_shares(self.key_holder_share, self.responder_share, layout=self.layout,
                                      n_cols=self.n_enc_cols, modulus=self.modulus,
                                      encryptor=f"party {self.encryptor}")
        return total if self.encryptor == "a" else total.T


def run_secure_product(X_a: np.ndarray, X_b: np.ndarray, *, key_bits: int = 2048,
                       precision_bits: int = DEFAULT_PRECISION_BITS, value_bound: float = 1.0,
                       noise: np.ndarray | None = None, noise_sigma: float | None = None,
                       allow_insecure: bool = False, rng: RandomState = None, workers: int | None = None,
                       progress: bool = False, keypair: tuple | None = None, encryptor: str = "auto",
                       randomness: str = "short-exponent", noise_bits: int | None = None,
                       on_decrypt: Callable[[int], None] | None = None, precompute: bool = False,
                       executor: Any = None, key_holder_noise: np.ndarray | None = None) -> ProductRun:
    """Both roles in one process, through the wire format; packed shares of ``X_a^T X_b + noise``.

    ``noise``: the responder's integer noise, array ``d_a x d_b`` in units ``2^-2p``; or ``noise_sigma`` (real
    units): a discrete Gaussian ``N_Z(0, (sigma 2^2p)^2)`` drawn from ``make_rng(rng)`` (Canonne et al. 2020).
    ``key_holder_noise``: the key holder's own noise share (same shape and units), added after decryption.
    ``encryptor``: ``"a"``, ``"b"`` or ``"auto"`` (:func:`choose_encryptor`). ``executor``: where both roles'
    heavy work runs (:mod:`vfl.secure.executors`).
    """
    X_a, X_b = _as_matrix(X_a, "X_a"), _as_matrix(X_b, "X_b")
    if X_a.shape[0] != X_b.shape[0]:
        raise DataValidationError(f"row counts differ: {X_a.shape[0]} vs {X_b.shape[0]}")
    n, d_a, d_b = X_a.shape[0], X_a.shape[1], X_b.shape[1]
    if noise is not None and noise_sigma is not None:
        raise ConfigurationError("give either noise or noise_sigma, not both")
    if noise_sigma is not None:
        noise = discrete_gaussian_array(noise_sigma, (d_a, d_b), make_rng(rng), scale_bits=2 * precision_bits)
    if keypair is None:
        keypair = generate_keypair(key_bits, allow_insecure=allow_insecure)
    public_key, private_key = keypair
    if int(public_key.n).bit_length() < 2048 and not allow_insecure:
        raise KeyValidationError("keys below 2048 bits need allow_insecure=True")
    if encryptor == "auto":
        encryptor = choose_encryptor(n, d_a, d_b, key_bits=int(public_key.n).bit_length(),
                                     precision_bits=precision_bits, value_bound=value_bound, noise_bits=noise_bits)
    if encryptor not in ("a", "b"):
        raise ConfigurationError(f"encryptor must be 'a', 'b' or 'auto', got {encryptor!r}")
    X_enc, X_resp = (X_a, X_b) if encryptor == "a" else (X_b, X_a)
    def oriented(arr: np.ndarray | None) -> np.ndarray | None:
        return None if arr is None else (np.asarray(arr) if encryptor == "a" else np.asarray(arr).T)

    noise_oriented = oriented(noise)

    holder = ProductEncryptor(private_key, X_enc, response_cols=X_resp.shape[1], precision_bits=precision_bits,
                              value_bound=value_bound,
                              noise_bits=noise_bits, randomness=randomness, workers=workers, progress=progress,
                              on_decrypt=on_decrypt, executor=executor)
    responder = ProductResponder(X_resp, precision_bits=precision_bits, value_bound=value_bound,
                                 noise_bits=noise_bits, randomness=randomness, workers=workers, progress=progress,
                                 executor=executor)
    if precompute:
        holder.precompute_randomness()
    header, frames = holder.request().to_wire()
    response, share_resp = responder.respond(EncryptedBlock.from_wire(header, frames, public_key), noise_oriented)
    header, frames = response.to_wire()
    share_holder = holder.decrypt(holder.response_from_wire(header, frames), noise=oriented(key_holder_noise))
    return ProductRun(share_holder, share_resp, encryptor, holder.layout, holder.n_cols, int(public_key.n))


def secure_gram(X_a: np.ndarray, X_b: np.ndarray, *, key_bits: int = 2048,
                precision_bits: int = DEFAULT_PRECISION_BITS, value_bound: float = 1.0,
                noise: np.ndarray | None = None, allow_insecure: bool = False, rng: RandomState = None,
                workers: int | None = None, progress: bool = False, **options: Any) -> np.ndarray:
    """``X_a^T X_b (+ noise 2^-2p)`` computed through the real encryption, masking and decryption.

    Exact up to :func:`vfl.secure.encoding.inner_product_error_bound`. ``options`` are passed to
    :func:`run_secure_product` (``keypair``, ``encryptor``, ``randomness``, ``noise_sigma``, ``on_decrypt``...).
    """
    run = run_secure_product(X_a, X_b, key_bits=key_bits, precision_bits=precision_bits, value_bound=value_bound,
                             noise=noise, allow_insecure=allow_insecure, rng=rng, workers=workers,
                             progress=progress, **options)
    return decode_products(run.combined(), precision_bits)


def secure_label_products(y: np.ndarray, X_b: np.ndarray, **kwargs: Any) -> np.ndarray:
    """``y^T X_b`` (a ``d_b`` vector) through the real protocol; keyword arguments as :func:`secure_gram`.

    ``noise`` (if given) has shape ``(d_b,)`` or ``(1, d_b)``.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise DataValidationError(f"y must be a 1-D label vector, got shape {y.shape}")
    if kwargs.get("noise") is not None:
        kwargs["noise"] = np.asarray(kwargs["noise"]).reshape(1, -1)
    return secure_gram(y.reshape(-1, 1), X_b, **kwargs)[0]
