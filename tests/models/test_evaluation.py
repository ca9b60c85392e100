"""Held-out metrics of vfl.models.evaluation (issue 31) against direct, library-free formulas: pairwise AUC, a
per-row log-loss loop, numpy R^2/MSE, a per-row calibration loop; and the labels file's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.models.evaluation import (
    calibration_table,
    classification_metrics,
    evaluate_scores,
    read_labels_file,
    regression_metrics,
    roc_auc,
)


def _pairwise_auc(y, s) -> float:
    pos, neg = [v for v, t in zip(s, y, strict=True) if t == 1], [v for v, t in zip(s, y, strict=True) if t == 0]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_classification_metrics_equal_the_direct_formulas(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    p = np.round(rng.uniform(size=n), 2)          # rounded: many ties, which the rank formula must count 1/2
    p[:5] = [0.0, 1.0, 0.5, 0.5, 1e-20]
    y = (rng.uniform(size=n) < p).astype(float)
    m = classification_metrics(y, p, bins=7)
    assert m["auc"] == pytest.approx(_pairwise_auc(y, p), abs=1e-12)
    clip = [min(max(v, 1e-15), 1 - 1e-15) for v in p]
    loss = -sum(t * math.log(q) + (1 - t) * math.log(1 - q) for t, q in zip(y, clip, strict=True)) / n
    assert m["log_loss"] == pytest.approx(loss, rel=1e-12)
    assert m["accuracy"] == pytest.approx(sum((q >= 0.5) == (t == 1) for q, t in zip(p, y, strict=True)) / n, abs=0)
    assert m["brier"] == pytest.approx(sum((q - t) ** 2 for q, t in zip(p, y, strict=True)) / n, rel=1e-12)
    rate = y.mean()
    assert m["base_rate"] == pytest.approx(rate) and m["base_rate_accuracy"] == pytest.approx(max(rate, 1 - rate))
    for b, row in enumerate(m["calibration"]):
        inside = [(q, t) for q, t in zip(p, y, strict=True) if b / 7 <= q < (b + 1) / 7 or (b == 6 and q == 1.0)]
        assert row["count"] == len(inside)
        if inside:
            assert row["mean_predicted"] == pytest.approx(sum(q for q, _ in inside) / len(inside), rel=1e-12)
            assert row["observed_rate"] == pytest.approx(sum(t for _, t in inside) / len(inside), rel=1e-12)
        else:
            assert row["mean_predicted"] is None and row["observed_rate"] is None
    assert sum(r["count"] for r in m["calibration"]) == n


def test_auc_extremes_and_one_class() -> None:
    y = np.array([0, 0, 1, 1.0])
    assert roc_auc(y, [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert roc_auc(y, [0.9, 0.8, 0.2, 0.1]) == 0.0
    assert roc_auc(y, [0.5] * 4) == 0.5
    assert roc_auc(np.ones(4), [0.1, 0.2, 0.3, 0.4]) is None


@pytest.mark.parametrize("seed", [3, 4])
def test_regression_metrics_equal_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.normal(size=200)
    f = 0.7 * y + rng.normal(scale=0.5, size=200)
    m = regression_metrics(y, f)
    assert m["mse"] == pytest.approx(np.mean((y - f) ** 2), rel=1e-12)
    assert m["rmse"] == pytest.approx(math.sqrt(m["mse"]), rel=1e-12)
    assert m["mae"] == pytest.approx(np.mean(np.abs(y - f)), rel=1e-12)
    assert m["r2"] == pytest.approx(1 - np.sum((y - f) ** 2) / np.sum((y - y.mean()) ** 2), rel=1e-12)
    assert regression_metrics(y, np.full_like(y, y.mean()))["r2"] == pytest.approx(0.0, abs=1e-12)
    assert regression_metrics(np.ones(3), [1.0, 2.0, 3.0])["r2"] is None


def test_missing_ids_are_left_out_never_scored_as_zero() -> None:
    y = np.array([1.0, 2.0, 3.0, 4.0])
    rec = evaluate_scores("linear", y, [1.0, np.nan, 3.0, 4.0], [False, True, False, False])
    assert (rec["n_queried"], rec["n_scored"], rec["n_missing"]) == (4, 3, 1)
    assert rec["metrics"]["mse"] == 0.0 and rec["differentially_private"] is False
    with pytest.raises(DataValidationError, match="no scored test ID"):
        evaluate_scores("linear", y, [np.nan] * 4, [True] * 4)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(DataValidationError, match="0 or 1"):
        classification_metrics([0, 2], [0.1, 0.2])
    with pytest.raises(ConfigurationError, match="bins"):
        calibration_table([0, 1], [0.1, 0.2], bins=0)


def test_labels_file(tmp_path) -> None:
    good = tmp_path / "test.csv"
    good.write_text("id,y\nc1,0.5\nc2,-1\n")
    assert read_labels_file(good, None, "id")[1:][0] == ["c1", "c2"]
    name, ids, y = read_labels_file(good, "y", None)
    assert name == "id" and list(y) == [0.5, -1.0]
    bad = tmp_path / "bad.csv"
    bad.write_text("id,y\nc1,0.5\nc2,\n")
    with pytest.raises(DataValidationError, match="line 3: label '' is not a number"):
        read_labels_file(bad, "y", "id")
    wide = tmp_path / "wide.csv"
    wide.write_text("id,x,y\nc1,1,0\n")
    with pytest.raises(ConfigurationError, match="--id-column"):
        read_labels_file(wide, "y", None)
    with pytest.raises(DataValidationError, match="unknown label column"):
        read_labels_file(good, "label", None)
