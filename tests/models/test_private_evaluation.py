"""DP held-out metrics (vfl.models.private_evaluation, issue 31): the sums' L2 sensitivity holds for neighbouring
test sets at the extremes of the public ranges, the released metrics are unbiased with the stated noise std (a
derived tolerance over independent draws), and a refusal without label bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError
from vfl.models.private_evaluation import (
    SENSITIVITY,
    _linear_stats,
    _logistic_stats,
    private_metrics,
    score_range,
)
from vfl.rng import make_rng

FRANGE = (-3.0, 2.5)
LABELS = (-2.0, 1.0)


def _linear_rows(rng, n):
    return rng.uniform(*LABELS, n), rng.uniform(*FRANGE, n)


def _logistic_rows(rng, n):
    z = rng.uniform(*FRANGE, n)
    return (rng.uniform(size=n) < 0.5).astype(float), 1 / (1 + np.exp(-z))


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_replacing_one_row_moves_the_sums_by_at_most_the_sensitivity(model: str) -> None:
    rng = np.random.default_rng(0)
    worst = 0.0
    extremes_f = [FRANGE[0], FRANGE[1], 0.0, 0.3 * FRANGE[0]]
    for trial in range(300):
        y, f = _linear_rows(rng, 20) if model == "linear" else _logistic_rows(rng, 20)
        y2, f2 = y.copy(), f.copy()
        if trial % 2:   # both versions of the row at corners of the public ranges
            for ys, fs in ((y, f), (y2, f2)):
                ys[0] = rng.choice(LABELS) if model == "linear" else rng.choice([0.0, 1.0])
                z = rng.choice(extremes_f)
                fs[0] = z if model == "linear" else 1 / (1 + math.exp(-z))
        else:
            new_y, new_f = _linear_rows(rng, 1) if model == "linear" else _logistic_rows(rng, 1)
            y2[0], f2[0] = new_y[0], new_f[0]
        if model == "linear":
            a, _ = _linear_stats(y, f, FRANGE, LABELS)
            b, _ = _linear_stats(y2, f2, FRANGE, LABELS)
        else:
            a, _ = _logistic_stats(y, f, FRANGE, 4)
            b, _ = _logistic_stats(y2, f2, FRANGE, 4)
        assert np.all((a >= 0) & (a <= 1 + 1e-12))
        worst = max(worst, float(np.linalg.norm(a.sum(axis=0) - b.sum(axis=0))))
    assert worst <= SENSITIVITY[model] + 1e-12
    assert worst >= 0.6 * SENSITIVITY[model]     # the bound is not loose by more than the search can miss


@pytest.mark.parametrize("data_seed,noise_seed", [(1, 7), (11, 17)])   # a second, disjoint pair of seeds
def test_released_linear_metrics_are_unbiased_with_the_stated_noise(data_seed: int, noise_seed: int) -> None:
    rng = np.random.default_rng(data_seed)
    y, f = _linear_rows(rng, 200)
    exact_mse = float(np.mean((y - f) ** 2))
    draws, stated = [], None
    gen = make_rng(noise_seed)
    for _ in range(300):
        rec = private_metrics("linear", y, f, np.zeros(200, bool), epsilon=1.0, delta=1e-6, score_bounds=FRANGE,
                              label_bounds=LABELS, rng=gen)
        draws.append(rec["metrics"]["mse"])
        stated = rec["metrics"]["noise_std"]["mse"]
    draws = np.array(draws)
    k = len(draws)
    # grid rounding moves the sum by at most n 2^-31 R^2 / n: far below the noise
    assert abs(draws.mean() - exact_mse) <= 4 * stated / math.sqrt(k)
    # the sample std of k normal draws: relative standard error ~ 1/sqrt(2(k-1)); 4 of them
    assert abs(draws.std(ddof=1) / stated - 1) <= 4 / math.sqrt(2 * (k - 1))
    assert rec["differentially_private"] and rec["privacy"]["epsilon"] == 1.0


def test_released_logistic_metrics_are_unbiased_with_the_stated_noise() -> None:
    rng = np.random.default_rng(2)
    y, p = _logistic_rows(rng, 150)
    exact = float(np.mean((p >= 0.5) == (y == 1)))
    gen = make_rng(8)
    recs = [private_metrics("logistic", y, p, np.zeros(150, bool), epsilon=2.0, delta=1e-6, score_bounds=FRANGE,
                            bins=3, rng=gen) for _ in range(200)]
    acc = np.array([r["metrics"]["accuracy"] for r in recs])
    stated = recs[0]["metrics"]["noise_std"]["accuracy"]
    assert abs(acc.mean() - exact) <= 4 * stated / math.sqrt(len(acc))
    assert abs(acc.std(ddof=1) / stated - 1) <= 4 / math.sqrt(2 * (len(acc) - 1))
    assert all(r["metrics"]["auc"] is None for r in recs)
    counts = np.array([[b["count"] for b in r["metrics"]["calibration"]] for r in recs]).mean(axis=0)
    truth = np.histogram(p, bins=3, range=(0, 1))[0]
    assert np.all(np.abs(counts - truth) <= 4 * recs[0]["privacy"]["noise_std_per_sum"] / math.sqrt(len(recs)))


def test_score_range_and_refusals() -> None:
    assert score_range([2.0, -1.0], 0.5, [0.0, -1.0], [1.0, 3.0]) == (0.5 + 0.0 - 3.0, 0.5 + 2.0 + 1.0)
    with pytest.raises(ConfigurationError, match="public bounds"):
        score_range([1.0], 0.0, [np.nan], [1.0])
    with pytest.raises(ConfigurationError, match="label bounds"):
        private_metrics("linear", [0.0], [0.0], [False], epsilon=1.0, delta=1e-6, score_bounds=FRANGE,
                        label_bounds=None, rng=make_rng(1))


def test_the_printed_lines_of_a_private_record_state_the_noise() -> None:
    from vfl.models.evaluation import format_metrics

    rng = np.random.default_rng(5)
    y, p = _logistic_rows(rng, 50)
    rec = private_metrics("logistic", y, p, np.zeros(50, bool), epsilon=1.0, delta=1e-6, score_bounds=FRANGE,
                          bins=4, rng=make_rng(3))
    lines = format_metrics(rec)
    assert "differentially private: noise std accuracy" in lines[1] and "AUC n/a" in lines[2]
    assert len([line for line in lines if line.startswith("    [")]) == 4
