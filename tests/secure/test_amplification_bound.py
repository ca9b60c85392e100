"""The coordinator's magnitude check of a combined cross block (issue 20, item 4: amplified operands).

Attacker: a malicious encryptor that sends ``lambda e_t`` (one row, offset-encoded, every other row 0) as its operand,
inside its declared slots, so that the slot range check of :func:`combine_packed_shares` passes and the released
block would be ``lambda b_t + noise``: the responder's row ``t`` with the DP noise divided by ``lambda``.
Invariant: a combined entry beyond ``1.5 n A B + 12 sqrt(2) sigma`` (what operands inside the public encoding bound
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
        check_product_magnitude(total, n_rows=ROWS, enc_bound=lay.offset, resp_bound=lay.offset, noise_std_raw=sigma,
                                block="M[0,1]", encryptor="party mallory")


def test_the_largest_honest_operand_and_a_noise_tail_pass(keypair):
    """An honest operand at the encoding bound (every a = 1, every b = 1: the noise-free bound n O^2) with noise
    draws of 8 standard deviations passes; the same block scaled beyond 1.5 n O is refused."""
    pk, sk = keypair
    sigma = 2.0 * 2**P
    lay = ProductEncryptor(sk, np.zeros((ROWS, 1)), response_cols=1, precision_bits=P).layout
    bounds = {"n_rows": ROWS, "enc_bound": lay.offset, "resp_bound": lay.offset // 3, "noise_std_raw": sigma}
    extreme = np.array([[ROWS * lay.offset * (lay.offset // 3) + int(8 * sigma)]], dtype=object)
    check_product_magnitude(extreme, **bounds, block="M[0,1]", encryptor="party alice")
    check_product_magnitude(-extreme, **bounds, block="M[0,1]", encryptor="party alice")
    beyond = np.array([[2 * ROWS * lay.offset * (lay.offset // 3) + int(60 * sigma)]], dtype=object)
    with pytest.raises(ProtocolError, match="party alice"):
        check_product_magnitude(beyond, **bounds, block="M[0,1]", encryptor="party alice")


@pytest.mark.parametrize("model, domain, mechanism", [("linear", "l2", "gaussian-fm"),
                                                      ("logistic", "l2", "gaussian-fm"),
                                                      ("linear", "linf", "laplace-fm")])
def test_honest_fm_releases_at_the_domain_bound_pass_the_coordinators_magnitude_check(model, domain, mechanism):
    """Every prepared value at its public bound (the worst case for the check) through the socket-free FM release:
    the coordinator's per-operand bounds (label / linf: 2^p, l2 features: c 2^p / sqrt(d)) never refuse an honest
    run, intercept and logistic offsets included."""
    from vfl.protocols.contracts import Registration
    from vfl.protocols.fm_release import FMCoordinator

    rows = 40
    regs = [Registration(peer=b"A", name="alice", n_rows=rows, features=["a0", "a1"], label_owner=True),
            Registration(peer=b"B", name="bob", n_rows=rows, features=["b0", "b1", "b2"], label_owner=False)]
    from vfl.protocols.settings import RunSettings

    coordinator = FMCoordinator(RunSettings(n_parties=2, model=model, mechanism=mechanism, epsilon=1.0,
                                            delta=1e-5, key_bits=1024, allow_insecure_keys=True,
                                            mechanism_options={"domain": domain},
                                            precision_bits=P), regs)
    d = coordinator.plan.n_features
    for block in coordinator.plan.cross_blocks():
        enc_b = coordinator._operand_bound(block, block.encryptor)
        resp_b = coordinator._operand_bound(block, block.responder)
        worst = np.array([[rows * enc_b * resp_b]], dtype=object)       # every row at both bounds, same sign
        offset = rows * max(enc_b, resp_b) * 2 ** (P - 1) if model == "logistic" and block.kind == "alpha" else 0
        check_product_magnitude(worst + offset, n_rows=rows, enc_bound=enc_b, resp_bound=resp_b,
                                noise_std_raw=coordinator._noise_std_raw(block), block=block.name, encryptor="x")
        if domain == "l2" and not coordinator.plan.label_operand(block, block.encryptor):
            assert enc_b < 2**P / np.sqrt(d) + 2          # the l2 bound is the tight one
    # the bound holds for the parties' real preparation of values at their public bounds (not only by definition)
    from vfl.fm.domain import ColumnBounds, prepare_party_block
    from vfl.privacy.fixed_point import prepare_fixed_point

    extreme = np.array([[-5.0, 5.0, 5.0]] * 3)
    U, _ = prepare_party_block(extreme, bounds=ColumnBounds(np.full(3, -5.0), np.full(3, 5.0)), domain=domain,
                               n_features_total=d)
    ints = np.rint(prepare_fixed_point(U, precision_bits=P, domain=domain, n_features_total=d) * 2**P)
    feature = next(b for b in coordinator.plan.cross_blocks() if b.kind == "M")
    assert np.max(np.abs(ints)) <= coordinator._operand_bound(feature, 1)
