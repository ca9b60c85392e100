"""vfl.fit with row IDs (issue 9): PSI alignment through the real protocol (threads, loopback ZeroMQ).

1024-bit keys (allow_insecure_keys=True) are INSECURE and used only to keep these tests fast.
"""

from __future__ import annotations

import numpy as np
import pytest

from vfl.api import Party, fit
from vfl.exceptions import DataValidationError, PartyFailure

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner
FAST = {"key_bits": 1024, "allow_insecure_keys": True, "timeout": 30}


def _people(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    y = np.clip(X @ np.array([0.5, -0.3, 0.2]) + 0.05 * rng.normal(size=n), -1, 1)
    ids = np.array([f"user{i:05d}" for i in range(n)], dtype=object)
    return rng, X, y, ids


def test_fit_with_ids_aligns_shuffled_partially_overlapping_tables():
    rng, X, y, ids = _people()
    a = rng.permutation(np.flatnonzero(rng.random(len(y)) < 0.8))
    b = rng.permutation(np.flatnonzero(rng.random(len(y)) < 0.8))
    parties = [Party("a", X[a, :2], y[a], bounds=(-1, 1), label_bounds=(-1, 1), ids=ids[a]),
               Party("b", X[b, 2:], bounds=(-1, 1), ids=[f" {v} " for v in ids[b]])]   # padded: same IDs
    model = fit(parties, mechanism="none", precision_bits=32, fit_intercept=False, **FAST)
    common = np.intersect1d(a, b)
    assert model.n_samples == common.size < len(y)
    np.testing.assert_allclose(model.w, np.linalg.lstsq(X[common], y[common], rcond=None)[0], atol=1e-6)
    notes = " ".join(model.privacy_report["notes"])
    assert "intersection" in notes and "public" in notes


def test_fit_refuses_bad_ids_before_the_run():
    _, X, y, ids = _people(20)
    with pytest.raises(DataValidationError, match="duplicate row ID in data rows 1 and 3"):
        fit([Party("a", X[:, :2], y, bounds=(-1, 1), ids=["u1", "u2", "u1", *ids[3:]]),
             Party("b", X[:, 2:], bounds=(-1, 1), ids=ids)], mechanism="none", **FAST)
    with pytest.raises(DataValidationError, match="missing row ID in data row 2"):
        fit([Party("a", X[:, :2], y, bounds=(-1, 1), ids=["u1", None, *ids[2:]]),
             Party("b", X[:, 2:], bounds=(-1, 1), ids=ids)], mechanism="none", **FAST)
    with pytest.raises(DataValidationError, match="ids has 19 entries, X has 20 rows"):
        Party("a", X, y, ids=ids[:19]).local_data()


def test_fit_ids_on_one_party_only_and_min_rows():
    rng, X, y, ids = _people(60, seed=3)
    # the second REGISTER is refused and the run waits out its registration window (issue 14): keep it short
    with pytest.raises((PartyFailure, DataValidationError), match=r"gave row IDs \(--id\) but b did not"):
        fit([Party("a", X[:, :2], y, bounds=(-1, 1), ids=ids), Party("b", X[:, 2:], bounds=(-1, 1))],
            mechanism="none", **{**FAST, "timeout": 8})
    half = np.arange(30)
    with pytest.raises((PartyFailure, DataValidationError), match="30 in common, fewer than .*--min-rows 40"):
        fit([Party("a", X[:, :2], y, bounds=(-1, 1), ids=ids), Party("b", X[half, 2:], bounds=(-1, 1), ids=ids[half])],
            mechanism="none", min_rows=40, **FAST)
