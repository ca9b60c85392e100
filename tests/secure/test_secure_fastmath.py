"""Fast Paillier arithmetic: bucket multi-exponentiation, fixed-base tables, CRT / short-exponent /
precomputed randomness, and the process pool. Keys are 1024-bit INSECURE test keys."""

from __future__ import annotations

import random
import warnings

import gmpy2
import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, SlowBackendWarning
from vfl.secure import ProductResponder, fastmath, generate_keypair
from vfl.secure.fastmath import (
    Encrypter,
    FixedBaseTable,
    RandomnessPool,
    encrypt_many,
    multiexp,
    multiexp_columns,
)


@pytest.fixture(scope="module")
def insecure_test_keypair():
    return generate_keypair(1024, allow_insecure=True)


@pytest.mark.parametrize("window", [None, 1, 3, 7])
def test_multiexp_equals_product_of_powers(window):
    rnd = random.Random(f"multiexp-{window}")  # seeded also for window=None (Random(None) uses OS entropy)
    mod = gmpy2.mpz(rnd.getrandbits(512) | 1)
    bases = [gmpy2.mpz(rnd.getrandbits(500)) for _ in range(60)]
    exps = [rnd.getrandbits(rnd.choice([0, 1, 5, 26])) for _ in range(60)]
    expected = 1
    for b, e in zip(bases, exps, strict=True):
        expected = expected * pow(int(b), e, int(mod)) % int(mod)
    value, mults = multiexp(bases, exps, mod, window)
    assert int(value) == expected
    assert 0 < mults < 60 * 26  # fewer multiplications than separate square-and-multiply
    assert multiexp(bases, [0] * 60, mod) == (1, 0)


def test_fixed_base_table_matches_powmod():
    mod = gmpy2.mpz(2**521 - 1)
    table = FixedBaseTable(7, mod, 256, 5)
    for e in (0, 1, 2**255, 2**256 - 1, 123456789):
        assert table.pow(e) == pow(7, e, int(mod))


@pytest.mark.parametrize("randomness", ["short-exponent", "standard"])
@pytest.mark.parametrize("with_factors", [True, False])
def test_encrypter_ciphertexts_decrypt_and_rerandomise(insecure_test_keypair, randomness, with_factors):
    pk, sk = insecure_test_keypair
    kw = {"p": sk.p, "q": sk.q} if with_factors else {}
    enc = Encrypter(pk.n, randomness=randomness, **kw)
    enc.prepare(300)
    m = 2**900 + 17
    c = enc.encrypt(m)
    assert sk.raw_decrypt(int(c)) == m
    c2 = enc.rerandomise(c)
    assert c2 != c and sk.raw_decrypt(int(c2)) == m
    assert sk.raw_decrypt(int(enc.add_plain(c, 5))) == m + 5
    assert sk.raw_decrypt(int(enc.compute_nth_residue())) == 0  # rho is an n-th residue: Enc(0)


def test_randomness_pool_is_used_once_per_encryption(insecure_test_keypair):
    pk, sk = insecure_test_keypair
    enc = Encrypter(pk.n, p=sk.p, q=sk.q, randomness="standard")
    RandomnessPool.fill(enc, 3)
    assert len(enc.pool) == 3
    cts = encrypt_many(enc, [1, 2, 3, 4], workers=1)
    assert len(enc.pool) == 0 and len(set(cts)) == 4
    assert [sk.raw_decrypt(c) for c in cts] == [1, 2, 3, 4]


def test_process_pool_encryption_and_multiexp_match_serial(insecure_test_keypair):
    pk, sk = insecure_test_keypair
    enc = Encrypter(pk.n, p=sk.p, q=sk.q)
    cts = encrypt_many(enc, list(range(40)), workers=2)
    assert [sk.raw_decrypt(c) for c in cts] == list(range(40))
    exps = [list(range(40)), [3] * 40]
    bases = [[gmpy2.mpz(c) for c in cts]]
    par = multiexp_columns(bases, [(0, e) for e in exps], enc.n2, workers=2)
    ser = multiexp_columns(bases, [(0, e) for e in exps], enc.n2, workers=1)
    assert par == ser
    assert sk.raw_decrypt(par[0][0]) == sum(i * i for i in range(40))


def test_workers_argument_is_validated():
    with pytest.raises(ConfigurationError):
        fastmath.resolve_workers(0, 1.0)
    assert fastmath.resolve_workers(None, 1.0) == 1
    with pytest.raises(ConfigurationError):
        Encrypter(101 * 103, randomness="fast")


def test_missing_gmpy2_warns_slow_backend(monkeypatch):
    monkeypatch.setattr(fastmath, "HAVE_GMPY2", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ProductResponder(np.zeros((2, 1)), precision_bits=8)
    assert any(issubclass(w.category, SlowBackendWarning) for w in caught)


@pytest.mark.parametrize("count", [1, 3000])   # no table (plain powmods) and two CRT fixed-base tables
def test_crt_short_exponent_encryption_gives_the_same_ciphertexts_as_the_public_key_path(insecure_test_keypair, count):
    """The key holder's short-exponent ``rho = h_s^alpha`` computed by CRT modulo p^2 and q^2 (issue 25) equals the
    value modulo n^2 that a task without the factors computes, for the same ``alpha``: the encrypted frames are
    bit-identical and decrypt to the packed rows."""
    from vfl.secure.executors import encrypt_rows_task
    from vfl.secure.packing import pack

    pk, sk = insecure_test_keypair
    holder = Encrypter(pk.n, p=sk.p, q=sk.q, randomness="short-exponent")
    with_f, without = holder.task_state(with_factors=True), holder.task_state()
    assert with_f[1:3] == (sk.p, sk.q) and without[1:3] == (None, None) and with_f[4] == without[4]
    rows = np.random.default_rng(count).integers(0, 2**20, (5, 3))
    draws = [holder.draw() for _ in range(10)]
    residues = []
    for state in (with_f, without):   # prepare() for `count` encryptions: tables (or plain powmods) per encrypter
        enc = Encrypter.from_state(state)
        enc.prepare(count)
        assert (enc._crt_tables is not None) == (count > 1 and state is with_f)
        residues.append([int(enc.residue_from(d)) for d in draws])
    assert residues[0] == residues[1]
    crt = encrypt_rows_task(with_f, rows, [(0, 2), (2, 3)], 30, draws, False, 256)
    plain = encrypt_rows_task(without, rows, [(0, 2), (2, 3)], 30, draws, False, 256)
    assert crt == plain
    cts = [int.from_bytes(crt[i:i + 256], "big") for i in range(0, len(crt), 256)]
    want = [pack(list(r[lo:hi]), 30) for r in rows.tolist() for lo, hi in [(0, 2), (2, 3)]]
    assert [sk.raw_decrypt(c) for c in cts] == want


def test_bucket_accumulator_over_several_chunks_equals_the_product_of_powers():
    """Buckets kept across chunks (issue 25): bases added in three chunks, exponents of 0..26 bits, give
    prod b^e mod N; an untouched product is 1; the window respects the memory cap and prefers fewer multiplications."""
    rnd = random.Random(25)
    m = gmpy2.mpz(rnd.getrandbits(512) | 1)
    acc = fastmath.BucketAccumulator(2, 26, 13, m)
    bases = [gmpy2.mpz(rnd.getrandbits(500)) for _ in range(300)]
    exps = [rnd.getrandbits(rnd.choice([0, 1, 5, 26])) for _ in range(300)]
    for lo, hi in [(0, 100), (100, 101), (101, 300)]:
        acc.add(0, bases[lo:hi], exps[lo:hi])
    want = gmpy2.mpz(1)
    for b, e in zip(bases, exps, strict=True):
        want = want * gmpy2.powmod(b, e, m) % m
    assert acc.result(0) == want and acc.result(1) == 1
    assert fastmath.persistent_bucket_window(10**5, 26, 10, 512) == 13
    assert fastmath.persistent_bucket_window(10**5, 26, 10, 512, cap_bytes=1 << 20) < 13


def test_batched_short_exponent_draws_are_uniform_256_bit_integers():
    """Issue 34: ``draw_many`` gives ``count`` independent uniform ``alpha`` of SHORT_EXPONENT_BITS bits: every bit
    position is set in about half of 4000 draws (binomial: 4.5 standard deviations allowed per bit, so a fixed or
    truncated bit fails and a fair one passes except with probability < 2e-3 over all 256 bits)."""
    from vfl.secure.fastmath import SHORT_EXPONENT_BITS, Encrypter

    enc = Encrypter((1 << 127) - 1, randomness="short-exponent", h_s=3)
    draws = enc.draw_many(4000)
    assert len(draws) == 4000 and len(set(draws)) == 4000
    assert all(0 <= a < 1 << SHORT_EXPONENT_BITS for a in draws)
    sd = (4000 * 0.25) ** 0.5
    for bit in range(SHORT_EXPONENT_BITS):
        ones = sum((a >> bit) & 1 for a in draws)
        assert abs(ones - 2000) < 4.5 * sd, bit
    assert Encrypter((1 << 127) - 1, randomness="standard").draw_many(3).__len__() == 3
