"""Issue 14, item 1 (key-holder side): a hostile relay must not turn the key holder into a decryption oracle.

The red team's attack: the coordinator echoed bob's own request ciphertexts back as a "masked response"
declaring ``n_resp_cols = N``; bob decrypted all of them and his share revealed his whole table. The key holder
now decrypts only ``response_cols x n_groups`` ciphertexts, ``response_cols`` derived from the agreed plan.

FAST TESTS: 1024-bit INSECURE test keys (``allow_insecure=True``).
"""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ProtocolError
from vfl.secure import MaskedResponse, ProductEncryptor, ProductResponder, generate_keypair
from vfl.secure.encoding import to_fixed_point_ints
from vfl.secure.fastmath import cached_encrypter
from vfl.secure.keys import ciphertexts_to_bytes
from vfl.secure.packing import unpack
from vfl.secure.products import combine_packed_shares, pack_slots

P = 24


@pytest.fixture(scope="module")
def insecure_test_keypair():
    return generate_keypair(1024, allow_insecure=True)


def _echo_response(holder_header: dict, holder_frames: list[bytes], n_resp_cols: int, n_groups: int,
                   ciphertexts: list[int] | None = None, pk=None) -> tuple[dict, list[bytes]]:
    """What the hostile coordinator sends: the key holder's own request, re-labelled as a response."""
    header = {"kind": MaskedResponse.KIND, "version": 1, "session": holder_header["session"],
              "key_fingerprint": holder_header["key_fingerprint"],
              "ciphertext_bytes": holder_header["ciphertext_bytes"], "slot_bits": holder_header["slot_bits"],
              "n_enc_cols": holder_header["n_cols"], "n_resp_cols": n_resp_cols, "n_groups": n_groups}
    frames = holder_frames if ciphertexts is None else [ciphertexts_to_bytes(pk, ciphertexts)]
    return header, frames


def _recover_rows(share: np.ndarray, holder: ProductEncryptor) -> np.ndarray:
    """The attacker's decoding of an echoed packed share: ``S[i, g] + pack_g(O colsum_j) mod n = pack_g(a'_ij)``
    (row ``i``'s request ciphertext of group ``g``), so ``a_int_ij = unpack(...)_j - O``."""
    lay, O, d = holder.layout, holder.layout.offset, holder.n_cols
    col_sums = np.array(holder._col_sums, dtype=object).reshape(-1, 1)
    packed = pack_slots(O * col_sums * np.ones((1, share.shape[0]), dtype=object), lay, int(holder.public_key.n))
    rows = []
    for i in range(share.shape[0]):
        row = []
        for g in range(share.shape[1]):
            plain = (int(share[i, g]) + int(packed[i, g])) % int(holder.public_key.n)
            row += [v - O for v in unpack(plain, lay.slot_bits, len(lay.group_columns(d, g)))]
        rows.append(row)
    return np.array(rows, dtype=object)


def test_echoed_request_with_n_resp_cols_n_is_refused_before_any_decryption(insecure_test_keypair):
    """Regression for the red team's table-recovery attack (fails on the unfixed decrypt, which accepted it)."""
    pk, sk = insecure_test_keypair
    rng = np.random.default_rng(14)
    bob = rng.uniform(-1, 1, (12, 4))        # bob's raw table (the key holder's columns)
    seen: list[int] = []
    holder = ProductEncryptor(sk, bob, response_cols=3, precision_bits=P, workers=1, on_decrypt=seen.append)
    header, frames = holder.request().to_wire()
    n, G = bob.shape[0], header["n_groups"]
    echo_header, echo_frames = _echo_response(header, frames, n_resp_cols=n, n_groups=G)
    with pytest.raises(ProtocolError, match="expects"):
        holder.response_from_wire(echo_header, echo_frames)
    # even a response object that slipped past parsing is refused by decrypt itself
    echoed = MaskedResponse.from_wire(echo_header, echo_frames, pk)
    with pytest.raises(ProtocolError, match="agreed plan"):
        holder.decrypt(echoed)
    assert seen == []   # not one plaintext decrypted


def test_the_echo_attack_is_real_when_the_width_is_not_bounded(insecure_test_keypair):
    """The test above can fail: if the width the key holder accepts were N (what the unfixed decrypt effectively
    allowed, taking it from the response), a re-randomised echo reveals every raw value of bob's table — so the
    plan-derived width, not luck, is what stops the attack. A literal echo is caught even then."""
    pk, sk = insecure_test_keypair
    rng = np.random.default_rng(15)
    bob = rng.uniform(-1, 1, (6, 3))
    holder = ProductEncryptor(sk, bob, response_cols=6, precision_bits=P, workers=1)
    block = holder.request()
    header, frames = block.to_wire()
    G = block.n_groups
    echo_header, echo_frames = _echo_response(header, frames, n_resp_cols=6, n_groups=G)
    with pytest.raises(ProtocolError, match="echo"):
        holder.decrypt(holder.response_from_wire(echo_header, echo_frames))
    holder = ProductEncryptor(sk, bob, response_cols=6, precision_bits=P, workers=1)
    block = holder.request()
    header, _ = block.to_wire()
    enc = cached_encrypter(pk.n, randomness="standard")
    fresh = [int(enc.rerandomise(c)) for c in block.ciphertexts]
    h, f = _echo_response(header, [], n_resp_cols=6, n_groups=G, ciphertexts=fresh, pk=pk)
    share = holder.decrypt(holder.response_from_wire(h, f))
    assert _recover_rows(share, holder).tolist() == to_fixed_point_ints(bob, P, 1.0).tolist()


def test_rerandomised_echo_leaks_at_most_response_cols_rows(insecure_test_keypair):
    """A coordinator holding the public key can re-randomise the echo; then the plan-derived count is the bound:
    at most ``response_cols x n_groups`` plaintexts (here 2 of bob's 10 rows), never the table."""
    pk, sk = insecure_test_keypair
    rng = np.random.default_rng(16)
    bob = rng.uniform(-1, 1, (10, 3))
    seen: list[int] = []
    holder = ProductEncryptor(sk, bob, response_cols=2, precision_bits=P, workers=1, on_decrypt=seen.append)
    block = holder.request()
    header, _ = block.to_wire()
    enc = cached_encrypter(pk.n, randomness="standard")
    G = block.n_groups
    rerandomised = [int(enc.rerandomise(c)) for c in block.ciphertexts]
    # asking for all N rows is refused outright
    h_all, f_all = _echo_response(header, [], n_resp_cols=10, n_groups=G, ciphertexts=rerandomised, pk=pk)
    with pytest.raises(ProtocolError):
        holder.response_from_wire(h_all, f_all)
    assert seen == []
    # the plan's count goes through: 2 rows' worth of plaintexts, exactly response_cols x G decryptions
    h_two, f_two = _echo_response(header, [], n_resp_cols=2, n_groups=G, ciphertexts=rerandomised[: 2 * G], pk=pk)
    share = holder.decrypt(holder.response_from_wire(h_two, f_two))
    assert len(seen) == 2 * G
    leaked = _recover_rows(share, holder)
    assert leaked.shape == (2, 3)
    assert leaked.tolist() == to_fixed_point_ints(bob[:2], P, 1.0).tolist()  # documented residual (threat_model.md)


def test_honest_response_of_the_plan_width_still_decrypts(insecure_test_keypair):
    pk, sk = insecure_test_keypair
    rng = np.random.default_rng(17)
    A, B = rng.uniform(-1, 1, (9, 2)), rng.uniform(-1, 1, (9, 3))
    holder = ProductEncryptor(sk, A, response_cols=3, precision_bits=P, workers=1)
    block = holder.request()
    response, share_b = ProductResponder(B, precision_bits=P, workers=1).respond(block)
    share_a = holder.decrypt(holder.response_from_wire(*response.to_wire()))
    total = combine_packed_shares(share_a, share_b, layout=holder.layout, n_cols=2, modulus=int(pk.n))
    assert total.tolist() == to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0)).tolist()
    # a responder with one column too many (plan says 3) is refused
    holder2 = ProductEncryptor(sk, A, response_cols=3, precision_bits=P, workers=1)
    wide, _ = ProductResponder(np.hstack([B, B[:, :1]]), precision_bits=P, workers=1).respond(holder2.request())
    with pytest.raises(ProtocolError):
        holder2.response_from_wire(*wide.to_wire())


@pytest.mark.parametrize("cols", [0, -1, True, 2.5, None])
def test_response_cols_is_required_and_validated(insecure_test_keypair, cols):
    from vfl.exceptions import ConfigurationError

    _, sk = insecure_test_keypair
    with pytest.raises(ConfigurationError):
        ProductEncryptor(sk, np.ones((3, 1)), response_cols=cols, precision_bits=P)
    with pytest.raises(TypeError):
        ProductEncryptor(sk, np.ones((3, 1)), precision_bits=P)  # no default: the caller must derive it


def test_echo_tags_are_the_low_64_bits_of_each_ciphertext_and_stop_at_the_capacity():
    """The key holder's echo memory: exact membership of the low 64 bits of each fixed-width big-endian ciphertext
    in a frame, nothing beyond ``capacity`` (8 bytes per ciphertext, bounded whatever n is)."""
    from vfl.secure.products import EchoTags

    rng = np.random.default_rng(5)
    width = 24
    values = [int.from_bytes(rng.bytes(width), "big") for _ in range(10)]
    frame = b"".join(v.to_bytes(width, "big") for v in values)
    tags = EchoTags(capacity=7)
    tags.add_frame(frame[: 4 * width], width)
    tags.add_frame(frame[4 * width:], width)
    assert len(tags) == 7
    low = [v & ((1 << 64) - 1) for v in values]
    assert all(tags.contains_any([t]) for t in low[:7])
    assert not any(tags.contains_any([t]) for t in low[7:])         # beyond the capacity: not kept
    assert not tags.contains_any([t ^ 1 for t in low[:7]])           # a tag differing in one bit is not a hit
    assert tags.contains_any([low[8], low[2]]) and not tags.contains_any([])
    assert not EchoTags(4).contains_any([low[0]])                    # empty store
