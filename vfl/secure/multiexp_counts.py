"""Exact multiplication counts of the responder's multi-exponentiations, and the sorted-exponent method (issue 34).

The responder of a packed product computes, per own column ``k``, ``y_k = prod_i c_i^{e_ik} mod n^2`` over the same
``n`` bases ``c_i`` for every column: a multi-output multi-exponentiation with ``p`` outputs and ``b``-bit exponents.
Pippenger (*On the evaluation of powers and monomials*, SIAM J. Comput. 9, 1980; D. J. Bernstein, *Pippenger's
exponentiation algorithm*, 2002) bounds it asymptotically by ``H / lg H`` multiplications, ``H = p n b``: about 1.06
per row and column at ``n = 10^5, p = 10, b = 26``. That figure has no lower-order terms: every method below, each
counted exactly on the exponents of a run, needs about two per row and column at that size (``docs/secure_products.md``,
*Multi-output multi-exponentiation*):

* :func:`bucket_mults`: Pippenger's bucket method with window ``c`` (``fastmath.multiexp``, ``BucketAccumulator``);
* :func:`sorted_mults` / :func:`multiexp_sorted`: sort the bases by exponent, ``R_j = prod_{l <= j} c_(l)`` (one
  multiplication each), then ``prod_i c_i^{e_i} = prod_j R_j^{e_(j) - e_(j+1)}`` (Abel summation) with the bucket
  method on the gaps, which have about ``b - lg n`` bits (Bos & Coster's reduction, *Addition chain heuristics*,
  CRYPTO '89, in one pass). It needs every base at once, so it does not stream.

The counts are pure functions of the exponents (numpy), so they price a floor without big-number arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vfl.secure.bigint import mpz
from vfl.secure.fastmath import _multiexp_python, multiexp_cost


def _as_array(exponents: Any) -> np.ndarray:
    e = np.asarray(exponents, dtype=np.int64)
    if e.ndim != 1 or (e.size and e.min() < 0):
        raise ValueError("exponents must be a 1-d array of non-negative integers below 2^63")
    return e


def bucket_mults(exponents: Any, window: int) -> int:
    """Multiplications :func:`vfl.secure.fastmath.multiexp` (Python loops) performs with window ``window``: per window
    one per base joining a non-empty bucket, the running product and sum of the buckets, ``window`` squarings and one
    multiplication per window after the first non-empty one."""
    e = _as_array(exponents)
    e = e[e > 0]
    if e.size == 0:
        return 0
    n_windows = math.ceil(int(e.max()).bit_length() / window)
    mask, total, started = (1 << window) - 1, 0, False
    for w in range(n_windows - 1, -1, -1):
        if started:
            total += window
        digits = (e >> (w * window)) & mask
        digits = digits[digits > 0]
        if digits.size == 0:
            continue
        distinct = np.unique(digits)
        total += (digits.size - distinct.size) + (distinct.size - 1) + (int(distinct.max()) - 1)
        total += 1 if started else 0
        started = True
    return total


def best_bucket_mults(exponents: Any) -> tuple[int, int]:
    """``(multiplications, window)`` of the cheapest window for :func:`bucket_mults` on these exponents."""
    return min((bucket_mults(exponents, c), c) for c in range(1, 21))


def sorted_gaps(exponents: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(order, gaps)``: the non-zero exponents' indices by decreasing exponent and ``e_(j) - e_(j+1)`` (the last
    gap is the smallest exponent itself)."""
    e = _as_array(exponents)
    order = np.nonzero(e)[0]
    order = order[np.argsort(-e[order], kind="stable")]
    s = e[order]
    gaps = np.empty_like(s)
    gaps[:-1] = s[:-1] - s[1:]
    if s.size:
        gaps[-1] = s[-1]
    return order, gaps


def _gap_window(gaps: np.ndarray) -> int:
    """The window ``c`` minimising the estimated bucket cost of the gaps: per window ``w`` one multiplication per gap
    with a digit there (``#{g >= 2^(c w)}``) plus its largest digit (the running sum of the buckets), and ``c``
    squarings. The gaps are about exponentially distributed, so their high windows are nearly empty, which
    ``best_bucket_window``'s dense model ignores."""
    s = np.sort(gaps[gaps > 0])
    top = int(s[-1])

    def cost(c: int) -> int:
        windows = math.ceil(top.bit_length() / c)
        return sum(s.size - int(np.searchsorted(s, 1 << (c * w))) + min((1 << c) - 1, top >> (c * w))
                   for w in range(windows)) + (windows - 1) * c

    return min(range(1, 21), key=cost)


def sorted_mults(exponents: Any) -> int:
    """Multiplications of :func:`multiexp_sorted`: ``m - 1`` running products over the ``m`` non-zero exponents plus
    the bucket multi-exponentiation of their gaps (window by ``best_bucket_window`` for the non-zero gaps)."""
    order, gaps = sorted_gaps(exponents)
    return 0 if order.size == 0 else order.size - 1 + bucket_mults(gaps, _gap_window(gaps))


def multiexp_sorted(bases: Sequence[Any], exponents: Sequence[int], modulus: Any) -> tuple[Any, int]:
    """``(prod_i bases[i]^exponents[i] mod N, multiplications)`` by the sorted-exponent method (module docstring):
    the same value as :func:`vfl.secure.fastmath.multiexp`, since both compute the same product modulo ``N``."""
    if len(bases) != len(exponents):
        raise ValueError("multiexp_sorted needs one exponent per base")
    order, gaps = sorted_gaps(exponents)
    if order.size == 0:
        return mpz(1), 0
    running, prefix = None, []
    for i in order.tolist():
        running = mpz(bases[i]) if running is None else running * bases[i] % modulus
        prefix.append(running)
    g = gaps.tolist()
    window = _gap_window(gaps)
    value, mults = _multiexp_python(prefix, g, modulus, window, max(int(x).bit_length() for x in g))
    return value, mults + order.size - 1


def pippenger_bound(n: int, outputs: int, exponent_bits: int) -> float:
    """Pippenger's asymptotic ``H / lg H`` (``H = p n b``) per row and output, without its lower-order terms."""
    h = n * outputs * exponent_bits
    return h / math.log2(h) / (n * outputs)


def multi_output_counts(E: Any, kept_window: int) -> dict[str, float]:
    """Multiplications per row and column of each method on the exponent matrix ``E`` (rows x columns): the bucket
    bound vfl's floor used (``ceil(b / c)(n + 2^(c+1))``), the buckets vfl keeps (window ``kept_window``), the best
    window, the sorted-exponent method, the best of them per column, and Pippenger's asymptotic figure."""
    E = np.asarray(E, dtype=np.int64)
    n, p = E.shape
    bits = int(E.max()).bit_length()
    cols = [E[:, k] for k in range(p)]
    kept = sum(bucket_mults(e, kept_window) for e in cols)
    best_bucket = sum(best_bucket_mults(e)[0] for e in cols)
    sort = sum(sorted_mults(e) for e in cols)
    best = sum(min(best_bucket_mults(e)[0], sorted_mults(e)) for e in cols)
    per = float(n * p)
    return {"bound_model": multiexp_cost(n, bits) / n, "kept_buckets": kept / per, "best_window": best_bucket / per,
            "sorted": sort / per, "best": best / per, "pippenger_asymptotic": pippenger_bound(n, p, bits),
            "exponent_bits": bits}
