"""The epsilon planner for noisy gradients (issue 33): ``plan_epsilon(mechanism="noisy-gd")`` and ``vfl plan
--mechanism noisy-gd``.

As tests/models/test_planner.py does for Gaussian FM, the prediction is checked against fits the planner did not
simulate: independent data sets drawn from the planner's reference by this test's own code
(tests/models/test_planner.py's ``_reference``), fitted through ``vfl.LinearRegression(mechanism="noisy-gd")`` and
``mechanism="none"``. The predicted excess test MSE must be within +-25 % of the measured one, after the test checks
that 4 combined standard errors of the two means are below that tolerance (a correct planner fails with probability
below ~1e-4). The noise row must be the library's own calibration: the in-process estimator's sigma (central) and
the networked run's sigma against a hostile co-party, two draws (two-sided, vfl.protocols.gd_phase.gd_params)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError
from vfl.models.estimators import LinearRegression
from vfl.models.planner import plan_epsilon
from vfl.privacy.gradient_release import GradientRelease

N, P, R2 = 1000, 4, 0.5
REPLICATES = 300   # per side: combined standard error ~1.8 % of the excess MSE at epsilon 1 (measured)
Y_BOUNDS = (-3 * math.sqrt(2.0), 3 * math.sqrt(2.0))


def _reference(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The planner's reference, written out here (as tests/models/test_planner.py)."""
    X = np.clip(rng.normal(0.0, 1.0 / 3.0, (n, P)), -1, 1)
    beta = np.full(P, 3.0 / math.sqrt(P))
    y_sd = math.sqrt(1.0 + (1.0 - R2) / R2)
    return X, np.clip(X @ beta + rng.normal(0.0, math.sqrt((1 - R2) / R2), n), -3 * y_sd, 3 * y_sd)


def _measured_excess(epsilon: float, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    X_test, y_test = _reference(20_000, rng)
    common = {"bounds": [(-1.0, 1.0)] * P, "y_bounds": Y_BOUNDS}
    excess = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # seeded noise and the default accountant warn per fit
        for i in range(REPLICATES):
            X, y = _reference(N, rng)
            private = LinearRegression(epsilon=epsilon, mechanism="noisy-gd", random_state=seed * 1000 + i,
                                       **common).fit(X, y)
            exact = LinearRegression(mechanism="none", **common).fit(X, y)
            excess.append(np.mean((private.predict(X_test) - y_test) ** 2)
                          - np.mean((exact.predict(X_test) - y_test) ** 2))
    e = np.asarray(excess)
    return float(e.mean()), float(e.std(ddof=1) / math.sqrt(e.size))


@pytest.mark.parametrize("epsilon,seed", [(1.0, 31), pytest.param(1.0, 47, marks=pytest.mark.slow)])  # disjoint
def test_predicted_noisy_gd_excess_mse_is_within_25_percent_of_independent_fits(epsilon, seed):
    plan = plan_epsilon(N, [P], mechanism="noisy-gd", epsilons=(epsilon,), noise_sharing="central",
                        replicates=REPLICATES, random_state=seed, bounds=[(-1.0, 1.0)] * P, label_bounds=Y_BOUNDS)
    row = plan.rows[0]
    measured, measured_se = _measured_excess(epsilon, seed + 100)
    combined_se = math.hypot(measured_se, row.excess_error_mean_se)
    assert 4 * combined_se < 0.25 * measured, (measured, measured_se, row.excess_error_mean_se)   # the test's power
    assert abs(row.excess_error_mean - measured) <= 0.25 * measured, (row.excess_error_mean, measured, combined_se)


def test_noise_row_is_the_librarys_calibration_and_more_budget_means_less_error():
    from vfl.protocols.gd_phase import gd_params

    two = plan_epsilon(2000, [3, 2], mechanism="noisy-gd", epsilons=(0.5, 4.0), replicates=40, random_state=3)
    # networked: label owner 0 holds 3 columns + the intercept, the other party 2: (A, B) widths (2, 4)
    for row, eps in zip(two.rows, (0.5, 4.0), strict=True):
        rel, _ = gd_params("linear", 2000, (2, 4), epsilon=eps, delta=1e-5, steps=25, radius=1.0, learning_rate=None,
                           precision_bits=24, key_bits=2048)
        (noise,) = row.noise
        assert noise.entry_std == pytest.approx(rel.sigma, rel=1e-12) and noise.draws == 2
        assert noise.total_std == pytest.approx(math.sqrt(2) * rel.sigma, rel=1e-12)
        assert row.lambda_floor == 0.0 and row.no_model_share == 0.0
        assert row.true_epsilon == pytest.approx(eps, rel=1e-6)
    assert two.rows[1].excess_error_median < two.rows[0].excess_error_median
    central = plan_epsilon(2000, [3, 2], mechanism="noisy-gd", epsilons=(1.0,), noise_sharing="central",
                           replicates=20, random_state=4)
    (noise,) = central.rows[0].noise
    assert noise.draws == 1 and noise.entry_std == pytest.approx(GradientRelease("linear", 2000, 6, 1.0, 1e-5).sigma)
    assert "gradient per round (T = 25)" in two.text()


def test_networked_noisy_gd_plan_needs_two_parties():
    with pytest.raises(ConfigurationError, match="exactly two parties"):
        plan_epsilon(500, [2, 2, 2], mechanism="noisy-gd", replicates=20)


def test_vfl_plan_covers_noisy_gd(capsys):
    from vfl.cli import main

    code = main(["plan", "--rows", "800", "--party-columns", "2,2", "--mechanism", "noisy-gd", "--epsilon", "1",
                 "--replicates", "20", "--seed", "1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["settings"]["mechanism"] == "noisy-gd"
    assert doc["rows"][0]["noise"][0]["draws"] == 2 and doc["rows"][0]["excess_error_median"] > 0
