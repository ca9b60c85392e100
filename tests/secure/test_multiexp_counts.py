"""Exact multiplication counts of the responder's multi-exponentiation methods and the sorted-exponent method
(issue 34, vfl.secure.multiexp_counts): values identical to the bucket method's on real Paillier ciphertexts, counts
equal to what the Python loops perform, and the comparison the floor of benchmarks/secure_products.py rests on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.secure import generate_keypair, native
from vfl.secure.encoding import encode_offset
from vfl.secure.fastmath import Encrypter, _multiexp_python, mpz, multiexp, multiexp_cost
from vfl.secure.multiexp_counts import (
    best_bucket_mults,
    bucket_mults,
    multi_output_counts,
    multiexp_sorted,
    pippenger_bound,
    sorted_gaps,
    sorted_mults,
)

P = 24


@pytest.fixture(scope="module")
def ciphertexts() -> tuple[list, int, np.ndarray]:
    """300 real ciphertexts under a small key (tests only) and the encoded exponents of three responder columns."""
    pk, sk = generate_keypair(512, allow_insecure=True)
    enc = Encrypter(pk.n, p=sk.p, q=sk.q, randomness="short-exponent")
    rng = np.random.default_rng(340)
    cts = [enc.encrypt(int(m)) for m in rng.integers(0, 2**40, 300)]
    E = np.asarray(encode_offset(rng.uniform(-1, 1, (300, 3)), P, 1.0)[0], dtype=np.int64)
    return cts, int(pk.nsquare), E


def _reference(bases: list, exponents: list[int], modulus: int) -> int:
    out = 1
    for b, e in zip(bases, exponents, strict=True):
        out = out * pow(int(b), e, modulus) % modulus
    return out


def test_the_sorted_method_gives_the_bucket_methods_product_on_real_ciphertexts(ciphertexts) -> None:
    cts, n2, E = ciphertexts
    for k in range(E.shape[1]):
        e = [int(x) for x in E[:, k]]
        value, mults = multiexp_sorted(cts, e, n2)
        assert int(value) == int(multiexp(cts, e, mpz(n2))[0]) == _reference(cts, e, n2)
        assert mults == sorted_mults(E[:, k])


@pytest.mark.skipif(native.fastloops is None, reason="the C loops are not built")
def test_the_sorted_method_matches_the_c_loops_too(ciphertexts) -> None:
    cts, n2, E = ciphertexts
    e = [int(x) for x in E[:, 0]]
    assert int(multiexp_sorted(cts, e, n2)[0]) == int(native.c_multiexp(cts, e, mpz(n2), 6, 26)[0])


def test_bucket_counts_are_the_multiplications_the_python_loops_perform(ciphertexts) -> None:
    cts, n2, E = ciphertexts
    e = [int(x) for x in E[:, 1]]
    bits = int(E[:, 1].max()).bit_length()
    for window in (1, 4, 7, 13):
        value, mults = _multiexp_python(cts, e, mpz(n2), window, bits)
        assert int(value) == _reference(cts, e, n2)
        assert mults == bucket_mults(E[:, 1], window)


@pytest.mark.parametrize("exponents", [[0, 0, 0], [5], [0, 3, 0], [7, 7, 7, 1], [1, 2, 3, 4, 5, 6, 7, 8]])
def test_edge_cases_zero_exponents_ties_and_single_bases(exponents: list[int]) -> None:
    modulus = 1_000_003 * 999_983
    bases = [mpz(1234567 + 7919 * i) for i in range(len(exponents))]
    value, mults = multiexp_sorted(bases, exponents, modulus)
    assert int(value) == _reference(bases, exponents, modulus)
    assert mults == sorted_mults(exponents)
    order, gaps = sorted_gaps(exponents)
    assert int(gaps.sum()) == max(exponents)   # the gaps telescope to the largest exponent
    assert sorted(order.tolist()) == [i for i, e in enumerate(exponents) if e]


def test_negative_or_mismatched_exponents_are_refused() -> None:
    with pytest.raises(ValueError):
        bucket_mults([1, -2], 3)
    with pytest.raises(ValueError):
        multiexp_sorted([mpz(2), mpz(3)], [1], 101)


@pytest.mark.parametrize("seed", [1, 2])
def test_sorted_exponents_need_fewer_multiplications_than_any_bucket_window_at_ten_thousand_rows(seed: int) -> None:
    """The comparison the floor rests on, on two disjoint seeds: at 10^4 encoded 26-bit exponents the sorted method
    (about 1 + (b - lg n) / c multiplications per row) beats every bucket window (about b / c with c < lg n), and
    Pippenger's asymptotic H / lg H lies far below both: it is not a count any of these methods reaches."""
    rng = np.random.default_rng(seed)
    E = np.asarray(encode_offset(rng.uniform(-1, 1, (10_000, 1)), P, 1.0)[0], dtype=np.int64)[:, 0]
    best, _ = best_bucket_mults(E)
    assert sorted_mults(E) < best <= multiexp_cost(10_000, 26)
    assert pippenger_bound(10_000, 10, 26) * 10_000 < 0.5 * sorted_mults(E)


def test_multi_output_counts_take_the_best_method_per_column() -> None:
    rng = np.random.default_rng(3)
    E = np.column_stack([rng.integers(0, 2**26, 4000), rng.integers(0, 2**6, 4000)])   # a wide and a narrow column
    counts = multi_output_counts(E, 9)
    per_col = [min(best_bucket_mults(E[:, k])[0], sorted_mults(E[:, k])) for k in range(2)]
    assert counts["best"] == pytest.approx(sum(per_col) / E.size)
    assert counts["best"] <= min(counts["sorted"], counts["best_window"]) <= counts["kept_buckets"]
    assert counts["pippenger_asymptotic"] == pytest.approx(26 / math.log2(E.size * 26))
