"""The coordinator's magnitude check of a combined cross block (issue 20, item 4: amplified operands).

Attacker: a malicious encryptor that sends ``lambda e_t`` (one row, offset-encoded, every other row 0) as its operand,
inside its declared slots, so that the slot range check of :func:`combine_packed_shares` passes and the released
block would be ``lambda b_t + noise``: the responder's row ``t`` with the DP noise divided by ``lambda``.
Invariant: a combined entry beyond ``1.5 n O^2 + 40 sqrt(2) sigma`` (what operands inside the public encoding bound
can produce, plus a negligible noise tail) stops the run naming the encryptor, so ``lambda <= 1.5 n O``.
"""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ProtocolError
from vfl.protocols.fm_release import check_product_magnitude
from vfl.secure import EncryptedBlock, ProductEncryptor, ProductResponder, generate_keypair
from vfl.secure.discrete_noise import discrete_gaussian_array
from vfl.secure.fastmath import cached_encrypter
from vfl.secure.products import combine_packed_shares, pack_slots

P = 24
ROWS = 12


@pytest.fixture(scope="module")
def keypair():
    return generate_keypair(1024, allow_insecure=True)


def _amplified_product(keypair, lam: int, B: np.ndarray, noise_std: float):
    """The attack end to end through the real wire format: (combined exact ints, layout)."""
    pk, sk = keypair
    honest = ProductEncryptor(sk, np.zeros((ROWS, 1)), response_cols=B.shape[1], precision_bits=P, workers=1)
    header = honest.stream_header()
    lay, O = header.layout, header.layout.offset
    enc = cached_encrypter(pk.n)
    plaintexts = [O + lam if i == 3 else O for i in range(ROWS)]        # a_int = lam e_3, offset-encoded
    request = EncryptedBlock(header.session, pk, lay, 1, [int(enc.encrypt(m)) for m in plaintexts])
    request = EncryptedBlock.from_wire(*request.to_wire(), pk)
    rng = np.random.default_rng(5)
    noise = discrete_gaussian_array(noise_std, (1, B.shape[1]), rng, scale_bits=0)
    response, share_b = ProductResponder(B, precision_bits=P, workers=1).respond(request, noise)
    n = int(pk.n)
    # the attacker's share by the honest formula for the operand it really encrypted (column sum lam)
    correction = pack_slots(np.full((1, B.shape[1]), -O * lam, dtype=object), lay, n)
    share_a = np.array([[(sk.raw_decrypt(int(c)) + int(correction[k, 0])) % n]
                        for k, c in enumerate(response.ciphertexts)], dtype=object)
    total = combine_packed_shares(share_a, share_b, layout=lay, n_cols=1, modulus=n, encryptor="party mallory")
    return total, lay


def test_an_operand_amplified_inside_its_slots_passes_the_slot_check_but_not_the_magnitude_check(keypair):
    B = np.random.default_rng(1).uniform(0.5, 1.0, (ROWS, 2))
    B_int = np.round(B * 2**P).astype(np.int64)
    lam = 1 << (P + 20)                         # a 2^20-fold amplification of the largest honest value 2^P
    sigma = 3.0 * 2**P                          # a noise std in raw units, as the coordinator derives it
    total, lay = _amplified_product(keypair, lam, B, sigma)
    # the slot check alone lets it through: the combined block is lam b_3 + noise (the leak this test stops)
    assert all(abs(int(total[0, k]) - lam * int(B_int[3, k])) < 60 * sigma for k in range(2))
    with pytest.raises(ProtocolError, match="party mallory's operand is amplified"):
        check_product_magnitude(total, lay, sigma, block="M[0,1]", encryptor="party mallory")


def test_the_largest_honest_operand_and_a_noise_tail_pass(keypair):
    """An honest operand at the encoding bound (every a = 1, every b = 1: the noise-free bound n O^2) with noise
    draws of 8 standard deviations passes; the same block scaled beyond 1.5 n O is refused."""
    pk, sk = keypair
    sigma = 2.0 * 2**P
    lay = ProductEncryptor(sk, np.zeros((ROWS, 1)), response_cols=1, precision_bits=P).layout
    extreme = np.array([[lay.n_rows * lay.offset**2 + int(8 * sigma)]], dtype=object)
    check_product_magnitude(extreme, lay, sigma, block="M[0,1]", encryptor="party alice")
    check_product_magnitude(-extreme, lay, sigma, block="M[0,1]", encryptor="party alice")
    beyond = np.array([[2 * lay.n_rows * lay.offset**2 + int(60 * sigma)]], dtype=object)
    with pytest.raises(ProtocolError, match="party alice"):
        check_product_magnitude(beyond, lay, sigma, block="M[0,1]", encryptor="party alice")
