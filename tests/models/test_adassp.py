"""AdaSSP (Wang 2018, Alg. 2) as a baseline: its three Gaussian releases compose to exactly mu*(epsilon, delta), its
noise scales follow the replace-one sensitivities, and it converges to least squares as epsilon grows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.exceptions import PrivacyParameterError
from vfl.models.baselines import ADASSP_SENSITIVITIES, AdaSSP
from vfl.privacy.calibration import calibrate_mu


def _data(n: int = 4000, d: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, d))
    y = np.clip(X @ np.array([0.8, -0.5, 0.3, 0.0])[:d] + 0.1 * rng.normal(size=n), -2.0, 2.0)
    return X, y


@pytest.mark.parametrize("eps", [0.3, 1.0, 5.0])
def test_three_releases_compose_to_mu_star(eps) -> None:
    s = AdaSSP.noise_scales(eps, 1e-5)
    mu = math.sqrt(sum((ADASSP_SENSITIVITIES[k] / s[k]) ** 2 for k in s))
    assert mu == pytest.approx(calibrate_mu(eps, 1e-5), rel=1e-12)
    assert s["Xty"] == pytest.approx(2.0 * math.sqrt(3.0) / calibrate_mu(eps, 1e-5), rel=1e-12)
    X, y = _data()
    m = AdaSSP(epsilon=eps, bounds=(-1.0, 1.0), y_bounds=(-2.0, 2.0), random_state=1).fit(X, y)
    assert m.privacy_report_.epsilon == pytest.approx(eps, rel=1e-9)
    assert m.privacy_report_.formal_dp is False           # seeded
    assert m.ridge_ >= 0.0


def test_approaches_least_squares_and_adapts_its_ridge() -> None:
    X, y = _data()
    A = np.hstack([X, np.ones((len(y), 1))])
    ols = np.linalg.lstsq(A, y, rcond=None)[0]
    big = AdaSSP(epsilon=1e6, bounds=(-1.0, 1.0), y_bounds=(-2.0, 2.0), random_state=2).fit(X, y)
    np.testing.assert_allclose(big.coef_, ols[:-1], atol=2e-3)
    assert big.intercept_ == pytest.approx(ols[-1], abs=2e-3)
    small = AdaSSP(epsilon=0.1, bounds=(-1.0, 1.0), y_bounds=(-2.0, 2.0), random_state=2).fit(X, y)
    assert small.ridge_ > big.ridge_
    assert np.linalg.norm(small.coef_ - ols[:-1]) > np.linalg.norm(big.coef_ - ols[:-1])


def test_bad_privacy_parameters_are_refused() -> None:
    X, y = _data(50)
    with pytest.raises(PrivacyParameterError, match="delta"):
        AdaSSP(epsilon=1.0, delta=0.0, bounds=(-1.0, 1.0), y_bounds=(-2.0, 2.0)).fit(X, y)
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        AdaSSP(epsilon=-1.0, bounds=(-1.0, 1.0), y_bounds=(-2.0, 2.0)).fit(X, y)
