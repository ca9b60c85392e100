"""ECDH private set intersection primitives: row-ID normalisation and commutative blinding on Curve25519.

Commutative blinding (Meadows 1986; Huberman, Franklin & Hogg 1999; the "DH-PSI" of De Cristofaro & Tsudik 2010):
with a hash ``H`` into a prime-order group and secret scalars ``k_1 ... k_K`` of K parties,

    blind_k(x) = [k] H(x),        reblind_k(P) = [k] P,        so   [k_1 k_2 ... k_K] H(x)

does not depend on the order in which the keys were applied. Two IDs are equal iff their fully blinded points are
equal (up to a collision of H, probability ~ n^2 2^-252); under the decisional Diffie-Hellman assumption in the
prime-order subgroup of Curve25519 (order ``L = 2^252 + ...``), with H modelled as a random oracle, a point blinded
by at least one key its viewer does not hold is indistinguishable from a random group element, so it reveals nothing
about the ID -- not even a plain hash of it. docs/psi.md ("Security of the Curve25519 ring") has the argument.

Everything is libsodium (through PyNaCl's bindings, no new dependency), composed, nothing home-made:

* ``H(x)``: ``r = SHA-512(DOMAIN || utf8(x))[:32]``, ``E = crypto_core_ed25519_from_uniform(r)`` -- Elligator 2
  (Bernstein, Hamburg, Krasnova & Lange 2013) onto edwards25519 with the cofactor cleared, so ``E`` lies in the
  prime-order subgroup (RFC 9380's ``encode_to_curve`` shape for edwards25519: one map, then ``[8]``) -- and its
  Montgomery u-coordinate ``u = (1 + y) / (1 - y) mod p`` (RFC 7748 section 4.1's birational map, the value
  libsodium's ``crypto_sign_ed25519_pk_to_curve25519`` returns; that function also re-checks that ``E`` is in the
  subgroup, which ``from_uniform`` guarantees, at 56 us per ID: :func:`self_test` checks both give the same u);
* ``[k] P``: X25519, ``crypto_scalarmult(k, u)`` (RFC 7748): the x-only Montgomery ladder with the clamped scalar
  ``c(k) = 8 k'``, which commutes (``c(k_1) c(k_2) = c(k_2) c(k_1)``), maps the subgroup to itself bijectively,
  and kills any small-order component an input may carry. libsodium refuses an input whose result is the neutral
  element (every small-order point) -> :class:`ProtocolError`; :func:`split_points` and :meth:`BlindingKey.reblind`
  also refuse non-canonical encodings (``u >= p``) and u-coordinates on the quadratic twist (a Legendre symbol), so
  a re-blinded list holds only points of the curve.

Eight lanes at once (optional, blinding only): where Intel's crypto_mb library is installed (``pip install
'vfl[psi-fast]'``, the ``ipp-crypto`` wheel) and the CPU has AVX-512 IFMA, :meth:`BlindingKey.blind` runs eight
X25519 ladders per call through :mod:`vfl.secure.x25519_mb` (``mbx_x25519_mb8``, the call SecretFlow's SPU uses),
bit-identical to libsodium's ``crypto_scalarmult`` on its own hash outputs (checked when it loads, and by the tests;
an all-zero result is refused here, since crypto_mb only flags it in a status word). :meth:`BlindingKey.reblind`
stays on libsodium: its points come from peers, and crypto_mb 2026.2.0 returns a wrong result for some valid,
canonical curve points (``u = p - d`` for every ``d`` from 1 to 1393 we tried, and ``u = 2^254 - 9``; measured
against libsodium and the RFC 7748 ladder, tests/secure/test_x25519_mb.py), so a hostile peer could make a party
compute a faulty multiple of its key; vfl does not hand a peer that oracle. Random points (the hash's outputs) never
hit it in our runs (0 mismatches in 4 * 10^4 random curve points). Without the library: libsodium as above.

Batched and parallel: IDs/points are cut into :data:`CHUNK`-sized pieces that run on a thread pool of
:func:`usable_cores` threads (or ``workers``); libsodium's calls through cffi release the GIL, so the threads run
on every core, the results are joined in input order, and the calling party's heartbeat thread keeps running.

Points travel as one byte string of concatenated 32-byte little-endian u-coordinates (:data:`POINT_BYTES`).

ID normalisation (:func:`normalise_id`, docs/psi.md): ``str(value)``, Unicode NFC, surrounding whitespace stripped
(``str.strip``), case-sensitive; an ID that is empty after this is refused, and so are duplicates after it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import nacl.bindings as sodium
import numpy as np

from vfl.data.id_column import MAX_ID_CHARS as _MAX_ID_CHARS
from vfl.exceptions import DataValidationError, ProtocolError
from vfl.secure import x25519_mb
from vfl.secure.bigint import invert, legendre, mpz

__all__ = ["POINT_BYTES", "MAX_ID_CHARS", "DOMAIN", "normalise_id", "normalise_ids", "BlindingKey", "split_points",
           "hash_to_group", "montgomery_u", "usable_cores", "fast_backend", "self_test"]

#: bytes of one point: the little-endian Montgomery u-coordinate of a Curve25519 point (RFC 7748), canonical (< p)
POINT_BYTES = 32
#: longest accepted ID after normalisation (vfl.data.id_column.MAX_ID_CHARS: it bounds a party's ID array too)
MAX_ID_CHARS = _MAX_ID_CHARS
#: IDs/points per task of the thread pool: libsodium releases the GIL, so a party's heartbeat thread runs while
#: 10^6 IDs are blinded; a task of 4096 IDs is ~0.2-0.4 s of one core, small enough to balance the threads
CHUNK = 4096
#: domain separation of H (RFC 9380 section 3.1's DST idea): a new DOMAIN gives a new, independent hash
DOMAIN = b"vfl.psi.v2:edwards25519:SHA-512:ELL2:NU:"
#: most threads a BlindingKey starts when ``workers`` is not given (as vfl.secure.fastmath.resolve_workers)
MAX_THREADS = 8

_P = 2**255 - 19                 # the field of Curve25519
_A = 486662                      # Montgomery coefficient: v^2 = u^3 + A u^2 + u
_Y_MASK = (1 << 255) - 1         # an edwards25519 encoding is y with the sign of x in bit 255


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS says, else ``os.cpu_count()``), at most
    :data:`MAX_THREADS`."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # pragma: no cover - non-Linux
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))


@functools.cache
def fast_backend() -> x25519_mb.MultiBuffer | None:
    """The eight-lane X25519 of :mod:`vfl.secure.x25519_mb` where it loads and checks out, else None (libsodium);
    looked up once per process."""
    return x25519_mb.load()


def hash_to_group(x: str) -> bytes:
    """``H(x)``: the u-coordinate of ``crypto_core_ed25519_from_uniform(SHA-512(DOMAIN || x)[:32])`` (module
    docstring), 32 bytes. ``x`` is an already normalised ID."""
    r = hashlib.sha512(DOMAIN + x.encode("utf-8")).digest()[:32]
    return montgomery_u(sodium.crypto_core_ed25519_from_uniform(r))


def montgomery_u(edwards: bytes) -> bytes:
    """The Montgomery u-coordinate ``(1 + y) / (1 - y) mod p`` of an edwards25519 point of the prime-order subgroup
    (RFC 7748 section 4.1), as 32 little-endian bytes: what ``crypto_sign_ed25519_pk_to_curve25519`` returns for it
    after its own subgroup check. Only for points this module computed; ValueError for the neutral element
    (``y = 1``: u is undefined) and for a non-canonical ``y >= p`` (libsodium never outputs one)."""
    y = int.from_bytes(edwards, "little") & _Y_MASK
    if y >= _P:
        raise ValueError("montgomery_u: non-canonical edwards25519 encoding (y >= p)")
    if y == 1:
        raise ValueError("montgomery_u: the neutral element has no Montgomery u-coordinate (y = 1)")
    ym = mpz(y)
    return int((1 + ym) * invert(1 - ym, _P) % _P).to_bytes(POINT_BYTES, "little")


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
    """Concatenated points -> list of 32-byte points; ProtocolError for a wrong length or a non-canonical
    encoding (a u-coordinate ``>= p``, including any with bit 255 set: X25519 would silently reduce it)."""
    if len(blob) % POINT_BYTES:
        raise ProtocolError(f"PSI point list of {len(blob)} bytes is not a multiple of {POINT_BYTES}")
    n = len(blob) // POINT_BYTES
    if count is not None and n != count:
        raise ProtocolError(f"PSI point list holds {n} points, expected {count}")
    if n:
        raw = np.frombuffer(blob, dtype=np.uint8).reshape(n, POINT_BYTES)
        # u >= p = 2^255 - 19 <=> bit 255 set, or bytes 31..1 = 7f ff .. ff and byte 0 >= 0xed
        high = raw[:, 31] >= 0x80
        top = (raw[:, 31] == 0x7F) & (raw[:, 1:31] == 0xFF).all(axis=1) & (raw[:, 0] >= 0xED)
        if bool((high | top).any()):
            raise ProtocolError("PSI point list contains a non-canonical Curve25519 point encoding")
    return [blob[i:i + POINT_BYTES] for i in range(0, len(blob), POINT_BYTES)]


def _on_curve(u_bytes: bytes) -> bool:
    """``u^3 + A u^2 + u`` is a square mod p: u is the u-coordinate of a Curve25519 point, not of its twist."""
    u = mpz(int.from_bytes(u_bytes, "little"))
    return legendre((u * u + _A * u + 1) * u % _P, _P) != -1


class BlindingKey:
    """One party's secret PSI scalar ``k`` (32 bytes from the OS CSPRNG per run, never leaves the party).

    ``blind(ids)`` = concatenated ``[k] H(x)`` in input order; ``reblind(blob)`` = concatenated ``[k] P`` in order.
    ``workers``: threads for lists longer than one :data:`CHUNK` (default :func:`usable_cores`).
    ``backend``: the eight-lane X25519 for :meth:`blind`, ``None`` for libsodium, ``"auto"`` (default) for
    :func:`fast_backend`; the results are the same bytes either way. :meth:`reblind` always uses libsodium.
    """

    def __init__(self, key_bytes: bytes | None = None, *, workers: int | None = None,
                 backend: x25519_mb.MultiBuffer | None | str = "auto") -> None:
        if key_bytes is None:
            key_bytes = secrets.token_bytes(sodium.crypto_scalarmult_SCALARBYTES)
        if not isinstance(key_bytes, bytes) or len(key_bytes) != sodium.crypto_scalarmult_SCALARBYTES:
            raise ValueError("a PSI key is 32 bytes")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a positive int or None, got {workers!r}")
        if isinstance(backend, str) and backend != "auto":
            raise ValueError(f"backend must be a MultiBuffer, None or 'auto', got {backend!r}")
        self._key = key_bytes
        self.workers = usable_cores() if workers is None else workers
        self.backend: x25519_mb.MultiBuffer | None = fast_backend() if isinstance(backend, str) else backend

    def _mult(self, u: bytes) -> bytes:
        try:
            return sodium.crypto_scalarmult(self._key, u)
        except RuntimeError:   # libsodium: the result is the neutral element, i.e. u has small order
            raise ProtocolError("PSI point list contains a point of small order") from None

    def _mult_all(self, points: Sequence[bytes], *, own: bool) -> bytes:
        """``[k] P`` for every point, concatenated in order: libsodium one by one, or -- for ``own`` points (this
        party's hash outputs, never a peer's: module docstring) -- eight lanes per call, with the all-zero result
        refused here as libsodium refuses it."""
        if self.backend is None or not own:
            return b"".join(self._mult(p) for p in points)
        out, status = self.backend.scalarmult(self._key, b"".join(points))
        if out and bool((np.frombuffer(out, dtype=np.uint8).reshape(-1, POINT_BYTES) == 0).all(axis=1).any()):
            raise ProtocolError("PSI point list contains a point of small order")
        if status != 0:
            raise RuntimeError(f"crypto_mb's mbx_x25519_mb8 reported status {status:#x} on valid points")
        return out

    def _blind_chunk(self, ids: Sequence[str]) -> bytes:
        return self._mult_all([hash_to_group(x) for x in ids], own=True)

    def _reblind_chunk(self, points: Sequence[bytes]) -> bytes:
        if not all(_on_curve(p) for p in points):
            raise ProtocolError("PSI point list contains a point that is not on Curve25519 (a twist point)")
        return self._mult_all(points, own=False)

    def _run(self, fn: Callable[[Any], bytes], items: Sequence[Any]) -> bytes:
        """``fn`` over CHUNK-sized pieces of ``items``, on the thread pool when there is more than one piece;
        results joined in input order."""
        pieces = [items[i:i + CHUNK] for i in range(0, len(items), CHUNK)]
        if len(pieces) <= 1 or self.workers == 1:
            return b"".join(fn(p) for p in pieces)
        with ThreadPoolExecutor(max_workers=min(self.workers, len(pieces)), thread_name_prefix="vfl-psi") as pool:
            return b"".join(pool.map(fn, pieces))

    def blind(self, ids: Sequence[str]) -> bytes:
        """``[k] H(x)`` for every (already normalised) ID, concatenated in input order."""
        return self._run(self._blind_chunk, list(ids))

    def reblind(self, blob: bytes, count: int | None = None) -> bytes:
        """``[k] P`` for every point of ``blob`` (validated: length, canonical, on the curve, not of small order),
        in input order; :class:`ProtocolError` for the first invalid point (nothing is returned)."""
        return self._run(self._reblind_chunk, split_points(blob, count))


def self_test() -> None:
    """Check what this module relies on, on random IDs: input order kept (batched = one by one, threads or not),
    the keys commute, distinct IDs give distinct points, the u-coordinate equals libsodium's own conversion
    (``crypto_sign_ed25519_pk_to_curve25519``), and the eight-lane backend (where in use) gives libsodium's bytes.
    Raises RuntimeError otherwise (alignment would silently be wrong)."""
    ids = [secrets.token_hex(8) for _ in range(16)]
    a, b = BlindingKey(workers=1), BlindingKey()
    ab = b.reblind(a.blind(ids))
    ba = a.reblind(b.blind(ids))
    one_by_one = b"".join(a.blind([x]) for x in ids)
    r = hashlib.sha512(DOMAIN + ids[0].encode()).digest()[:32]
    converted = sodium.crypto_sign_ed25519_pk_to_curve25519(sodium.crypto_core_ed25519_from_uniform(r))
    plain = BlindingKey(a._key, workers=1, backend=None)
    if (ab != ba or a.blind(ids) != one_by_one or len(set(split_points(ab))) != len(ids)
            or converted != hash_to_group(ids[0]) or plain.blind(ids) != a.blind(ids)):
        raise RuntimeError("libsodium does not behave as vfl.secure.psi expects (order, commutativity or the map)")
