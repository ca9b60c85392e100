"""Paillier keys: size floor, pickle-free public-key bytes, ciphertext validation.

Keys here are 1024-bit INSECURE test keys (``allow_insecure=True``), for speed.
"""

from __future__ import annotations

import gmpy2
import pytest

from vfl.exceptions import KeyValidationError, ProtocolError
from vfl.secure import generate_keypair, key_fingerprint, public_key_from_bytes, public_key_to_bytes
from vfl.secure.keys import ciphertexts_from_bytes, ciphertexts_to_bytes, validate_ciphertext


@pytest.fixture(scope="module")
def insecure_test_keypair():
    return generate_keypair(1024, allow_insecure=True)


def test_generate_keypair_refuses_keys_below_2048_bits_without_opt_in():
    with pytest.raises(KeyValidationError, match="insecure"):
        generate_keypair(1024)
    with pytest.raises(KeyValidationError):
        generate_keypair(1001, allow_insecure=True)  # not a multiple of 8


def test_insecure_1024_bit_test_key_has_requested_size(insecure_test_keypair):
    pk, sk = insecure_test_keypair
    assert pk.n.bit_length() == 1024
    assert sk.p * sk.q == pk.n


def test_public_key_bytes_roundtrip_and_fingerprint(insecure_test_keypair):
    pk, _ = insecure_test_keypair
    data = public_key_to_bytes(pk)
    assert data.startswith(b"VFLPK1")
    back = public_key_from_bytes(data, min_bits=1024)
    assert back.n == pk.n and back == pk
    assert key_fingerprint(back) == key_fingerprint(pk)
    with pytest.raises(KeyValidationError, match="at least 2048"):
        public_key_from_bytes(data)  # default floor is 2048 bits


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: b"XXXXXX" + d[6:],                      # bad magic
        lambda d: d[:-1],                                 # length field mismatch
        lambda d: d[:10] + b"\x00" * (len(d) - 10),       # n has small factors / is 0-ish
        lambda d: d[:-1] + bytes([d[-1] & 0xFE]),         # even modulus
    ],
)
def test_malformed_public_key_bytes_are_refused(insecure_test_keypair, mutate):
    data = public_key_to_bytes(insecure_test_keypair[0])
    with pytest.raises(KeyValidationError):
        public_key_from_bytes(mutate(data), min_bits=8)


def test_perfect_square_modulus_is_refused():
    p = int(gmpy2.next_prime(2**600))
    n = p * p
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    with pytest.raises(KeyValidationError, match="square"):
        public_key_from_bytes(b"VFLPK1" + len(body).to_bytes(4, "big") + body, min_bits=8)


def test_validate_ciphertext_range_and_gcd(insecure_test_keypair):
    pk, sk = insecure_test_keypair
    good = pk.encrypt(5).ciphertext(be_secure=False)
    assert validate_ciphertext(pk, gmpy2.mpz(good)) == good
    for bad in (0, -1, pk.nsquare, pk.nsquare + 7, sk.p * 12345, sk.q):
        with pytest.raises(KeyValidationError):
            validate_ciphertext(pk, bad)
    with pytest.raises(KeyValidationError):
        validate_ciphertext(pk, "123")


@pytest.mark.parametrize("where", [0, 17, 39])
@pytest.mark.parametrize("factor", ["p", "q"])
def test_a_frame_with_one_non_unit_ciphertext_is_refused_by_the_batched_check(insecure_test_keypair, where, factor):
    """One gcd per frame (running product mod n): a single ciphertext sharing a factor with n, anywhere among 40
    valid ones, still refuses the whole frame with the per-ciphertext message; the valid frame passes unchanged."""
    pk, sk = insecure_test_keypair
    cts = [pk.encrypt(i).ciphertext(be_secure=False) for i in range(40)]
    assert ciphertexts_from_bytes(pk, ciphertexts_to_bytes(pk, cts), 40) == cts
    bad = list(cts)
    bad[where] = (sk.p if factor == "p" else sk.q) * (where + 3)
    with pytest.raises(KeyValidationError, match="shares a factor with n"):
        ciphertexts_from_bytes(pk, ciphertexts_to_bytes(pk, bad), 40)
    bad[where] = 0
    with pytest.raises(KeyValidationError, match="outside"):
        ciphertexts_from_bytes(pk, ciphertexts_to_bytes(pk, bad), 40)


def test_ciphertext_frames_roundtrip_and_refuse_wrong_length_or_other_key(insecure_test_keypair):
    pk, _ = insecure_test_keypair
    cts = [pk.encrypt(i).ciphertext() for i in range(3)]
    frame = ciphertexts_to_bytes(pk, cts)
    assert ciphertexts_from_bytes(pk, frame, 3) == cts
    with pytest.raises(ProtocolError, match="bytes"):
        ciphertexts_from_bytes(pk, frame[:-1], 3)
    other, _ = generate_keypair(512, allow_insecure=True)
    with pytest.raises(ProtocolError):
        ciphertexts_from_bytes(other, frame, 3)  # width differs for a 512-bit key


def test_oversized_public_key_is_refused():
    """A peer's key bounds the responder's work (ciphertexts are n^2-sized): moduli above MAX_KEY_BITS are refused."""
    from vfl.secure.keys import _SMALL_PRIMES

    n = (1 << (16384 + 8)) + 1  # MAX_KEY_BITS = 16384
    while any(n % p == 0 for p in _SMALL_PRIMES):  # passes every other check: odd, no small factor, not a square
        n += 2
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    with pytest.raises(KeyValidationError, match="more than"):
        public_key_from_bytes(b"VFLPK1" + len(body).to_bytes(4, "big") + body)
