"""capePCA (seed Algorithm 3): aggregate CAPE noise has the pooled mechanism's variance (Monte Carlo), validation.

Statistical checks use two-sided chi-square intervals at total false-failure probability 1e-9 per check: the
off-diagonal entries of the aggregate noise are i.i.d. N(0, sigma^2 / 2) (iso construction, spec §2.4), so
(n - 1) s^2 / (sigma^2/2) ~ chi^2_{n-1}.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from scipy.stats import chi2

from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyLeakWarning
from vfl.models.cape_pca import CapePCA
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.cape_accounting import kappa

ALPHA = 1e-9


def _sites(S, n, D, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(S):
        X = rng.normal(size=(D, n))
        X /= np.linalg.norm(X, axis=0) * rng.uniform(1.0, 1.5, size=n)
        out.append(X)
    return out


def _variance_ci(sample: np.ndarray, sigma2: float) -> bool:
    n = sample.size
    s2 = float(np.var(sample, ddof=1))
    lo = chi2.ppf(ALPHA / 2, n - 1) / (n - 1)
    hi = chi2.isf(ALPHA / 2, n - 1) / (n - 1)
    return lo <= s2 / sigma2 <= hi


def _offdiag_noise(pca: CapePCA, sites) -> np.ndarray:
    N = sum(X.shape[1] for X in sites)
    pooled = sum(X @ X.T for X in sites) / N
    noise = pca.covariance_ - pooled
    iu = np.triu_indices(noise.shape[0], k=1)
    return noise[iu]


@pytest.mark.parametrize("calibration", ["paper", "analytic"])
def test_cape_aggregate_noise_variance_is_pooled_mechanism(calibration):
    """Lemma 1: with the seed's calibration (tau = Delta_s / mu) the aggregate noise has exactly the variance of the
    pooled-data Gaussian mechanism (Delta_pool = sqrt(2)/N, sigma_pool = Delta_pool / mu); the corrected calibration
    multiplies the variance by kappa(S, S_C) (spec §3.3)."""
    S, n, D, eps, delta = 4, 50, 300, 1.0, 1e-5
    sites = _sites(S, n, D)
    with pytest.warns(PrivacyLeakWarning) if calibration == "paper" else contextlib.nullcontext():
        pca = CapePCA(2, eps, delta, calibration=calibration, random_state=11).fit(sites)
    N = S * n
    sigma_pool = math.sqrt(2.0) / N / calibrate_mu(eps, delta)
    factor = 1.0 if calibration == "paper" else kappa(S, 1)
    assert pca.noise_std_ == pytest.approx(sigma_pool * math.sqrt(factor), rel=1e-12)
    sample = _offdiag_noise(pca, sites)
    assert sample.size > 40000
    assert _variance_ci(sample, factor * sigma_pool**2 / 2)
    assert not _variance_ci(sample, 1.3 * factor * sigma_pool**2 / 2)  # the test can fail
    assert abs(float(np.mean(sample))) <= 6.1 * math.sqrt(factor) * sigma_pool / math.sqrt(2 * sample.size)
    # the zero-sum shares cancel, so the aggregate is (1/S) sum_s g_s and the site releases are far noisier
    site_noise = pca.site_releases_[0] - sites[0] @ sites[0].T / n
    assert np.std(site_noise[np.triu_indices(D, 1)]) > 1.5 * np.std(sample)


def test_conventional_aggregate_noise_is_sqrt_s_larger():
    S, n, D, eps, delta = 4, 50, 300, 1.0, 1e-5
    sites = _sites(S, n, D, seed=1)
    pca = CapePCA(2, eps, delta, noise="conventional", random_state=12).fit(sites)
    sigma_site = math.sqrt(2.0) / n / calibrate_mu(eps, delta)
    assert _variance_ci(_offdiag_noise(pca, sites), sigma_site**2 / S / 2)


def test_nonprivate_components_span_pooled_top_subspace():
    sites = _sites(3, 80, 12, seed=2)
    pca = CapePCA(3, noise="none").fit(sites)
    pooled = sum(X @ X.T for X in sites) / 240
    vals, vecs = np.linalg.eigh(pooled)
    top = vecs[:, -3:]
    np.testing.assert_allclose(np.abs(top.T @ pca.components_) @ np.ones(3) >= 0.999, True)
    np.testing.assert_allclose(np.sort(pca.eigenvalues_), vals[-3:], rtol=1e-10)
    M, r = pca.whitening()
    for X in sites:
        assert np.linalg.norm(M @ X, axis=0).max() <= r * (1 + 1e-12)


def test_validation():
    sites = _sites(3, 20, 5)
    with pytest.raises(DataValidationError, match="column"):
        CapePCA(2).fit([sites[0] * 3.0, sites[1], sites[2]])
    with pytest.raises(DataValidationError, match="at least 2"):
        CapePCA(2).fit(sites[:1])
    with pytest.raises(DataValidationError, match="exactly one"):
        CapePCA(2, noise="local").fit(sites)
    with pytest.raises(ConfigurationError):
        CapePCA(9).fit(sites)
    with pytest.raises(ConfigurationError):
        CapePCA(2, noise="loud")
    local = CapePCA(2, noise="local", random_state=1).fit(sites[:1])
    assert local.privacy_report_["true_epsilon"] == pytest.approx(1.0, rel=1e-9)
