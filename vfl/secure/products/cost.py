"""Who encrypts: the work model of a packed secure product for either side as key holder (see
:mod:`vfl.secure.products`)."""

from __future__ import annotations

from typing import Any

from vfl.secure.encoding import DEFAULT_PRECISION_BITS
from vfl.secure.fastmath import (
    multiexp_cost,
)
from vfl.secure.packing import SlotLayout, default_noise_bits

_ENC_COST = {"short-exponent": 40, "standard": 530}  # per encryption, in mulmods modulo n^2 (measured)
_RERAND_COST = 1900  # responder's full-size r^n mod n^2 without the factors (~15 ms / ~8 us per mulmod, 2048 bits)
_DEC_COST = 500


def product_cost(n: int, d_enc: int, d_resp: int, *, key_bits: int = 2048,
                 precision_bits: int = DEFAULT_PRECISION_BITS, value_bound: float = 1.0,
                 noise_bits: int | None = None, randomness: str = "short-exponent") -> int:
    """Estimated work (multiplications modulo ``n^2``) when the ``d_enc`` side encrypts."""
    lay = SlotLayout(key_bits, n, precision_bits, float(value_bound),
                     default_noise_bits(precision_bits) if noise_bits is None else noise_bits)
    G = lay.n_groups(d_enc)
    per_column = multiexp_cost(n, lay.exponent_bits) + _RERAND_COST + _DEC_COST
    return G * n * _ENC_COST[randomness] + d_resp * G * per_column


def choose_encryptor(n: int, d_a: int, d_b: int, **layout: Any) -> str:
    """``"a"`` or ``"b"``: which side should hold the key and encrypt so that total work is smallest.

    The encryptor's columns are packed for free (``ceil(d / s)`` ciphertexts per row) while each
    responder column costs a multi-exponentiation, so the wider side encrypts when it fits in one group.
    """
    return "a" if product_cost(n, d_a, d_b, **layout) <= product_cost(n, d_b, d_a, **layout) else "b"
