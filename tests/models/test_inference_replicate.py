"""Every bootstrap replicate de-biased by its own estimated world (issue 31; vfl.models.inference_world).

The real estimate theta~ = S^-1 w_floor uses S = -2 mean(R*) M_0 with M_0 estimated from the noisy release. The
earlier replicates were de-biased with that one fixed S ("fixed"), so the bootstrap distribution ignored the
variability of estimating S. The default ("replicate-spread") estimates every replicate's own world M_0*_b, its S*_b
and theta~*_b = S*_b^-1 w*_b. Checked here: the batched replicate estimator against a direct computation, the
noise-free case (no S to estimate: the same spread as "fixed"), the expected direction on a noisy logistic release
(wider), the plumbing, and (slow) coverage on two disjoint seed sets with thresholds from the binomial law.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.inference_cells import logistic_fit as _logistic
from helpers.inference_cells import symmetric_noise as _noise
from helpers.inference_cells import taylor_truth as _taylor_truth

from vfl.exceptions import ConfigurationError
from vfl.models.inference import DEFAULT_BOOTSTRAP
from vfl.models.inference_world import floored_inverse, matched_second_moments, replicate_estimates

pytestmark = pytest.mark.filterwarnings("ignore::vfl.exceptions.NoBetterThanBaselineWarning")


def test_the_batched_replicate_estimator_is_the_estimator_applied_to_each_replicate():
    """For every replicate: the floor solve, its matched world (here the full fixed point from scratch, 60 steps,
    against the warm-started batched one), S*_b = mean_k (M_0*_b + E_k)_+^-1 M_0*_b and S*_b^-1 w*_b, computed
    one replicate at a time with plain numpy. The warm start is exact at convergence, so they agree to 1e-6."""
    rng = np.random.default_rng(3)
    d, floor, lower = 5, 0.05, 0.025
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    M_hat = (Q * np.array([0.02, 0.3, 0.6, 1.0, 2.0])) @ Q.T
    noise = _noise(rng, 16, d, 0.05)
    M0 = matched_second_moments(M_hat, noise, lower, draws=16, iterations=200)
    world = (np.linalg.eigvalsh(M_hat), np.linalg.eigvalsh(M0))
    M_star = M0 + _noise(rng, 4, d, 0.05)
    alpha = rng.normal(size=(4, d))
    got = replicate_estimates(alpha, M_star, noise, lambda_floor=floor, lower=lower, world=world, iterations=200)
    for b in range(4):
        s, V = np.linalg.eigh(M_star[b])
        w = -0.5 * (V * floored_inverse(s, floor)) @ V.T @ alpha[b]
        M0_b = matched_second_moments(M_star[b], noise, lower, draws=16, iterations=200)
        mean_inv = np.mean([(lambda t: (t[1] * floored_inverse(t[0], floor)) @ t[1].T)(np.linalg.eigh(M0_b + E))
                            for E in noise], axis=0)
        np.testing.assert_allclose(got[b], np.linalg.solve(mean_inv @ M0_b, w), rtol=1e-6, atol=1e-8)


def test_on_a_noise_free_release_it_has_the_spread_of_the_fixed_de_biasing():
    """Without DP noise there is no S to estimate (every replicate's world is the release's), so the replicates'
    spread -- bse -- is the fixed de-biasing's to rounding, and the intervals differ only by where the replicates
    are centred, by at most 4 Monte Carlo standard errors of the replicate mean (4 bse / sqrt(B))."""
    est = _logistic(1000, None, 5)
    fixed, rep = est.inference(debias="fixed"), est.inference()
    np.testing.assert_allclose(rep.bse, fixed.bse, rtol=1e-8)
    shift = np.abs(rep.conf_int() - fixed.conf_int())
    assert np.all(shift <= 4.0 * fixed.bse[:, None] / math.sqrt(DEFAULT_BOOTSTRAP)), shift / fixed.bse[:, None]


@pytest.mark.parametrize("seed", [70, 71, 72])
def test_on_a_noisy_logistic_release_the_replicates_spread_more(seed):
    """Logistic N = 10^3, epsilon = 1 (the fixed S under-covered there: 0.924 at 500 data sets): S estimated on the
    noisy release varies from replicate to replicate, so the default's standard errors are larger than the fixed
    de-biasing's (mean over coefficients; the screen of docs/inference.md measured 1.2 x the width). The Monte Carlo
    error of a bootstrap sd is about 1/sqrt(2B) = 4 % per coefficient, so the direction is not a Monte Carlo draw.
    The ratio of the mean standard errors was 1.07-1.25 on 20 other data sets (seeds 100-119), so the test asks for
    the direction only (> 1; without the replicate de-biasing the ratio is exactly 1), not a level tuned to these
    seeds."""
    est = _logistic(1000, 1.0, seed)
    fixed, rep = est.inference(debias="fixed"), est.inference()
    assert rep.bse.mean() > fixed.bse.mean(), (rep.bse.mean(), fixed.bse.mean())
    assert np.array_equal(rep.center, fixed.center)   # the estimate is the same; only its distribution changed


def test_the_option_and_the_method_name():
    est = _logistic(1000, 4.0, 7)
    assert "own estimated world" in est._inference().method
    assert np.array_equal(est.inference(debias="replicate-spread").conf_int(), est.conf_int())
    assert "fixed de-biasing" in est.inference(debias="fixed").method
    assert "fixed de-biasing" in est.inference(spectrum="deflated").method   # the deflated world keeps its S
    with pytest.raises(ConfigurationError, match="debias"):
        est.inference(debias="nonsense")



#: data sets per seed set; two disjoint seed sets, disjoint from every benchmark run (2024.., 9000000..,
#: 10002024.., 12000000..) and from tests/models/test_inference_spectrum.py (50000000..)
SETS, SEED_SETS = 150, (60_000_000, 61_000_000)
#: the target of issue 31
LOW, HIGH = 0.93, 0.975


@pytest.mark.slow
@pytest.mark.parametrize("first_seed", SEED_SETS)
def test_the_default_interval_covers_in_the_cell_where_the_fixed_one_fell_short(first_seed):
    """Logistic, N = 10^3, epsilon = 1. The statistic is the mean coverage over the 11 coefficients and SETS data
    sets; its variance is at most p (1 - p) / SETS (a mean of correlated indicators varies at most as much as the
    most variable one). When the true coverage lies in the target [LOW, HIGH] the test fails with probability <=
    0.001 per side at the thresholds LOW - 3.09 sqrt(LOW (1 - LOW) / SETS) = 0.866 and HIGH + 3.09 sqrt(HIGH (1 -
    HIGH) / SETS) = 1.014 (so only the lower side can fail at this SETS). It guards against a gross regression
    only: the fixed S's 0.924 passes too; the benchmark (docs/inference.md) measures the level."""
    lo = LOW - 3.09 * math.sqrt(LOW * (1.0 - LOW) / SETS)
    hi = HIGH + 3.09 * math.sqrt(HIGH * (1.0 - HIGH) / SETS)
    target = _taylor_truth()
    hits = []
    for s in range(SETS):
        ci = _logistic(1000, 1.0, first_seed + s).conf_int()
        hits.append((ci[:, 0] <= target) & (target <= ci[:, 1]))
    coverage = float(np.mean(hits))
    assert lo <= coverage <= hi, (coverage, lo, hi)
