"""A CAPE site's own policy on the aggregator's plan (vfl.protocols.policy.SitePolicy; review of issue 11).

The aggregator's plan fixes epsilon, delta, S_C, the calibration and (capeDJICA) the rounds. A site refuses,
before it computes or releases any statistic, a plan whose TRUE epsilon (the site computes it: paper
calibration's larger value, all planned rounds) exceeds its --max-epsilon, whose delta exceeds --max-delta, or
that withstands fewer colluders than --min-colluders; it prints the plan it accepted.
"""

from __future__ import annotations

import numpy as np
import pytest

from vfl.data.synthetic_ica import make_joint_ica
from vfl.exceptions import ConfigurationError, PrivacyLeakWarning
from vfl.models.cape_ica import CapeICAConfig
from vfl.protocols.cape_aggregation import CapeFMAggregator, CapeFMSite, CapeMessage
from vfl.protocols.cape_djica_rounds import CapeICAAggregator, CapeICAPlan, CapeICASite
from vfl.protocols.policy import SitePolicy, check_site_plan


def _ica_plan_message(sites, **config):
    cfg = CapeICAConfig(3, **{"epsilon": 2.0, "delta": 1e-5, "max_iter": 12, **config})
    plan = CapeICAPlan.new(cfg, [X.shape[1] for X in sites], sites[0].shape[0])
    return CapeMessage("plan", 0, {"index": 0, **plan.to_body()}), plan


@pytest.fixture(scope="module")
def ica_sites():
    return make_joint_ica(3, 2, 60, 3, 6, scale_sd=2.0, random_state=5).sites


def test_check_site_plan_refuses_each_policy_bound_and_names_the_option():
    policy = SitePolicy(max_epsilon=2.0, max_delta=1e-4, min_colluders=1)
    common = dict(what="capeFM linear", epsilon=1.0, delta=1e-5, n_sites=4, test_noise=False)
    line = check_site_plan(policy, true_epsilon=1.0, n_colluders=1, **common)
    assert line == ("plan: capeFM linear, 4 sites, epsilon 1, delta 1e-05, withstands the aggregator plus 1 "
                    "colluding site(s)")
    assert "(true epsilon 3.5)" in check_site_plan(SitePolicy(max_epsilon=4), true_epsilon=3.5, n_colluders=1,
                                                   **common)
    with pytest.raises(ConfigurationError, match=r"true epsilon 2\.5 \(claimed 1\).*--max-epsilon 2"):
        check_site_plan(policy, true_epsilon=2.5, n_colluders=1, **common)
    with pytest.raises(ConfigurationError, match="--max-delta"):
        check_site_plan(policy, true_epsilon=1.0, n_colluders=1, **{**common, "delta": 1e-3})
    with pytest.raises(ConfigurationError, match="--min-colluders 1"):
        check_site_plan(policy, true_epsilon=1.0, n_colluders=0, **common)
    # the site's own test mode (no noise) is its choice: not checked, but said
    assert "NO noise" in check_site_plan(policy, true_epsilon=np.inf, n_colluders=0,
                                         **{**common, "test_noise": True})
    # permissive: any plan (in-process runs, one caller)
    check_site_plan(SitePolicy.permissive(), true_epsilon=1e6, n_colluders=0, **{**common, "delta": 0.5})


@pytest.mark.parametrize("bad", [dict(max_epsilon=0.0), dict(max_epsilon=float("inf")), dict(max_delta=1.0),
                                 dict(min_colluders=-1), dict(min_colluders=True)])
def test_site_policy_options_are_checked(bad):
    with pytest.raises(ConfigurationError):
        SitePolicy(**bad)


def test_djica_site_refuses_a_plan_above_its_max_epsilon_before_computing_anything(ica_sites):
    msg, _ = _ica_plan_message(ica_sites, epsilon=50.0)
    site = CapeICASite(ica_sites[0])
    with pytest.raises(ConfigurationError, match="true epsilon 50.*--max-epsilon 10"):
        site.handle(msg)
    assert site.round is None and site.plan is None        # nothing computed, nothing to send
    accepted = CapeICASite(ica_sites[0], policy=SitePolicy(max_epsilon=60.0))
    assert accepted.handle(msg) and accepted.plan_summary.startswith("plan: capePCA + capeDJICA, 3 sites, 12 rounds")


def test_djica_site_checks_the_true_epsilon_of_the_paper_calibration(ica_sites):
    """The paper's Lemma-1 calibration claims epsilon 2 but spends more (kappa); the site refuses on the truth."""
    msg, plan = _ica_plan_message(ica_sites, calibration="paper", n_colluders=1)
    with pytest.warns(PrivacyLeakWarning):
        agg = CapeICAAggregator(plan)
    del agg
    pca = plan.pca_calibration()
    from vfl.models.cape_djica import planned_true_epsilon

    true_eps = planned_true_epsilon(plan.ica_calibration(pca), 1e-5)
    assert true_eps > 2.0 * 1.01
    with pytest.raises(ConfigurationError, match=r"claimed 2\)"):
        CapeICASite(ica_sites[0], policy=SitePolicy(max_epsilon=2.0 * 1.005)).handle(msg)
    site = CapeICASite(ica_sites[0], policy=SitePolicy(max_epsilon=true_eps * 1.001))
    with pytest.warns(PrivacyLeakWarning):
        site.handle(msg)
    assert f"true epsilon {true_eps:g}" in site.plan_summary and "plus 1 colluding" in site.plan_summary


def test_djica_site_refuses_too_few_colluders(ica_sites):
    msg, _ = _ica_plan_message(ica_sites, n_colluders=0)
    with pytest.raises(ConfigurationError, match="withstands 0 colluding"):
        CapeICASite(ica_sites[0], policy=SitePolicy(min_colluders=1)).handle(msg)


def _fm_sites(n_rows=(20, 20), d=4):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(sum(n_rows), d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.5
    y = np.clip(X @ rng.normal(size=d) * 0.5, -1, 1)
    return X[: n_rows[0]], y[: n_rows[0]]


def test_capefm_site_refuses_a_plan_above_its_policy():
    X, y = _fm_sites()
    plan = CapeFMAggregator.new_plan("linear", 50.0, 1e-5, [20, 20], 4)
    with pytest.raises(ConfigurationError, match="true epsilon 50.*--max-epsilon 10"):
        CapeFMSite(X, y, "linear").handle(CapeFMAggregator(plan).plan_messages()[0])
    plan = CapeFMAggregator.new_plan("linear", 1.0, 0.01, [20, 20], 4)
    with pytest.raises(ConfigurationError, match="delta 0.01.*--max-delta"):
        CapeFMSite(X, y, "linear").handle(CapeFMAggregator(plan).plan_messages()[0])
    plan = CapeFMAggregator.new_plan("linear", 1.0, 1e-5, [20, 20], 4)
    site = CapeFMSite(X, y, "linear")
    assert site.handle(CapeFMAggregator(plan).plan_messages()[0])
    assert site.plan_summary.startswith("plan: capeFM linear, 2 sites, epsilon 1, delta 1e-05")
