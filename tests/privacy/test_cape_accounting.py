"""CAPE accounting (spec §3.3): kappa closed form vs the numeric recipe, paper eq. (1), delta forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from vfl.exceptions import ConfigurationError, PrivacyParameterError
from vfl.privacy.calibration import calibrate_mu, epsilon_of
from vfl.privacy.cape_accounting import (
    CapeView,
    calibrate_cape_tau,
    cape_mu_z,
    cape_mu_z_mean,
    cape_sigma_z,
    cape_true_epsilon,
    default_colluders,
    exact_delta,
    kappa,
    observation_map,
    paper_delta,
    paper_mu_z,
    privacy_loss,
    privacy_q,
    worst_case_q,
)


def test_kappa_special_values():
    for S in (2, 3, 10, 50):
        assert kappa(S, 0) == pytest.approx(2 * S / (S + 1), rel=1e-15)
        assert kappa(S, S - 1) == pytest.approx(S, rel=1e-15)
    assert kappa(10, 3) == pytest.approx((10 / 11) * (17 / 7), rel=1e-15)
    assert kappa(30000, 9999) == pytest.approx(2.5, abs=1e-3)  # S_C ~ S/3
    assert default_colluders(10) == 3 and default_colluders(50) == 16 and default_colluders(2) == 0
    for bad in ((1, 0), (3, 3), (3, -1), (2.5, 0)):
        with pytest.raises(ConfigurationError):
            kappa(*bad)


def test_spec_reference_mu_z():
    # spec §3: S=10, S_C=3, N=1e4, tau=0.005 -> mu_z = 0.044156
    assert cape_mu_z_mean(10, 3, 10_000, 0.005) == pytest.approx(0.044156, abs=5e-7)
    S, C, N, tau = 10, 3, 10_000, 0.005
    assert cape_mu_z_mean(S, C, N, tau) == pytest.approx(S**3 * (2 * S - C) / (2 * tau**2 * N**2 * (S + 1) * (S - C)))


def _check_recipe(S: int) -> float:
    worst = 0.0
    rng = np.random.default_rng(S)
    for C in range(S):
        tau = float(rng.uniform(0.5, 2.0))
        delta_s = float(rng.uniform(0.1, 1.0))
        q = privacy_q([delta_s] * S, [tau] * S, 0, list(range(1, C + 1)))
        worst = max(worst, abs(q / ((delta_s / tau) ** 2 * kappa(S, C)) - 1.0))
    return worst


def test_numeric_recipe_equals_closed_form():
    for S in list(range(2, 17)) + [30]:
        assert _check_recipe(S) < 1e-9, S


@pytest.mark.slow
def test_numeric_recipe_equals_closed_form_all_sizes():
    for S in range(2, 51):
        assert _check_recipe(S) < 1e-9, S


def test_symmetric_worst_case_is_any_site_and_coalition():
    S, C = 5, 2
    qs = [privacy_q([1.0] * S, [1.0] * S, h, c) for h, c in ((0, (1, 2)), (4, (0, 3)), (2, (1, 4)))]
    np.testing.assert_allclose(qs, kappa(S, C), rtol=1e-10)
    assert worst_case_q([1.0] * S, [1.0] * S, C) == pytest.approx(kappa(S, C), rel=1e-10)
    # a larger coalition never sees less
    assert privacy_q([1.0] * S, [1.0] * S, 0, (1, 2, 3)) >= qs[0]


def test_asymmetric_enumeration_and_unbounded_loss():
    n = np.array([100.0, 200.0, 300.0, 150.0])
    q = worst_case_q(1 / n, 1 / n, 1)
    each = [privacy_q(1 / n, 1 / n, h, (c,)) for h in range(4) for c in range(4) if c != h]
    assert q == pytest.approx(max(each), rel=1e-12)
    assert q >= kappa(4, 1) * 0.5
    # an honest site that adds no noise has unbounded privacy loss
    assert privacy_q([1.0, 1.0, 1.0], [0.0, 1.0, 1.0], 0, ()) == math.inf
    with pytest.raises(ConfigurationError, match="max_sets"):
        worst_case_q(1 / np.arange(1, 31), 1 / np.arange(1, 31), 10, max_sets=1000)


def test_paper_eq1_reproduction():
    # paper bracket = eq. (1) / (S^3 / (2 tau^2 N^2 (S + 1))); corrected bracket (2S - S_C)/(S - S_C)
    def bracket(S, C):
        return paper_mu_z(S, C, 1000, 0.01) / (S**3 / (2 * 0.01**2 * 1000**2 * (S + 1)))

    assert bracket(10, 3) == pytest.approx(1.425, abs=5e-4)
    assert bracket(50, 16) == pytest.approx(1.097, abs=5e-4)
    assert paper_mu_z(2, 0, 1000, 0.01) == pytest.approx(cape_mu_z_mean(2, 0, 1000, 0.01), rel=1e-12)
    assert paper_mu_z(10, 3, 10_000, 0.005) < cape_mu_z_mean(10, 3, 10_000, 0.005)  # the paper understates it


def test_delta_forms_order_and_calibration_round_trip():
    mu_z = cape_mu_z_mean(10, 3, 10_000, 0.005)
    sigma_z = cape_sigma_z(mu_z)
    assert sigma_z == pytest.approx(math.sqrt(2 * mu_z))
    for eps in (0.5, 1.0, 2.0):
        exact = exact_delta(eps, mu_z)
        tail = norm.sf((eps - mu_z) / sigma_z)
        assert exact <= tail <= paper_delta(eps, mu_z, sigma_z) / 2.0
    with pytest.raises(PrivacyParameterError, match="epsilon > mu_z"):
        paper_delta(0.01, mu_z, sigma_z)
    # calibrating tau for (eps, delta) gives exactly delta at eps, for one or several blocks
    eps, delta, S, C = 1.0, 1e-5, 10, 3
    tau = calibrate_cape_tau(1e-3, eps, delta, S, C)
    assert exact_delta(eps, cape_mu_z(1e-3, tau, S, C)) == pytest.approx(delta, rel=1e-6)
    sens = [4e-3, math.sqrt(2) * 1e-3]
    taus = [calibrate_cape_tau(s, eps, delta, S, C, n_blocks=2) for s in sens]
    assert cape_true_epsilon(sens, taus, delta, kappa(S, C)) == pytest.approx(eps, rel=1e-9)
    mu = math.sqrt(kappa(S, C) * sum((s / t) ** 2 for s, t in zip(sens, taus, strict=True)))
    assert mu == pytest.approx(calibrate_mu(eps, delta), rel=1e-12)
    assert epsilon_of(mu, delta) == pytest.approx(eps, rel=1e-9)


def test_monte_carlo_privacy_loss_mean_and_variance():
    # z = log p_D(o)/p_D'(o), o ~ p_D: mean q/2, variance q (sigma_z^2 = 2 mu_z, not sigma_z = 2 mu_z)
    S, C, n = 6, 2, 100_000
    taus = np.array([0.8, 1.0, 1.2, 0.9, 1.1, 1.0])
    view = CapeView.build([0.7] * S, taus, 0, (2, 4))
    rng = np.random.default_rng(11)
    omega = rng.normal(size=(n, 2 * S)) * view.stds
    z = privacy_loss(view, omega @ view.A.T)
    q = view.q
    assert abs(z.mean() - q / 2) < 5 * math.sqrt(q / n)
    assert abs(z.var() / q - 1) < 5 * math.sqrt(2 / n)
    assert view.A.shape == observation_map(S, (2, 4)).shape == (S + 1 + 2 * C, 2 * S)
