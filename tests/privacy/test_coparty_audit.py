"""Issue 20, item 6: a co-party's best test from its own view, as a statistical audit (Clopper-Pearson lower bound).

The red team's setting: 2 parties, linear, epsilon = 1, delta = 1e-5, N = 5000; the label owner (party 0) sees its
own data, its own noise draws, its own blocks and the released cross blocks (and the model, post-processing of
them); neighbouring datasets differ in one row of party 1's feature. With one-sided noise (the label owner answers
alpha[1] = X_1^T y and draws its whole noise) the block is exact in its view: the lower bound is limited only by the
number of runs and far above the epsilon^(1) = 0.854 the report stated. With two-sided noise it stays within the
epsilon the report states against a party. The default tests simulate the block release in floats with the
calibrated noise (vfl.privacy.audit.audit_view); the slow one runs the exact fixed-point release of the networked
protocol (vfl.privacy.fixed_point.simulate_release, both parties' draws from their own block generators) and
subtracts the label owner's own draws, re-drawn from its generators.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import DissectionPlan
from vfl.privacy.accounting import AGAINST_COORDINATOR, AGAINST_PARTY
from vfl.privacy.audit import (
    audit_statistics,
    audit_view,
    likelihood_ratio_statistic,
    party_neighbouring_pair,
    release_mean,
    view_noise_specs,
)
from vfl.privacy.calibration import epsilon_of
from vfl.privacy.fixed_point import block_generators, cross_block_noise, prepare_fixed_point, simulate_release
from vfl.privacy.mechanisms import make_mechanism

N, EPS, DELTA = 5000, 1.0, 1e-5
LABEL, VICTIM = 0, 1


def mechanism(sharing: str, n: int = N, name: str = "gaussian-fm"):
    plan = DissectionPlan([1, 1], LABEL, model="linear")
    # the equal budget split: the numbers of docs/audit.md were measured with it (issue 20, before issue 24's split)
    kw = {"delta": DELTA, "budget_split": "equal"} if name == "gaussian-fm" else {}
    return make_mechanism(name, plan=plan, n_samples=n, epsilon=EPS, noise_sharing=sharing,
                          party_names=["alice", "bob"], **kw)


def test_the_views_noise() -> None:
    """What each participant does not know: the label owner knows its own blocks and, one-sided, the whole noise of
    alpha[1] (it responds to it); two-sided it misses one draw everywhere; the coordinator two on cross blocks."""
    two, one = mechanism("two-sided"), mechanism("one-sided")
    names = [b.name for b in two.plan.blocks]
    assert names == ["alpha[0]", "alpha[1]", "M[0,0]", "M[0,1]", "M[1,1]"]   # one coordinate each (d = 1 + 1)
    tau_a, tau_m = two.taus["alpha"], two.taus["M"]
    stds = {who: [s.scale for s in view_noise_specs(m, LABEL)] for who, m in
            (("label, two-sided", two), ("label, one-sided", one))}
    assert stds["label, two-sided"] == pytest.approx([0.0, tau_a, 0.0, tau_m / math.sqrt(2), tau_m])
    assert stds["label, one-sided"] == pytest.approx([0.0, 0.0, 0.0, tau_m / math.sqrt(2), tau_m])
    coord = [s.scale for s in view_noise_specs(two, "coordinator")]
    assert coord == pytest.approx([tau_a, math.sqrt(2) * tau_a, tau_m, tau_m, tau_m])
    with pytest.raises(ConfigurationError, match="Laplace"):
        view_noise_specs(mechanism("two-sided", name="laplace-fm"), "coordinator")
    pair = party_neighbouring_pair(two.plan, VICTIM, N)
    pair.X1[0, 1] = 0.3   # bob's own block M[1,1] changes
    with pytest.raises(ConfigurationError, match="holds itself"):
        audit_view(two, VICTIM, 100, pair=pair)   # bob's own data changes: not a test against bob


def test_one_sided_noise_lets_the_label_owner_see_through_it() -> None:
    mech = mechanism("one-sided")
    stated = mech.privacy_report().parties[VICTIM].epsilon       # what the report said before two-sided noise
    assert stated == pytest.approx(0.854, abs=5e-4)
    result = audit_view(mech, LABEL, 4000, random_state=1)
    assert result.epsilon_pair == math.inf and result.epsilon_true == math.inf   # the one-sided report says so now
    assert result.epsilon_lower_bound >= 5.01 > stated        # the red team's number, from only 4000 runs


def test_two_sided_noise_keeps_the_label_owner_within_the_reported_epsilon() -> None:
    mech = mechanism("two-sided")
    report = mech.privacy_report()
    against_party = report.parties[VICTIM].epsilon_against[AGAINST_PARTY]
    assert against_party == pytest.approx(0.854, abs=5e-4)
    result = audit_view(mech, LABEL, 400_000, random_state=1)
    assert result.epsilon_true == against_party
    assert result.epsilon_pair == pytest.approx(against_party, rel=1e-9)   # the pair attains the per-party bound
    assert 0.4 < result.epsilon_lower_bound <= against_party   # the test has power, and stays within the report


def test_the_coordinator_alone_stays_within_its_smaller_epsilon() -> None:
    mech = mechanism("two-sided")
    stated = mech.privacy_report().parties[VICTIM].epsilon_against[AGAINST_COORDINATOR]
    result = audit_view(mech, "coordinator", 400_000, random_state=2)
    assert result.epsilon_true == stated < mech.privacy_report().parties[VICTIM].epsilon
    assert result.epsilon_pair <= stated
    assert 0.2 < result.epsilon_lower_bound <= stated


# ------------------------------------------------------------------ the exact networked release (slow)
P_BITS = 24


def _quantized(mech, X: np.ndarray, y: np.ndarray):
    d = mech.plan.n_features
    parts = [prepare_fixed_point(X[:, sl], precision_bits=P_BITS, domain="l2", n_features_total=d)
             for sl in mech.plan.feature_slices]
    return parts, prepare_fixed_point(y, precision_bits=P_BITS, domain="linf", n_features_total=d)


def label_owner_view(mech, parts, y_q, seeds: tuple[int, int]) -> np.ndarray:
    """The cross blocks and bob's block as the label owner sees them: the released values (exact fixed-point release,
    both parties' draws from their own block generators) minus its own draws, re-drawn from its generators."""
    plan, n = mech.plan, len(y_q)
    values = simulate_release(plan, mech, parts, y_q, party_rngs=[np.random.default_rng(s) for s in seeds],
                              precision_bits=P_BITS)
    own = block_generators(np.random.default_rng(seeds[LABEL]), plan, LABEL)
    view = []
    for b in plan.blocks:
        if b.name in ("alpha[0]", "M[0,0]"):
            continue                                  # its own blocks: bob's data does not enter them
        value = np.asarray(values[b.name], dtype=float).reshape(-1)
        if b.cross:
            raw = cross_block_noise(plan, mech, b, (1, 1), n_samples=n, precision_bits=P_BITS, rng=own[b.name])
            value = value - plan.scale(b, n) * float(int(raw.reshape(-1)[0])) / 2.0 ** (2 * P_BITS)
        view.append(value[0])
    return np.array(view)


@pytest.mark.slow
def test_exact_release_two_sided_label_owner_audit() -> None:
    """About 40 s: 12 000 exact releases per dataset (N = 500, p = 24)."""
    n, runs = 500, 12_000
    mech = mechanism("two-sided", n=n)
    pair = party_neighbouring_pair(mech.plan, VICTIM, n, random_state=3)
    keep = [1, 3, 4]                                   # alpha[1], M[0,1], M[1,1] in release order
    specs = [view_noise_specs(mech, LABEL)[i] for i in keep]
    q0, q1 = _quantized(mech, pair.X0, pair.y0), _quantized(mech, pair.X1, pair.y1)
    none = make_mechanism("none", plan=mech.plan, n_samples=n)
    means = [np.array([v.reshape(-1)[0] for name, v in simulate_release(
        mech.plan, none, *q, party_rngs=[np.random.default_rng(0)] * 2, precision_bits=P_BITS).items()
        if name not in ("alpha[0]", "M[0,0]")]) for q in (q0, q1)]
    views = [np.array([label_owner_view(mech, *q, (2 * i + 1, 2 * i + 2)) for i in range(j * runs, (j + 1) * runs)])
             for j, q in enumerate((q0, q1))]
    residual = views[0] - means[0]
    assert residual.std(axis=0) == pytest.approx([s.scale for s in specs], rel=0.05)   # one draw: tau, not 0 or 2
    s0, s1 = (likelihood_ratio_statistic(v, means[0], means[1], specs) for v in views)
    result = audit_statistics(s0, s1, delta=DELTA)
    against = mech.privacy_report().parties[VICTIM].epsilon_against[AGAINST_PARTY]
    float_means = release_mean(mech.plan, pair.X0, pair.y0)[keep], release_mean(mech.plan, pair.X1, pair.y1)[keep]
    mu = float(np.linalg.norm((float_means[1] - float_means[0]) / [s.scale for s in specs]))
    assert epsilon_of(mu, DELTA) <= against * (1 + 1e-6)
    assert result.epsilon_lower_bound <= against
