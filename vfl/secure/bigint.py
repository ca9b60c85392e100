"""Big-integer primitives on gmpy2 when it is installed, on Python ints otherwise (the role of phe's ``phe/util.py``).

``mpz``, ``powmod``, ``invert``, ``gcd`` and ``legendre`` behave the same on both backends (gmpy2's are 7-12x
faster on 2048-bit Paillier numbers); ``HAVE_GMPY2`` says which one is loaded. A leaf: it imports no other vfl module,
so :mod:`vfl.secure.fastmath` and the C loops' wrapper :mod:`vfl.secure.native` both build on it (issue 30 cut the
import cycle between those two).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["HAVE_GMPY2", "mpz", "powmod", "invert", "gcd", "legendre"]

try:  # pragma: no cover - exercised by whichever backend is installed
    import gmpy2

    HAVE_GMPY2 = True
    mpz: Callable[[int], Any] = gmpy2.mpz
    powmod: Callable[[Any, Any, Any], Any] = gmpy2.powmod
    invert: Callable[[Any, Any], Any] = gmpy2.invert
    gcd: Callable[[Any, Any], Any] = gmpy2.gcd
    legendre: Callable[[Any, Any], int] = gmpy2.legendre
except ImportError:  # pragma: no cover
    HAVE_GMPY2 = False
    mpz = int

    def powmod(b: Any, e: Any, m: Any) -> Any:
        """``b^e mod m``."""
        return pow(b, e, m)

    def invert(a: Any, m: Any) -> Any:
        """``a^-1 mod m`` (``ValueError`` when it does not exist)."""
        return pow(a, -1, m)

    gcd = math.gcd

    def legendre(a: Any, p: Any) -> int:
        """The Legendre symbol ``(a / p)`` for an odd prime ``p`` (Euler's criterion)."""
        r = pow(a, (p - 1) // 2, p)
        return -1 if r == p - 1 else int(r)
