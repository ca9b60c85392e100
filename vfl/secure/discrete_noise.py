"""Exact discrete Laplace and discrete Gaussian samplers (Canonne, Kamath & Steinke, NeurIPS 2020).

Noise added inside a Paillier ciphertext must be an integer (units ``2^-2p``). Rounding a float draw
inherits the floating-point leaks of spec Sec. 6 pitfall 1 (Mironov 2012); instead these samplers
use only exact rational arithmetic (:class:`fractions.Fraction`) and uniform integers from the
injected :class:`numpy.random.Generator` (arbitrary size, by rejection):

* :func:`bernoulli_exp` -- ``Bernoulli(exp(-gamma))``, CKS Algorithm 1;
* :func:`discrete_laplace` -- ``P[Y = y] ∝ exp(-|y| s / t)``, CKS Algorithm 2;
* :func:`discrete_gaussian` -- ``P[Y = y] ∝ exp(-y^2 / (2 sigma^2))``, CKS Algorithm 3.

The discrete Gaussian ``N_Z(0, sigma^2)`` with integer sensitivity Delta is (Delta^2 / (2 sigma^2))-concentrated
DP like ``N(0, sigma^2)`` (CKS Thm. 4), and its variance is at most ``sigma^2`` (CKS Prop. 19). Its exact
(eps, delta) curve is *not* the continuous one when sigma is a few grid units: at sigma = 2, Delta = 1, eps = 1 its
delta is 7.25e-3 against the continuous 6.83e-3 (exact sums, CKS Thm. 7). At the same Delta/sigma on a finer grid
the curves meet (sigma = 2000, Delta = 1000: equal to 1e-6 relative; tests/secure/test_discrete_gaussian_delta.py).
With ``sigma`` and the sensitivity scaled by ``2^scale_bits`` (the networked release: millions of grid units and
more) the fixed-point grid is that fine. Note timing is not constant (CKS Sec. 6 discuss this side channel).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from vfl.exceptions import PrivacyParameterError

_CHUNK_BITS = 62


def uniform_below(rng: np.random.Generator, m: int) -> int:
    """Uniform integer in ``[0, m)`` for any ``m >= 1`` (62-bit chunks from ``rng``, rejection sampling)."""
    if m < 1:
        raise ValueError("uniform_below needs m >= 1")
    if m <= 1 << _CHUNK_BITS:
        return int(rng.integers(0, m))
    bits = (m - 1).bit_length()
    n_chunks = math.ceil(bits / _CHUNK_BITS)
    while True:
        x = 0
        for _ in range(n_chunks):
            x = (x << _CHUNK_BITS) | int(rng.integers(0, 1 << _CHUNK_BITS))
        x >>= n_chunks * _CHUNK_BITS - bits
        if x < m:
            return x


def bernoulli(rng: np.random.Generator, p: Fraction) -> bool:
    """Exact ``Bernoulli(p)`` for rational ``0 <= p <= 1``."""
    return uniform_below(rng, p.denominator) < p.numerator


def bernoulli_exp(rng: np.random.Generator, gamma: Fraction) -> bool:
    """Exact ``Bernoulli(exp(-gamma))`` for rational ``gamma >= 0`` (CKS 2020, Algorithm 1)."""
    if gamma < 0:
        raise ValueError("gamma must be >= 0")
    while gamma > 1:  # exp(-gamma) = exp(-1)^floor(gamma) exp(-(gamma - floor(gamma)))
        if not bernoulli_exp(rng, Fraction(1)):
            return False
        gamma -= 1
    k = 1
    while bernoulli(rng, gamma / k):
        k += 1
    return k % 2 == 1


def discrete_laplace(rng: np.random.Generator, s: int, t: int) -> int:
    """``P[Y = y] ∝ exp(-|y| s / t)`` for positive integers ``s, t`` (CKS 2020, Algorithm 2); scale ``t/s``."""
    if s < 1 or t < 1:
        raise ValueError("discrete_laplace needs positive integers s, t")
    while True:
        u = uniform_below(rng, t)
        if not bernoulli_exp(rng, Fraction(u, t)):
            continue
        v = 0
        while bernoulli_exp(rng, Fraction(1)):
            v += 1
        y = (u + t * v) // s
        negative = bernoulli(rng, Fraction(1, 2))
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian(rng: np.random.Generator, sigma2: Fraction) -> int:
    """``P[Y = y] ∝ exp(-y^2 / (2 sigma^2))`` for rational ``sigma^2 > 0`` (CKS 2020, Algorithm 3)."""
    if sigma2 <= 0:
        raise ValueError("sigma^2 must be > 0")
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
    while True:
        y = discrete_laplace(rng, 1, t)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(rng, gamma):
            return y


def discrete_gaussian_array(sigma: float, shape: tuple[int, ...], rng: np.random.Generator, *,
                            scale_bits: int = 0) -> np.ndarray:
    """Object array of i.i.d. ``N_Z(0, (sigma 2^scale_bits)^2)``: noise of std ``sigma`` in units ``2^-scale_bits``.

    ``sigma`` is converted exactly (``Fraction(float)``); one independent draw per entry.
    """
    if not (math.isfinite(sigma) and sigma > 0):
        raise PrivacyParameterError(f"noise sigma must be positive and finite, got {sigma!r}")
    sigma2 = (Fraction(sigma) * 2**scale_bits) ** 2
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = discrete_gaussian(rng, sigma2)
    return out


def discrete_laplace_array(scale: float, shape: tuple[int, ...], rng: np.random.Generator, *,
                           scale_bits: int = 0) -> np.ndarray:
    """Object array of i.i.d. discrete Laplace with scale ``b = scale 2^scale_bits`` (``P ∝ exp(-|y|/b)``)."""
    if not (math.isfinite(scale) and scale > 0):
        raise PrivacyParameterError(f"noise scale must be positive and finite, got {scale!r}")
    b = Fraction(scale) * 2**scale_bits
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = discrete_laplace(rng, b.denominator, b.numerator)
    return out
