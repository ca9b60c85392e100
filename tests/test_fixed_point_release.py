"""The networked single-party release works on the public 2^-p grid: exact integer Gram matrices and a
public shrink that keeps ||x|| <= 1 after rounding (no socket needed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vfl.domain import fixed_point_shrink, quantize
from vfl.fixed_point import exact_integer_gram


@pytest.mark.parametrize("bits,n", [(24, 2000), (33, 5000), (48, 300), (60, 4)])
def test_exact_integer_gram_equals_python_integer_arithmetic(bits, n):
    rng = np.random.default_rng(bits)
    A = rng.integers(-(2**bits), 2**bits, (n, 3), dtype=np.int64)
    B = rng.integers(-(2**bits), 2**bits, (n, 2), dtype=np.int64)
    assert (exact_integer_gram(A, B) == A.astype(object).T @ B.astype(object)).all()


@settings(max_examples=200, deadline=None)
@given(d=st.integers(1, 40), p=st.integers(4, 30), seed=st.integers(0, 2**32 - 1))
def test_shrink_then_round_keeps_rows_in_the_unit_ball(d, p, seed):
    """Adversarial rows: on the unit sphere, and with every coordinate half a grid step above a grid point."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=d)
    x /= np.linalg.norm(x)
    step = 2.0**-p
    nudged = (np.floor(np.abs(x) / step) + 0.5) * step * np.sign(x)
    nudged /= max(1.0, np.linalg.norm(nudged))
    c = fixed_point_shrink(d, p)
    for row in (x, nudged):
        assert np.linalg.norm(quantize(c * row, p)) <= 1.0 + 1e-15
