"""ECDH private set intersection primitives: row-ID normalisation and commutative blinding on P-256.

Commutative blinding (Meadows 1986; Huberman, Franklin & Hogg 1999; the "DH-PSI" of De Cristofaro & Tsudik 2010):
with a hash to the curve ``H`` and secret scalars ``k_1 ... k_K`` of K parties,

    blind_k(x) = H(x)^k,        reblind_k(P) = P^k,        so   H(x)^(k_1 k_2 ... k_K)

does not depend on the order in which the keys were applied. Two IDs are equal iff their fully blinded points are
equal (up to a hash collision, probability ~ n^2 2^-256); under the decisional Diffie-Hellman assumption on P-256 in
the random-oracle model, a point blinded by at least one key its viewer does not hold is indistinguishable from a
random point, so it reveals nothing about the ID -- not even a plain hash of it.

The elliptic-curve work is done by openmined-psi (``private_set_intersection``, C++ on BoringSSL/OpenSSL P-256,
hash-to-curve by try-and-increment over SHA-256), reused as a batch primitive through its own objects created from
one key: ``client.CreateRequest(ids)`` is ``[H(x)^k for x in ids]`` in input order, and
``server.ProcessRequest(points)`` with ``reveal_intersection=True`` is ``[P^k for P in points]`` in input order (the
library's own ECDH-PSI is exactly these two steps plus an unblinding). :func:`self_test` checks both properties and
commutativity at run time; tests/secure/test_secure_psi.py checks them too. Why this library and not ristretto255 via
libsodium: docs/psi.md (measured).

Points travel as one byte string of concatenated 33-byte compressed SEC1 points (:data:`POINT_BYTES`).

ID normalisation (:func:`normalise_id`, docs/psi.md): ``str(value)``, Unicode NFC, surrounding whitespace stripped
(``str.strip``), case-sensitive; an ID that is empty after this is refused, and so are duplicates after it.
"""

from __future__ import annotations

import secrets
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from vfl.exceptions import DataValidationError, ProtocolError

__all__ = ["POINT_BYTES", "MAX_ID_CHARS", "normalise_id", "normalise_ids", "BlindingKey", "split_points",
           "self_test"]

#: bytes of one compressed P-256 point (0x02/0x03 prefix + 32-byte x coordinate)
POINT_BYTES = 33
#: longest accepted ID after normalisation (guards the hash-to-curve input; real IDs are far shorter)
MAX_ID_CHARS = 4096
#: IDs/points per library call: the C++ holds the GIL for a whole call, so long lists are cut into ~1 s pieces and a
#: party's heartbeat thread still runs while 10^6 IDs are blinded
CHUNK = 8192


def _library() -> Any:
    import private_set_intersection.python as psi_lib  # deferred: a compiled extension, only needed with --id

    return psi_lib


def normalise_id(value: Any) -> str:
    """One row ID as the string that is intersected: ``unicodedata.normalize("NFC", str(value)).strip()``.

    Case-sensitive ("AB12" and "ab12" are different people); NFC makes the two Unicode spellings of an accented
    letter equal; leading/trailing whitespace (any Unicode space, tabs, newlines) is dropped, inner whitespace is
    kept. ``None`` and float NaN (a missing cell in pandas) are missing, as is an ID that is empty after stripping.
    Raises :class:`DataValidationError` for a missing ID.
    """
    if value is None or (isinstance(value, float) and value != value):
        raise DataValidationError("missing row ID")
    text = unicodedata.normalize("NFC", str(value)).strip()
    if not text:
        raise DataValidationError("empty row ID")
    if len(text) > MAX_ID_CHARS:
        raise DataValidationError(f"row ID longer than {MAX_ID_CHARS} characters")
    return text


def normalise_ids(values: Iterable[Any], what: str = "row-ID column") -> list[str]:
    """Normalise every ID (:func:`normalise_id`) and refuse missing, empty or duplicate ones.

    The error names the first offending row (1-based data row) but never quotes an ID: it may travel to the
    coordinator as the party's one-line failure reason.
    """
    out: list[str] = []
    seen: dict[str, int] = {}
    for row, value in enumerate(values, start=1):
        try:
            text = normalise_id(value)
        except DataValidationError as exc:
            raise DataValidationError(f"{what}: {exc} in data row {row}") from None
        first = seen.setdefault(text, row)
        if first != row:
            raise DataValidationError(f"{what}: duplicate row ID in data rows {first} and {row} "
                                      "(after normalisation: Unicode NFC, surrounding whitespace stripped)")
        out.append(text)
    if not out:
        raise DataValidationError(f"{what}: no rows")
    return out


def split_points(blob: bytes, count: int | None = None) -> list[bytes]:
    """Concatenated points -> list of 33-byte points; ProtocolError for a wrong length or prefix."""
    if len(blob) % POINT_BYTES:
        raise ProtocolError(f"PSI point list of {len(blob)} bytes is not a multiple of {POINT_BYTES}")
    n = len(blob) // POINT_BYTES
    if count is not None and n != count:
        raise ProtocolError(f"PSI point list holds {n} points, expected {count}")
    points = [blob[i:i + POINT_BYTES] for i in range(0, len(blob), POINT_BYTES)]
    if any(p[0] not in (2, 3) for p in points):
        raise ProtocolError("PSI point list contains a point that is not a compressed P-256 point")
    return points


class BlindingKey:
    """One party's secret PSI scalar ``k`` (fresh from the library's CSPRNG per run, never leaves the party).

    ``blind(ids)`` = concatenated ``H(x)^k`` in input order; ``reblind(blob)`` = concatenated ``P^k`` in order.
    """

    def __init__(self, key_bytes: bytes | None = None) -> None:
        lib = _library()
        if key_bytes is None:
            # the library draws the scalar from BoringSSL/OpenSSL's CSPRNG; we only reuse it for both objects
            key_bytes = lib.client.CreateWithNewKey(True).GetPrivateKeyBytes()
        self._client = lib.client.CreateFromKey(key_bytes, True)
        self._server = lib.server.CreateFromKey(key_bytes, True)
        self._lib = lib

    def blind(self, ids: Sequence[str]) -> bytes:
        """``H(x)^k`` for every (already normalised) ID, concatenated in input order."""
        ids = list(ids)
        return b"".join(p for i in range(0, len(ids), CHUNK)
                        for p in self._client.CreateRequest(ids[i:i + CHUNK]).encrypted_elements)

    def reblind(self, blob: bytes, count: int | None = None) -> bytes:
        """``P^k`` for every point of ``blob`` (validated: length, prefix, on the curve), in input order."""
        points = split_points(blob, count)
        pieces: list[bytes] = []
        for i in range(0, len(points), CHUNK):
            request = self._lib.Request()
            request.reveal_intersection = True   # order-preserving response (the library sorts it otherwise)
            request.encrypted_elements.extend(points[i:i + CHUNK])
            try:
                response = self._server.ProcessRequest(request)
            except RuntimeError:
                raise ProtocolError("PSI point list contains a byte string that is not a P-256 point") from None
            pieces.extend(response.encrypted_elements)
        out = b"".join(pieces)
        if len(out) != len(blob):
            raise ProtocolError("PSI library returned an unexpected number of points")
        return out


def self_test() -> None:
    """Check the two library properties this module relies on (input order kept; keys commute) on random IDs.

    Raises RuntimeError if an openmined-psi release ever changes them (then alignment would silently be wrong).
    """
    ids = [secrets.token_hex(8) for _ in range(16)]
    a, b = BlindingKey(), BlindingKey()
    ab = b.reblind(a.blind(ids))
    ba = a.reblind(b.blind(ids))
    one_by_one = b"".join(a.blind([x]) for x in ids)
    if ab != ba or a.blind(ids) != one_by_one or len(set(split_points(ab))) != len(ids):
        raise RuntimeError("openmined-psi does not behave as vfl.secure.psi expects (order or commutativity)")
