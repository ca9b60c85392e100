"""The networked single-party release works on the public 2^-p grid: exact integer Gram matrices and a
public shrink that keeps ||x|| <= 1 after rounding (no socket needed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vfl.fm.domain import fixed_point_shrink, round_to_grid
from vfl.privacy.fixed_point import exact_integer_gram


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
        assert np.linalg.norm(round_to_grid(c * row, p)) <= 1.0 + 1e-15


def test_cross_block_logistic_offset_is_exact_integer_arithmetic():
    """The logistic alpha offset (1/(2N)) sum_i x_i folded into a cross block's share must be exactly
    -sum_i x_int 2^(p-1) raw units. It used to go through floats ((sum x / 2N) / scale * 2^2p), which is off by
    up to 2^24 raw units once n 2^(2p) passes 2^53 (p = 32, n ~ 1e5): a data-dependent rounding error in the
    release, which the fixed-point path is meant to rule out."""
    from vfl.fm.dissection import DissectionPlan
    from vfl.privacy.fixed_point import cross_block_offset

    plan = DissectionPlan([1, 1], 0, model="logistic")
    block = plan.block("alpha[1]")
    rng = np.random.default_rng(0)
    wrong_before = 0
    cases = [(32, 100726), (24, 100885), (32, 16082), (32, 67225)]
    cases += [(32, int(v)) for v in rng.integers(10**4, 10**5, 12)]
    for p, n in cases:
        s_int = int(rng.integers(-(n * 2**p) // 3, (n * 2**p) // 3))
        q, r = divmod(abs(s_int), n)
        X = np.full((n, 1), q / 2.0**p)
        X[:r, 0] += 1 / 2.0**p
        X *= 1 if s_int >= 0 else -1
        assert int(np.rint(X * 2.0**p).astype(np.int64).astype(object).sum()) == s_int
        exact = -s_int * 2 ** (p - 1)
        got = cross_block_offset(plan, block, 1, X, (1, 1), precision_bits=p)
        assert int(got[0, 0]) == exact
        old = int(round(float(X.sum(axis=0)[0] / (2.0 * n) / plan.scale(block, n)) * 2.0 ** (2 * p)))
        wrong_before += old != exact
    assert wrong_before > 0   # the cases do exercise the float error of the old computation


def test_logistic_single_party_alpha_offset_does_not_overflow_int64():
    """p = 52 and n = 4096: sum_i x_int reaches n 2^52 > 2^63, which wrapped around in int64."""
    from vfl.fm.dissection import DissectionPlan
    from vfl.privacy.fixed_point import single_party_block
    from vfl.privacy.mechanisms import make_mechanism

    p, n = 52, 4096
    plan = DissectionPlan([1, 1], 0, model="logistic")
    block = plan.block("alpha[0]")
    X = np.ones((n, 1))
    y = np.zeros(n)
    got = single_party_block(plan, make_mechanism("none", plan=plan, n_samples=n), block, X, y, n_samples=n,
                             precision_bits=p, rng=np.random.default_rng(0))
    np.testing.assert_allclose(got, [0.5], rtol=1e-15)   # alpha = (1/N) sum (1/2 - y) x = 1/2


@pytest.mark.parametrize("p", [16, 24, 32, 44, 48, 52])
def test_quantized_rows_are_in_the_unit_ball_in_exact_integer_arithmetic(p):
    """sum_j k_j^2 <= 2^(2p) for the grid integers k_j of every prepared row (corners of the cube, the
    intercept column, random rows), through the parties' own preparation. Without a margin for the float
    rounding of u/sqrt(d) and c*x, c = 1 - sqrt(d) 2^-(p+1) let the corner row of d = 37 leave the ball at p = 52."""
    from vfl.fm.domain import prepare_party_block, resolve_bounds
    from vfl.privacy.fixed_point import prepare_fixed_point

    rng = np.random.default_rng(p)
    for d in [*range(1, 41), 64, 100, 257]:
        rows = [np.ones(d), rng.choice([-1.0, 1.0], d), *(rng.uniform(-1, 1, (5, d)))]
        U = np.array(rows)
        P, _ = prepare_party_block(U, bounds=resolve_bounds((-1, 1), U), domain="l2", n_features_total=d + 1)
        P = np.hstack([P, np.full((len(rows), 1), 1 / np.sqrt(d + 1))])   # the intercept column
        Q = prepare_fixed_point(P, precision_bits=p, domain="l2", n_features_total=d + 1)
        K = np.rint(Q * 2.0**p).astype(np.int64).astype(object)
        assert (K * K).sum(axis=1).max() <= 2 ** (2 * p)


def test_a_grid_too_coarse_for_d_is_refused():
    from vfl.exceptions import ConfigurationError

    assert 0 < fixed_point_shrink(15, 1) < 1
    with pytest.raises(ConfigurationError, match="too coarse"):
        fixed_point_shrink(16, 1)   # c = 1 - 4/4 = 0 would erase the data (and c < 0 breaks ||x|| <= 1)


def test_two_parties_with_the_same_seed_draw_independent_noise_on_a_cross_block():
    """Attacker: an operator (or a script) that starts both parties with one --seed. Invariant: the two draws of a cross
    block are still different, so the released noise is not twice one draw that both parties know."""
    from vfl.fm.dissection import DissectionPlan
    from vfl.privacy.fixed_point import block_generators
    from vfl.rng import make_rng

    plan = DissectionPlan([2, 3], 0, model="linear")
    a = block_generators(make_rng(7), plan, 0)
    b = block_generators(make_rng(7), plan, 1)
    again = block_generators(make_rng(7), plan, 0)
    for block in plan.cross_blocks():
        first, second, repeat = (g[block.name].standard_normal(4) for g in (a, b, again))
        assert not np.allclose(first, second)          # different parties: different streams
        np.testing.assert_array_equal(first, repeat)   # the same party and seed: reproducible
