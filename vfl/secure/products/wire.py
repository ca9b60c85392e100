"""Wire objects of the packed secure product: the stream header, encrypted chunks and blocks, the masked response, echo
tags, and the limits and header checks every message passes (see :mod:`vfl.secure.products`)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from phe import paillier

from vfl.exceptions import (
    ConfigurationError,
    EncodingOverflowError,
    KeyValidationError,
    ProtocolError,
)
from vfl.secure.keys import (
    ciphertext_byte_length,
    ciphertexts_from_bytes,
    ciphertexts_to_bytes,
    key_fingerprint,
)
from vfl.secure.packing import MIN_GUARD_BITS, SlotLayout

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
    if not isinstance(value, str) or not pattern.fullmatch(value):
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


class ChunkGate:
    """Responder, on its receive thread: admit an :class:`EncryptedChunk` message only if it is the stream's next
    (its wire ``index`` = chunks of the stream admitted so far) and at most ``window`` chunks would then wait unfolded
    -- before it is queued for the worker, so that a hub replaying a signed chunk (or relaying past the credit) makes
    the responder hold at most ``window`` chunks per stream, not one per message (review of the bounded worker: each
    task of a 4,096-task queue could hold a ciphertext frame). An honest key holder sends a chunk only within the
    credit granted, ``folded + CREDIT_WINDOW``, so never more than ``CREDIT_WINDOW`` wait."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._admitted: dict[str, int] = {}   # stream (block) -> chunks admitted so far

    def admit(self, stream: str, header: Any, folded: int) -> None:
        """Admit the chunk with wire ``header`` of ``stream`` (``folded``: its chunks the worker folded so far);
        ProtocolError, one line, otherwise."""
        got = self._admitted.get(stream, 0)
        index = header.get("index") if isinstance(header, dict) else None
        if isinstance(index, bool) or index != got:
            raise ProtocolError(f"chunk {index!r} of {stream} arrived, expected chunk {got} (a chunk repeated, "
                                "missing or out of order); refused before it is queued")
        if got - folded >= self.window:
            raise ProtocolError(f"chunk {got} of {stream} arrived with {got - folded} chunks not yet folded, more "
                                f"than the credit window {self.window} allows; refused before it is queued")
        self._admitted[stream] = got + 1
