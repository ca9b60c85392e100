"""Packed, masked secure products through real Paillier encryption, masking and decryption.

Default tests use 1024-bit INSECURE test keys (``allow_insecure=True``) and small n; the 2048-bit
forest shape and the n = 1e5 accumulation are ``@pytest.mark.slow``.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from scipy import stats

from vfl.exceptions import (
    DataValidationError,
    EncodingOverflowError,
    KeyValidationError,
    ProtocolError,
)
from vfl.secure import (
    EncryptedBlock,
    MaskedResponse,
    ProductEncryptor,
    ProductResponder,
    choose_encryptor,
    combine_shares,
    discrete_gaussian_array,
    generate_keypair,
    inner_product_error_bound,
    run_secure_product,
    secure_gram,
    secure_label_products,
)
from vfl.secure.encoding import to_fixed_point_ints

P = 24


@pytest.fixture(scope="module")
def insecure_test_keypair():
    return generate_keypair(1024, allow_insecure=True)


def exact_integer_product(A, B, p=P, bound=1.0):
    """``round(A 2^p)^T round(B 2^p)`` in exact integers: what the shares must sum to."""
    return to_fixed_point_ints(A, p, bound).T.dot(to_fixed_point_ints(B, p, bound))


def run(A, B, keypair, **kw):
    return run_secure_product(A, B, keypair=keypair, allow_insecure=True, precision_bits=kw.pop("p", P),
                              workers=kw.pop("workers", 1), **kw)


CASES = {
    "uniform": lambda r: (r.uniform(-1, 1, (40, 3)), r.uniform(-1, 1, (40, 4))),
    "negative": lambda r: (-r.uniform(0, 1, (30, 2)), r.uniform(-1, 0, (30, 5))),
    "zeros": lambda r: (np.zeros((10, 2)), r.uniform(-1, 1, (10, 3))),
    "extremes": lambda r: (r.choice([-1.0, 1.0], (25, 3)), r.choice([-1.0, 1.0, 0.0], (25, 2))),
    "tiny": lambda r: (r.uniform(-1, 1, (20, 2)) * 2.0**-23, r.uniform(-1, 1, (20, 2))),
    "one_row": lambda r: (np.array([[0.5, -1.0]]), np.array([[-0.75]])),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("encryptor", ["a", "b"])
def test_shares_sum_exactly_to_fixed_point_product_and_match_numpy(insecure_test_keypair, case, encryptor):
    A, B = CASES[case](np.random.default_rng(zlib.crc32(case.encode())))  # str hash() is salted per process
    r = run(A, B, insecure_test_keypair, encryptor=encryptor)
    assert r.combined().tolist() == exact_integer_product(A, B).tolist()
    G = combine_shares(r.combined(), precision_bits=P)
    assert G.shape == (A.shape[1], B.shape[1])
    assert np.max(np.abs(G - A.T @ B)) <= inner_product_error_bound(A.shape[0], P, 1.0)


def test_many_columns_span_several_ciphertext_groups(insecure_test_keypair):
    rng = np.random.default_rng(3)
    A, B = rng.uniform(-1, 1, (15, 19)), rng.uniform(-1, 1, (15, 2))
    r = run(A, B, insecure_test_keypair, encryptor="a")
    assert r.layout.n_groups(19) >= 2
    assert r.combined().tolist() == exact_integer_product(A, B).tolist()


def test_large_accumulation_of_extreme_values_is_exact(insecure_test_keypair):
    """3000 rows of +-1: the slot holds n (2O)^2 ~ 2^62 plus noise and mask without carrying."""
    rng = np.random.default_rng(4)
    A = rng.choice([-1.0, 1.0], (3000, 2))
    A[:, 0] = 1.0
    B = np.ones((3000, 1))
    B[::2] = -1.0
    G = secure_gram(A, B, keypair=insecure_test_keypair, allow_insecure=True, workers=1)
    np.testing.assert_array_equal(G, A.T @ B)  # integers: exact


def test_value_bound_and_precision_parameters(insecure_test_keypair):
    rng = np.random.default_rng(5)
    A, B = rng.uniform(-8, 8, (20, 2)), rng.uniform(-8, 8, (20, 3))
    G = secure_gram(A, B, keypair=insecure_test_keypair, allow_insecure=True, workers=1, value_bound=8.0,
                    precision_bits=16)
    assert np.max(np.abs(G - A.T @ B)) <= inner_product_error_bound(20, 16, 8.0)


def test_noise_is_added_inside_the_ciphertext_exactly(insecure_test_keypair):
    rng = np.random.default_rng(6)
    A, B = rng.uniform(-1, 1, (12, 3)), rng.uniform(-1, 1, (12, 2))
    noise = np.array([[5, -7], [2**70, -(2**70)], [0, 1]], dtype=object)
    for enc in ("a", "b"):
        r = run(A, B, insecure_test_keypair, noise=noise, encryptor=enc)
        assert (r.combined() - noise).tolist() == exact_integer_product(A, B).tolist()


def test_noise_sigma_draws_discrete_gaussian_from_injected_rng(insecure_test_keypair):
    rng = np.random.default_rng(7)
    A, B = rng.uniform(-1, 1, (8, 2)), rng.uniform(-1, 1, (8, 2))
    r = run(A, B, insecure_test_keypair, noise_sigma=0.5, rng=np.random.default_rng(99))
    expected_noise = discrete_gaussian_array(0.5, (2, 2), np.random.default_rng(99), scale_bits=2 * P)
    diff = r.combined() - exact_integer_product(A, B)
    assert diff.tolist() == expected_noise.tolist()


def test_label_products(insecure_test_keypair):
    rng = np.random.default_rng(8)
    y, X = rng.integers(0, 2, 30).astype(float), rng.uniform(-1, 1, (30, 6))
    v = secure_label_products(y, X, keypair=insecure_test_keypair, allow_insecure=True, workers=1)
    assert v.shape == (6,)
    assert np.max(np.abs(v - y @ X)) <= inner_product_error_bound(30, P, 1.0)
    v = secure_label_products(y, X, keypair=insecure_test_keypair, allow_insecure=True, workers=1,
                              noise=np.arange(6) * 2 ** (2 * P))
    assert np.max(np.abs(v - y @ X - np.arange(6))) <= inner_product_error_bound(30, P, 1.0)


def test_choose_encryptor_packs_the_wider_side():
    assert choose_encryptor(517, 1, 12) == "b"   # labels: the feature owner encrypts, one response column
    assert choose_encryptor(517, 12, 1) == "a"
    assert choose_encryptor(517, 14, 13) == "a"


def test_process_pool_path_gives_the_same_exact_result(insecure_test_keypair):
    rng = np.random.default_rng(9)
    A, B = rng.uniform(-1, 1, (30, 3)), rng.uniform(-1, 1, (30, 3))
    r = run(A, B, insecure_test_keypair, workers=2, randomness="standard", precompute=True)
    assert r.combined().tolist() == exact_integer_product(A, B).tolist()


# ----------------------------------------------------------------------------- overflow and validation
def test_overflow_raises_before_anything_is_decrypted(insecure_test_keypair):
    seen = []
    pk, sk = insecure_test_keypair
    with pytest.raises(EncodingOverflowError):
        ProductEncryptor(sk, np.array([[1.5]]), response_cols=1, precision_bits=P, on_decrypt=seen.append)
    holder = ProductEncryptor(sk, np.ones((3, 2)), response_cols=1, precision_bits=P, on_decrypt=seen.append, workers=1)
    block = holder.request()
    with pytest.raises(EncodingOverflowError):
        ProductResponder(np.full((3, 1), -1.01), precision_bits=P)
    responder = ProductResponder(np.ones((3, 1)), precision_bits=P, workers=1)
    too_big = np.full((2, 1), 2 ** holder.layout.noise_bits)
    with pytest.raises(EncodingOverflowError, match="noise"):
        responder.respond(block, too_big)
    with pytest.raises(DataValidationError):
        responder.respond(block, np.full((2, 1), 0.5))
    assert seen == []


def test_wire_messages_are_validated(insecure_test_keypair):
    pk, sk = insecure_test_keypair
    holder = ProductEncryptor(sk, np.eye(4)[:, :2], response_cols=1, precision_bits=P, workers=1)
    header, frames = holder.request().to_wire()
    assert EncryptedBlock.from_wire(header, frames, pk).ciphertexts
    for field, value in [("slot_bits", header["slot_bits"] - 1), ("guard_bits", 7), ("n_rows", 5),
                         ("kind", "x"), ("session", "zz"), ("value_bound", "1")]:
        with pytest.raises(ProtocolError):
            EncryptedBlock.from_wire({**header, field: value}, frames, pk)
    with pytest.raises(ProtocolError):
        EncryptedBlock.from_wire(header, [frames[0][:-1]], pk)
    bad = bytearray(frames[0])
    bad[: len(bad) // 4] = b"\xff" * (len(bad) // 4)  # first ciphertext >= n^2
    with pytest.raises(KeyValidationError):
        EncryptedBlock.from_wire(header, [bytes(bad)], pk)
    other_pk, _ = generate_keypair(1024, allow_insecure=True)
    with pytest.raises(KeyValidationError, match="different public key"):
        EncryptedBlock.from_wire(header, frames, other_pk)


def test_sessions_are_single_use_and_bound_to_their_response(insecure_test_keypair):
    pk, sk = insecure_test_keypair
    A, B = np.full((4, 2), 0.5), np.full((4, 1), -0.5)
    holder = ProductEncryptor(sk, A, response_cols=1, precision_bits=P, workers=1)
    block = holder.request()
    with pytest.raises(ProtocolError):
        holder.request()
    responder = ProductResponder(B, precision_bits=P, workers=1)
    response, _ = responder.respond(block)
    with pytest.raises(ProtocolError, match="already answered"):
        responder.respond(block)
    with pytest.raises(ProtocolError, match="agreed"):
        ProductResponder(B, precision_bits=P - 1, workers=1).respond(block)
    other = ProductEncryptor(sk, A, response_cols=1, precision_bits=P, workers=1)
    other.request()
    with pytest.raises(ProtocolError, match="another session"):
        other.decrypt(response)
    header, frames = response.to_wire()
    holder.decrypt(MaskedResponse.from_wire(header, frames, pk))
    with pytest.raises(ProtocolError):
        holder.decrypt(response)


def test_secure_gram_refuses_short_keys_without_opt_in(insecure_test_keypair):
    with pytest.raises(KeyValidationError):
        secure_gram(np.ones((2, 1)), np.ones((2, 1)), keypair=insecure_test_keypair)
    with pytest.raises(DataValidationError):
        secure_gram(np.ones((2, 1)), np.ones((3, 1)), keypair=insecure_test_keypair, allow_insecure=True)


# ----------------------------------------------------------------------------- masking and the audit
def audited_plaintexts(A, B, keypair, **kw):
    """Run the protocol and return (every decrypted plaintext, the run)."""
    plaintexts = []
    r = run(A, B, keypair, on_decrypt=plaintexts.append, encryptor="a", **kw)
    return plaintexts, r


def test_decryption_audit_key_holder_only_sees_fully_masked_plaintexts(insecure_test_keypair):
    """Every plaintext the key holder decrypts is one response ciphertext ``P + R + pack(noise + C) mod n`` with
    ``R`` uniform on ``[0, n)``: without the mask it would be below ``2^(d_a w + 1)``; with it, each plaintext is
    ``>= 2^(s w)`` (all slots' bits) except with probability ``2^(s w) / n < 2^-38``, and none equals the unmasked
    packed accumulation."""
    rng = np.random.default_rng(10)
    A, B = rng.uniform(-1, 1, (25, 4)), rng.uniform(-1, 1, (25, 3))
    plaintexts, r = audited_plaintexts(A, B, insecure_test_keypair)
    assert len(plaintexts) == 3  # one per responder column (one group): nothing else was ever decrypted
    lay = r.layout
    O, w = lay.offset, lay.slot_bits
    unmasked = (to_fixed_point_ints(A, P, 1.0) + O).T.dot(to_fixed_point_ints(B, P, 1.0) + O)
    packed = {sum(int(unmasked[j, k]) << (w * j) for j in range(4)) for k in range(3)}
    assert all(m >= 2 ** (lay.slots_per_ciphertext * w) for m in plaintexts)
    assert not set(plaintexts) & packed


def test_audit_catches_a_responder_that_forgets_the_mask(insecure_test_keypair, monkeypatch):
    """The audit can fail: with the mask forced to 0 the key holder would see the packed slots below 2^(d_a w+1)."""
    import vfl.secure.products.responder as products  # where the mask is drawn

    monkeypatch.setattr(products.secrets, "randbelow", lambda k: 0)
    rng = np.random.default_rng(11)
    plaintexts, r = audited_plaintexts(rng.uniform(-1, 1, (5, 2)), rng.uniform(-1, 1, (5, 2)),
                                       insecure_test_keypair)
    assert all(m < 2 ** (2 * r.layout.slot_bits + 1) for m in plaintexts)


UNIFORMITY_ALPHA = 1e-9
"""Masks come from ``secrets`` and cannot be seeded: 7 checks at 1e-9 (and a 6.5-sigma mean bound) make a false
failure of the uniformity test below ~1e-8 per run, while a missing or short mask gives p-values ~ 0."""


def test_decrypted_plaintexts_look_uniform_and_do_not_depend_on_the_data(insecure_test_keypair):
    """Over 15 runs x 32 response ciphertexts per data set: decrypted plaintexts / n ~ U(0, 1) (KS) and their low 4
    bits are uniform (chi-square), for two opposite data sets (all +1 and all -1), and the two samples are
    indistinguishable (two-sample KS). Level :data:`UNIFORMITY_ALPHA` per check."""
    n, d_a, d_b, runs = 10, 8, 32, 15
    modulus = int(insecure_test_keypair[0].n)
    samples = {}
    for sign in (1.0, -1.0):
        values, low_bits = [], []
        for _ in range(runs):
            plaintexts, _ = audited_plaintexts(np.full((n, d_a), sign), np.ones((n, d_b)), insecure_test_keypair)
            values += [m / modulus for m in plaintexts]
            low_bits += [m & 15 for m in plaintexts]
        samples[sign] = np.array(values)
        assert len(values) == runs * d_b
        assert stats.kstest(values, "uniform").pvalue > UNIFORMITY_ALPHA
        assert abs(np.mean(values) - 0.5) < 6.5 * np.sqrt(1 / 12 / len(values))
        assert stats.chisquare(np.bincount(low_bits, minlength=16)).pvalue > UNIFORMITY_ALPHA
    assert stats.ks_2samp(samples[1.0], samples[-1.0]).pvalue > UNIFORMITY_ALPHA


# ----------------------------------------------------------------------------- slow: real key sizes
@pytest.mark.slow
def test_forest_shape_with_2048_bit_keys_matches_numpy():
    rng = np.random.default_rng(12)
    A, B = rng.uniform(-1, 1, (517, 13)), rng.uniform(-1, 1, (517, 14))
    G = secure_gram(A, B)
    assert np.max(np.abs(G - A.T @ B)) <= inner_product_error_bound(517, P, 1.0)


@pytest.mark.slow
def test_hundred_thousand_rows_accumulate_exactly_with_2048_bit_keys():
    rng = np.random.default_rng(13)
    A = rng.choice([-1.0, 1.0], (100_000, 2))
    B = rng.choice([-1.0, 1.0], (100_000, 1))
    r = run_secure_product(A, B, key_bits=2048)
    assert r.combined().tolist() == exact_integer_product(A, B).tolist()
    np.testing.assert_array_equal(combine_shares(r.combined(), precision_bits=P),
                                  A.T @ B)


def test_concurrent_products_in_threads_are_exact(insecure_test_keypair):
    """Two parties in one process (vfl.fit runs them as threads) may run products at the same time."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(14)
    pairs = [(rng.uniform(-1, 1, (60, 3)), rng.uniform(-1, 1, (60, 2))) for _ in range(4)]
    with ThreadPoolExecutor(4) as ex:
        runs = list(ex.map(lambda ab: run(*ab, insecure_test_keypair), pairs))
    for (A, B), r in zip(pairs, runs, strict=True):
        assert r.combined().tolist() == exact_integer_product(A, B).tolist()


# ----------------------------------------------------------------------------- re-randomisation vs the key holder
def _keypair_with_primes_1_mod_4(bits: int = 1024):
    """An INSECURE test key with p = q = 1 (mod 4): then -1 is a square mod p, so every short-exponent
    randomness h_s^alpha (h = -y^2) is a quadratic residue mod p."""
    import secrets

    import gmpy2
    from phe import paillier

    def prime(b):
        while True:
            p = int(gmpy2.next_prime(secrets.randbits(b) | (1 << (b - 1))))
            if p % 4 == 1 and p.bit_length() == b:
                return p

    p = prime(bits // 2)
    q = prime(bits // 2)
    while q == p:
        q = prime(bits // 2)
    pk = paillier.PaillierPublicKey(p * q)
    return pk, paillier.PaillierPrivateKey(pk, p, q)


@pytest.mark.parametrize("randomness", ["short-exponent", "standard"])
def test_response_randomness_extracted_by_the_key_holder_is_uniform(monkeypatch, randomness):
    """The key holder knows p and can read the randomness R of a response (c = R^n mod n, and R^n has R's
    Legendre symbol mod p since n is odd). A fresh uniform Enc(0) makes (c | p) a fair coin; with a
    short-exponent re-randomiser (and short-exponent encryptions) every response was a residue mod p, i.e.
    the key holder saw randomness confined to a subgroup. 24 ciphertexts all residues: probability 2^-24."""
    import gmpy2

    import vfl.secure.products.responder as products

    pk, sk = _keypair_with_primes_1_mod_4()
    seen: list[int] = []
    from_wire = products.MaskedResponse.from_wire

    def spy(header, frames, public_key):
        response = from_wire(header, frames, public_key)
        seen.extend(response.ciphertexts)
        return response

    monkeypatch.setattr(products.MaskedResponse, "from_wire", spy)
    rng = np.random.default_rng(15)
    A, B = rng.uniform(-1, 1, (6, 2)), rng.uniform(-1, 1, (6, 24))
    r = run(A, B, (pk, sk), encryptor="a", randomness=randomness)
    assert r.combined().tolist() == exact_integer_product(A, B).tolist()
    assert len(seen) == 24
    symbols = {int(gmpy2.legendre(c % sk.p, sk.p)) for c in seen}
    assert symbols == {1, -1}


def test_responder_refuses_a_request_with_other_noise_bits_and_never_quotes_its_noise(insecure_test_keypair):
    """noise_bits is an agreed public parameter: a key holder that shrinks it (to make the responder fail, or
    to squeeze the slot) is refused; an over-bound noise entry raises without printing the secret value."""
    pk, sk = insecure_test_keypair
    A, B = np.full((4, 2), 0.5), np.full((4, 1), -0.5)
    shrunk = ProductEncryptor(sk, A, response_cols=1, precision_bits=P, noise_bits=8, workers=1).request()
    with pytest.raises(ProtocolError, match="noise_bits"):
        ProductResponder(B, precision_bits=P, workers=1).respond(shrunk, np.array([[300], [-7]]))
    agreed = ProductResponder(B, precision_bits=P, noise_bits=8, workers=1)
    with pytest.raises(EncodingOverflowError, match="noise") as info:
        agreed.respond(shrunk, np.array([[123457], [-7]]))
    assert "123457" not in str(info.value)


@pytest.mark.parametrize("frame", ["abc", None, 3.5, [b"x"]])
def test_malformed_frames_raise_protocol_errors_not_tracebacks(insecure_test_keypair, frame):
    pk, sk = insecure_test_keypair
    holder = ProductEncryptor(sk, np.eye(2), response_cols=2, precision_bits=P, workers=1)
    header, frames = holder.request().to_wire()
    with pytest.raises(ProtocolError):
        EncryptedBlock.from_wire(header, [frame], pk)
    response, _ = ProductResponder(np.eye(2), precision_bits=P, workers=1).respond(
        EncryptedBlock.from_wire(header, frames, pk))
    r_header, _ = response.to_wire()
    with pytest.raises(ProtocolError):
        MaskedResponse.from_wire(r_header, [frame], pk)
