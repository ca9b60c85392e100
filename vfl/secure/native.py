"""The optional C inner loops (``vfl.secure._fastloops``, issue 25) behind the interfaces of :mod:`vfl.secure.fastmath`.

Python spends 7-8 µs per modular multiplication of 2048-bit Paillier ciphertexts where GMP itself needs about 5:
the responder's Pippenger buckets (one multiplication modulo ``n^2`` per row, column and exponent window) and the
key holder's fixed-base tables (``ceil(256 / c)`` multiplications modulo ``p^2`` and ``q^2`` per ciphertext) run
here in C when setup.py could build the extension (a C compiler and GMP's headers), and in
:class:`fastmath.BucketAccumulator` / :class:`fastmath.FixedBaseTable` otherwise. Both perform the same
multiplications in the same order, so results (and multiplication counts) are bit-identical; the test suite runs
both on the same inputs (tests/secure/test_secure_native.py). ``VFL_PURE_PYTHON=1`` forces the Python loops.

The interface to C is bytes and small ints: big integers as big-endian bytes, exponents as ``uint64`` arrays.
Every count, width and exponent range is checked in C before use; ciphertext values are validated by
:mod:`vfl.secure.keys` before they reach a bucket.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

PURE_PYTHON_VARIABLE = "VFL_PURE_PYTHON"
NO_IFMA_VARIABLE = "VFL_NO_IFMA"
"""Set (like ``VFL_PURE_PYTHON``): the C buckets and the key holder's fixed-base tables (read when a table is built) use
GMP's one-at-a-time Montgomery product even where the CPU has AVX-512 IFMA (issue 34: eight products per call,
``vfl/secure/_ifma52.h``); the results are identical."""
MAX_EXPONENT_BITS = 64
"""The C buckets take exponents as ``uint64``; wider exponents use the Python loops."""
REQUIRED = ("Buckets", "FixedBase", "GMP_VERSION", "crt_encrypt", "mulmod_repeat")
"""What this module calls in the extension: a build that lacks one (compiled from older sources) is not used."""


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def pure_python_requested() -> bool:
    """``VFL_PURE_PYTHON`` is set to a true value (anything but empty, 0, false, no, off)."""
    return _flag(PURE_PYTHON_VARIABLE)


def ifma_buckets() -> bool:
    """The C buckets multiply eight products per AVX-512 IFMA call (the CPU has it and ``VFL_NO_IFMA`` is unset)."""
    return fastloops is not None and bool(getattr(fastloops, "IFMA", 0)) and not _flag(NO_IFMA_VARIABLE)


def _load() -> tuple[ModuleType | None, str]:
    if pure_python_requested():
        return None, f"pure Python ({PURE_PYTHON_VARIABLE} is set)"
    try:
        from vfl.secure import _fastloops  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"pure Python (the optional C extension is not built: {exc})"
    missing = [name for name in REQUIRED if not hasattr(_fastloops, name)]
    if missing:   # a stale build: fall back as a whole rather than fail with an AttributeError mid-run
        return None, (f"pure Python (the C extension is stale, it lacks {', '.join(missing)}: rebuild it with "
                      "pip install -e .)")
    ifma = getattr(_fastloops, "IFMA", 0) and not _flag(NO_IFMA_VARIABLE)
    simd = " and AVX-512 IFMA buckets and encryption" if ifma else ""
    return _fastloops, f"C (vfl.secure._fastloops on GMP {_fastloops.GMP_VERSION}{simd})"


fastloops, IMPLEMENTATION = _load()
"""The loaded extension module (``None``: Python loops) and the one line ``vfl --version`` and ``vfl --help`` print."""


def _to_bytes(x: Any) -> bytes:
    x = int(x)
    if x < 0:
        raise ValueError("big integers passed to the C loops must be non-negative")
    return x.to_bytes(max(1, (x.bit_length() + 7) // 8), "big")


def exponent_array(exponents: Any, bits: int) -> np.ndarray:
    """``exponents`` as a C-contiguous ``uint64`` array after checking ``0 <= e < 2^bits`` (``bits <= 64``)."""
    import numpy as np  # not at import time: ``vfl --help`` names the implementation without loading numpy

    arr = np.asarray(exponents)
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=np.uint64)
    if arr.dtype.kind not in "iuO":
        raise ValueError(f"exponents must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "O" and not all(isinstance(v, (int, np.integer)) for v in arr.flat):
        raise ValueError("exponents must be integers")
    low, high = arr.min(), arr.max()
    if low < 0 or int(high) >> bits:
        raise ValueError(f"exponents must lie in [0, 2^{bits})")
    return np.ascontiguousarray(arr, dtype=np.uint64)


class CBucketAccumulator:
    """:class:`fastmath.BucketAccumulator` with its bucket loop and combination in C (same results and counts)."""

    def __init__(self, n_products: int, exponent_bits: int, window: int, modulus: Any,
                 simd: bool | None = None) -> None:
        """``simd``: None = eight products per AVX-512 IFMA call where the CPU has it, the modulus is odd and a row
        fills the lanes (at least 8 products x windows), unless ``VFL_NO_IFMA`` is set; True = required (ValueError
        without IFMA); False = GMP's Montgomery product. The results and counts are the same in every case."""
        if fastloops is None:
            raise RuntimeError(f"the C loops are not available: {IMPLEMENTATION}")
        if window > 16:
            raise ValueError("window must be at most 16")
        self.window = window
        self.n_windows = max(1, math.ceil(exponent_bits / window))
        if window * self.n_windows > MAX_EXPONENT_BITS + window - 1:
            raise ValueError(f"the C buckets take exponents of at most {MAX_EXPONENT_BITS} bits")
        self.modulus = modulus
        self.n_products = n_products
        self._bits = min(window * self.n_windows, MAX_EXPONENT_BITS)
        mode = -1 if simd is None else int(simd)
        if simd is None and not ifma_buckets():
            mode = 0
        self._c = fastloops.Buckets(n_products, window, self.n_windows, _to_bytes(modulus), mode)

    @property
    def simd(self) -> bool:
        """True: this accumulator's bucket products run eight at a time on AVX-512 IFMA."""
        return bool(self._c.simd)

    @property
    def mults(self) -> int:
        return int(self._c.mults)

    def add(self, product: int, bases: Sequence[Any], exponents: Sequence[int]) -> None:
        """Put ``bases[i]`` into the buckets of ``product`` by the digits of ``exponents[i]`` (see the Python class)."""
        if len(bases) != len(exponents):
            raise ValueError("add needs one exponent per base")
        if not 0 <= product < self.n_products:
            raise IndexError("no such product")
        if not bases:
            return
        values = [int(b) for b in bases]
        if min(values) < 0:
            raise ValueError("bases must be non-negative")
        width = max(1, max((v.bit_length() + 7) // 8 for v in values))
        frame = b"".join(v.to_bytes(width, "big") for v in values)
        exps = exponent_array([[int(e)] for e in exponents], self._bits)
        self._c.add(frame, width, 1, exps.tobytes(), 1, product)

    def add_frame(self, frame: bytes, width: int, n_groups: int, block: Any) -> None:
        """Every ciphertext of a validated chunk frame (rows x ``n_groups``, ``width`` bytes each) into the buckets
        of products ``k n_groups + g`` with the exponents ``block[:, k]`` (rows x columns)."""
        exps = exponent_array(block, self._bits)
        if exps.ndim != 2:
            raise ValueError("the exponent block must be rows x columns")
        self._c.add(bytes(frame), width, n_groups, exps.tobytes(), exps.shape[1], 0)

    def result(self, product: int) -> Any:
        """``prod_i bases_i^{e_i} mod N`` over everything added to ``product`` (its buckets are then released)."""
        from vfl.secure.bigint import mpz

        return mpz(int.from_bytes(self._c.result(product), "big"))


class CFixedBaseTable:
    """:class:`fastmath.FixedBaseTable` with the table and the lookups in C (same table, same results)."""

    def __init__(self, base: Any, modulus: Any, exponent_bits: int, window: int) -> None:
        if fastloops is None:
            raise RuntimeError(f"the C loops are not available: {IMPLEMENTATION}")
        self.modulus = modulus
        self.window = window
        self.n_windows = math.ceil(exponent_bits / window)
        self._bits = self.window * self.n_windows
        self._nbytes = (self._bits + 7) // 8
        self._c = fastloops.FixedBase(_to_bytes(base), _to_bytes(modulus), window, self.n_windows)

    def pow(self, exponent: int) -> Any:
        """``base^exponent mod N`` for ``0 <= exponent < 2^(c K)``."""
        from vfl.secure.bigint import mpz

        exponent = int(exponent)
        if exponent < 0 or exponent >> self._bits:
            raise ValueError(f"the exponent must lie in [0, 2^{self._bits})")
        return mpz(int.from_bytes(self._c.pow(exponent.to_bytes(self._nbytes, "little")), "big"))


def c_multiexp(bases: Sequence[Any], exponents: Sequence[int], modulus: Any, window: int,
               exponent_bits: int) -> tuple[int, int] | None:
    """:func:`fastmath.multiexp` by the C buckets: ``(value, multiplications counted as multiexp counts them)``, or
    ``None`` where the C loops do not apply (not built, even modulus, a base not below it, exponents over 64 bits)."""
    m = int(modulus)
    if fastloops is None or not m % 2 or exponent_bits > MAX_EXPONENT_BITS or window > 16:
        return None
    values = [int(b) for b in bases]
    if not values or min(values) < 0 or max(values) >= m:
        return None
    acc = CBucketAccumulator(1, exponent_bits, window, m)
    width = (m.bit_length() + 7) // 8
    acc.add_frame(b"".join(v.to_bytes(width, "big") for v in values), width, 1,
                  [[int(e)] for e in exponents])
    value = int(acc.result(0))
    return value, acc.mults + int(acc._c.combination_mults)


def crt_encrypt(table_p: CFixedBaseTable, table_q: CFixedBaseTable, plaintexts: Sequence[int],
                alphas: Sequence[int], n: Any, p2_inv_q2: Any, width: int) -> bytes:
    """``(1 + m n) CRT(h_s^alpha mod p^2, h_s^alpha mod q^2) mod n^2`` for every pair ``(m, alpha)``, in one C call,
    as ``width``-byte big-endian ciphertexts: the integers of :meth:`fastmath.Encrypter.encrypt_frame`'s loop."""
    if fastloops is None:
        raise RuntimeError(f"the C loops are not available: {IMPLEMENTATION}")
    if len(plaintexts) != len(alphas):
        raise ValueError("crt_encrypt needs one exponent per plaintext")
    alpha_len = max(table_p._nbytes, table_q._nbytes)
    plain_len = (int(n).bit_length() + 7) // 8
    try:
        a = b"".join(int(x).to_bytes(alpha_len, "little") for x in alphas)
        m = b"".join(int(x).to_bytes(plain_len, "big") for x in plaintexts)
    except OverflowError as exc:
        raise ValueError("crt_encrypt: exponents and plaintexts must be non-negative and fit their tables") from exc
    return fastloops.crt_encrypt(table_p._c, table_q._c, a, alpha_len, m, plain_len, _to_bytes(n),
                                 _to_bytes(p2_inv_q2), width)


def mulmod_repeat(a: int, b: int, modulus: int, count: int, montgomery: bool = False) -> int:
    """``count`` multiplications modulo ``N`` in C (the unit cost of one at C speed): ``a b^count mod N`` by GMP's
    ``mpz_mul`` + ``mpz_tdiv_r``, or with ``montgomery=True`` (odd ``N``, ``a, b < N``) by the Montgomery product the
    buckets use, which gives ``a b^count R^(-count) mod N`` with ``R = 2^(64 limbs(N))``."""
    if fastloops is None:
        raise RuntimeError(f"the C loops are not available: {IMPLEMENTATION}")
    out = fastloops.mulmod_repeat(_to_bytes(a), _to_bytes(b), _to_bytes(modulus), count, montgomery)
    return int.from_bytes(out, "big")
