"""Review of the AVX-512 IFMA lanes (vfl/secure/_ifma52.h): adversarial moduli, bases and exponents against pow.

Invariant: the eight-lane almost-Montgomery products (radix 2^52, nd digits with 4 m < 2^(52 nd), values kept
below 2m, reduced once when converted back to GMP limbs) give the bytes of GMP's loop and of Python's ``pow`` for
every odd modulus and every base below it. Attacker: a hostile co-party chooses the bases (ciphertexts) of the
responder's buckets, so bases 0, 1, m - 1, m - d for small d, 2^k - c and all-ones digit patterns are exercised, on
moduli at the digit-count boundaries (52 nd - 2 and 52 nd - 1 bits, where 4 m < R' is tightest or just gained a
digit), moduli of all-ones digits, and long chains of products into one bucket (the value must stay below 2m with no
final subtraction). Bases not below m are refused by both paths. crt_encrypt's lanes get the same edge moduli
(p^2 just below a digit boundary) and edge table bases. Skipped without IFMA (the GMP path is then the only one).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from vfl.secure import native

HAVE_IFMA = native.fastloops is not None and bool(getattr(native.fastloops, "IFMA", 0))
pytestmark = pytest.mark.skipif(not HAVE_IFMA, reason=f"no AVX-512 IFMA C loops: {native.IMPLEMENTATION}")


def _edge_moduli() -> list[int]:
    out = [3, 5, (1 << 52) - 1, (1 << 52) + 1]
    for k in (1, 2, 3, 20, 79, 80):
        top = 52 * k - 2                                    # 4 m < 2^(52 k) is tightest here
        out += [(1 << top) - 1, (1 << top) - 3, (1 << (top - 1)) + 1, (1 << (top + 1)) - 1, (1 << (top + 1)) + 1]
        out += [(1 << (top + 2)) - 1, (1 << (top + 2)) - 3, (1 << (top + 1)) + 3]   # 52 k bits: one digit more
    out += [(1 << 4096) - 1, (1 << 4096) - 189, (1 << 2048) - 159]
    return sorted({m for m in out if m % 2 and m > 2})


def _edge_bases(m: int, rng: random.Random) -> list[int]:
    bits = m.bit_length()
    cands = [0, 1, 2, m - 1, m - 2, m - 3, m - 5, m - (1 << 52) + 1, m >> 1, (m >> 1) + 1]
    cands += [(1 << k) - 1 for k in (51, 52, 53, 104, bits - 1)] + [(1 << k) - c for k in (bits - 1,) for c in (1, 3)]
    cands += [sum(((1 << 52) - 1) << (52 * j) for j in range(0, bits // 52, 2)) % m]   # alternating all-ones digits
    cands += [rng.randrange(m) for _ in range(6)]
    return [b % m for b in cands if b >= 0]


def _products(m: int, bases: list[int], exps: np.ndarray, simd: bool, window: int, bits: int) -> list[int]:
    width = (m.bit_length() + 7) // 8 + 1                  # one leading zero byte: widths above the modulus' bytes
    acc = native.CBucketAccumulator(exps.shape[1], bits, window, m, simd=simd)
    assert acc.simd == simd
    frame = b"".join(b.to_bytes(width, "big") for b in bases)
    half = len(bases) // 2
    acc.add_frame(frame[:half * width], width, 1, exps[:half])
    acc.add_frame(frame[half * width:], width, 1, exps[half:])
    return [int(acc.result(p)) for p in range(exps.shape[1])]


@pytest.mark.parametrize("m", _edge_moduli(), ids=lambda m: f"{m.bit_length()}b-{m % 1000}")
def test_ifma_bucket_products_equal_pow_on_edge_moduli_and_hostile_bases(m):
    rng = random.Random(m % (1 << 61))
    bases = _edge_bases(m, rng)
    bases = bases * 3                                       # each base three times: chains into the same buckets
    bits, window = 12, 4
    cols = [np.full(len(bases), (1 << bits) - 1, dtype=np.uint64),        # every digit at its maximum
            np.full(len(bases), 1, dtype=np.uint64),                      # one bucket takes every base
            np.array([rng.getrandbits(bits) for _ in bases], dtype=np.uint64),
            np.array([(1 << bits) - 1 if i % 2 else 0 for i in range(len(bases))], dtype=np.uint64)]
    exps = np.stack(cols, axis=1)
    want = []
    for k in range(exps.shape[1]):
        v = 1
        for b, e in zip(bases, exps[:, k], strict=True):
            v = v * pow(b, int(e), m) % m
        want.append(v)
    assert _products(m, bases, exps, True, window, bits) == want
    assert _products(m, bases, exps, False, window, bits) == want


@pytest.mark.parametrize("m", [(1 << 102) - 1, (1 << 4094) - 1, (1 << 4095) + 1])
def test_a_long_chain_into_one_bucket_stays_exact(m):
    """1000 products into one bucket (every exponent 1): the almost-Montgomery value must stay below 2m."""
    bases = [m - 1 - (i % 7) for i in range(1000)]
    exps = np.ones((len(bases), 8), dtype=np.uint64)         # eight columns: eight lanes busy, same chain in each
    want = 1
    for b in bases:
        want = want * b % m
    assert _products(m, bases, exps, True, 4, 4) == [want] * 8


@pytest.mark.parametrize("simd", [True, False])
@pytest.mark.parametrize("hostile", ["m", "m+1", "all-ones"])
def test_a_base_not_below_the_modulus_is_refused_by_both_paths(simd, hostile):
    m = (1 << 1022) - 3
    width = 129
    bad = {"m": m, "m+1": m + 1, "all-ones": (1 << (8 * width)) - 1}[hostile]
    acc = native.CBucketAccumulator(8, 8, 4, m, simd=simd)
    frame = b"".join(b.to_bytes(width, "big") for b in [5, bad, 7])
    with pytest.raises(ValueError, match="not below the modulus"):
        acc.add_frame(frame, width, 1, np.ones((3, 8), dtype=np.uint64))
    acc.add_frame((5).to_bytes(width, "big"), width, 1, np.full((1, 8), 3, dtype=np.uint64))   # still usable
    assert [int(acc.result(p)) for p in range(8)] == [125] * 8


def _coprime_pairs() -> list[tuple[int, int]]:
    out = []
    for k in (2, 20, 40):                                   # p^2 of 52 k - 2 bits (tightest) and of 52 k - 1 bits
        out.append(((1 << (26 * k - 1)) - 1, (1 << (26 * k - 1)) + 1))
        out.append(((1 << (26 * k - 1)) - 3, (1 << (26 * k - 1)) - 5))
    return out


@pytest.mark.parametrize(("p", "q"), _coprime_pairs(), ids=lambda v: f"{v.bit_length()}b")
def test_crt_encrypt_lanes_equal_pow_on_edge_moduli_and_table_bases(monkeypatch, p, q):
    import math

    assert math.gcd(p, q) == 1
    n, p2, q2 = p * q, p * p, q * q
    n2 = n * n
    inv = pow(p2, -1, q2)
    rng = random.Random(n % 1000003)
    width = (n2.bit_length() + 7) // 8
    for hs in (n2 - 1, n2 - 2, (1 << (n2.bit_length() - 1)) - 1, rng.randrange(2, n2)):
        alphas = [0, (1 << 64) - 1, 1, 2, (1 << 63), rng.getrandbits(64), rng.getrandbits(64), 3] * 2 + [5]
        plains = [n - 1, 0, 1, n - 2] + [rng.randrange(n) for _ in range(13)]

        def tables(hs=hs):
            return (native.CFixedBaseTable(hs % p2, p2, 64, 5), native.CFixedBaseTable(hs % q2, q2, 64, 5))

        monkeypatch.delenv("VFL_NO_IFMA", raising=False)
        ifma = native.crt_encrypt(*tables(), plains, alphas, n, inv, width)
        monkeypatch.setenv("VFL_NO_IFMA", "1")
        gmp = native.crt_encrypt(*tables(), plains, alphas, n, inv, width)
        want = b"".join(((1 + m * n) * pow(hs, a, n2) % n2).to_bytes(width, "big")
                        for m, a in zip(plains, alphas, strict=True))
        assert ifma == gmp == want


def test_the_largest_modulus_of_ifma_max_digits_is_exact_and_one_bit_more_is_refused():
    """nd = IFMA_MAX_DIGITS = 1000 (51998 bits): the unnormalised digit sums stay below 2^64 at the largest size."""
    m = (1 << 51998) - 1
    rng = random.Random(7)
    bases = [m - 1, m - 2, rng.randrange(m), (1 << 51997) + 1] * 2
    exps = np.array([[1] * 8, [3] * 8, [2] * 8, [1] * 8] * 2, dtype=np.uint64)
    want = 1
    for b, e in zip(bases, exps[:, 0], strict=True):
        want = want * pow(b, int(e), m) % m
    assert _products(m, bases, exps, True, 2, 2) == [want] * 8
    with pytest.raises(ValueError, match="IFMA"):
        native.CBucketAccumulator(8, 2, 2, (1 << 51999) - 1, simd=True)
    assert not native.CBucketAccumulator(8, 2, 2, (1 << 51999) - 1).simd
