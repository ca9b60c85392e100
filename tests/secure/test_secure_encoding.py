"""Fixed-point offset encoding and slot packing: exact integers, bounds, overflow detection."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, DataValidationError, EncodingOverflowError
from vfl.secure.encoding import (
    decode_products,
    encode_offset,
    inner_product_error_bound,
    offset,
    to_fixed_point_ints,
)
from vfl.secure.packing import SlotLayout, pack, unpack


def test_quantize_rounds_to_one_agreed_exponent_and_handles_negatives_and_extremes():
    X = np.array([[0.0, -1.0, 1.0], [0.5, -0.25, 2.0**-24], [-(2.0**-25), 1 - 2.0**-30, -0.3]])
    q = to_fixed_point_ints(X, 24, 1.0)
    assert q.dtype == object
    assert q[0].tolist() == [0, -(2**24), 2**24]
    assert q[1].tolist() == [2**23, -(2**22), 1]
    assert q[2, 0] == 0 and q[2, 1] == 2**24
    assert q[2, 2] == round(-0.3 * 2**24)


def test_encode_offset_is_non_negative_and_returns_owner_column_sums():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (50, 4))
    enc, sums = encode_offset(X, 20, 1.0)
    O = offset(20, 1.0)
    assert all(0 <= v <= 2 * O for v in enc.ravel())
    assert sums.tolist() == to_fixed_point_ints(X, 20, 1.0).sum(axis=0).tolist()


def test_values_outside_bound_or_non_finite_raise_before_encoding():
    with pytest.raises(EncodingOverflowError, match="value_bound"):
        to_fixed_point_ints(np.array([[1.0000001]]), 24, 1.0)
    with pytest.raises(DataValidationError):
        to_fixed_point_ints(np.array([[np.nan]]), 24, 1.0)
    with pytest.raises(ConfigurationError):
        to_fixed_point_ints(np.zeros((1, 1)), 60, 1.0)
    with pytest.raises(ConfigurationError):
        to_fixed_point_ints(np.zeros((1, 1)), 24, -1.0)


def test_decode_and_error_bound_against_numpy():
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-1, 1, 1000), rng.uniform(-1, 1, 1000)
    qa, qb = to_fixed_point_ints(a, 16, 1.0), to_fixed_point_ints(b, 16, 1.0)
    raw = np.array([sum(int(x) * int(y) for x, y in zip(qa, qb, strict=True))], dtype=object)
    err = abs(decode_products(raw, 16)[0] - a @ b)
    assert 0 < err <= inner_product_error_bound(1000, 16, 1.0)


def test_slot_layout_widths_follow_the_documented_formula():
    lay = SlotLayout(key_bits=2048, n_rows=517, precision_bits=24, value_bound=1.0, noise_bits=80)
    O = 2**24
    v = (517 * (2 * O) ** 2 + 2 * 2**80).bit_length()
    assert lay.value_bits == v and lay.slot_bits == v + 9 and lay.guard_bits == 8
    assert lay.slots_per_ciphertext == 2047 // (v + 9)
    assert lay.exponent_bits == 26
    assert lay.n_groups(13) == 1 and lay.n_groups(lay.slots_per_ciphertext + 1) == 2
    assert list(lay.group_columns(30, 1)) == list(range(lay.slots_per_ciphertext, 30))


def test_slot_layout_refuses_weak_masks_and_impossible_layouts():
    with pytest.raises(ConfigurationError, match="guard_bits"):
        SlotLayout(2048, 10, 24, 1.0, 80, guard_bits=7)
    with pytest.raises(EncodingOverflowError, match="rows"):
        SlotLayout(512, 10, 24, 1.0, noise_bits=505)  # one slot would not fit a 512-bit plaintext
    with pytest.raises(EncodingOverflowError):
        SlotLayout(2048, 0, 24, 1.0, 80)


def test_pack_unpack_roundtrip_and_overflow():
    vals = [0, 1, 2**60 - 1, 12345]
    packed = pack(vals, 60)
    assert unpack(packed, 60, 4) == vals
    with pytest.raises(EncodingOverflowError):
        pack([2**60], 60)
    with pytest.raises(EncodingOverflowError):
        pack([-1], 60)
    with pytest.raises(EncodingOverflowError, match="beyond its slots"):
        unpack(packed + (1 << 240), 60, 4)
