"""Secure aggregation (issue 3 item 7): exact sums, uniform masked inputs, clear protocol errors.

Real RFC 3526 2048-bit Diffie-Hellman keys and SHAKE-256 masks throughout (no mocks). The statistical
tests use unseeded cryptographic masks (they cannot be seeded), 8 p-values at a rejection level of 1e-9 and a
7-sigma correlation bound, so a correct implementation fails one of them with probability below 1e-8 per run;
a missing or biased mask gives p-values ~ 0 at these sample sizes (32768 words).
"""

from __future__ import annotations

import gmpy2
import numpy as np
import pytest
from scipy import stats

from vfl.exceptions import DataValidationError, EncodingOverflowError, KeyValidationError, ProtocolError
from vfl.secure.aggregation import (
    MODP_2048_GENERATOR,
    MODP_2048_ORDER,
    MODP_2048_PRIME,
    SecAggAggregator,
    SecAggSite,
    decode_fixed_point,
    encode_fixed_point,
    secure_sum,
    validate_public_value,
)

ALPHA = 1e-9


def _setup(n_sites: int, length: int, precision_bits: int = 32, round_id: int = 7):
    sites = [SecAggSite(s, n_sites, length, precision_bits, round_id) for s in range(n_sites)]
    agg = SecAggAggregator(n_sites, length, precision_bits, round_id)
    for site in sites:
        agg.register_public_key(site.site_id, site.public_key())
    keys = agg.public_keys()
    for site in sites:
        site.receive_public_keys(keys)
    return sites, agg


def test_group_is_rfc3526_group14():
    gmpy2.get_context().precision = 4000
    pi_bits = int(gmpy2.floor(gmpy2.const_pi() * gmpy2.mpz(2) ** 1918))
    assert MODP_2048_PRIME == 2**2048 - 2**1984 - 1 + 2**64 * (pi_bits + 124476)
    assert gmpy2.is_prime(MODP_2048_PRIME, 40) and gmpy2.is_prime(MODP_2048_ORDER, 40)
    assert pow(MODP_2048_GENERATOR, MODP_2048_ORDER, MODP_2048_PRIME) == 1


@pytest.mark.parametrize("n_sites", [2, 3, 7])
def test_sum_exact_within_fixed_point_bound(n_sites):
    rng = np.random.default_rng(n_sites)
    length = 500
    xs = [rng.uniform(-1, 1, length) for _ in range(n_sites)]
    xs[0][:5] = [0.0, -0.0, 1.0, -1.0, 1e-12]  # zeros, extremes, below resolution
    f = 32
    got = secure_sum(xs, precision_bits=f)
    want = np.sum(xs, axis=0)
    assert np.max(np.abs(got - want)) <= n_sites * 2.0 ** -(f + 1) + 1e-15 * n_sites
    # the integer sum is exact: masked words add up to the sum of the encodings mod 2^64
    sites, agg = _setup(n_sites, length, f)
    for site, x in zip(sites, xs, strict=True):
        agg.submit(site.site_id, site.masked_input(x))
    enc_sum = np.zeros(length, dtype=np.uint64)
    for x in xs:
        enc_sum += encode_fixed_point(x, f, n_sites)
    np.testing.assert_array_equal(agg.aggregate_words(), enc_sum)


def test_range_limit_is_exact_and_overflow_raises():
    n_sites, f = 4, 40
    limit = (2**63 - 1) // n_sites
    biggest = float(limit >> f)  # representable, at the range's edge
    xs = [np.array([biggest, -biggest]) for _ in range(n_sites)]
    np.testing.assert_allclose(secure_sum(xs, precision_bits=f), [n_sites * biggest, -n_sites * biggest])
    with pytest.raises(EncodingOverflowError, match="fixed-point range"):
        encode_fixed_point(np.array([0.0, -(biggest + 1.0)]), f, n_sites)
    site = _setup(n_sites, 2, f)[0][0]
    with pytest.raises(EncodingOverflowError):
        site.masked_input(np.array([1e12, 0.0]))
    with pytest.raises(DataValidationError, match="NaN"):
        encode_fixed_point(np.array([np.nan]), f, n_sites)


def test_encode_decode_roundtrip_negative():
    x = np.array([-1.0, -0.5, 0.25, 3.0, -2.0**-20])
    np.testing.assert_array_equal(decode_fixed_point(encode_fixed_point(x, 20, 2), 20), x)


def _uniformity_pvalues(words: np.ndarray) -> list[float]:
    """Chi-square on the top and bottom bytes (256 bins) and KS of words / 2^64 against U(0, 1)."""
    top = (words >> np.uint64(56)).astype(np.int64)
    low = (words & np.uint64(0xFF)).astype(np.int64)
    p_top = stats.chisquare(np.bincount(top, minlength=256)).pvalue
    p_low = stats.chisquare(np.bincount(low, minlength=256)).pvalue
    p_ks = stats.kstest(words.astype(np.float64) / 2.0**64, "uniform").pvalue
    return [p_top, p_low, p_ks]


def test_single_masked_input_is_uniform_and_independent_of_the_input():
    length = 1 << 15
    masked = {}
    for name, x in {"zeros": np.zeros(length), "large": np.full(length, 12345.678)}.items():
        sites, _ = _setup(3, length)
        masked[name] = sites[1].masked_input(x)  # a middle site: has both + and - masks
        assert min(_uniformity_pvalues(masked[name])) > ALPHA
    a = masked["zeros"].astype(np.float64)
    b = masked["large"].astype(np.float64)
    assert stats.ks_2samp(a, b).pvalue > ALPHA
    # and a single masked word carries no linear trace of the input across positions
    assert abs(stats.pearsonr(a[:-1], a[1:]).statistic) < 7 / np.sqrt(length)  # 7 standard errors


def test_masked_word_uniform_across_fresh_sessions():
    # one coordinate, 80 sessions with fresh Diffie-Hellman keys and the same input
    words = []
    for _ in range(80):
        sites, _ = _setup(2, 1, round_id=0)
        words.append(sites[0].masked_input(np.array([0.5]))[0])
    u = np.array(words, dtype=np.float64) / 2.0**64
    assert stats.kstest(u, "uniform").pvalue > ALPHA


def test_masks_cancel_for_zero_inputs_and_differ_per_round():
    sites, agg = _setup(4, 64, round_id=1)
    outs = [s.masked_input(np.zeros(64)) for s in sites]
    for s, y in zip(sites, outs, strict=True):
        assert np.count_nonzero(y) > 60  # masked, not the zero encoding
        agg.submit(s.site_id, y)
    np.testing.assert_array_equal(agg.aggregate(), np.zeros(64))
    with pytest.raises(ProtocolError, match="already masked"):
        sites[0].masked_input(np.zeros(64))


def test_submission_errors_are_clear():
    sites, agg = _setup(3, 4)
    y0 = sites[0].masked_input(np.ones(4))
    with pytest.raises(ProtocolError, match="uint64"):
        agg.submit(0, y0.astype(np.float64))
    with pytest.raises(ProtocolError, match="shape"):
        agg.submit(0, y0[:3].copy())
    with pytest.raises(ProtocolError, match="unknown site 5"):
        agg.submit(5, y0)
    agg.submit(0, y0)
    with pytest.raises(ProtocolError, match="duplicate submission from site 0"):
        agg.submit(0, y0)
    agg.submit(2, sites[2].masked_input(np.ones(4)))
    with pytest.raises(ProtocolError, match=r"no masked input from sites \[1\]"):
        agg.aggregate()
    with pytest.raises(DataValidationError, match="length 4"):
        sites[1].masked_input(np.ones(5))


def test_key_exchange_errors():
    p = MODP_2048_PRIME
    for bad in (0, 1, p - 1, p, p + 5):
        with pytest.raises(KeyValidationError, match="out of range"):
            validate_public_value(bad)
    with pytest.raises(KeyValidationError, match="prime-order subgroup"):
        validate_public_value(p - 2)  # -2 is a quadratic non-residue (p = 7 mod 8): order 2q
    with pytest.raises(KeyValidationError, match="integer"):
        validate_public_value(2.0)
    # the Legendre-symbol test agrees with the definition A^q = 1 mod p
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = int.from_bytes(rng.bytes(256), "big") % p
        if 1 < a < p - 1:
            in_subgroup = pow(a, MODP_2048_ORDER, p) == 1
            try:
                validate_public_value(a)
                assert in_subgroup
            except KeyValidationError:
                assert not in_subgroup
    site = SecAggSite(0, 3, 2)
    other = SecAggSite(1, 3, 2)
    with pytest.raises(ProtocolError, match="receive the public keys"):
        site.masked_input(np.zeros(2))
    with pytest.raises(ProtocolError, match=r"missing public keys of sites \[2\]"):
        site.receive_public_keys({1: other.public_key()})
    with pytest.raises(ProtocolError, match="unknown sites"):
        site.receive_public_keys({1: other.public_key(), 2: other.public_key(), 9: 4})
    with pytest.raises(ProtocolError, match="own public key was altered"):
        site.receive_public_keys({0: 4, 1: other.public_key(), 2: 4})
    with pytest.raises(KeyValidationError, match="subgroup"):
        site.receive_public_keys({1: other.public_key(), 2: p - 2})
    agg = SecAggAggregator(3, 2)
    agg.register_public_key(0, site.public_key())
    with pytest.raises(ProtocolError, match="twice"):
        agg.register_public_key(0, site.public_key())
    with pytest.raises(ProtocolError, match=r"missing from sites \[1, 2\]"):
        agg.public_keys()
    with pytest.raises(ProtocolError, match="at least 2 sites"):
        SecAggAggregator(1, 2)


def test_pairwise_secrets_agree_and_keys_are_fresh():
    sites, _ = _setup(2, 3)
    assert sites[0]._pair_keys[1] == sites[1]._pair_keys[0]
    assert sites[0].public_key() != SecAggSite(0, 2, 3).public_key()


def test_overflow_message_does_not_quote_the_secret_input_and_string_ids_are_protocol_errors():
    """capeFM's inputs are secret noise draws: an overflow error must not print them. Site ids arriving as
    strings (JSON object keys) are refused with ProtocolError rather than a KeyError traceback."""
    with pytest.raises(EncodingOverflowError) as info:
        encode_fixed_point(np.array([0.0, 9876543.21]), 40, 3)  # limit ~2.8e6
    assert "9876543" not in str(info.value) and "9.87654" not in str(info.value)
    site, other = SecAggSite(0, 2, 1), SecAggSite(1, 2, 1)
    with pytest.raises(ProtocolError, match="integers"):
        site.receive_public_keys({"1": other.public_key()})
    with pytest.raises(ProtocolError, match="mapping"):
        site.receive_public_keys([other.public_key()])
    site.receive_public_keys({np.int64(1): other.public_key()})  # numpy integer ids are fine
