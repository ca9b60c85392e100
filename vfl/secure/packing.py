"""Slot layout: several fixed-point slots per Paillier plaintext.

Slot ``(j, k)`` of a response accumulates ``X_jk = sum_i a'_ij b'_ik <= n (2 O)^2`` (offset encoding,
:mod:`vfl.secure.encoding`); once the two parties' packed shares are combined (:mod:`vfl.secure.products`) it holds
``u_jk + C`` with ``u = sum_i a_int b_int + noise^A + noise^B`` (each ``|noise| < N = 2^noise_bits``) and the public
centring constant ``C = 2^v``, where

    v = bitlen(n (2 O)^2 + 2 N)        (every honest u has |u| < 2^v, so u + C lies in (0, 2^(v+1)))
    w = v + g + 1                      (slot width: the top g bits of every honest slot are 0)

``g = guard_bits >= 8`` (default 8) is a guard band, not a mask: the responder masks the whole plaintext space
(:mod:`vfl.secure.products`), so no slot bit hides anything. The guard is what makes the coordinator's range check
(:func:`vfl.secure.products.combine_packed_shares`) meaningful: with ``g = 0`` every ``(v+1)``-bit pattern but 0 would
be an honest slot value. With ``g`` bits, a slot pushed up to ``2^g`` times beyond the declared range lands in the
guard and is refused deterministically; a larger deviation carries into the next slot or above the last one, which
the same check (and, for model releases, :func:`vfl.protocols.fm_release.check_product_magnitude`) sees. Until the
full-space mask the guard was ``kappa = 40`` bits of statistical slack for per-slot masks; 8 bits give 22 instead of
16 slots per 2048-bit plaintext at n = 517, p = 24 (docs/secure_products.md). A plaintext holds
``s = floor((bits(n) - 1) / w)`` slots, so a packed value is ``< 2^(s w) <= 2^(bits(n)-1) < n`` and never wraps
modulo ``n``. Every bound is computed before
encryption and rechecked by the responder from the header; a layout that cannot hold one slot raises
:class:`EncodingOverflowError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vfl.exceptions import ConfigurationError, EncodingOverflowError
from vfl.secure.encoding import check_precision, offset

MIN_GUARD_BITS = 8
"""Smallest guard band a party accepts (and the default): see the module docstring."""
DEFAULT_GUARD_BITS = MIN_GUARD_BITS
DEFAULT_NOISE_HEADROOM_BITS = 32
"""Default ``noise_bits = 2 p + 32``: noise up to ``2^32`` in real units fits a slot."""


def default_noise_bits(precision_bits: int) -> int:
    """``2 p + 32``: the noise bound ``|noise| < 2^32`` expressed in fixed-point units ``2^-2p``."""
    return 2 * precision_bits + DEFAULT_NOISE_HEADROOM_BITS


@dataclass(frozen=True)
class SlotLayout:
    """Public packing parameters agreed by both parties (all derivable from the request header)."""

    key_bits: int
    n_rows: int
    precision_bits: int
    value_bound: float
    noise_bits: int
    guard_bits: int = DEFAULT_GUARD_BITS

    def __post_init__(self) -> None:
        check_precision(self.precision_bits, self.value_bound)
        if isinstance(self.guard_bits, bool) or not isinstance(self.guard_bits, int) or not (
                MIN_GUARD_BITS <= self.guard_bits <= 1024):
            raise ConfigurationError(f"guard_bits must be an int in [{MIN_GUARD_BITS}, 1024], got {self.guard_bits!r}")
        if self.noise_bits < 1 or self.noise_bits > 4096:
            raise ConfigurationError(f"noise_bits must be in [1, 4096], got {self.noise_bits}")
        if self.n_rows < 1:
            raise EncodingOverflowError("a secure product needs at least one row")
        if self.slots_per_ciphertext < 1:
            raise EncodingOverflowError(
                f"{self.n_rows} rows need {self.slot_bits}-bit slots, more than a {self.key_bits}-bit plaintext holds"
            )

    @property
    def offset(self) -> int:
        """``O = ceil(V 2^p)``."""
        return offset(self.precision_bits, self.value_bound)

    @property
    def noise_offset(self) -> int:
        """``N = 2^noise_bits``: noise must satisfy ``|noise| < N``."""
        return 1 << self.noise_bits

    @property
    def max_accumulation(self) -> int:
        """Largest possible ``sum_i a'_ij b'_ik`` (``n (2O)^2``)."""
        return self.n_rows * (2 * self.offset) ** 2

    @property
    def value_bits(self) -> int:
        """``v``: the masked quantity ``X + noise + N`` is < ``2^v``."""
        return (self.max_accumulation + 2 * self.noise_offset).bit_length()

    @property
    def slot_bits(self) -> int:
        """``w = v + g + 1`` (``g`` = :attr:`guard_bits`)."""
        return self.value_bits + self.guard_bits + 1

    @property
    def slots_per_ciphertext(self) -> int:
        """``s = floor((bits(n) - 1) / w)``."""
        return (self.key_bits - 1) // self.slot_bits

    @property
    def exponent_bits(self) -> int:
        """Bits of a responder exponent ``b' in [0, 2O]``."""
        return (2 * self.offset).bit_length()

    def n_groups(self, n_cols: int) -> int:
        """Ciphertexts per row needed for ``n_cols`` packed columns."""
        return max(1, math.ceil(n_cols / self.slots_per_ciphertext))

    def group_columns(self, n_cols: int, group: int) -> range:
        """Columns packed in ciphertext ``group`` of a row."""
        s = self.slots_per_ciphertext
        return range(group * s, min(n_cols, (group + 1) * s))


def pack(values: list[int], slot_bits: int) -> int:
    """``sum_j values[j] 2^(j w)``; each value must lie in ``[0, 2^w)``."""
    limit = 1 << slot_bits
    packed = 0
    for j in range(len(values) - 1, -1, -1):
        v = int(values[j])
        if not 0 <= v < limit:
            raise EncodingOverflowError(f"slot value {v} does not fit in {slot_bits} bits")
        packed = (packed << slot_bits) | v
    return packed


def unpack(packed: int, slot_bits: int, n_slots: int) -> list[int]:
    """Inverse of :func:`pack`; raises :class:`EncodingOverflowError` if bits remain above the last slot."""
    packed = int(packed)
    mask = (1 << slot_bits) - 1
    out = []
    for _ in range(n_slots):
        out.append(packed & mask)
        packed >>= slot_bits
    if packed:
        raise EncodingOverflowError("decrypted plaintext has bits beyond its slots: the slot layout overflowed")
    return out
