"""Mechanism construction, calibration wiring and parameter errors (spec §1.2, §2.3, §2.5, §5.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, PrivacyLeakWarning, PrivacyParameterError
from vfl.fm.dissection import DissectionPlan
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.mechanisms import GaussianFM, LaplaceFM, NoMechanism, RelaxedFM, make_mechanism
from vfl.privacy.sensitivity import relaxed_sensitivity


@pytest.fixture
def plan() -> DissectionPlan:
    return DissectionPlan([2, 3], 0, model="linear")


def test_gaussian_taus_spec_2_3(plan) -> None:
    """The equal split (budget_split="equal", every block the share 1/J'; the default before issue 24)."""
    n, eps, delta = 1000, 0.5, 1e-5
    mu = calibrate_mu(eps, delta)
    m = make_mechanism("gaussian-fm", plan=plan, n_samples=n, epsilon=eps, delta=delta, budget_split="equal")
    assert isinstance(m, GaussianFM)
    assert m.taus["alpha"] == pytest.approx(4 * math.sqrt(2) / (n * mu), rel=1e-12)   # J' = 2
    assert m.taus["M"] == pytest.approx(2 / (n * mu), rel=1e-12)
    assert m.lambda_floor == pytest.approx(m.taus["M"] * math.sqrt(5))
    pb = DissectionPlan([5], 0, model="linear", release_beta=True)
    m3 = make_mechanism("gaussian-fm", plan=pb, n_samples=n, epsilon=eps, delta=delta, budget_split="equal")
    assert m3.taus == pytest.approx({"beta": math.sqrt(3) / (n * mu), "alpha": 4 * math.sqrt(3) / (n * mu),
                                     "M": math.sqrt(6) / (n * mu)}, rel=1e-12)
    pl = DissectionPlan([5], 0, model="logistic")
    ml = make_mechanism("gaussian-fm", plan=pl, n_samples=n, epsilon=eps, delta=delta)
    assert ml.taus == pytest.approx({"alpha": math.sqrt(2) / (n * mu), "M": 1 / (4 * n * mu)}, rel=1e-12)
    # classical: 1/mu* replaced by sqrt(2 ln(1.25/delta))/eps
    mc = make_mechanism("gaussian-fm", plan=pl, n_samples=n, epsilon=eps, delta=delta, calibration="classical")
    c = math.sqrt(2 * math.log(1.25 / delta)) / eps
    assert mc.taus["M"] == pytest.approx(c / (4 * n), rel=1e-12)
    assert mc.privacy_report().epsilon < eps   # classical is conservative for eps < 1


def test_laplace_scale_and_floor(plan) -> None:
    m = make_mechanism("laplace-fm", plan=plan, n_samples=200, epsilon=0.5)
    assert isinstance(m, LaplaceFM)
    assert m.scale == pytest.approx((2 * 36 - 2) / (200 * 0.5))   # 2(1+d)^2 - 2, d = 5, no beta
    assert m.lambda_floor == pytest.approx(math.sqrt(2) * m.scale * math.sqrt(5))
    mt = make_mechanism("laplace-fm", plan=plan, n_samples=200, epsilon=0.5, fm_sensitivity="tight")
    assert mt.scale == pytest.approx((25 + 25) / (200 * 0.5))
    ml = make_mechanism("laplace-fm", plan=DissectionPlan([5], 0, model="logistic"), n_samples=200, epsilon=0.5)
    assert ml.fm_sensitivity == "xu" and ml.scale == pytest.approx((25 / 4 + 5) / 100)


def test_relaxed_fm(plan) -> None:
    m = make_mechanism("relaxed-fm", plan=plan, n_samples=400, epsilon=1.0, delta=1e-5)
    assert isinstance(m, RelaxedFM)
    assert m.tau == pytest.approx(relaxed_sensitivity("linear", 5, 400) / calibrate_mu(1.0, 1e-5))
    assert m.sensitivity == pytest.approx(2 * math.sqrt(6) / 400)
    assert m.privacy_report().epsilon == 1.0


def test_none_mechanism(plan) -> None:
    m = make_mechanism("none", plan=plan, n_samples=10)
    assert isinstance(m, NoMechanism)
    assert m.lambda_floor == 0.0
    rng = np.random.default_rng(0)
    for b in plan.blocks:
        assert not np.any(m.block_noise(b, rng))
    assert m.privacy_report().epsilon is None


@pytest.mark.parametrize("eps", [0, -0.5, float("nan")])
def test_bad_epsilon(plan, eps) -> None:
    for name in ("laplace-fm", "gaussian-fm", "relaxed-fm"):
        with pytest.raises(PrivacyParameterError, match="epsilon"):
            make_mechanism(name, plan=plan, n_samples=10, epsilon=eps, delta=1e-5)


@pytest.mark.parametrize("delta", [0, 1, -0.1, 2.0])
def test_bad_delta(plan, delta) -> None:
    for name in ("gaussian-fm", "relaxed-fm"):
        with pytest.raises(PrivacyParameterError, match="delta"):
            make_mechanism(name, plan=plan, n_samples=10, epsilon=1.0, delta=delta)


def test_missing_parameters_and_options(plan) -> None:
    with pytest.raises(PrivacyParameterError, match="needs epsilon"):
        make_mechanism("laplace-fm", plan=plan, n_samples=10)
    with pytest.raises(PrivacyParameterError, match="needs delta"):
        make_mechanism("gaussian-fm", plan=plan, n_samples=10, epsilon=1.0)
    with pytest.raises(ConfigurationError, match="unknown mechanism"):
        make_mechanism("exponential", plan=plan, n_samples=10, epsilon=1.0)
    with pytest.raises(ConfigurationError, match="do not apply"):
        make_mechanism("laplace-fm", plan=plan, n_samples=10, epsilon=1.0, sym="iso")
    with pytest.raises(ConfigurationError, match="sym"):
        make_mechanism("gaussian-fm", plan=plan, n_samples=10, epsilon=1.0, delta=1e-5, sym="upper")
    with pytest.raises(ConfigurationError, match="calibration"):
        make_mechanism("gaussian-fm", plan=plan, n_samples=10, epsilon=1.0, delta=1e-5, calibration="rdp")
    with pytest.raises(ConfigurationError, match="l2 domain"):
        make_mechanism("gaussian-fm", plan=plan, n_samples=10, epsilon=1.0, delta=1e-5, domain="linf")
    with pytest.raises(ConfigurationError, match="fm_sensitivity"):
        make_mechanism("laplace-fm", plan=plan, n_samples=10, epsilon=1.0, fm_sensitivity="huge")
    with pytest.raises(ConfigurationError, match="n_samples"):
        make_mechanism("laplace-fm", plan=plan, n_samples=0, epsilon=1.0)


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_classical_raises_for_eps_ge_1_but_paper_mode_reproduces(plan, eps) -> None:
    with pytest.raises(PrivacyParameterError, match="epsilon < 1"):
        make_mechanism("gaussian-fm", plan=plan, n_samples=10, epsilon=eps, delta=1e-5, calibration="classical")
    with pytest.warns(PrivacyLeakWarning):
        m = make_mechanism("gaussian-fm", plan=plan, n_samples=10, epsilon=eps, delta=1e-5, calibration="paper")
    assert m.privacy_report().epsilon > eps
