"""capeDJICA (seed Algorithm 4): recovery of a known mixing matrix, per-round CAPE noise variance, accounting.

Statistical checks: two-sided chi-square intervals at false-failure probability 1e-9 per check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from vfl.data.synthetic_ica import make_joint_ica
from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.models.cape_djica import CapeDJICA, infomax_update
from vfl.models.cape_pca import CapePCA
from vfl.models.ica_metrics import amari_index, match_mixing_matrix
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.cape_accounting import kappa
from vfl.privacy.ica_accounting import calibrate_round_mu, infomax_sensitivities

ALPHA = 1e-9
#: Stated recovery threshold for non-private djICA on the synthetic problem below (measured: ~0.01).
AMARI_THRESHOLD = 0.05


def test_amari_index_values():
    P = np.diag([2.0, -0.5, 3.0])[[2, 0, 1]]  # scaled permutation
    assert amari_index(P) == 0.0
    assert amari_index(np.ones((4, 4))) == pytest.approx(1.0)
    # hand value: rows (1 + 0.5 - 1) + (1 - 1); cols (1 + 0 - 1) + (0.5 + 1 - 1) -> (0.5 + 0.5)/(2*2*1)
    assert amari_index(np.array([[1.0, 0.5], [0.0, 1.0]])) == pytest.approx(0.25)
    with pytest.raises(DataValidationError):
        amari_index(np.ones((2, 3)))


def test_nonprivate_djica_recovers_known_mixing_matrix():
    data = make_joint_ica(3, 4, 250, 4, 10, scale_sd=2.0, random_state=5)
    pca = CapePCA(4, noise="none").fit(data.sites)
    M, r = pca.whitening()
    ica = CapeDJICA(noise="none", max_iter=150, learning_rate=1.0, data_radius=r).fit([M @ X for X in data.sites])
    P = ica.unmixing_ @ M @ data.mixing
    q = amari_index(P)
    assert q < AMARI_THRESHOLD, q
    # the quality index is meaningful: a random unmixing matrix is far worse
    assert amari_index(np.random.default_rng(0).normal(size=(4, 4)) @ M @ data.mixing) > 3 * AMARI_THRESHOLD
    A_hat = match_mixing_matrix(data.mixing, np.linalg.pinv(ica.unmixing_ @ M))
    assert np.linalg.norm(A_hat - data.mixing) < 0.25 * np.linalg.norm(data.mixing)


def _first_round_noise(noise: str, S: int, R: int, n: int, reps: int, seed: int):
    rng = np.random.default_rng(seed)
    sites = []
    for _ in range(S):
        X = rng.laplace(size=(R, n))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=0) / 2.0)  # radius 2
        sites.append(X)
    rho, eps, delta, J = 0.3, 1.0, 1e-5, 5
    dW0 = sum(infomax_update(np.eye(R), np.zeros(R), X, rho)[0] for X in sites) / S
    noises = []
    for k in range(reps):
        # one released round whose noise is calibrated as round 1 of J: the other J - 1 rounds are 'prior'
        ica = CapeDJICA(eps, delta, noise=noise, max_iter=1, learning_rate=rho, data_radius=2.0,
                        prior_releases=[(calibrate_round_mu(eps, delta, J), J - 1)], random_state=seed * 1000 + k)
        ica.fit(sites)
        noises.append((ica.unmixing_ - np.eye(R) - dW0).ravel())
    mu_round = calibrate_round_mu(eps, delta, J)
    delta_W, _ = infomax_sensitivities(np.eye(R), np.zeros(R), rho, n, 2.0)
    return np.concatenate(noises), delta_W, mu_round


def _ci(sample, sigma2):
    n = sample.size
    ratio = float(np.var(sample, ddof=1)) / sigma2
    return chi2.ppf(ALPHA / 2, n - 1) / (n - 1) <= ratio <= chi2.isf(ALPHA / 2, n - 1) / (n - 1)


def test_cape_round_noise_at_aggregator_is_pooled_times_kappa():
    """Per round the aggregate ΔW noise is (1/S) sum_s g_s: variance tau^2/S^2 with tau = Delta_s sqrt(2 kappa)/mu,
    i.e. kappa times the pooled-data mechanism's variance (Delta_pool = Delta_s / S, two blocks)."""
    S, R, n = 4, 40, 60
    sample, delta_W, mu = _first_round_noise("cape", S, R, n, reps=6, seed=3)
    sigma_pool2 = 2 * (delta_W / S) ** 2 / mu**2
    assert sample.size >= 8000
    assert _ci(sample, kappa(S, 1) * sigma_pool2)
    assert not _ci(sample, 1.5 * kappa(S, 1) * sigma_pool2)


def test_conventional_round_noise_is_s_over_kappa_larger():
    S, R, n = 4, 40, 60
    sample, delta_W, mu = _first_round_noise("conventional", S, R, n, reps=4, seed=4)
    assert _ci(sample, 2 * delta_W**2 / mu**2 / S)  # each site adds tau = Delta sqrt(2)/mu, average of S


def test_privacy_report_and_accountants():
    data = make_joint_ica(3, 2, 100, 3, 6, scale_sd=2.0, random_state=1)
    pca = CapePCA(3, 1.0, 1e-5, mu=0.1, random_state=2).fit(data.sites)
    M, r = pca.whitening()
    ica = CapeDJICA(2.0, 1e-5, max_iter=20, learning_rate=0.5, data_radius=r, prior_releases=[(pca.mu_, 1)],
                    random_state=3).fit([M @ X for X in data.sites])
    rep = ica.privacy_report_
    assert rep["accountants"]["gdp"] == pytest.approx(2.0, rel=1e-6)
    assert rep["accountants"]["gdp"] <= rep["accountants"]["rdp"] <= rep["accountants"]["moments"]
    assert rep["accountants"]["strong"] > rep["accountants"]["rdp"]
    assert rep["released_rounds"] <= 20 and rep["kappa_true"] == pytest.approx(kappa(3, 0))
    assert rep["mu_round_true"] == pytest.approx(ica.mu_round_, rel=1e-12)  # analytic calibration includes kappa
    assert math.sqrt(20 * ica.mu_round_**2 + pca.mu_**2) == pytest.approx(calibrate_mu(2.0, 1e-5), rel=1e-9)


def test_validation():
    data = make_joint_ica(2, 1, 50, 3, 3, random_state=1)
    with pytest.raises(DataValidationError, match="column"):
        CapeDJICA(data_radius=0.01).fit(data.sites)
    with pytest.raises(DataValidationError, match="exactly one"):
        CapeDJICA(noise="local").fit(data.sites)
    with pytest.raises(DataValidationError, match="at least 2"):
        CapeDJICA().fit(data.sites[:1])
    with pytest.raises(ConfigurationError):
        CapeDJICA(accountant="pld")
    with pytest.raises(ConfigurationError):
        CapeDJICA(max_iter=0)
    local = CapeDJICA(noise="local", max_iter=5, random_state=0).fit(data.sites[:1])
    assert local.privacy_report_["true_epsilon"] == pytest.approx(1.0, rel=1e-6)


def test_schedule_survives_a_zero_step():
    """A released update of exactly zero (e.g. rho annealed to 0 over thousands of rounds) has no angle: the
    schedule must not divide by zero (it did: ZeroDivisionError in a 20 000-round networked run) and a zero change
    below tol converges."""
    from vfl.models.cape_djica import InfomaxSchedule

    schedule = InfomaxSchedule(2, 10, tol=1e-300)
    step = np.array([[0.1, 0.0], [0.0, -0.1]])
    schedule.apply(step, np.zeros(2))
    schedule.apply(np.zeros((2, 2)), np.zeros(2))
    assert not schedule.converged
    schedule.apply(np.zeros((2, 2)), np.zeros(2))   # step 3: angle against step 1 undefined; change 0 < tol
    assert schedule.converged and schedule.rounds == 3
