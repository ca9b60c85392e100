"""The spectrum-matched bootstrap world (issue 31): ``est.inference(spectrum="matched")``.

The deflated world (the default) estimates the release's second moments M_0 by lowering each released eigenvalue
(sqrt(s^2 - v)) and flooring it at the solver's floor. The noise spreads the spectrum both ways, so that world is
too ill-conditioned where the noise is moderate (intervals too wide: linear N = 10^3, epsilon = 4, coverage 0.985)
and too well-conditioned where the true eigenvalues lie below the floor (too short: logistic N = 10^3, epsilon =
0.5, 0.864). The matched world inverts the noisy spectrum by simulation of the public noise law
(vfl.models.inference.matched_second_moments). Checked here: the inversion recovers a known spectrum, the option's
plumbing, and (slow) its coverage on seeds disjoint from the benchmark's with a threshold from the binomial law.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.inference_cells import logistic_fit as _logistic
from helpers.inference_cells import symmetric_noise as _symmetric_noise
from helpers.inference_cells import taylor_truth as _taylor_truth

from vfl.exceptions import ConfigurationError
from vfl.models.inference import denoised_second_moments, matched_second_moments

pytestmark = pytest.mark.filterwarnings("ignore::vfl.exceptions.NoBetterThanBaselineWarning")


@pytest.mark.parametrize("seed", [1, 2])
def test_the_matched_spectrum_undoes_the_noises_spread_where_the_deflated_one_does_not(seed):
    """A known M (bulk eigenvalues 1..2, one at 5, random eigenvectors) and Gaussian noise whose spread of the
    spectrum is about half the bulk, over R = 100 releases: the mean of the matched smallest and largest bulk
    eigenvalue is within 0.1 of the truth (4 Monte Carlo standard errors: their sd over releases is <= 0.25, so
    4 x 0.25 / sqrt(100) = 0.1), and the deflated world's smallest eigenvalue is biased far below it (< 0.5: it
    lowers every eigenvalue, and the noise has already pushed the smallest one down)."""
    rng = np.random.default_rng(seed)
    d = 11
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    truth = np.append(np.linspace(1.0, 2.0, d - 1), 5.0)
    M = (Q * truth) @ Q.T
    noise = _symmetric_noise(rng, 300, d, 0.15)
    matched, deflated = [], []
    for _ in range(100):
        released = M + _symmetric_noise(rng, 1, d, 0.15)[0]
        matched.append(np.linalg.eigvalsh(matched_second_moments(released, noise, 0.05)))
        deflated.append(np.linalg.eigvalsh(denoised_second_moments(released, noise, 0.05)))
    m, f = np.mean(matched, axis=0), np.mean(deflated, axis=0)
    assert abs(m[0] - truth[0]) < 0.1 and abs(m[d - 2] - truth[d - 2]) < 0.1, m
    assert f[0] < 0.5, f


def test_the_lower_bound_and_a_noise_free_release():
    M = np.diag([1e-4, 1.0, 2.0])
    noise = _symmetric_noise(np.random.default_rng(0), 100, 3, 0.05)
    assert np.linalg.eigvalsh(matched_second_moments(M, noise, 0.3)).min() >= 0.3 - 1e-12
    assert np.array_equal(matched_second_moments(M, np.zeros((5, 3, 3)), 0.3), M)


def test_matched_is_the_default_and_deflated_names_itself():
    est = _logistic(1000, 0.5, 7)
    assert np.array_equal(est.inference(spectrum="matched").conf_int(), est.conf_int())
    assert "spectrum-matched" in est._inference().method
    deflated = est.inference(spectrum="deflated")
    assert "deflated bootstrap world" in deflated.method
    assert not np.array_equal(deflated.conf_int(), est.conf_int())
    assert np.array_equal(est.inference().conf_int(), est.conf_int())   # a function of the release only
    assert np.array_equal(deflated.unreliable, est._inference().unreliable)   # the flag: the deflated world's
    with pytest.raises(ConfigurationError, match="spectrum"):
        est.inference(spectrum="nonsense")



#: fresh data sets (seeds disjoint from the benchmark's main 2024.., confirmation 9000000.. and earlier runs)
SETS, FIRST_SEED = 300, 50_000_000
#: the matched interval's coverage claimed in this cell: docs/inference.md measured 0.927 (main, 200 data sets),
#: 0.928 (confirmation, disjoint seeds) and 0.930 (500 data sets); the claim is a little below the lowest
CLAIM = 0.925


@pytest.mark.slow
def test_the_matched_interval_covers_where_the_deflated_one_does_not():
    """Logistic, N = 10^3, epsilon = 0.5 (the deflated world's worst cell: 0.864 at 500 data sets). The statistic is
    the mean coverage over the 11 coefficients and SETS independent data sets. Its variance is at most one
    coefficient's, p (1 - p) / SETS (a mean of correlated indicators varies at most as much as the most variable
    one), so when the claim p >= CLAIM holds the test fails with probability <= 0.001 at the threshold CLAIM - 3.09
    sqrt(CLAIM (1 - CLAIM) / SETS) = 0.878. Power: an interval of the deflated world's coverage 0.864 passes with
    probability <= P(Z >= (0.878 - 0.864) / sqrt(0.864 x 0.136 / SETS)) = P(Z >= 0.7) = 0.24 (the
    naive interval of "Coverage, measured", 0.542 there, fails almost surely)."""
    threshold = CLAIM - 3.09 * math.sqrt(CLAIM * (1.0 - CLAIM) / SETS)
    target = _taylor_truth()
    hits = []
    for s in range(SETS):
        ci = _logistic(1000, 0.5, FIRST_SEED + s).inference(spectrum="matched").conf_int()
        hits.append((ci[:, 0] <= target) & (target <= ci[:, 1]))
    coverage = float(np.mean(hits))
    assert coverage >= threshold, (coverage, threshold)
