"""Private inference from the release (vfl.models.inference, issue 31): coverage, width against epsilon, only the
release enters, the batched solver equals the solver, the statsmodels-like face and the fit-measure warning."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from vfl.exceptions import NoBetterThanBaselineWarning
from vfl.fm.dissection import DissectionPlan
from vfl.fm.objective import QuadraticObjective
from vfl.fm.solver import solve_details
from vfl.models.estimators import LinearRegression, LogisticRegression
from vfl.models.inference import InferenceResult, batch_solve, noise_draws
from vfl.privacy.mechanisms import make_mechanism

D = 10
THETA = np.linspace(-1.0, 1.0, D) / 5.5
ICPT = 0.25
Z975 = 1.959963984540054


def _linear_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n, D))
    return X, ICPT + X @ THETA + rng.uniform(-1.0, 1.0, n)


def _linear(epsilon: float, seed: int, **kw) -> LinearRegression:
    return LinearRegression(epsilon=epsilon, bounds=(-1.0, 1.0), y_bounds=(ICPT - 2.0, ICPT + 2.0),
                            random_state=seed, **kw)


def _quiet_fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        assert est.inference_ is not None
    return est


def test_coverage_of_a_quick_cell_within_the_sampling_error_and_naive_intervals_fail_it() -> None:
    """N = 1000, epsilon = 1, beta released: the mean coverage of the 11 nominal 95 % intervals over K independent
    data sets lies within 4 standard errors of 0.95, the standard error from the spread of the per-data-set
    coverage (at least the binomial sd of K sets with 11 independent intervals each). The naive interval (the
    non-private OLS standard errors around the DP coefficients) fails the same check."""
    K = 60
    truth = np.append(THETA, ICPT)
    per_set, naive = [], []
    for s in range(K):
        X, y = _linear_data(1000, 7000 + s)
        est = _quiet_fit(_linear(1.0, 8000 + s, release_beta=True), X, y)
        ci = est.conf_int()
        per_set.append(np.mean((ci[:, 0] <= truth) & (truth <= ci[:, 1])))
        Z = np.column_stack([X, np.ones(len(X))])
        b = np.linalg.lstsq(Z, y, rcond=None)[0]
        se = np.sqrt(np.diag(np.linalg.inv(Z.T @ Z)) * np.sum((y - Z @ b) ** 2) / (len(y) - D - 1))
        coef = np.append(est.coef_, est.intercept_)
        naive.append(np.mean(np.abs(coef - truth) <= Z975 * se))
    for values, should_pass in ((per_set, True), (naive, False)):
        arr = np.asarray(values)
        se = max(arr.std(ddof=1) / math.sqrt(K), math.sqrt(0.95 * 0.05 / (11 * K)))
        assert bool(abs(arr.mean() - 0.95) <= 4.0 * se) is should_pass, (arr.mean(), se)


def test_intervals_widen_as_epsilon_shrinks() -> None:
    widths = []
    for eps in (4.0, 1.0, 0.5):
        per_set = []
        for s in range(3):
            X, y = _linear_data(2000, 100 + s)
            ci = _quiet_fit(_linear(eps, 200 + s, release_beta=True), X, y).conf_int()
            per_set.append(np.median(ci[:, 1] - ci[:, 0]))
        widths.append(float(np.mean(per_set)))
    assert widths[0] < widths[1] < widths[2], widths


def test_same_release_same_interval_whatever_the_raw_data() -> None:
    """Two different data sets with the same sufficient statistics (rows 0-3 reflected by H = I - 2vv'/v'v with
    v = (1, 1, -1, -1, 0, ...), orthogonal to the ones vector, so X'X, X'y, y'y and the column sums are unchanged)
    and the same noise seed give the same release, hence the same inference: nothing non-public enters."""
    X, y = _linear_data(500, 3)
    X, y = 0.3 * X, 0.3 * y                     # room inside the bounds for the reflected rows
    v = np.zeros(len(y))
    v[:4] = [1.0, 1.0, -1.0, -1.0]
    H = np.eye(len(y)) - 2.0 * np.outer(v, v) / (v @ v)
    X2, y2 = H @ X, H @ y
    assert not np.allclose(X2[:4], X[:4])
    a = _quiet_fit(_linear(1.0, 11, release_beta=True), X, y)
    b = _quiet_fit(_linear(1.0, 11, release_beta=True), X2, y2)
    np.testing.assert_allclose(a.objective_.M, b.objective_.M, atol=1e-12)
    np.testing.assert_allclose(a.conf_int(), b.conf_int(), atol=1e-8)
    np.testing.assert_allclose(a.bse, b.bse, atol=1e-8)
    c = _quiet_fit(_linear(1.0, 12, release_beta=True), X, y)   # another noise draw: another release
    assert not np.allclose(a.conf_int(), c.conf_int(), atol=1e-6)


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("regularization", ["floor", "adaptive"])
def test_batch_solve_equals_the_solver(model: str, regularization: str) -> None:
    plan = DissectionPlan([3, 2], 0, model=model)
    mech = make_mechanism("gaussian-fm", plan=plan, n_samples=400, epsilon=1.0, delta=1e-5,
                          noise_sharing="two-sided")
    rng = np.random.default_rng(0)
    alpha, M, _ = noise_draws(mech, 50, rng)
    M = M + np.eye(5) * 0.05
    floor = mech.lambda_floor
    W, _ = batch_solve(alpha, M, lambda_floor=floor, regularization=regularization,
                       alpha_noise_var=mech.alpha_noise_variance())
    for k in range(50):
        ref = solve_details(QuadraticObjective(0.0, alpha[k], M[k]), lambda_floor=floor, fallback="ridge",
                            regularization=regularization, alpha_noise_var=mech.alpha_noise_variance()).w
        np.testing.assert_allclose(W[k], ref, atol=1e-10)


def test_noise_draws_follow_the_public_noise_law_with_two_draws_on_cross_blocks() -> None:
    plan = DissectionPlan([2, 2], 0, model="linear")
    one = make_mechanism("gaussian-fm", plan=plan, n_samples=1000, epsilon=1.0, delta=1e-5)
    two = make_mechanism("gaussian-fm", plan=plan, n_samples=1000, epsilon=1.0, delta=1e-5,
                         noise_sharing="two-sided")
    B = 20000
    for mech, draws in ((one, 1), (two, 2)):
        alpha, M, _ = noise_draws(mech, B, np.random.default_rng(1))
        tau_a = mech.entry_noise(plan.block("alpha[1]")).std
        tau_m = mech.entry_noise(plan.block("M[0,1]")).std
        for value, expected in ((alpha[:, 2].var(), draws * tau_a**2), (M[:, 0, 2].var(), draws * tau_m**2),
                                (alpha[:, 0].var(), mech.entry_noise(plan.block("alpha[0]")).std ** 2)):
            assert abs(value / expected - 1.0) < 6 * math.sqrt(2.0 / B), (value, expected)   # sd of a variance


def test_statsmodels_like_face_and_round_trip() -> None:
    X, y = _linear_data(3000, 5)
    est = _quiet_fit(_linear(2.0, 6, release_beta=True), X, y)
    ci = est.conf_int()
    assert ci.shape == (D + 1, 2) and np.all(ci[:, 0] < ci[:, 1])
    assert est.bse.shape == est.pvalues.shape == (D + 1,)
    assert np.all((est.pvalues >= 0) & (est.pvalues <= 1))
    assert np.all(est.conf_int(alpha=0.2)[:, 1] - est.conf_int(alpha=0.2)[:, 0] < ci[:, 1] - ci[:, 0])
    text = est.summary()
    for word in ("coef", "std err", "P>|z|", "[0.025", "0.975]", "x0", "intercept", "r2"):
        assert word in text
    record = est.inference_.to_dict()
    assert set(record) >= {"method", "alpha", "names", "coef", "bse", "conf_int", "pvalues", "n_bootstrap", "fit",
                           "warnings"}
    assert record["names"][-1] == "intercept" and record["alpha"] == 0.05
    np.testing.assert_allclose(record["coef"], np.append(est.coef_, est.intercept_))
    assert {"r2", "r2_conf_int", "mse"} <= set(record["fit"])
    back = InferenceResult.from_dict(record)
    np.testing.assert_array_equal(back.conf_int(), ci)


def test_fit_measures_r2_close_to_the_in_sample_r2_and_warning_for_a_useless_model() -> None:
    X, y = _linear_data(20000, 9)
    est = _quiet_fit(_linear(4.0, 10, release_beta=True), X, y)
    fit = est.inference_.fit
    r2 = est.score(X, y)
    lo, hi = fit["r2_conf_int"]
    assert lo <= r2 <= hi and hi - lo < 0.2, (r2, fit)
    assert not est.inference_.warnings
    rng = np.random.default_rng(3)
    noise_y = ICPT + rng.uniform(-1.0, 1.0, 2000)        # y unrelated to X: no model beats the mean
    useless = _linear(0.5, 4, release_beta=True).fit(X[:2000], noise_y)
    with pytest.warns(NoBetterThanBaselineWarning, match="predicting the mean"):
        useless.summary()
    assert any("mean" in w for w in useless.inference_.warnings)


def test_without_beta_the_intervals_are_marked_conservative() -> None:
    X, y = _linear_data(2000, 21)
    est = _quiet_fit(_linear(1.0, 22), X, y)
    assert any("conservative" in w for w in est.inference_.warnings)
    assert est.inference_.fit["r2"] is None and est.inference_.fit["mse_gain_over_mean"] is not None


def test_logistic_inference_has_taylor_fit_measures() -> None:
    rng = np.random.default_rng(2)
    X = rng.uniform(-1.0, 1.0, (4000, 4))
    y = (rng.uniform(size=4000) < 1 / (1 + np.exp(-(X @ np.array([1.5, -1.0, 0.5, 0.0]))))).astype(float)
    est = _quiet_fit(LogisticRegression(epsilon=2.0, bounds=(-1.0, 1.0), random_state=3), X, y)
    fit = est.inference_.fit
    assert {"taylor_loss", "taylor_gain_over_base_rate", "base_rate", "pseudo_r2"} <= set(fit)
    assert abs(fit["base_rate"] - y.mean()) < 0.1
    assert est.conf_int().shape == (5, 2)


def test_z_and_p_values_agree() -> None:
    X, y = _linear_data(1500, 31)
    inf = _quiet_fit(_linear(1.0, 32, release_beta=True), X, y).inference_
    from vfl.models.inference import normal_cdf

    np.testing.assert_allclose(inf.pvalues, 2.0 * normal_cdf(-np.abs(inf.tvalues)), atol=1e-12)


def test_model_file_inference_record_is_checked_and_optional() -> None:
    from vfl.exceptions import ConfigurationError
    from vfl.models.modelio import FittedModel, PartyColumns

    X, y = _linear_data(1000, 41)
    est = _quiet_fit(_linear(1.0, 42), X, y)
    cols = [PartyColumns("a", [f"x{j}" for j in range(D)], [[-1.0, 1.0]] * D, 1.0, True)]
    plain = FittedModel("linear", "gaussian-fm", cols, np.zeros(D), [ICPT - 2.0, ICPT + 2.0])
    with pytest.raises(ConfigurationError, match="no inference record"):
        plain.conf_int()
    doc = plain.to_dict()
    assert "inference" not in doc
    doc["inference"] = est.inference_.to_dict()
    loaded = FittedModel.from_dict(doc)
    np.testing.assert_array_equal(loaded.conf_int(), est.conf_int())
    doc["inference"] = {**doc["inference"], "bse": [1.0]}     # one standard error for 11 names
    with pytest.raises(ConfigurationError, match="malformed model file"):
        FittedModel.from_dict(doc)
