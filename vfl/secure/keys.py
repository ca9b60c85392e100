"""Paillier keys: generation with a size floor, pickle-free public-key bytes, ciphertext validation.

Paillier (1999): public key ``n = p q``, plaintexts ``Z_n``, ciphertexts ``Z*_{n^2}``, with ``g = n + 1``
so ``Enc(m; r) = (1 + m n) r^n mod n^2``. Keys are ``phe`` key objects so the rest of the ecosystem
(and the naive baseline) can use them; the fast arithmetic lives in :mod:`vfl.secure.fastmath`.

Everything received from a peer goes through :func:`public_key_from_bytes` or
:func:`validate_ciphertext`; a ciphertext outside ``(0, n^2)`` or sharing a factor with ``n`` is
refused (a non-unit would let a malicious peer probe the factorisation through decryption).
"""

from __future__ import annotations

import hashlib
import math
import operator

from phe import paillier

from vfl.exceptions import KeyValidationError, ProtocolError
from vfl.secure.bigint import gcd, mpz

MIN_KEY_BITS = 2048
MAX_KEY_BITS = 16384
"""Largest modulus accepted from a peer: bounds the work a received key can make a responder do."""
"""Smallest modulus accepted without ``allow_insecure`` (NIST SP 800-57: 2048-bit RSA-equivalent ~ 112 bits)."""

_PK_MAGIC = b"VFLPK1"
_SMALL_PRIMES = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)


def generate_keypair(
    bits: int = MIN_KEY_BITS, *, allow_insecure: bool = False
) -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    """Generate a Paillier key pair with an ``bits``-bit modulus.

    Refuses ``bits < 2048`` with :class:`KeyValidationError` unless ``allow_insecure=True``
    (only the fast unit tests do that, with 1024-bit keys they name as insecure).
    """
    if not isinstance(bits, int) or bits < 256 or bits % 8:
        raise KeyValidationError(f"key size must be a multiple of 8 and >= 256 bits, got {bits!r}")
    if bits < MIN_KEY_BITS and not allow_insecure:
        raise KeyValidationError(
            f"{bits}-bit Paillier keys are insecure; use >= {MIN_KEY_BITS} (or allow_insecure=True in tests)"
        )
    public_key, private_key = paillier.generate_paillier_keypair(n_length=bits)
    return public_key, private_key


def public_key_to_bytes(public_key: paillier.PaillierPublicKey) -> bytes:
    """Serialise ``n`` as ``b"VFLPK1" || len (4 bytes, big-endian) || n (big-endian)``: no pickle."""
    n = int(public_key.n)
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return _PK_MAGIC + len(body).to_bytes(4, "big") + body


def public_key_from_bytes(data: bytes, *, min_bits: int = MIN_KEY_BITS) -> paillier.PaillierPublicKey:
    """Parse and validate bytes from :func:`public_key_to_bytes`.

    Checks: magic and length, ``n`` odd, between ``min_bits`` and :data:`MAX_KEY_BITS` bits, no small
    prime factor, not a perfect square (``n = p q`` with ``p != q``). Raises :class:`KeyValidationError`.
    ``g = n + 1`` is implied (phe's convention; nothing else is accepted on the wire).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise KeyValidationError("public key must be bytes")
    data = bytes(data)
    head = len(_PK_MAGIC) + 4
    if len(data) < head or data[: len(_PK_MAGIC)] != _PK_MAGIC:
        raise KeyValidationError("public key bytes do not start with the VFLPK1 header")
    length = int.from_bytes(data[len(_PK_MAGIC) : head], "big")
    if length != len(data) - head or length == 0:
        raise KeyValidationError("public key length field does not match the payload")
    if length * 8 > MAX_KEY_BITS:
        raise KeyValidationError(f"public key has more than {MAX_KEY_BITS} bits")
    n = int.from_bytes(data[head:], "big")
    if n.bit_length() < min_bits:
        raise KeyValidationError(f"public key has {n.bit_length()} bits, at least {min_bits} required")
    if n % 2 == 0 or any(n % p == 0 for p in _SMALL_PRIMES):
        raise KeyValidationError("public key modulus has a small prime factor")
    if math.isqrt(n) ** 2 == n:
        raise KeyValidationError("public key modulus is a perfect square")
    return paillier.PaillierPublicKey(n)


def key_fingerprint(public_key: paillier.PaillierPublicKey) -> str:
    """SHA-256 of the serialised key (hex): binds every message to the key it was made for."""
    return hashlib.sha256(public_key_to_bytes(public_key)).hexdigest()


def validate_ciphertext(public_key: paillier.PaillierPublicKey, c: int) -> int:
    """Check ``0 < c < n^2`` and ``gcd(c, n) = 1``; return ``c`` as a Python int or raise KeyValidationError."""
    if isinstance(c, bool) or not hasattr(c, "__index__"):
        raise KeyValidationError("ciphertext is not an integer")
    c = operator.index(c)  # int or gmpy2.mpz
    if not 0 < c < public_key.nsquare:
        raise KeyValidationError("ciphertext is outside (0, n^2): it was not made for this key")
    if gcd(mpz(c), mpz(public_key.n)) != 1:
        raise KeyValidationError("ciphertext shares a factor with n: not a valid Paillier ciphertext")
    return c


def ciphertext_byte_length(public_key: paillier.PaillierPublicKey) -> int:
    """Fixed width of one ciphertext on the wire: bytes of ``n^2``."""
    return (int(public_key.nsquare).bit_length() + 7) // 8


def ciphertexts_to_bytes(public_key: paillier.PaillierPublicKey, ciphertexts: list[int]) -> bytes:
    """Concatenate ciphertexts as fixed-width big-endian integers (one frame, no per-item framing)."""
    width = ciphertext_byte_length(public_key)
    return b"".join(int(c).to_bytes(width, "big") for c in ciphertexts)


def ciphertexts_from_bytes(public_key: paillier.PaillierPublicKey, frame: bytes, count: int) -> list[int]:
    """Inverse of :func:`ciphertexts_to_bytes`, validating the length and every ciphertext."""
    width = ciphertext_byte_length(public_key)
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"ciphertext frame must be bytes, got {type(frame).__name__}")
    frame = bytes(frame)
    if len(frame) != count * width:
        raise ProtocolError(f"ciphertext frame has {len(frame)} bytes, expected {count} x {width}")
    return _validated_batch(public_key, [int.from_bytes(frame[i * width : (i + 1) * width], "big")
                                         for i in range(count)])


def _validated_batch(public_key: paillier.PaillierPublicKey, cts: list[int]) -> list[int]:
    """Every ``c`` in ``(0, n^2)`` and a unit modulo ``n``, with one gcd per frame (issue 25).

    ``gcd(prod_i c_i mod n, n) = 1`` exactly when every ``c_i`` is a unit modulo ``n`` (a product of residues is a unit
    iff each factor is, since ``Z_n^*`` is the set of residues prime to both factors of ``n``), so a running product
    modulo ``n`` (one multiplication per ciphertext) and one gcd replace a gcd per ciphertext. When the batch fails,
    each ciphertext is checked on its own so that the error is the same as :func:`validate_ciphertext`'s.
    """
    n, n2 = mpz(public_key.n), public_key.nsquare
    acc = mpz(1)
    for c in cts:
        if not 0 < c < n2:
            raise KeyValidationError("ciphertext is outside (0, n^2): it was not made for this key")
        acc = acc * c % n
    if gcd(acc, n) != 1:
        for c in cts:
            validate_ciphertext(public_key, c)
    return cts
