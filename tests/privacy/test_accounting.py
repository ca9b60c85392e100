"""Privacy accounting: noisy-GD exact and RDP (spec §5.1), per-party reports (spec §1.4, §2.6), JSON round trips."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from vfl.fm.dissection import DissectionPlan
from vfl.privacy.accounting import (
    PrivacyReport,
    gaussian_mu_of_blocks,
    noisy_gd_epsilon_exact,
    noisy_gd_epsilon_rdp,
    noisy_gd_mu,
    noisy_gd_sigma_for,
    rdp_optimal_order,
    tasnim_rdp_order,
)
from vfl.privacy.calibration import calibrate_mu, epsilon_of
from vfl.privacy.mechanisms import make_mechanism
from vfl.privacy.sensitivity import (
    gaussian_party_sensitivities,
    laplace_block_table_sum,
    laplace_party_sensitivity_sum,
    laplace_sensitivity_sum,
    partial_block_frobenius,
    xu_party_sensitivity_sum,
)


def test_noisy_gd_reference_values() -> None:
    T, delta, Delta = 1000, 1e-5, 0.37
    tau = 10 * Delta
    rho = T * Delta**2 / (2 * tau**2)
    assert rho == pytest.approx(5.0)
    assert noisy_gd_epsilon_rdp(T, Delta, tau, delta) == pytest.approx(20.174, abs=1e-3)
    assert noisy_gd_epsilon_rdp(T, Delta, tau, delta) == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / delta)))
    a_t = tasnim_rdp_order(T, Delta, tau, delta)
    assert noisy_gd_epsilon_rdp(T, Delta, tau, delta, order=a_t) == pytest.approx(20.422, abs=1e-3)
    assert noisy_gd_epsilon_exact(T, Delta, tau, delta) == pytest.approx(17.857, abs=1e-3)
    assert noisy_gd_mu(T, Delta, tau) == pytest.approx(math.sqrt(10))


def test_rdp_order_is_optimal_and_tasnim_is_worse() -> None:
    T, Delta, tau, delta = 200, 1.0, 7.0, 1e-6
    a = rdp_optimal_order(T, Delta, tau, delta)
    best = noisy_gd_epsilon_rdp(T, Delta, tau, delta)
    for other in np.linspace(1.01, 5 * a, 400):
        assert noisy_gd_epsilon_rdp(T, Delta, tau, delta, order=other) >= best - 1e-12
    assert noisy_gd_epsilon_rdp(T, Delta, tau, delta, order=tasnim_rdp_order(T, Delta, tau, delta)) > best
    # exact accounting is never worse than the RDP conversion
    assert noisy_gd_epsilon_exact(T, Delta, tau, delta) < best


@pytest.mark.parametrize("eps,T", [(0.5, 10), (1.0, 100), (4.0, 1000)])
def test_noisy_gd_sigma_hits_target(eps: float, T: int) -> None:
    sigma = noisy_gd_sigma_for(eps, 1e-5, T, 0.02)
    assert noisy_gd_epsilon_exact(T, 0.02, sigma, 1e-5) == pytest.approx(eps, rel=1e-8)


def test_gaussian_mu_of_blocks() -> None:
    assert gaussian_mu_of_blocks({"a": 3.0, "b": 4.0}, {"a": 1.0, "b": 1.0}) == pytest.approx(5.0)
    assert gaussian_mu_of_blocks({"a": 3.0, "b": 0.0}, {"a": 1.0, "b": 0.0}) == pytest.approx(3.0)


# ----------------------------------------------------------------------------- per-party reports
@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("variant", ["paper", "tight"])
def test_laplace_report_per_party_xu_thm2(model: str, variant: str) -> None:
    counts, L, n, eps = [3, 2, 4], 1, 800, 0.7
    plan = DissectionPlan(counts, L, model=model)
    mech = make_mechanism("laplace-fm", plan=plan, n_samples=n, epsilon=eps, fm_sensitivity=variant)
    rep = mech.privacy_report()
    noise_sum = laplace_sensitivity_sum(model, 9, variant="xu" if (variant == "paper" and model == "logistic")
                                        else variant)
    assert mech.scale == pytest.approx(noise_sum / (n * eps))
    table_total = sum(laplace_block_table_sum(plan).values())
    assert rep.epsilon == pytest.approx(min(eps, table_total / noise_sum * eps))
    assert rep.epsilon_claimed == eps
    for k in range(3):
        p = rep.parties[k]
        top = laplace_party_sensitivity_sum(plan, k) / noise_sum * eps
        assert p.epsilon == pytest.approx(min(top, rep.epsilon))
        assert p.epsilon_bottom_up == pytest.approx(top)
        assert p.epsilon_paper == pytest.approx(xu_party_sensitivity_sum(plan, k) / noise_sum * eps)
        assert p.epsilon <= rep.epsilon + 1e-15
    if model == "linear":   # block table by hand (spec §1.3): party 0: 12+12+12+24, party 1 (label): 8+12+16+6+12+16
        assert [laplace_party_sensitivity_sum(plan, k) for k in range(3)] == [60.0, 70.0, 76.0]
    if variant == "tight":
        assert rep.epsilon == pytest.approx(eps)


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_gaussian_report_per_party_g_of_r(model: str) -> None:
    counts, L, n, eps, delta = [1, 4, 3], 0, 1000, 1.0, 1e-5
    plan = DissectionPlan(counts, L, model=model)
    mech = make_mechanism("gaussian-fm", plan=plan, n_samples=n, epsilon=eps, delta=delta)
    rep = mech.privacy_report()
    assert rep.epsilon == pytest.approx(eps, rel=1e-8)
    mu_star = calibrate_mu(eps, delta)
    assert rep.extra["mu"] == pytest.approx(mu_star, rel=1e-12)
    radii = np.sqrt(np.array(counts) / 8)
    np.testing.assert_allclose(rep.extra["radii"], radii)
    ms = 1.0 if model == "linear" else 1 / 8
    a1 = 4.0 if model == "linear" else 1.0
    for k in range(3):
        d1 = a1 / n if k == L else a1 * radii[k] / n
        d2 = ms * partial_block_frobenius(radii[k]) / n
        mu_k = math.sqrt((d1 / mech.taus["alpha"]) ** 2 + (d2 / mech.taus["M"]) ** 2)
        assert rep.parties[k].epsilon == pytest.approx(epsilon_of(mu_k, delta), rel=1e-9)
        assert rep.parties[k].epsilon <= eps + 1e-9
        assert rep.parties[k].sensitivity == gaussian_party_sensitivities(plan, k, n, radii)
    # the label holder is charged its full Delta_1; a small party much less
    assert rep.parties[0].epsilon > rep.parties[2].epsilon


@pytest.mark.parametrize("model,claimed,true", [("linear", 0.5, 0.75), ("logistic", 0.5, 0.64),
                                                ("linear", 1.0, 1.61), ("logistic", 1.0, 1.37)])
def test_paper_calibration_true_epsilon(model: str, claimed: float, true: float) -> None:
    """Spec §2.3: Tasnim et al.'s per-block classical calibration really gives 0.75/0.64 (0.5) and 1.61/1.37 (1)."""
    plan = DissectionPlan([5], 0, model=model, release_beta=True)
    with pytest.warns(UserWarning, match="paper"):
        mech = make_mechanism("gaussian-fm", plan=plan, n_samples=1000, epsilon=claimed, delta=1e-5,
                              calibration="paper")
    rep = mech.privacy_report()
    assert rep.epsilon_claimed == claimed
    assert rep.epsilon == pytest.approx(true, abs=0.005)
    mu_cl = claimed / math.sqrt(2 * math.log(1.25e5))
    assert mech.true_mu() == pytest.approx((2.0 if model == "linear" else math.sqrt(3)) * mu_cl, rel=1e-12)
    assert f"claimed epsilon {claimed:g} is really" in rep.to_text()
    assert "true epsilon" in rep.to_text()


def test_report_json_and_text_round_trip() -> None:
    plan = DissectionPlan([2, 2], 1, model="linear", release_beta=True)
    for name, kw in (("laplace-fm", {}), ("gaussian-fm", {"delta": 1e-6}), ("relaxed-fm", {"delta": 1e-6}),
                     ("none", {})):
        mech = make_mechanism(name, plan=plan, n_samples=300, epsilon=0.9, party_names=["alice", "bob"], **kw)
        rep = mech.privacy_report()
        s = rep.to_json()
        back = json.loads(s)
        assert back == json.loads(json.dumps(rep.to_dict()))
        assert back["mechanism"] == name
        assert back["neighbouring"].startswith("bounded DP")
        rebuilt = PrivacyReport(**{k: v for k, v in back.items() if k != "parties"})
        assert rebuilt.to_dict() | {"parties": back["parties"]} == back
        text = rep.to_text()
        assert name in text and "neighbouring" in text
        if name != "none":
            assert "party 0 (alice)" in text and "party 1 (bob)" in text
            assert back["parties"][1]["name"] == "bob"
        else:
            assert "no differential privacy" in text and not back["formal_dp"]


def test_seeded_report_warns_in_text() -> None:
    plan = DissectionPlan([2], 0)
    rep = make_mechanism("gaussian-fm", plan=plan, n_samples=10, epsilon=1, delta=1e-5, seeded=True).privacy_report()
    assert rep.seeded and "fixed seed" in rep.to_text()
