"""Built-in data sets through party configs: the z-scored columns (de Jong et al.'s preprocessing, for BCD)
reach FM runs in raw units with their documented bounds, so no data-derived mean or sd leaves a party."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from vfl.data.config import load_dataset_table
from vfl.data.datasets import public_bounds
from vfl.fm.domain import resolve_bounds, to_unit_interval
from vfl.protocols.local_data import LocalData

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_data = pytest.mark.skipif(not (SHARED / "forestfires.csv").exists(), reason="../shared/data not present")


@needs_data
def test_z_scored_columns_get_a_raw_fm_view_with_documented_bounds(monkeypatch):
    monkeypatch.setenv("VFL_DATA_DIR", str(SHARED))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no DataBoundsWarning: nothing data-derived is declared any more
        table = load_dataset_table("forestfires", ["FFMC", "DMC", "month_aug"])
    raw = public_bounds("forestfires", space="raw")
    assert table.fm_bounds["FFMC"] == tuple(float(v) for v in raw["FFMC"])
    assert table.fm_bounds["month_aug"] == (0.0, 1.0)
    # the FM release only sees the unit-interval map, which is the same for both views
    z_unit = to_unit_interval(table.X, resolve_bounds(table.bounds, table.X, table.feature_names))
    raw_unit = to_unit_interval(table.fm_columns, resolve_bounds(table.fm_bounds, table.X, table.feature_names))
    np.testing.assert_allclose(raw_unit, z_unit, atol=1e-12)
    local = LocalData.build("bob", table.X, feature_names=table.feature_names, bounds=table.bounds,
                            fm_columns=table.fm_columns, fm_bounds=table.fm_bounds)
    X_fm, bounds_fm = local.fm_view
    assert not bounds_fm.from_data and np.array_equal(X_fm, table.fm_columns)
    np.testing.assert_allclose(bounds_fm.lower[:2], [raw["FFMC"][0], raw["DMC"][0]])


@needs_data
def test_unscaled_dummies_need_no_fm_view(monkeypatch):
    monkeypatch.setenv("VFL_DATA_DIR", str(SHARED))
    table = load_dataset_table("forestfires", ["month_aug", "day_sun"])
    assert table.fm_columns is None and table.fm_bounds is None
