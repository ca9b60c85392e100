"""The FM solve's adaptive regularisation as the estimators, the CLI and the run settings offer it (issue 24):
post-processing of the released objective with the mechanism's public alpha noise variances, so the privacy report
is the floor solve's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import vfl
from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import DissectionPlan
from vfl.fm.solver import solve
from vfl.privacy.mechanisms import make_mechanism
from vfl.protocols.settings import RunSettings


def _data(seed: int = 0, n: int = 400):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 4))
    y = np.clip(X @ np.array([0.8, -0.4, 0.2, 0.0]) + 0.1 * rng.normal(size=n), -2, 2)
    return X, y


def _fit(**kw) -> vfl.LinearRegression:
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return vfl.LinearRegression(bounds=(-1, 1), y_bounds=(-2, 2), epsilon=1.0, random_state=11,
                                    accountant=vfl.BudgetAccountant(epsilon=10, delta=1e-3), **kw).fit(X, y)


def test_linear_default_is_adaptive_with_the_mechanisms_alpha_variances() -> None:
    default, floor = _fit(), _fit(regularization="floor")
    # the same seed: the same released objective, only the solve differs
    np.testing.assert_array_equal(default.objective_.M, floor.objective_.M)
    plan = DissectionPlan([5], 0, model="linear")
    mech = make_mechanism("gaussian-fm", plan=plan, n_samples=400, epsilon=1.0, delta=1e-5, domain="l2")
    lam = mech.lambda_floor
    np.testing.assert_array_equal(default.coef_unit_, solve(default.objective_, lambda_floor=lam,
                                                            regularization="adaptive",
                                                            alpha_noise_var=mech.alpha_noise_variance()))
    np.testing.assert_array_equal(floor.coef_unit_, solve(floor.objective_, lambda_floor=lam))
    assert not np.array_equal(default.coef_unit_, floor.coef_unit_)
    assert _fit(regularization="adaptive").coef_unit_.tolist() == default.coef_unit_.tolist()


def test_adaptive_is_post_processing_the_privacy_report_is_unchanged() -> None:
    """The report is the release's (the same for both solves); the post-processing claim itself is that the
    adaptive coefficients are a function of the released objective and public noise scales only: solving the
    released objective of one fit again, with no access to X or y, reproduces them bit for bit."""
    a, f = _fit(), _fit(regularization="floor")
    assert (a.privacy_report_.epsilon, a.privacy_report_.delta) == (f.privacy_report_.epsilon,
                                                                    f.privacy_report_.delta)
    assert a.privacy_report_.epsilon == pytest.approx(1.0)
    released = a.objective_   # the noisy objective as released; below, only public constants are added
    public = make_mechanism("gaussian-fm", plan=DissectionPlan([a.objective_.alpha.size], 0, model="linear"),
                            n_samples=400, epsilon=1.0, delta=1e-5, domain="l2")
    np.testing.assert_array_equal(a.coef_unit_, solve(released, lambda_floor=public.lambda_floor,
                                                      regularization="adaptive",
                                                      alpha_noise_var=public.alpha_noise_variance()))


def test_logistic_keeps_the_floor_by_default() -> None:
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, size=(300, 3))
    labels = (X[:, 0] + 0.3 * rng.normal(size=300) > 0).astype(int)
    kw = dict(bounds=(-1, 1), random_state=4, accountant=vfl.BudgetAccountant(epsilon=10, delta=1e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = vfl.LogisticRegression(**kw).fit(X, labels)
        floor = vfl.LogisticRegression(regularization="floor", **kw).fit(X, labels)
    np.testing.assert_array_equal(default.coef_unit_, floor.coef_unit_)


def test_alpha_noise_variance_counts_both_draws_of_a_two_sided_cross_block() -> None:
    plan = DissectionPlan([3, 2], 0, model="linear")
    central = make_mechanism("gaussian-fm", plan=plan, n_samples=500, epsilon=1.0, delta=1e-5)
    two = make_mechanism("gaussian-fm", plan=plan, n_samples=500, epsilon=1.0, delta=1e-5, noise_sharing="two-sided")
    own, cross = (b for b in plan.blocks if b.kind == "alpha")
    assert not own.cross and cross.cross
    np.testing.assert_allclose(central.alpha_noise_variance(), [central.entry_noise(own).std ** 2] * 3
                               + [central.entry_noise(cross).std ** 2] * 2)
    np.testing.assert_allclose(two.alpha_noise_variance()[3:], 2 * central.alpha_noise_variance()[3:])
    np.testing.assert_allclose(two.alpha_noise_variance()[:3], central.alpha_noise_variance()[:3])
    # the variance is the noise's: 4000 draws of the in-process release's alpha noise
    rng = np.random.default_rng(0)
    draws = np.array([np.concatenate([central.block_noise(own, rng), central.block_noise(cross, rng)])
                      for _ in range(4000)])
    np.testing.assert_allclose(draws.var(axis=0), central.alpha_noise_variance(), rtol=0.1)


def test_run_settings_and_cli_offer_the_option(capsys) -> None:
    RunSettings(n_parties=2, regularization="adaptive").validate()
    with pytest.raises(ConfigurationError, match="--regularization"):
        RunSettings(n_parties=2, regularization="ridge").validate()
    from vfl.cli import main

    assert main(["coordinator", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--regularization [floor|adaptive]" in out and "post-processing" in out
