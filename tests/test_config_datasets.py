"""Built-in data sets through party configs: data-dependent preprocessing is flagged, never silent."""

from __future__ import annotations

from pathlib import Path

import pytest

from vfl.config import load_dataset_table
from vfl.exceptions import DataBoundsWarning
from vfl.party import LocalData

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_data = pytest.mark.skipif(not (SHARED / "forestfires.csv").exists(), reason="../shared/data not present")


@needs_data
def test_z_scored_forest_fire_bounds_are_flagged_as_data_dependent(monkeypatch):
    monkeypatch.setenv("VFL_DATA_DIR", str(SHARED))
    with pytest.warns(DataBoundsWarning, match="z-scored with the data's own mean"):
        table = load_dataset_table("forestfires", ["FFMC", "DMC"])
    assert table.bounds_data_dependent
    local = LocalData.build("bob", table.X, feature_names=table.feature_names, bounds=table.feature_bounds())
    assert local.bounds is not None and local.bounds.from_data   # travels to the report as "NOT differentially private"


@needs_data
def test_unscaled_dummies_keep_their_public_bounds(monkeypatch):
    monkeypatch.setenv("VFL_DATA_DIR", str(SHARED))
    table = load_dataset_table("forestfires", ["month_aug", "day_sun"])
    assert not table.bounds_data_dependent
    local = LocalData.build("alice", table.X, feature_names=table.feature_names, bounds=table.feature_bounds())
    assert local.bounds is not None and not local.bounds.from_data
