"""vfl.secure.packing: slot widths, slots per plaintext, pack/unpack and overflow refusal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vfl.exceptions import ConfigurationError, EncodingOverflowError
from vfl.secure.encoding import offset
from vfl.secure.packing import DEFAULT_GUARD_BITS, MIN_GUARD_BITS, SlotLayout, default_noise_bits, pack, unpack


def test_layout_widths_follow_the_documented_formulas():
    layout = SlotLayout(key_bits=2048, n_rows=1000, precision_bits=16, value_bound=1.0, noise_bits=64)
    o = offset(16, 1.0)
    assert layout.offset == o and layout.max_accumulation == 1000 * (2 * o) ** 2
    v = (1000 * (2 * o) ** 2 + 2 * 2**64).bit_length()
    assert layout.value_bits == v and layout.slot_bits == v + DEFAULT_GUARD_BITS + 1
    assert layout.slots_per_ciphertext == (2048 - 1) // layout.slot_bits
    s = layout.slots_per_ciphertext
    assert layout.n_groups(s) == 1 and layout.n_groups(s + 1) == 2
    assert list(layout.group_columns(s + 1, 1)) == [s]
    assert default_noise_bits(16) == 64


def test_a_packed_plaintext_stays_below_the_key_modulus():
    layout = SlotLayout(key_bits=1024, n_rows=50, precision_bits=12, value_bound=1.0, noise_bits=56)
    top = [(1 << layout.slot_bits) - 1] * layout.slots_per_ciphertext
    assert pack(top, layout.slot_bits).bit_length() <= 1024 - 1


@given(st.lists(st.integers(0, 2**40 - 1), min_size=1, max_size=8))
def test_unpack_inverts_pack(values):
    assert unpack(pack(values, 40), 40, len(values)) == values


def test_overflowing_values_and_layouts_are_refused():
    with pytest.raises(EncodingOverflowError, match="does not fit"):
        pack([1 << 8], 8)
    with pytest.raises(EncodingOverflowError, match="beyond its slots"):
        unpack(1 << 16, 8, 2)
    with pytest.raises(EncodingOverflowError, match="more than a"):
        SlotLayout(key_bits=128, n_rows=10**6, precision_bits=40, value_bound=1.0, noise_bits=120)
    with pytest.raises(ConfigurationError, match="guard_bits"):
        SlotLayout(key_bits=2048, n_rows=10, precision_bits=16, value_bound=1.0, noise_bits=64,
                   guard_bits=MIN_GUARD_BITS - 1)


def test_the_guard_band_replaces_the_former_40_bit_mask_slack_and_packs_more_slots():
    """Forest shape (n = 517, p = 24, noise_bits = 2p + 32): v = 82, so w = 91 and 22 slots per 2048-bit plaintext
    (w = 123 and 16 slots with the former kappa = 40); a larger guard is still accepted."""
    lay = SlotLayout(key_bits=2048, n_rows=517, precision_bits=24, value_bound=1.0, noise_bits=80)
    assert (lay.value_bits, lay.guard_bits, lay.slot_bits, lay.slots_per_ciphertext) == (82, 8, 91, 22)
    wide = SlotLayout(key_bits=2048, n_rows=517, precision_bits=24, value_bound=1.0, noise_bits=80, guard_bits=40)
    assert (wide.slot_bits, wide.slots_per_ciphertext) == (123, 16)
