"""Combining the shares of a packed secure product: the centring constant, packing signed slots, the coordinator's
range-checked combination (see :mod:`vfl.secure.products`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    ProtocolError,
)
from vfl.secure.encoding import decode_products
from vfl.secure.packing import SlotLayout


def combine_shares(*shares: np.ndarray, precision_bits: int) -> np.ndarray:
    """``sum(shares) 2^-2p`` as float64 (correctly rounded) for additive integer shares of a product (e.g. the
    exact integers of :meth:`ProductRun.combined`). Packed shares are combined by :func:`combine_packed_shares`."""
    if not shares:
        raise ConfigurationError("combine_shares needs at least one share")
    total = np.asarray(shares[0], dtype=object).copy()
    for s in shares[1:]:
        s = np.asarray(s, dtype=object)
        if s.shape != total.shape:
            raise DataValidationError(f"share shapes differ: {s.shape} vs {total.shape}")
        total = total + s
    return decode_products(total, precision_bits)


def centring_constant(layout: SlotLayout) -> int:
    """``C = 2^v`` (``v`` = :attr:`SlotLayout.value_bits`), added once to every slot of a response.

    Every legitimate slot value ``u = sum_i a_int_ij b_int_ik + noise^A_jk + noise^B_jk (+ local offsets)`` has
    ``|u| < 2^v`` (``|sum_i a_int b_int| <= n O^2``, each noise share ``< N``, an FM offset ``<= n O^2 / 2``, and
    ``v = bitlen(n (2O)^2 + 2N)``), so ``u + C`` lies in ``(0, 2^(v+1))``, inside the ``w = v + g + 1``-bit
    slot: its top ``g`` guard bits (:mod:`vfl.secure.packing`) are 0 in every honest run.
    """
    return 1 << layout.value_bits


def pack_slots(values: Any, layout: SlotLayout, modulus: int) -> np.ndarray:
    """``out[k, g] = pack_g(values[:, k]) = sum_{j in g} 2^(w slot(j)) values[j, k] mod n`` (``d_b x n_groups``).

    ``values`` is a signed integer array ``d_a x d_b``; packing is linear modulo ``n``, which is how each party
    folds its own corrections (column sums, noise share, offsets) into its packed share.
    """
    arr = np.asarray(values, dtype=object)
    if arr.ndim != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                for v in arr.flat):
        raise DataValidationError("packed values must be a 2-D integer array (fixed-point units 2**-(2p))")
    d_a, d_b = arr.shape
    G, w = layout.n_groups(d_a), layout.slot_bits
    out = np.empty((d_b, G), dtype=object)
    for k in range(d_b):
        for g in range(G):
            total = 0
            for slot, j in enumerate(layout.group_columns(d_a, g)):
                total += int(arr[j, k]) << (w * slot)
            out[k, g] = total % modulus
    return out


def add_packed(share: Any, values: Any, *, layout: SlotLayout, modulus: int) -> np.ndarray:
    """``share + pack_slots(values) mod n``: a party adds a local ``d_a x d_b`` integer term to its packed share."""
    return (np.asarray(share, dtype=object) + pack_slots(values, layout, modulus)) % modulus


def _packed_sum(shares: tuple[Any, ...], n_groups: int, modulus: int) -> np.ndarray:
    if not shares:
        raise ConfigurationError("combine_packed_shares needs at least one share")
    total: np.ndarray | None = None
    for s in shares:
        arr = np.asarray(s, dtype=object)
        if arr.ndim != 2 or arr.shape[1] != n_groups or (total is not None and arr.shape != total.shape):
            raise DataValidationError(f"packed shares must all have shape (d_resp, {n_groups}), got {arr.shape}")
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and 0 <= v < modulus
                   for v in arr.flat):
            raise DataValidationError("packed share entries must be integers in [0, n)")
        total = arr.copy() if total is None else total + arr
    assert total is not None
    return total


def combine_packed_shares(*shares: Any, layout: SlotLayout, n_cols: int, modulus: int,
                          encryptor: str = "the encryptor", responder: str | None = None) -> np.ndarray:
    """The product from its packed shares: ``d_a x d_b`` exact integers ``u_jk`` (units ``2^-2p``), range-checked.

    ``Z_kg = sum(shares) mod n`` is unpacked with the public layout (slot width ``w``, ``n_cols = d_a`` columns,
    ``layout.group_columns``); each slot must satisfy ``|slot - C| < 2^v`` (:func:`centring_constant`) and every bit
    of ``Z_kg`` above its last slot must be 0. An honest run always passes; anything the encryptor packed outside
    its declared slots (or an operand entry outside ``[0, 2O]``) lands there with overwhelming probability, so a
    failure raises :class:`ProtocolError` naming ``encryptor`` and, if given, ``responder``: a share corrupted by the
    responder has the same effect, and the coordinator cannot tell the two apart from the shares. The message
    never says which slot failed: it reaches every party (the coordinator's ABORT), and the position of the first
    failing slot would give a probing encryptor more than the one bit of the abort itself.
    """
    G = layout.n_groups(n_cols)
    culprit = "" if responder is None else f", or {responder} corrupted its share"
    refused = ProtocolError(f"secure product refused: {encryptor}'s encrypted operand is not what its request "
                            f"declared{culprit} (the combined block lies outside its declared slots); the run stops")
    total = _packed_sum(shares, G, modulus)
    C, w = centring_constant(layout), layout.slot_bits
    bound, mask = 1 << layout.value_bits, (1 << w) - 1
    out = np.empty((n_cols, total.shape[0]), dtype=object)
    for k in range(total.shape[0]):
        for g in range(G):
            z = int(total[k, g]) % modulus
            for j in layout.group_columns(n_cols, g):
                u = (z & mask) - C
                if not -bound < u < bound:
                    raise refused
                out[j, k] = u
                z >>= w
            if z:
                raise refused
    return out
