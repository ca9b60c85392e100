"""Every message of the vfl wire protocol, its encoding and its validation (no pickle, ever).

A message is a list of ZeroMQ frames::

    [header JSON (UTF-8)] [payload frame 0] [payload frame 1] ...

The header is a small JSON object ``{"v", "type", "run", "from", "seq", "body", "frames"}``:
protocol version, message type (one of :class:`MessageType`), run id, sender name, a per-sender
sequence number (strictly increasing), a JSON body whose fields are checked against the type's
schema, and one descriptor per payload frame:

* ``{"kind": "array", "dtype": "<f8", "shape": [r, c]}`` -- a numeric numpy array, raw little-endian
  bytes; dtype from a short whitelist, byte length must equal ``prod(shape) * itemsize``;
* ``{"kind": "ints", "shape": [...]}`` -- an array of arbitrary-size Python ints (secure-product
  shares, ciphertexts): each element as a 4-byte big-endian length followed by that many bytes of the
  value in *signed* big-endian two's complement; every byte must be consumed;
* ``{"kind": "bytes"}`` -- an opaque byte string (a serialized public key, a packed ciphertext).

Decoding validates everything before any value reaches protocol code: sizes
(:data:`MAX_MESSAGE_BYTES`, :data:`MAX_HEADER_BYTES`, :data:`MAX_FRAMES`), UTF-8/JSON, version,
type, identifiers, sequence numbers, each body field's type, and each frame against its descriptor.
Anything wrong raises :class:`vfl.exceptions.ProtocolError` with one readable line.

Cheap checks come first (issue 14, item 3: one "ints" frame of small integers used to cost ~40 s of CPU and
2 GB before its sender was even looked at): total size, then the header, then the frame kinds each message type
may carry (:data:`FRAME_KINDS`: only SHARE carries integers, a REGISTER or HEARTBEAT carries no frame at all),
then every frame's declared size (at most :data:`MAX_INTS` integers), then the caller's ``accept`` check
(the transport's sender, run id and sequence number) -- and only then is any payload parsed.

Every message type is declared once, in :mod:`vfl.net.message_specs` (one :class:`MessageSpec` each: body
fields, frame kinds, sender -> receiver, one doc line); :data:`SCHEMAS` and :data:`FRAME_KINDS` below are
derived from those declarations, and the message table of docs/runtime.md is generated from them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, ProtocolError
from vfl.net.message_specs import MAX_ICA_DIMS, MAX_SCORE_IDS, SPECS, MessageSpec, MessageType, _is_int, _is_name
from vfl.validation import validate_name

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_MESSAGE_BYTES",
    "MAX_HEADER_BYTES",
    "MIN_MESSAGE_BYTES",
    "MAX_ICA_DIMS",
    "MAX_SCORE_IDS",
    "check_max_message_bytes",
    "MAX_FRAMES", "pack_payloads", "unpack_payloads",
    "MAX_INTS",
    "FRAME_KINDS",
    "MessageType",
    "MessageSpec",
    "SCHEMAS",
    "Message",
    "IntArray",
    "encode",
    "decode",
    "ints_to_bytes",
    "ints_from_bytes",
    "validate_name",
    "message_of",
]

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # whole message; the socket also enforces ZMQ_MAXMSGSIZE per frame
MAX_HEADER_BYTES = 256 * 1024
MIN_MESSAGE_BYTES = 64 * 1024  # below this even a PLAN with a few hundred feature names is refused


def check_max_message_bytes(value: int) -> int:
    """A hub's ``--max-message-bytes`` (coordinator, capeFM and capeDJICA aggregators): an integer in
    [:data:`MIN_MESSAGE_BYTES`, :data:`MAX_MESSAGE_BYTES`], else :class:`ConfigurationError` (one line)."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_MESSAGE_BYTES <= value <= MAX_MESSAGE_BYTES:
        raise ConfigurationError(f"--max-message-bytes must lie in [{MIN_MESSAGE_BYTES}, {MAX_MESSAGE_BYTES}], "
                                 f"got {value}")
    return value
MAX_FRAMES = 64
MAX_INT_BYTES = 16 * 1024  # one big integer (a 4096-bit key's n^2 is 1 KiB; shares are smaller)
MAX_INTS = 1 << 20  # integers in one frame: a share is d_enc x d_resp (1000 x 1000 fits)
MAX_DIMS = 4

ALLOWED_DTYPES = {"<f8": np.float64, "<i8": np.int64, "<u8": np.uint64, "|u1": np.uint8, "|b1": np.bool_}
_RUN_RE = re.compile(r"^[0-9a-f]{0,32}$")


#: field -> (required?, check) of every message type (unknown fields are rejected too), from its MessageSpec
SCHEMAS: dict[MessageType, dict[str, tuple[bool, Callable[[Any], bool]]]] = {s.type: s.fields for s in SPECS}
#: payload frame kinds each message type may carry (any one of the listed tuples), from its MessageSpec; types
#: whose spec says ``frames=None`` may carry any frames within the general limits
FRAME_KINDS: dict[MessageType, tuple[tuple[str, ...], ...]] = {s.type: s.frames for s in SPECS
                                                                if s.frames is not None}


# ------------------------------------------------------------------ payloads
@dataclass(frozen=True)
class IntArray:
    """An array of arbitrary-size Python ints (shares, ciphertexts): the only non-numeric payload."""

    values: np.ndarray  # dtype=object, Python ints

    @classmethod
    def of(cls, values: Any) -> IntArray:
        arr = np.asarray(values, dtype=object)
        return cls(arr)


Payload = np.ndarray | IntArray | bytes


def ints_to_bytes(values: Sequence[int] | np.ndarray) -> bytes:
    """Length-prefixed signed big-endian encoding of a flat sequence of Python ints."""
    out = bytearray()
    for v in np.asarray(values, dtype=object).ravel():
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise ProtocolError(f"cannot encode {type(v).__name__} as a big integer")
        v = int(v)
        blob = v.to_bytes((v + (v < 0)).bit_length() // 8 + 1, "big", signed=True)
        if len(blob) > MAX_INT_BYTES:
            raise ProtocolError(f"integer of {len(blob)} bytes exceeds the {MAX_INT_BYTES}-byte limit")
        out += len(blob).to_bytes(4, "big") + blob
    return bytes(out)


def ints_from_bytes(data: bytes, count: int) -> list[int]:
    """Inverse of :func:`ints_to_bytes`; exactly ``count`` ints and no trailing bytes, or ProtocolError."""
    view = memoryview(data)
    values: list[int] = []
    pos = 0
    for _ in range(count):
        if pos + 4 > len(view):
            raise ProtocolError("integer frame is truncated")
        n = int.from_bytes(view[pos:pos + 4], "big")
        pos += 4
        if n == 0 or n > MAX_INT_BYTES or pos + n > len(view):
            raise ProtocolError(f"integer frame declares an invalid length {n}")
        values.append(int.from_bytes(view[pos:pos + n], "big", signed=True))
        pos += n
    if pos != len(view):
        raise ProtocolError(f"integer frame has {len(view) - pos} unexpected trailing bytes")
    return values


def _shape_ok(shape: Any) -> bool:
    return (isinstance(shape, list) and len(shape) <= MAX_DIMS
            and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= 2**31 for s in shape))


def _encode_payload(p: Payload) -> tuple[dict, bytes]:
    if isinstance(p, IntArray):
        return {"kind": "ints", "shape": list(p.values.shape)}, ints_to_bytes(p.values)
    if isinstance(p, (bytes, bytearray, memoryview)):
        return {"kind": "bytes"}, bytes(p)
    if isinstance(p, np.ndarray):
        if p.dtype == object:
            raise ProtocolError("object arrays must be wrapped in IntArray")
        arr = np.ascontiguousarray(p.astype(p.dtype.newbyteorder("<")))
        code = arr.dtype.str
        if code not in ALLOWED_DTYPES:
            raise ProtocolError(f"dtype {arr.dtype} is not allowed on the wire")
        return {"kind": "array", "dtype": code, "shape": list(arr.shape)}, arr.tobytes()
    raise ProtocolError(f"unsupported payload type {type(p).__name__}")


def _check_descriptor(desc: Any, size: int) -> str:
    """Validate one frame descriptor against the frame's byte length without reading the frame; its kind."""
    if not isinstance(desc, dict):
        raise ProtocolError("frame descriptor is not an object")
    kind = desc.get("kind")
    if kind == "bytes":
        if set(desc) != {"kind"}:
            raise ProtocolError("bytes descriptor has unexpected fields")
        return kind
    if kind not in ("ints", "array"):
        raise ProtocolError(f"unknown frame kind {kind!r}")
    shape = desc.get("shape")
    if not _shape_ok(shape):
        raise ProtocolError(f"invalid frame shape {shape!r}")
    count = math.prod(shape) if shape else 1
    if kind == "ints":
        if set(desc) != {"kind", "shape"}:
            raise ProtocolError("ints descriptor has unexpected fields")
        if count > MAX_INTS:
            raise ProtocolError(f"integer frame declares {count} integers (limit {MAX_INTS})")
        if not count * 5 <= size <= count * (4 + MAX_INT_BYTES):
            raise ProtocolError(f"integer frame of {size} bytes cannot hold {count} integers")
        return kind
    if set(desc) != {"kind", "dtype", "shape"}:
        raise ProtocolError("array descriptor has unexpected fields")
    dtype = ALLOWED_DTYPES.get(desc.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise ProtocolError(f"dtype {desc.get('dtype')!r} is not allowed on the wire")
    if count * np.dtype(dtype).itemsize != size:
        raise ProtocolError(f"array frame has {size} bytes, shape {shape} needs {count * np.dtype(dtype).itemsize}")
    return kind


def _decode_payload(desc: dict, data: memoryview) -> Payload:
    """Parse one frame whose descriptor :func:`_check_descriptor` accepted."""
    kind = desc["kind"]
    if kind == "bytes":
        return bytes(data)
    shape = desc["shape"]
    count = math.prod(shape) if shape else 1
    if kind == "ints":
        arr = np.empty(count, dtype=object)
        arr[:] = ints_from_bytes(data, count)
        return IntArray(arr.reshape(shape))
    dtype = ALLOWED_DTYPES[desc["dtype"]]
    arr = np.frombuffer(data, dtype=np.dtype(desc["dtype"])).astype(dtype).reshape(shape)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ProtocolError("array frame contains NaN or infinity")
    return arr


def pack_payloads(payloads: Sequence[Payload]) -> tuple[list[dict], bytes]:
    """Payloads in one frame (more than :data:`MAX_FRAMES`, e.g. the model check's release): descriptors with sizes."""
    encoded = [_encode_payload(p) for p in payloads]
    return [{**d, "size": len(b)} for d, b in encoded], b"".join(b for _, b in encoded)


def unpack_payloads(descs: Any, blob: bytes) -> list[Payload]:
    """Inverse of :func:`pack_payloads`, every descriptor and size checked (ProtocolError, never another error)."""
    view, pos, out = memoryview(blob).cast("B"), 0, []
    for d in descs if isinstance(descs, list) else [None]:
        size = d.get("size") if isinstance(d, dict) else None
        if not _is_int(0, len(blob) - pos)(size):
            raise ProtocolError("packed payloads: a descriptor or size does not fit the frame")
        desc, part = {k: v for k, v in d.items() if k != "size"}, view[pos:pos + size]  # type: ignore[union-attr]
        _check_descriptor(desc, part.nbytes)
        out.append(_decode_payload(desc, part))
        pos += size
    if pos != len(blob):
        raise ProtocolError("packed payloads: trailing bytes")
    return out


# ------------------------------------------------------------------ messages
@dataclass
class Message:
    """One protocol message. ``sender``, ``run`` and ``seq`` are filled in by the transport when sent."""

    type: MessageType
    body: dict = field(default_factory=dict)
    payload: list[Payload] = field(default_factory=list)
    sender: str = ""
    run: str = ""
    seq: int = 0

    def array(self, i: int = 0) -> np.ndarray:
        """Payload ``i`` as a numeric array (ProtocolError if it is not one)."""
        p = self._get(i)
        if not isinstance(p, np.ndarray):
            raise ProtocolError(f"{self.type.value}: frame {i} should be a numeric array")
        return p

    def ints(self, i: int = 0) -> np.ndarray:
        """Payload ``i`` as an object array of Python ints."""
        p = self._get(i)
        if not isinstance(p, IntArray):
            raise ProtocolError(f"{self.type.value}: frame {i} should be an integer array")
        return p.values

    def blob(self, i: int = 0) -> bytes:
        p = self._get(i)
        if not isinstance(p, bytes):
            raise ProtocolError(f"{self.type.value}: frame {i} should be bytes")
        return p

    def _get(self, i: int) -> Payload:
        if not 0 <= i < len(self.payload):
            raise ProtocolError(f"{self.type.value}: missing frame {i}")
        return self.payload[i]


def encode(msg: Message) -> list[bytes]:
    """Message -> ZeroMQ frames (header JSON first). Validates the body against the type's schema."""
    _check_body(msg.type, msg.body)
    descs, frames = [], []
    for p in msg.payload:
        d, b = _encode_payload(p)
        descs.append(d)
        frames.append(b)
    header = {"v": PROTOCOL_VERSION, "type": msg.type.value, "run": msg.run, "from": msg.sender,
              "seq": int(msg.seq), "body": msg.body, "frames": descs}
    raw = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    if len(raw) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(raw)} bytes exceeds {MAX_HEADER_BYTES}")
    return [raw, *frames]


def decode(frames: Sequence[Any], *, max_bytes: int = MAX_MESSAGE_BYTES,
           accept: Callable[[Message], None] | None = None) -> Message:
    """ZeroMQ frames (bytes or buffers) -> validated Message, or ProtocolError (never any other exception).

    ``accept(message)`` is called with the validated header (``payload`` still empty) after every size and
    descriptor check and before any payload frame is parsed; it rejects by raising :class:`ProtocolError`.
    """
    try:
        return _decode(frames, max_bytes, accept)
    except ProtocolError:
        raise
    except Exception as exc:  # defensive: malformed input must never surface as a crash
        raise ProtocolError(f"malformed message: {type(exc).__name__}") from None


def _decode(frames: Sequence[Any], max_bytes: int, accept: Callable[[Message], None] | None) -> Message:
    if not frames:
        raise ProtocolError("empty message")
    if len(frames) > MAX_FRAMES + 1:
        raise ProtocolError(f"message has {len(frames)} frames (limit {MAX_FRAMES + 1})")
    views = [memoryview(f).cast("B") for f in frames]
    total = sum(v.nbytes for v in views)
    if total > max_bytes:
        raise ProtocolError(f"message of {total} bytes exceeds the {max_bytes}-byte limit")
    if views[0].nbytes > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {views[0].nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    raw = bytes(views[0])
    if len(raw) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(raw)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError):
        raise ProtocolError("header is not valid UTF-8 JSON") from None
    if not isinstance(header, dict) or set(header) != {"v", "type", "run", "from", "seq", "body", "frames"}:
        raise ProtocolError("header must have exactly the fields v, type, run, from, seq, body, frames")
    if header["v"] != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {header['v']!r} is not supported (this is {PROTOCOL_VERSION})")
    try:
        mtype = MessageType(header["type"])
    except (ValueError, TypeError):
        raise ProtocolError(f"unknown message type {header['type']!r}") from None
    run, sender, seq = header["run"], header["from"], header["seq"]
    if not isinstance(run, str) or not _RUN_RE.fullmatch(run):
        raise ProtocolError("invalid run id")
    if not (sender == "" or _is_name(sender)):
        raise ProtocolError("invalid sender name")
    if not _is_int(0, 2**62)(seq):
        raise ProtocolError("invalid sequence number")
    _check_body(mtype, header["body"])
    descs = header["frames"]
    if not isinstance(descs, list) or len(descs) != len(frames) - 1:
        raise ProtocolError(f"header declares {len(descs) if isinstance(descs, list) else '?'} frames, "
                            f"{len(frames) - 1} arrived")
    kinds = tuple(_check_descriptor(d, v.nbytes) for d, v in zip(descs, views[1:], strict=True))
    allowed = FRAME_KINDS.get(mtype)
    if allowed is not None and kinds not in allowed:
        raise ProtocolError(f"{mtype.value} may not carry frames {list(kinds)}")
    msg = Message(mtype, header["body"], [], sender, run, seq)
    if accept is not None:
        accept(msg)   # sender / run / sequence checks before a single payload byte is parsed
    msg.payload = [_decode_payload(d, v) for d, v in zip(descs, views[1:], strict=True)]
    return msg


def _reject_constant(name: str) -> None:
    raise ProtocolError(f"header contains {name}")


def _check_body(mtype: MessageType, body: Any) -> None:
    if not isinstance(body, dict):
        raise ProtocolError(f"{mtype.value}: body must be an object")
    schema = SCHEMAS[mtype]
    unknown = set(body) - set(schema)
    if unknown:
        raise ProtocolError(f"{mtype.value}: unexpected field(s) {', '.join(sorted(unknown))}")
    for key, (required, check) in schema.items():
        if key not in body:
            if required:
                raise ProtocolError(f"{mtype.value}: missing field {key!r}")
            continue
        if not check(body[key]):
            raise ProtocolError(f"{mtype.value}: invalid value for field {key!r}")


def message_of(out: Any) -> Message:
    """The :class:`Message` for what a protocol phase wants sent (a :class:`vfl.protocols.contracts.Out`):
    its wire type, a copy of its body, and its payload with arrays of Python ints wrapped as :class:`IntArray`."""
    payload = [IntArray.of(p) if isinstance(p, np.ndarray) and p.dtype == object else p for p in out.payload]
    return Message(MessageType(out.type), dict(out.body), payload)
