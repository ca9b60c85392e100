"""Noise audit: every released entry gets the noise its NoiseSpec declares, and the union of per-block noise
over a K-party plan is distributed like the centralized mechanism (spec §1.2, §2.4, §2.6; 'How to test' (iv))."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from vfl.exceptions import PrivacyLeakWarning
from vfl.fm.dissection import DissectionPlan
from vfl.privacy.mechanisms import make_mechanism

N_DRAWS = 4000
COUNTS = [2, 3, 1]   # 3 parties, label at party 1
D = sum(COUNTS)

CONFIGS = [
    ("laplace-fm", "linear", {"fm_sensitivity": "paper"}),
    ("laplace-fm", "logistic", {"fm_sensitivity": "tight"}),
    ("gaussian-fm", "linear", {"sym": "iso"}),
    ("gaussian-fm", "logistic", {"sym": "mirror"}),
    ("gaussian-fm", "linear", {"calibration": "paper"}),
    ("relaxed-fm", "logistic", {}),
]


def _mech(name, model, opts, counts=COUNTS, label=1, release_beta=True):
    plan = DissectionPlan(counts, label, model=model, release_beta=release_beta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)   # calibration="paper" warns on purpose
        mech = make_mechanism(name, plan=plan, n_samples=500, epsilon=0.8, delta=1e-5, **opts)
    return plan, mech


def _draw_blocks(plan, mech, seed: int, n: int = N_DRAWS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {b.name: np.array([mech.block_noise(b, rng) for _ in range(n)]) for b in plan.blocks}


@pytest.mark.parametrize("name,model,opts", CONFIGS)
def test_every_entry_matches_declared_scale(name, model, opts) -> None:
    plan, mech = _mech(name, model, opts)
    draws = _draw_blocks(plan, mech, seed=1)
    for b in plan.blocks:
        Z = draws[b.name].reshape(N_DRAWS, *b.shape)
        if b.kind == "M" and b.parties[0] == b.parties[1]:
            dk = b.shape[0]
            assert np.array_equal(Z, np.swapaxes(Z, 1, 2)), f"{b.name}: noise must be exactly symmetric"
            for a in range(dk):
                for c in range(a, dk):
                    spec = mech.diagonal_noise(b) if a == c else mech.entry_noise(b)
                    emp = Z[:, a, c].std()
                    assert emp == pytest.approx(spec.std, rel=0.05), (b.name, a, c, emp, spec)
                    assert abs(Z[:, a, c].mean()) < 5 * spec.std / math.sqrt(N_DRAWS)
        else:
            spec = mech.entry_noise(b)
            flat = Z.reshape(N_DRAWS, -1)
            for j in range(flat.shape[1]):
                assert flat[:, j].std() == pytest.approx(spec.std, rel=0.05), (b.name, j)
                assert abs(flat[:, j].mean()) < 5 * spec.std / math.sqrt(N_DRAWS)


@pytest.mark.parametrize("model,variant", [("linear", "paper"), ("logistic", "xu"), ("linear", "tight")])
def test_laplace_blocks_pass_ks(model: str, variant: str) -> None:
    plan, mech = _mech("laplace-fm", model, {"fm_sensitivity": variant})
    draws = _draw_blocks(plan, mech, seed=2, n=3000)
    b_scale = mech.scale
    for b in plan.blocks:
        Z = draws[b.name].reshape(3000, -1)
        if b.kind == "M" and b.parties[0] == b.parties[1]:
            iu = np.triu_indices(b.shape[0])
            Z = draws[b.name][:, iu[0], iu[1]]
        assert mech.entry_noise(b).kind == "laplace" and mech.entry_noise(b).scale == b_scale
        # every entry's marginal, and the pooled block (entries are i.i.d.)
        p = stats.kstest(Z.ravel(), "laplace", args=(0.0, b_scale)).pvalue
        assert p > 1e-3, (b.name, p)
        assert stats.kstest(Z[:, 0], "laplace", args=(0.0, b_scale)).pvalue > 1e-3
        # and the Gaussian of the same variance is rejected (the test has power)
        assert stats.kstest(Z.ravel(), "norm", args=(0.0, math.sqrt(2) * b_scale)).pvalue < 1e-3 or Z.size < 3000
    # variance 2 b^2
    pooled = np.concatenate([v.reshape(-1) for v in draws.values()])
    assert pooled.var() == pytest.approx(2 * b_scale**2, rel=0.03)


def test_iso_offdiagonal_to_diagonal_variance_ratio_is_half() -> None:
    plan, mech = _mech("gaussian-fm", "linear", {"sym": "iso"}, counts=[5], label=0)
    rng = np.random.default_rng(3)
    b = plan.block("M[0,0]")
    Z = np.array([mech.block_noise(b, rng) for _ in range(20000)])
    tau = mech.taus["M"]
    diag = Z[:, np.arange(5), np.arange(5)].ravel()
    iu = np.triu_indices(5, 1)
    off = Z[:, iu[0], iu[1]].ravel()
    ratio = off.var() / diag.var()
    # chi-square CI of the ratio (F distribution)
    lo, hi = stats.f.ppf([0.0005, 0.9995], off.size - 1, diag.size - 1)
    assert 0.5 * lo <= ratio <= 0.5 * hi, ratio
    assert diag.var() == pytest.approx(tau**2, rel=0.03)
    assert off.var() == pytest.approx(tau**2 / 2, rel=0.03)
    # mirror layout: off-diagonal variance equals the diagonal one (twice iso's)
    plan_m, mech_m = _mech("gaussian-fm", "linear", {"sym": "mirror"}, counts=[5], label=0)
    Zm = np.array([mech_m.block_noise(plan_m.block("M[0,0]"), rng) for _ in range(20000)])
    assert Zm[:, iu[0], iu[1]].var() == pytest.approx(tau**2, rel=0.03)


@pytest.mark.parametrize("name,model,opts", CONFIGS)
def test_union_of_blocks_equals_centralized(name, model, opts) -> None:
    """Per-entry noise law of the assembled (alpha, M) is identical for a 3-party and a 1-party plan."""
    plan_v, mech_v = _mech(name, model, opts)
    plan_c, mech_c = _mech(name, model, opts, counts=[D], label=0)

    def entry_specs(plan, mech):
        alpha = [None] * D
        M = [[None] * D for _ in range(D)]
        for b in plan.blocks:
            idx = plan.index(b)
            if b.kind == "alpha":
                for a in range(D)[idx[0]]:
                    alpha[a] = mech.entry_noise(b)
            elif b.kind == "M":
                for a in range(D)[idx[0]]:
                    for c in range(D)[idx[1]]:
                        spec = mech.diagonal_noise(b) if a == c else mech.entry_noise(b)
                        M[a][c] = M[c][a] = spec
        return alpha, M

    assert entry_specs(plan_v, mech_v) == entry_specs(plan_c, mech_c)
    if "beta" in mech_c.__dict__.get("taus", {}):
        assert mech_v.taus == mech_c.taus

    # empirical: assembled noise has the same per-entry variance and uncorrelated distinct entries
    def assembled(plan, mech, seed):
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(2500):
            obj = plan.assemble({b.name: mech.block_noise(b, rng) for b in plan.blocks}, beta=0.0)
            iu = np.triu_indices(D)
            out.append(np.concatenate([obj.alpha, obj.M[iu]]))
        return np.array(out)

    Av, Ac = assembled(plan_v, mech_v, 10), assembled(plan_c, mech_c, 11)
    np.testing.assert_allclose(Av.std(axis=0), Ac.std(axis=0), rtol=0.1)
    C = np.corrcoef(Av.T)
    assert np.abs(C - np.eye(C.shape[0])).max() < 0.1


def test_sqrt_sum_of_block_ratios_equals_mu_star() -> None:
    from vfl.privacy.calibration import calibrate_mu

    for model, beta in (("linear", False), ("linear", True), ("logistic", False)):
        plan = DissectionPlan([4], 0, model=model, release_beta=beta)
        for eps in (0.1, 0.5, 1.0, 3.0):
            mech = make_mechanism("gaussian-fm", plan=plan, n_samples=1234, epsilon=eps, delta=1e-6)
            mu = math.sqrt(sum((mech.sens[k] / mech.taus[k]) ** 2 for k in mech.sens))
            assert mu == pytest.approx(calibrate_mu(eps, 1e-6), rel=1e-12)
            assert mech.true_mu() == pytest.approx(mu, rel=1e-14)
