"""The epsilon planner (issue 31) against fits it did not simulate.

The planner predicts the excess test MSE of a private fit over the non-private fit of the same rows by simulating the
release with the library's mechanism on reference data drawn within the bounds. Here independent data sets are drawn
from that reference by this test's own code, fitted through the public estimator (vfl.LinearRegression, Gaussian FM
and mechanism "none"), and their excess test MSE is measured. The prediction must be within +-25 % of the
measurement; the test first checks that its own Monte Carlo error (the standard errors of both means, combined) is
below a quarter of that tolerance, so a correct planner fails it with probability below ~1e-4 (4 standard errors)
while a planner off by 25 % or more fails it.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError
from vfl.models.estimators import LinearRegression
from vfl.models.planner import plan_epsilon

N, P, R2 = 2000, 4, 0.5
REPLICATES = 1000   # per side: the relative standard error of each mean is then ~4 % (measured), combined ~5.6 %


def _reference(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The planner's reference, written out here: columns N(0, (1/3)^2) clipped to their bounds (-1, 1), every
    column the same share of a population R^2 of 1/2, the label clipped to +-3 sd."""
    X = np.clip(rng.normal(0.0, 1.0 / 3.0, (n, P)), -1, 1)
    beta = np.full(P, 3.0 / math.sqrt(P))           # Var(x . beta) = 1
    y_sd = math.sqrt(1.0 + (1.0 - R2) / R2)
    return X, np.clip(X @ beta + rng.normal(0.0, math.sqrt((1 - R2) / R2), n), -3 * y_sd, 3 * y_sd)


def _measured_excess(epsilon: float, data_sets: int, seed: int) -> tuple[float, float]:
    """(mean, standard error) of the excess test MSE of Gaussian FM over mechanism 'none' on fresh data sets."""
    rng = np.random.default_rng(seed)
    y_bounds = (-3 * math.sqrt(2.0), 3 * math.sqrt(2.0))
    X_test, y_test = _reference(20_000, rng)
    excess = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # seeded noise and the default accountant warn per fit
        for i in range(data_sets):
            X, y = _reference(N, rng)
            common = {"bounds": [(-1.0, 1.0)] * P, "y_bounds": y_bounds}
            private = LinearRegression(epsilon=epsilon, random_state=seed * 1000 + i, fallback="ridge",
                                       **common).fit(X, y)
            exact = LinearRegression(mechanism="none", **common).fit(X, y)
            excess.append(np.mean((private.predict(X_test) - y_test) ** 2)
                          - np.mean((exact.predict(X_test) - y_test) ** 2))
    e = np.asarray(excess)
    return float(e.mean()), float(e.std(ddof=1) / math.sqrt(e.size))


@pytest.mark.parametrize("epsilon,seed", [(1.0, 11), (4.0, 12),
                                          pytest.param(1.0, 23, marks=pytest.mark.slow),   # disjoint seeds
                                          pytest.param(4.0, 24, marks=pytest.mark.slow)])
def test_predicted_excess_mse_is_within_25_percent_of_independent_fits(epsilon, seed):
    plan = plan_epsilon(N, [P], epsilons=(epsilon,), noise_sharing="central", replicates=REPLICATES, random_state=seed,
                        bounds=[(-1.0, 1.0)] * P, label_bounds=(-3 * math.sqrt(2.0), 3 * math.sqrt(2.0)))
    row = plan.rows[0]
    measured, measured_se = _measured_excess(epsilon, REPLICATES, seed + 100)
    combined_se = math.hypot(measured_se, row.excess_error_mean_se)
    assert 4 * combined_se < 0.25 * measured, (measured, measured_se, row.excess_error_mean_se)   # the test's power
    assert abs(row.excess_error_mean - measured) <= 0.25 * measured, (row.excess_error_mean, measured, combined_se)


def test_plan_reports_the_librarys_own_noise_per_block_and_more_budget_means_less_error():
    from vfl.fm.dissection import DissectionPlan
    from vfl.privacy.mechanisms import make_mechanism

    plan = plan_epsilon(5000, [3, 2], epsilons=(0.5, 4.0), replicates=40, random_state=1)
    mech = make_mechanism("gaussian-fm", plan=DissectionPlan([4, 2], 0), n_samples=5000, epsilon=0.5, delta=1e-5,
                          domain="l2", noise_sharing="two-sided")
    by_name = {b.block: b for b in plan.rows[0].noise}
    for b in mech.plan.blocks:
        assert by_name[b.name].entry_std == pytest.approx(mech.entry_noise(b).std, rel=1e-12)
        assert by_name[b.name].draws == (2 if b.cross else 1)
    assert plan.names == ["x0", "x1", "x2", "x3", "x4", "intercept"]
    low, high = plan.rows
    assert high.excess_error_median < low.excess_error_median
    assert all(h < lo for h, lo in zip(high.interval_width, low.interval_width, strict=True))
    doc = plan.to_dict()
    assert doc["rows"][0]["epsilon"] == 0.5 and len(doc["rows"][0]["interval_width"]) == 6
    assert "epsilon planner: linear regression" in plan.text()


def test_logistic_plan_runs_and_reports_accuracy():
    plan = plan_epsilon(3000, [2, 2], model="logistic", epsilons=(1.0, 8.0), replicates=20, random_state=2)
    assert plan.error_measure == "log-loss" and plan.rows[0].accuracy_loss_median is not None
    assert plan.rows[1].excess_error_median <= plan.rows[0].excess_error_median + 0.01


@pytest.mark.parametrize("kwargs,message", [
    ({"n_rows": 1}, "N must be an integer >= 2"),
    ({"party_columns": [0, 0]}, "at least one column"),
    ({"epsilons": (0.0,)}, "positive number"),
    ({"model": "poisson"}, "linear or logistic"),
    ({"bounds": [(0, 1)]}, "1 pairs for 4 columns"),
])
def test_bad_planner_input_is_one_clear_error(kwargs, message):
    args = {"n_rows": 100, "party_columns": [2, 2], **kwargs}
    with pytest.raises(ConfigurationError, match=message):
        plan_epsilon(args.pop("n_rows"), args.pop("party_columns"), **args)


def test_vfl_plan_prints_json_and_refuses_bad_input_in_one_line(capsys, tmp_path):
    import json

    from vfl.cli import main

    alice = tmp_path / "alice.toml"
    alice.write_text("[bounds]\nage = [18, 90]\noutcome = [0, 1]\n")
    bob = tmp_path / "bob.toml"
    bob.write_text("[bounds]\nb0 = [0, 1]\nb1 = [0, 5]\n")
    code = main(["plan", "--rows", "500", "--party-columns", "2,1", "--bounds", f"{bob},{alice}", "--epsilon", "1,2",
                 "--replicates", "20", "--seed", "1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["names"] == ["b0", "b1", "age", "intercept"] and doc["settings"]["label_owner"] == 1
    assert doc["settings"]["label_bounds"] == [0.0, 1.0] and [r["epsilon"] for r in doc["rows"]] == [1.0, 2.0]
    for argv, message in ((["--party-columns", "a,b"], "--party-columns must be comma-separated numbers"),
                          (["--party-columns", "2", "--bounds", f"{alice},{bob}"], "2 file(s) for 1 parties")):
        assert main(["plan", "--rows", "500", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
