"""BCD / DP-BCD numeric core (spec section 4; de Jong et al. 2022, Alg. 1 and 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from vfl.data.datasets import forest_fires, garment, synthetic
from vfl.exceptions import DataValidationError, DPBCDAbort, PrivacyParameterError
from vfl.models.bcd import (
    FORMAL_DP_REASON,
    QRLeastSquares,
    dp_bcd_step,
    least_squares_step,
    party_generators,
    per_message_epsilon,
    r_squared,
    run_bcd,
    run_dp_bcd,
    sample_dp_bcd_noise,
    utility_bound,
)

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA_DIR / "forestfires.csv").is_file(), reason="../shared/data absent")


def three_blocks(n=300, seed=0, correlation=0.6):
    data = synthetic(n, 7, correlation=correlation, r2=0.6, random_state=seed)
    X = data.X
    return [X[:, :3], X[:, 3:5], X[:, 5:]], data.y, X


def projector(X):
    q, _ = np.linalg.qr(X)
    return q @ q.T


# --- least squares and non-private BCD ------------------------------------------------------------


def test_least_squares_step_matches_numpy_lstsq():
    blocks, y, _ = three_blocks()
    expected = np.linalg.lstsq(blocks[0], y, rcond=None)[0]
    np.testing.assert_allclose(least_squares_step(blocks[0], y), expected, rtol=1e-12, atol=1e-12)


def test_rank_deficient_or_wide_block_is_rejected():
    X = np.ones((10, 2))
    with pytest.raises(DataValidationError, match="full column rank"):
        QRLeastSquares(X)
    with pytest.raises(DataValidationError, match="more rows than columns"):
        QRLeastSquares(np.ones((2, 3)))


def test_b_zero_one_sweep_equals_algorithm_1():
    blocks, y, _ = three_blocks()
    # Algorithm 1 written out with numpy's lstsq
    v, expected = y.copy(), []
    for X in blocks:
        beta = np.linalg.lstsq(X, v, rcond=None)[0]
        expected.append(beta)
        v = v - X @ beta
    one_sweep = run_bcd(blocks, y, rounds=1)
    for got, want in zip(one_sweep.coefficients, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # the DP step with b = 0 is exactly the BCD step
    v = y.copy()
    rng = np.random.default_rng(0)
    for X, want in zip(blocks, expected, strict=True):
        step = dp_bcd_step(X, v, gamma=1.2, eps_r=1.0, rng=rng, noise=np.zeros(len(y)))
        assert not step.aborted
        np.testing.assert_allclose(step.beta_tilde, want, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(step.v_out, v - X @ step.beta_tilde)
        v = step.v_out
    assert one_sweep.r2 == pytest.approx(r_squared(y, sum(X @ b for X, b in zip(blocks, expected, strict=True))))


def test_many_sweeps_converge_to_ols():
    blocks, y, X = three_blocks(correlation=0.7)
    ols = np.linalg.lstsq(X, y, rcond=None)[0]
    result = run_bcd(blocks, y, rounds=400)
    assert np.max(np.abs(result.coef - ols)) < 1e-8
    assert result.r2 == pytest.approx(r_squared(y, X @ ols), abs=1e-12)
    assert all(a >= b - 1e-9 for a, b in zip(result.rss_history, result.rss_history[1:], strict=False))


def test_convergence_rule_stops_at_first_round_below_tol():
    blocks, y, _ = three_blocks(correlation=0.7)
    tol = 1e-6
    result = run_bcd(blocks, y, rounds=1000, tol=tol)
    assert result.converged and result.rounds_run < 1000
    rss = [float(y @ y)] + result.rss_history
    criterion = [abs(a - b) / (abs(b) + 0.1) for a, b in zip(rss, rss[1:], strict=False)]
    assert criterion[-1] < tol and all(c >= tol for c in criterion[:-1])
    assert not run_bcd(blocks, y, rounds=2, tol=tol).converged


# --- the noise sampler ----------------------------------------------------------------------------


def test_sampler_length_is_half_normal_and_direction_uniform():
    rng = np.random.default_rng(12345)
    n, xi, eps_r, draws = 15, 2.5, 0.4, 4000
    b = np.array([sample_dp_bcd_noise(n, xi, eps_r, rng) for _ in range(draws)])
    lengths = np.linalg.norm(b, axis=1) * math.sqrt(eps_r) / xi
    assert stats.kstest(lengths, stats.halfnorm.cdf).pvalue > 1e-3
    cos2 = (b[:, 0] / np.linalg.norm(b, axis=1)) ** 2
    assert stats.kstest(cos2, stats.beta(0.5, (n - 1) / 2).cdf).pvalue > 1e-3
    # the tests have power: a wrong scale or a non-uniform direction is rejected
    assert stats.kstest(lengths * 1.2, stats.halfnorm.cdf).pvalue < 1e-3
    assert stats.kstest(cos2, stats.beta(0.5, (n - 3) / 2).cdf).pvalue < 1e-3


def test_gaussian_vector_calibration_reads_eq12_literally():
    rng = np.random.default_rng(7)
    n, xi, eps_r = 12, 1.5, 0.3
    b = np.array([sample_dp_bcd_noise(n, xi, eps_r, rng, calibration="gaussian-vector") for _ in range(3000)])
    scaled = np.sum(b**2, axis=1) * eps_r / xi**2
    assert stats.kstest(scaled, stats.chi2(n).cdf).pvalue > 1e-3
    with pytest.raises(PrivacyParameterError):
        sample_dp_bcd_noise(n, xi, eps_r, rng, calibration="laplace")


# --- one step: identity, abort condition, leakage -------------------------------------------------


def test_identity_vout_norm_splits_into_residual_and_projected_noise():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((80, 5))
    P = projector(X)
    for _ in range(20):
        v_in = rng.standard_normal(80) * 3
        b = sample_dp_bcd_noise(80, 2.0, 0.5, rng)
        step = dp_bcd_step(X, v_in, gamma=1.3, eps_r=0.5, rng=rng, noise=b, abort_rule="ignore")
        lhs = step.norm_v_out**2
        rhs = np.sum(((np.eye(80) - P) @ v_in) ** 2) + np.sum((P @ b) ** 2)
        assert abs(lhs - rhs) < 1e-10
        assert step.norm_residual**2 == pytest.approx(np.sum(((np.eye(80) - P) @ v_in) ** 2), abs=1e-10)
        assert step.norm_projected_noise == pytest.approx(np.linalg.norm(P @ b), abs=1e-10)
        assert step.xi == pytest.approx(1.3 * step.norm_residual, rel=1e-14)


@pytest.mark.parametrize("factor, aborts", [(1 - 1e-6, False), (1 + 1e-6, True)])
def test_abort_fires_iff_projected_noise_exceeds_threshold(factor, aborts):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((60, 4))
    v_in = rng.standard_normal(60)
    gamma = 1.2
    residual = np.linalg.norm(v_in - X @ np.linalg.lstsq(X, v_in, rcond=None)[0])
    direction = X @ rng.standard_normal(4)  # in col(X): P b = b
    b = direction / np.linalg.norm(direction) * math.sqrt(gamma**2 - 1) * residual * factor
    step = dp_bcd_step(X, v_in, gamma=gamma, eps_r=1.0, rng=rng, noise=b)
    assert step.aborted is aborts
    assert (step.norm_v_out > step.xi) is aborts
    if aborts:
        assert step.beta_tilde is None and step.v_out is None  # nothing leaves the party
    else:
        assert step.v_out is not None


def test_leak_zeroed_row_gives_exact_zero_coordinate():
    """Spec 4.5: the receiver learns X beta~ exactly; for the neighbour with row r zeroed that coordinate
    of v_in - v_out is exactly 0, on the real data it is not: no (eps, delta < 1)-DP holds."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((50, 3))
    v_in = rng.standard_normal(50)
    r = 17
    neighbour = X.copy()
    neighbour[r] = 0.0
    for seed in range(20):
        leaked = v_in - dp_bcd_step(neighbour, v_in, gamma=2.0, eps_r=5.0, rng=np.random.default_rng(seed),
                                    abort_rule="ignore").v_out
        assert leaked[r] == 0.0
        original = v_in - dp_bcd_step(X, v_in, gamma=2.0, eps_r=5.0, rng=np.random.default_rng(seed),
                                      abort_rule="ignore").v_out
        assert original[r] != 0.0


def test_invalid_parameters_raise():
    X = np.random.default_rng(0).standard_normal((20, 2))
    v = np.ones(20)
    rng = np.random.default_rng(0)
    with pytest.raises(PrivacyParameterError):
        dp_bcd_step(X, v, gamma=1.0, eps_r=1.0, rng=rng)
    with pytest.raises(PrivacyParameterError):
        dp_bcd_step(X, v, gamma=1.2, eps_r=0.0, rng=rng)
    with pytest.raises(PrivacyParameterError):
        dp_bcd_step(X, v, gamma=1.2, eps_r=1.0, rng=rng, abort_rule="retry")
    with pytest.raises(DataValidationError):
        dp_bcd_step(X, np.ones(19), gamma=1.2, eps_r=1.0, rng=rng)
    with pytest.raises(DataValidationError):
        run_bcd([X], v, rounds=1)


# --- the whole run ---------------------------------------------------------------------------------


def test_ledger_has_k_times_t_messages_and_honest_report():
    blocks, y, _ = three_blocks()
    result = run_dp_bcd(blocks, y, epsilon=1e6, gamma=1.5, rounds=4, random_state=1)
    assert result.status == "completed"
    report = result.privacy
    assert len(report.ledger) == report.messages_planned == 12
    assert all(e.epsilon == pytest.approx(1e6 / 12) for e in report.ledger)
    assert report.epsilon_per_message == per_message_epsilon(1e6, 3, 4)
    assert report.epsilon_spent_nominal == pytest.approx(1e6)
    assert [(e.sender, e.receiver) for e in report.ledger[:3]] == [(0, 1), (1, 2), (2, 0)]
    assert report.formal_dp is False and report.reason == FORMAL_DP_REASON
    as_dict = json.loads(json.dumps(report.to_dict()))
    assert as_dict["formal_dp"] is False and as_dict["messages_sent"] == 12 and as_dict["seeded"] is True
    assert as_dict["epsilon_conservative"] == pytest.approx(2e6)
    # huge epsilon: essentially non-private BCD
    assert result.r2 == pytest.approx(run_bcd(blocks, y, rounds=4).r2, abs=1e-3)
    assert result.utility_bound == pytest.approx(utility_bound(1.5, 3, 4, result.r2_nonprivate))
    assert result.bound_holds


def test_abort_publishes_nothing():
    blocks, y, _ = three_blocks()
    result = run_dp_bcd(blocks, y, epsilon=0.01, gamma=1.05, rounds=5, random_state=2)
    assert result.aborted and result.coefficients is None and result.coef is None and result.r2 is None
    assert "no model is published" in result.abort_reason
    assert len(result.privacy.ledger) < 15
    # regression: the reason quoted xi = gamma ||(I - P) v_in|| and ||v_out||, un-noised functions of the data;
    # like the networked abort message it may name only the round and the party (the numbers stay in trace)
    failed = next(t for t in result.trace if t["check_failed"])
    for value in (failed["xi"], failed["norm_v_out"]):
        assert f"{value:.6g}" not in result.abort_reason and f"{value:.3g}" not in result.abort_reason
    assert "xi =" not in result.abort_reason and "||v_out|| =" not in result.abort_reason
    with pytest.raises(DPBCDAbort, match="aborted in round"):
        run_dp_bcd(blocks, y, epsilon=0.01, gamma=1.05, rounds=5, random_state=2, raise_on_abort=True)


def test_abort_rules_resample_and_ignore():
    blocks, y, _ = three_blocks()
    kwargs = dict(epsilon=0.5, gamma=1.2, rounds=3)
    paper = [run_dp_bcd(blocks, y, random_state=s, **kwargs).aborted for s in range(30)]
    resample = [run_dp_bcd(blocks, y, random_state=s, abort_rule="resample", **kwargs) for s in range(30)]
    ignore = [run_dp_bcd(blocks, y, random_state=s, abort_rule="ignore", **kwargs) for s in range(30)]
    assert sum(paper) > 0
    assert sum(r.aborted for r in resample) < sum(paper)
    assert max(t["attempts"] for r in resample for t in r.trace) > 1
    assert not any(r.aborted for r in ignore)
    assert any(t["check_failed"] for r in ignore for t in r.trace)
    assert "not covered" in resample[0].privacy.notes[0]


def test_in_process_run_equals_message_by_message_ring_with_party_generators():
    """What the networked runtime does (each party calls dp_bcd_step on every message with its own
    Generator, party_generators(seed, k)[i]) gives bit-identical coefficients to run_dp_bcd."""
    blocks, y, _ = three_blocks()
    seed, k, rounds, eps = 99, 3, 3, 50.0
    result = run_dp_bcd(blocks, y, epsilon=eps, gamma=1.3, rounds=rounds, random_state=seed)
    assert result.status == "completed"
    rngs = party_generators(seed, k)
    coefs = [np.zeros(b.shape[1]) for b in blocks]
    v = y.copy()
    for _ in range(rounds):
        for i in range(k):
            step = dp_bcd_step(blocks[i], v, gamma=1.3, eps_r=eps / (k * rounds), rng=rngs[i])
            coefs[i] += step.beta_tilde
            v = step.v_out
    for got, want in zip(result.coefficients, coefs, strict=True):
        np.testing.assert_array_equal(got, want)
    again = run_dp_bcd(blocks, y, epsilon=eps, gamma=1.3, rounds=rounds, random_state=seed)
    np.testing.assert_array_equal(again.coef, result.coef)


def test_label_party_other_than_first_starts_the_ring():
    blocks, y, _ = three_blocks()
    result = run_bcd(blocks, y, rounds=1, label_party=2)
    v = y.copy()
    for i in (2, 0, 1):
        beta = np.linalg.lstsq(blocks[i], v, rcond=None)[0]
        np.testing.assert_allclose(result.coefficients[i], beta, rtol=1e-10, atol=1e-12)
        v = v - blocks[i] @ beta


# --- real data ------------------------------------------------------------------------------------


@needs_data
def test_forest_fires_five_round_bcd_r2_matches_the_authors_13_digits():
    data = forest_fires()
    assert round(run_bcd(data.party_blocks(), data.y, rounds=5).r2, 13) == 0.0723196328281
    ols = np.linalg.lstsq(data.X, data.y, rcond=None)[0]
    assert r_squared(data.y, data.X @ ols) == pytest.approx(0.0742, abs=1e-4)


@needs_data
def test_garment_bcd_and_ols_r2():
    data = garment()
    assert run_bcd(data.party_blocks(), data.y, rounds=5).r2 == pytest.approx(0.2408, abs=1e-4)
    ols = np.linalg.lstsq(data.X, data.y, rcond=None)[0]
    assert r_squared(data.y, data.X @ ols) == pytest.approx(0.2718, abs=1e-4)


def test_abort_rate_matches_the_data_free_formula():
    """P(step aborts) depends only on (gamma, eps_r, m, N): checked against 300 simulated runs."""
    from vfl.models.bcd import completion_probability, step_abort_probability

    rng = np.random.default_rng(11)
    blocks = [rng.standard_normal((60, 3)), rng.standard_normal((60, 2))]
    y = rng.standard_normal(60)
    solvers = [QRLeastSquares(b) for b in blocks]
    runs = 300
    aborted = sum(run_dp_bcd(solvers, y, epsilon=2.0, gamma=1.2, rounds=2, random_state=s).aborted
                  for s in range(runs))
    p_abort = 1.0 - completion_probability(1.2, 2.0, 2, [3, 2], 60)
    assert 0.2 < p_abort < 0.8
    assert abs(aborted / runs - p_abort) < 4 * math.sqrt(p_abort * (1 - p_abort) / runs)
    # Monte Carlo of the formula itself, and the literal eq. (12) variant
    eps_r, m, n = 0.3, 4, 40
    u = stats.beta(m / 2, (n - m) / 2).rvs(200000, random_state=1)
    z = np.random.default_rng(2).standard_normal(200000)
    expected = np.mean(z**2 * u > (1.2**2 - 1) * eps_r / 1.2**2)
    assert step_abort_probability(1.2, eps_r, m, n) == pytest.approx(expected, abs=4e-3)
    assert step_abort_probability(1.2, eps_r, m, n, calibration="gaussian-vector") == pytest.approx(
        stats.chi2(m).sf(0.44 * eps_r / 1.44))
