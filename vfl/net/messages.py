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

The protocol (one run of a functional-mechanism fit; see docs/runtime.md)::

    party        -> coordinator  REGISTER        name, rows, feature names, label owner? (label name), row IDs
                                                 given?, declared preprocessing, its Ed25519 identity and
                                                 signature over all of it
    coordinator  -> party        WELCOME         run id (all later messages carry it)
    coordinator  -> party        PSI_START       (--id runs) index and K of the row alignment, every party's signed
                                                 REGISTER (its ID count: the length of the lists it may send)
    party        -> coordinator  PSI_POINTS      (relayed round the ring) blinded ID points, signed by the sender;
                                                 fully blinded: kept
    coordinator  -> party        PSI_RESULT      positions of the party's common rows in the agreed order
    coordinator  -> party        PLAN            party order, model, mechanism, privacy parameters, key size
    party        -> coordinator  ROSTER_ENTRY    its signed registration, the plan's digest, its Paillier key's
                                                 fingerprint, its Ed25519 signature over them (vfl.protocols.roster)
    coordinator  -> party        ROSTER          every entry in plan order; each party verifies it before anything
                                                 data-dependent (relayed party-to-party messages below carry ``auth``,
                                                 their sender's signature bound to the roster)
    party        -> coordinator  READY           data prepared; the label owner's public label bounds
    encryptor    -> coordinator  ENC_REQUEST     (relayed to the responder) public key + stream header
    responder    -> coordinator  CREDIT          (relayed to the encryptor) send chunks with index < upto
    encryptor    -> coordinator  ENC_CHUNK       (relayed to the responder) one chunk of encrypted rows
    responder    -> coordinator  MASKED_RESPONSE (relayed to the encryptor) masked, noised products
    party        -> coordinator  SHARE           its additive share of a cross block (+ its local offset)
    party        -> coordinator  BLOCK           a single-party block with the owner's noise added
    party        -> coordinator  BCD_REMAINDER   (relayed to the next party in the ring) DP-BCD residual
    party        -> coordinator  BCD_COEF        a party's final DP-BCD coefficients ("completed"; the label
                                                 owner's "converged" when the --tol check stops the ring early)
    coordinator  -> party        BCD_STOP        the ring stopped early (tol): send your coefficients now
    coordinator  -> party        RESULT          the released model
    either       -> either       HEARTBEAT       liveness while the other side computes
    coordinator  -> party        ABORT           the run ended with an error; no model is released
    party        -> coordinator  ERROR           the party failed; the coordinator aborts the run

capeFM over sites with disjoint rows (vfl.protocols.cape_aggregation, vfl.net.cape_aggregator, vfl.net.site):
REGISTER (role "site") / WELCOME as above, then

    aggregator   -> site         CAPE_PLAN       site index, the site names by index + the public plan (model, eps,
                                                 delta, every N_s, ...)
    site         -> aggregator   CAPE_KEY        Diffie-Hellman public value (uint8[256]), its Ed25519 signature
    aggregator   -> site         CAPE_KEYS       every site's public value (uint8[S, 256]) and signature; each site
                                                 checks them against its pinned identities (vfl.protocols.cape_keys)
    site         -> aggregator   CAPE_MASKED     pairwise-masked noise share (uint64[L])
    aggregator   -> site         CAPE_SUM        sum of the masked shares = sum of the noise shares (uint64[L])
    site         -> aggregator   CAPE_RELEASE    noisy coefficients (float64[L])
    aggregator   -> site         RESULT / ABORT

capePCA + capeDJICA over sites with disjoint columns (vfl.protocols.cape_djica_rounds, vfl.net.cape_ica_aggregator;
REGISTER role "djica-site" with ``dims`` D): CAPE_PLAN, one CAPE round of the second-moment matrix, then

    aggregator   -> site         CAPE_SUBSPACE   the released top-K eigenvectors and eigenvalues (float64[D K + K])
    (CAPE_KEY / CAPE_KEYS / CAPE_MASKED / CAPE_SUM: one shares-only round of the zero-sum shares of all rounds)
    aggregator   -> site         CAPE_STATE      round j: W, b, learning rate (float64[K^2 + K + 1])
    site         -> aggregator   CAPE_RELEASE    round j: noisy Delta W_s, Delta b_s (float64[K^2 + K])
    aggregator   -> site         RESULT / ABORT

Federated scoring (vfl.protocols.scoring, vfl.net.scoring; docs/serving.md): REGISTER (role "scorer") / WELCOME, then

    hub          -> party        SCORE_PLAN      index, serving parties, session id, model digest, --max-query-ids
    party        -> hub          SCORE_KEY       Diffie-Hellman public value, signed with the party's Ed25519 key
    hub          -> party        SCORE_KEYS      every party's signed public value (relayed)
    party        -> hub          SCORE_READY     co-parties' keys verified against the pinned identities
    hub          -> party        SCORE_QUERY     round r: the query's normalised IDs (uint32 lengths, then UTF-8)
    party        -> hub          SCORE_PARTIAL   round r: pairwise-masked partial scores, missing flags, check word
    hub          -> party        SCORE_DONE      the service ended
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, ProtocolError

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_MESSAGE_BYTES",
    "MAX_HEADER_BYTES",
    "MIN_MESSAGE_BYTES",
    "MAX_ICA_DIMS",
    "check_max_message_bytes",
    "MAX_FRAMES", "pack_payloads", "unpack_payloads",
    "MAX_INTS",
    "FRAME_KINDS",
    "MessageType",
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
MAX_ICA_DIMS = 100_000  # a capeDJICA site's data dimension D (REGISTER ``dims``); D^2 words per capePCA message
MIN_MESSAGE_BYTES = 64 * 1024  # below this even a PLAN with a few hundred feature names is refused
MAX_SCORE_IDS = 10_000_000  # IDs in one scoring query (the hub's --max-query-ids is lower)


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
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_RUN_RE = re.compile(r"^[0-9a-f]{0,32}$")


class MessageType(str, Enum):
    """Named message types; the value is what travels in the header."""

    REGISTER = "register"
    WELCOME = "welcome"
    PLAN = "plan"
    READY = "ready"
    ENC_REQUEST = "enc_request"
    ENC_CHUNK = "enc_chunk"
    CREDIT = "credit"
    MASKED_RESPONSE = "masked_response"
    SHARE = "share"
    BLOCK = "block"
    BCD_REMAINDER = "bcd_remainder"
    BCD_COEF = "bcd_coef"
    BCD_STOP = "bcd_stop"
    RESULT = "result"
    MODEL_CHECK = "model_check"
    MODEL_SIGNATURE = "model_signature"
    HEARTBEAT = "heartbeat"
    ABORT = "abort"
    ERROR = "error"
    CAPE_PLAN = "cape_plan"
    CAPE_KEY = "cape_key"
    CAPE_KEYS = "cape_keys"
    CAPE_MASKED = "cape_masked"
    CAPE_SUM = "cape_sum"
    CAPE_RELEASE = "cape_release"
    CAPE_SUBSPACE = "cape_subspace"
    CAPE_STATE = "cape_state"
    PSI_START = "psi_start"
    PSI_POINTS = "psi_points"
    PSI_RESULT = "psi_result"
    ROSTER_ENTRY = "roster_entry"
    ROSTER = "roster"
    SCORE_PLAN = "score_plan"
    SCORE_KEY = "score_key"
    SCORE_KEYS = "score_keys"
    SCORE_READY = "score_ready"
    SCORE_QUERY = "score_query"
    SCORE_PARTIAL = "score_partial"
    SCORE_DONE = "score_done"
    GD_ROUND = "gd_round"          # noisy-gradient rounds (vfl.protocols.gd_rounds)
    GD_REQUEST = "gd_request"
    GD_RESPONSE = "gd_response"
    GD_SHARE = "gd_share"


# ------------------------------------------------------------------ body schemas
def _is_str(limit: int = 4096) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and len(v) <= limit


def _is_int(lo: int = 0, hi: int = 2**62) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and bool(_NAME_RE.match(v))


def _is_opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _is_list(check: Callable[[Any], bool], limit: int = 100_000) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and len(v) <= limit and all(check(x) for x in v)


def _is_dict(v: Any) -> bool:
    return isinstance(v, dict)


_FEATURE = _is_str(256)
_BLOCK = _is_str(64)
_HEX_RE = re.compile(r"^[0-9a-f]*$")


def _is_hex(length: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and len(v) == length and bool(_HEX_RE.match(v))


_KEY = _is_hex(64)    # an Ed25519 public key or a sha256 digest, hex (vfl.secure.identity)
_AUTH = _is_hex(128)  # an Ed25519 signature, hex: the sender's, end to end (vfl.protocols.roster)

#: field -> (required?, check). Unknown fields are rejected too.
SCHEMAS: dict[MessageType, dict[str, tuple[bool, Callable[[Any], bool]]]] = {
    MessageType.REGISTER: {
        "name": (True, _is_name),
        "n_rows": (True, _is_int(1)),
        "features": (True, _is_list(_FEATURE, 100_000)),
        "label_owner": (True, _is_bool),
        "row_ids": (False, _is_bool),
        "order": (False, _is_opt(_is_int(0, 10_000))),
        "bounds": (False, _is_opt(_is_dict)),
        "label_bounds": (False, _is_opt(_is_list(_is_num, 2))),
        "bounds_from_data": (False, _is_bool),
        "role": (False, _is_opt(_is_str(16))),
        "seeded": (False, _is_bool),  # cape-fm site: its noise is seeded (`vfl site --seed`), flagged in the report
        "dims": (False, _is_int(1, MAX_ICA_DIMS)),  # capeDJICA site: its data dimension D (rows of its D x N_s matrix)
        "label": (False, _is_opt(_FEATURE)),        # the label owner's label column name (for the model file)
        "preprocessing": (False, _is_opt(_is_dict)),  # declared dummies/imputation (vfl.data.preprocessing record)
        "identity": (False, _KEY),   # the party's Ed25519 public key and its signature over this registration
        "auth": (False, _AUTH),
    },
    MessageType.WELCOME: {"run": (True, _is_str(32))},
    MessageType.PLAN: {
        "index": (True, _is_int(0, 10_000)),
        "parties": (True, _is_list(_is_dict, 10_000)),
        "model": (True, _is_str(16)),
        "mechanism": (True, _is_str(32)),
        "params": (True, _is_dict),
        "n_samples": (True, _is_int(1)),
        "label_owner": (True, _is_int(0, 10_000)),
    },
    MessageType.READY: {
        "label_bounds": (False, _is_opt(_is_list(_is_num, 2))),
        "label_bounds_from_data": (False, _is_bool),
        "seeded": (False, _is_bool),
        "bounds": (False, _is_opt(_is_dict)),
        "bounds_from_data": (False, _is_bool),
        "auth": (False, _AUTH),   # signed for the model check at the end of the run (vfl.net.model_check)
    },
    MessageType.ENC_REQUEST: {
        "block": (True, _BLOCK),
        "to": (True, _is_name),
        "origin": (False, _is_opt(_is_name)),
        "wire": (True, _is_dict),
        "auth": (False, _AUTH),
    },
    MessageType.ENC_CHUNK: {
        "block": (True, _BLOCK),
        "to": (True, _is_name),
        "origin": (False, _is_opt(_is_name)),
        "wire": (True, _is_dict),
        "auth": (False, _AUTH),
    },
    MessageType.CREDIT: {
        "block": (True, _BLOCK),
        "to": (True, _is_name),
        "origin": (False, _is_opt(_is_name)),
        "upto": (True, _is_int(1, 10_000_000)),
        "auth": (False, _AUTH),
    },
    MessageType.MASKED_RESPONSE: {
        "block": (True, _BLOCK),
        "to": (True, _is_name),
        "origin": (False, _is_opt(_is_name)),
        "wire": (True, _is_dict),
        "auth": (False, _AUTH),
    },
    MessageType.SHARE: {"block": (True, _BLOCK), "auth": (False, _AUTH)},
    MessageType.BLOCK: {"block": (True, _BLOCK), "auth": (False, _AUTH)},
    MessageType.BCD_REMAINDER: {
        "round": (True, _is_int(0, 1_000_000)),
        "to": (True, _is_name),
        "origin": (False, _is_opt(_is_name)),
        "auth": (False, _AUTH),
    },
    MessageType.BCD_COEF: {"status": (True, _is_str(64)), "reason": (False, _is_opt(_is_str(1024))),
                           "rounds_run": (False, _is_int(0, 1_000_000))},
    MessageType.BCD_STOP: {"rounds_run": (True, _is_int(0, 1_000_000))},
    MessageType.RESULT: {"model": (True, _is_dict)},
    # signed models (vfl.net.model_check): the release and the unsigned model out, each party's signature back
    MessageType.MODEL_CHECK: {"settings": (True, _is_dict), "release": (True, _is_list(_is_dict, 1_000_000)),
                              "frames": (True, _is_list(_is_dict, 1_000_000))},
    MessageType.MODEL_SIGNATURE: {"digest": (True, _KEY), "auth": (False, _AUTH)},
    MessageType.HEARTBEAT: {},
    MessageType.ABORT: {"reason": (True, _is_str(2048)), "error": (True, _is_str(64))},
    MessageType.ERROR: {"reason": (True, _is_str(2048)), "error": (True, _is_str(64))},
    MessageType.CAPE_PLAN: {"index": (True, _is_int(0, 10_000)), "plan": (True, _is_dict),
                            "fit_intercept": (False, _is_bool),  # capeFM plans carry it, capeDJICA plans do not
                            "sites": (False, _is_list(_is_name, 10_001))},  # site names by index (cape_keys)
    # a site's Diffie-Hellman value is signed by its Ed25519 identity; the table relays every signature (None: a
    # site run with --insecure-no-identity) and each site checks them (vfl.protocols.cape_keys)
    MessageType.CAPE_KEY: {"round": (True, _is_int(0, 2**63 - 1)), "auth": (False, _AUTH)},
    MessageType.CAPE_KEYS: {"round": (True, _is_int(0, 2**63 - 1)), "auths": (False, _is_list(_is_opt(_AUTH), 10_001))},
    MessageType.CAPE_MASKED: {"round": (True, _is_int(0, 2**63 - 1))},
    MessageType.CAPE_SUM: {"round": (True, _is_int(0, 2**63 - 1))},
    MessageType.CAPE_RELEASE: {"round": (True, _is_int(0, 2**63 - 1))},
    MessageType.CAPE_SUBSPACE: {"round": (True, _is_int(0, 2**63 - 1))},
    MessageType.CAPE_STATE: {"round": (True, _is_int(0, 2**63 - 1))},
    # PSI_START carries every ring member's signed REGISTER body; each list its sender's signature (issue 20)
    MessageType.PSI_START: {"index": (True, _is_int(0, 10_000)), "parties": (True, _is_int(1, 10_001)),
                            "registrations": (True, _is_list(_is_dict, 10_001))},
    MessageType.PSI_POINTS: {"origin": (True, _is_int(0, 10_000)), "hops": (True, _is_int(1, 10_001)),
                             "auth": (False, _AUTH)},
    MessageType.PSI_RESULT: {"n_common": (True, _is_int(0))},
    # the signed roster (vfl.protocols.roster): each party's entry, then every entry in plan order
    MessageType.ROSTER_ENTRY: {"party": (True, _is_name), "plan": (True, _KEY), "registration": (True, _is_dict),
                               "paillier": (True, _is_opt(_KEY)), "nonce": (True, _is_hex(32)),
                               "auth": (False, _AUTH)},
    MessageType.ROSTER: {"entries": (True, _is_list(_is_dict, 10_000))},
    # federated scoring (vfl.protocols.scoring, vfl.net.scoring; docs/serving.md)
    MessageType.SCORE_PLAN: {"index": (True, _is_int(0, 10_000)), "parties": (True, _is_list(_is_name, 10_000)),
                             "session": (True, _is_hex(32)), "model": (True, _KEY),
                             "max_ids": (True, _is_int(1, MAX_SCORE_IDS)), "precision_bits": (True, _is_int(8, 52))},
    MessageType.SCORE_KEY: {"index": (True, _is_int(0, 10_000)), "auth": (False, _AUTH)},
    MessageType.SCORE_KEYS: {"entries": (True, _is_list(_is_dict, 10_000))},
    MessageType.SCORE_READY: {},
    MessageType.SCORE_QUERY: {"round": (True, _is_int(1, 2**62)), "count": (True, _is_int(1, MAX_SCORE_IDS))},
    MessageType.SCORE_PARTIAL: {"round": (True, _is_int(1, 2**62)), "count": (True, _is_int(1, MAX_SCORE_IDS))},
    MessageType.SCORE_DONE: {"queries": (True, _is_int(0))},
    # noisy-gradient rounds (vfl.protocols.gd_rounds): the public iterate out, one encrypted column per party back
    MessageType.GD_ROUND: {"t": (True, _is_int(0, 1_000_000)), "w": (True, _is_list(_is_num, 100_000))},
    MessageType.GD_REQUEST: {"t": (True, _is_int(0, 1_000_000)), "w_digest": (True, _KEY), "wire": (True, _is_dict),
                             "auth": (False, _AUTH)},
    MessageType.GD_RESPONSE: {"t": (True, _is_int(0, 1_000_000)), "wire": (True, _is_dict), "auth": (False, _AUTH)},
    MessageType.GD_SHARE: {"t": (True, _is_int(0, 1_000_000)), "role": (True, _is_str(16)), "auth": (False, _AUTH)},
}


#: payload frame kinds each message type may carry (any one of the listed tuples); types not listed (added by
#: later protocols) may carry any frames within the general limits
FRAME_KINDS: dict[MessageType, tuple[tuple[str, ...], ...]] = {
    MessageType.REGISTER: ((),),
    MessageType.WELCOME: ((),),
    MessageType.PLAN: ((),),
    MessageType.READY: ((),),
    MessageType.ENC_REQUEST: (("bytes",),),     # the public key; the stream header is in the body (issue 8)
    MessageType.ENC_CHUNK: (("bytes",),),       # one chunk of ciphertexts
    MessageType.CREDIT: ((),),
    MessageType.MASKED_RESPONSE: (("bytes",),),
    MessageType.SHARE: (("ints",),),
    MessageType.BLOCK: (("array",),),
    MessageType.BCD_REMAINDER: (("array",),),
    MessageType.BCD_COEF: ((), ("array",)),
    MessageType.BCD_STOP: ((),),
    MessageType.RESULT: ((), ("array", "array", "array")),  # capeDJICA: unmixing, bias, eigenvalues as frames
    MessageType.HEARTBEAT: ((),),
    MessageType.ABORT: ((),),
    MessageType.ERROR: ((),),
    MessageType.CAPE_SUBSPACE: (("array",),),
    MessageType.CAPE_STATE: (("array",),),
    MessageType.PSI_START: ((),),
    MessageType.PSI_POINTS: (("bytes",),),
    MessageType.PSI_RESULT: (("array",),),
    MessageType.ROSTER_ENTRY: ((),),
    MessageType.ROSTER: ((),),
    MessageType.SCORE_PLAN: ((),),
    MessageType.SCORE_KEY: (("bytes",),),      # the party's Diffie-Hellman public value (256 bytes)
    MessageType.SCORE_KEYS: ((),),
    MessageType.SCORE_READY: ((),),
    MessageType.SCORE_QUERY: (("bytes",),),    # the query's normalised IDs: count uint32 lengths, then UTF-8
    MessageType.SCORE_PARTIAL: (("array",),),  # masked partial scores, missing flags, check (uint64[2 count + 1])
    MessageType.SCORE_DONE: ((),),
    MessageType.GD_ROUND: ((),),
    MessageType.GD_REQUEST: (("bytes", "bytes"),),   # the encryptor's public key, its one-column ciphertexts
    MessageType.GD_RESPONSE: (("bytes",),),
    MessageType.GD_SHARE: (("ints",),),
}


def validate_name(name: str, what: str = "party name") -> str:
    """Party names are short identifiers: letters, digits, '_', '.', '-' (at most 64 characters)."""
    if not _is_name(name):
        raise ProtocolError(f"invalid {what} {name!r}: use 1-64 letters, digits, '_', '.', '-'")
    return name


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
    if not isinstance(run, str) or not _RUN_RE.match(run):
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
