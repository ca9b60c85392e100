"""Honest intervals (issue 31): the inference record flags coefficients whose interval is not reliable.

The mechanism (docs/inference.md, "Real data"): columns that fill little of their declared public bounds put the
signal in directions of the released M that the DP noise swamps; the floor shrinks the estimate there by a factor the
release cannot tell, and the bootstrap world (floored at the solver's floor) does not reproduce it. The flag
(vfl.models.inference.unresolved_coefficients) uses released and public quantities only. It must fire on such data
and stay silent where the columns fill their bounds -- each checked on two disjoint seed sets.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from vfl.models.estimators import LinearRegression
from vfl.models.inference import InferenceResult, unreliable_warning
from vfl.models.report import report_html, report_text

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SEEDS_A, SEEDS_B = (0, 1, 2), (1000, 1001, 1002)


def _fit(X: np.ndarray, y: np.ndarray, bounds, y_bounds, epsilon: float, seed: int) -> LinearRegression:
    est = LinearRegression(epsilon=epsilon, delta=1e-5, bounds=bounds, y_bounds=y_bounds, release_beta=True,
                           random_state=seed + 10**6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return est


def _garment_like(seed: int) -> LinearRegression:
    """1200 rows, 8 columns; 6 of them fill 2 % of their declared bounds (and are correlated), with coefficients of
    a size that matters in the data (as garment's idle_men, smv, incentive)."""
    rng = np.random.default_rng(seed)
    n, d = 1200, 8
    base = rng.uniform(-1.0, 1.0, (n, 1))
    X = rng.uniform(-1.0, 1.0, (n, d))
    X[:, 2:] = 0.02 * (0.7 * base + 0.3 * X[:, 2:])
    theta = np.array([0.1, -0.1, 5.0, -5.0, 4.0, -4.0, 3.0, -3.0])
    y = np.clip(0.1 + X @ theta + 0.2 * rng.uniform(-1.0, 1.0, n), -1.0, 1.0)
    return _fit(X, y, (-1.0, 1.0), (-1.0, 1.0), 1.0, seed)


def _well_conditioned(seed: int) -> LinearRegression:
    """10^4 rows, 10 columns filling their bounds (the coverage benchmark's linear model), epsilon 1."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (10_000, 10))
    y = 0.25 + X @ (np.linspace(-1.0, 1.0, 10) / 5.5) + rng.uniform(-1.0, 1.0, 10_000)
    return _fit(X, y, (-1.0, 1.0), (-1.75, 2.25), 1.0, seed)


@pytest.mark.parametrize("seeds", [SEEDS_A, SEEDS_B], ids=["seeds-a", "seeds-b"])
def test_the_flag_fires_where_columns_fill_little_of_their_bounds(seeds):
    for seed in seeds:
        inf = _garment_like(seed)._inference()
        assert inf.unresolved_directions > 0
        assert inf.unreliable is not None and inf.unreliable[2:6].all(), (seed, inf.unreliable)
        assert any("NOT reliable" in w for w in inf.warnings)


@pytest.mark.parametrize("seeds", [SEEDS_A, SEEDS_B], ids=["seeds-a", "seeds-b"])
def test_the_flag_is_silent_on_well_conditioned_data(seeds):
    for seed in seeds:
        inf = _well_conditioned(seed)._inference()
        assert inf.unreliable is not None and not inf.unreliable.any(), (seed, inf.unreliable)
        assert not any("NOT reliable" in w for w in inf.warnings)


def test_the_flag_travels_through_the_model_record_summary_and_report():
    est = _garment_like(SEEDS_A[0])
    inf = est._inference()
    back = InferenceResult.from_dict(inf.to_dict())
    assert np.array_equal(back.unreliable, inf.unreliable) and back.unresolved_directions == inf.unresolved_directions
    assert np.allclose(back.bias_bound, inf.bias_bound)
    flagged = [n for n, f in zip(inf.names, inf.unreliable, strict=True) if f]
    line = unreliable_warning(flagged, inf.unresolved_directions)
    assert line in est.summary()
    names = [f"x{i}" for i in range(len(inf.names) - 1)]
    doc = {"format": "vfl-model", "schema_version": 2, "model": "linear", "mechanism": "gaussian-fm",
           "run_id": "ab" * 16, "n_samples": 1200, "label": "y", "label_bounds": [-1.0, 1.0], "features": names,
           "coef": inf.coef[:-1].tolist(), "intercept": float(inf.coef[-1]),
           "parties": [{"name": "alice", "features": names, "bounds": [[-1, 1]] * len(names), "label_owner": True,
                        "intercept": True}],
           "privacy_report": {}, "inference": {**inf.to_dict(), "names": names + ["intercept"]}}
    text = report_text(doc)
    assert text.count(line) == 1 and "WARNING" in text
    page = report_html(doc, planner_replicates=20)
    assert "<strong>Warning:</strong>" in page and "NOT reliable" in page
    doc["inference"]["unreliable"] = [False] * len(inf.names)
    assert "NOT reliable" not in report_text(doc).split("Fit measures")[0]


@pytest.mark.skipif(not (SHARED_DATA / "garments_worker_productivity.csv").is_file(), reason="../shared/data absent")
def test_the_flag_fires_on_the_real_garment_data():
    from vfl.data.datasets import garment, public_bounds
    data = garment(SHARED_DATA / "garments_worker_productivity.csv")
    bounds = public_bounds(data.name, dataset=data)
    lo, hi = (np.array([bounds[f][k] for f in data.feature_names]) for k in (0, 1))
    X, y = np.clip(data.X, lo, hi), np.clip(data.y, *bounds[data.target_name])
    est = _fit(X, y, [bounds[f] for f in data.feature_names], bounds[data.target_name], 1.0, 5)
    inf = est._inference()
    assert inf.unreliable is not None and inf.unreliable.any()
