"""vfl.fm.domain: public bounds, the unit map and its inverse on coefficients, row norms, the fixed-point grid."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, DataBoundsWarning, DataValidationError
from vfl.fm.domain import (
    ColumnBounds,
    clip_rows,
    fixed_point_shrink,
    from_unit_interval_coefficients,
    party_radii,
    prepare_labels,
    prepare_party_block,
    resolve_bounds,
    round_to_grid,
    to_unit_interval,
)


def test_bounds_accept_one_pair_pairs_or_names_and_refuse_the_rest(rng):
    X = rng.uniform(0, 1, (10, 2))
    assert resolve_bounds((0, 1), X).to_list() == [[0.0, 1.0], [0.0, 1.0]]
    assert resolve_bounds([(0, 1), (-1, 2)], X).to_list() == [[0.0, 1.0], [-1.0, 2.0]]
    assert resolve_bounds({"b": (0, 3), "a": (0, 1)}, X, ["a", "b"]).to_list() == [[0.0, 1.0], [0.0, 3.0]]
    with pytest.raises(DataValidationError, match="no bounds declared for column"):
        resolve_bounds({"a": (0, 1)}, X, ["a", "b"])
    with pytest.raises(DataValidationError, match="one \\(lo, hi\\) pair or 2 pairs"):
        resolve_bounds([(0, 1)] * 3, X)
    with pytest.raises(DataValidationError, match="degenerate"):
        ColumnBounds(np.array([0.0]), np.array([0.0]))


def test_bounds_from_the_data_warn_and_are_flagged(rng):
    X = rng.uniform(2, 5, (20, 2))
    with pytest.warns(DataBoundsWarning, match="NOT differentially private"):
        b = resolve_bounds(None, X)
    assert b.from_data and np.array_equal(b.lower, X.min(axis=0)) and np.array_equal(b.upper, X.max(axis=0))


def test_unit_map_and_coefficient_inverse_agree_with_numpy(rng):
    X = rng.uniform(-3, 7, (30, 3))
    bounds = ColumnBounds(np.array([-3.0, -5.0, -10.0]), np.array([7.0, 8.0, 10.0]))
    U = to_unit_interval(X, bounds)
    np.testing.assert_allclose(U, 2 * (X - bounds.lower) / (bounds.upper - bounds.lower) - 1, rtol=0, atol=1e-15)
    w = rng.normal(size=3)
    coef, intercept = from_unit_interval_coefficients(w, bounds, column_scale=0.5)
    np.testing.assert_allclose(X @ coef + intercept, (0.5 * U) @ w, rtol=1e-12, atol=1e-12)


def test_values_outside_the_declared_bounds_raise_with_their_place_or_are_clipped():
    b = ColumnBounds(np.array([0.0]), np.array([1.0]))
    with pytest.raises(DataValidationError, match=r"value 2 in age \(row 1\)"):
        to_unit_interval(np.array([[0.5], [2.0]]), b, feature_names=["age"])
    assert to_unit_interval(np.array([[2.0]]), b, out_of_bounds="clip")[0, 0] == 1.0
    with pytest.raises(DataValidationError, match="out_of_bounds"):
        to_unit_interval(np.array([[0.5]]), b, out_of_bounds="wrap")


def test_l2_preparation_keeps_every_row_in_the_party_radius(rng):
    X = rng.uniform(-1, 1, (200, 3))
    b = resolve_bounds((-1, 1), X)
    scaled, s = prepare_party_block(X, bounds=b, domain="l2", n_features_total=5)
    assert s == pytest.approx(1 / np.sqrt(5)) and np.linalg.norm(scaled, axis=1).max() <= np.sqrt(3 / 5) + 1e-12
    clipped, s = prepare_party_block(X, bounds=b, domain="l2", n_features_total=5, row_norm="clip")
    assert s == 1.0 and np.linalg.norm(clipped, axis=1).max() <= np.sqrt(3 / 5) + 1e-12
    assert np.sum(party_radii([3, 2]) ** 2) == pytest.approx(1.0)
    short = np.array([[0.1, 0.0]])
    assert np.array_equal(clip_rows(short, 1.0), short)   # rows inside the radius are untouched


def test_labels_linear_map_logistic_check():
    y_unit, yb = prepare_labels(np.array([0.0, 5.0, 10.0]), "linear", y_bounds=(0, 10))
    assert np.array_equal(y_unit, [-1.0, 0.0, 1.0]) and yb.to_list() == [[0.0, 10.0]]
    y, none = prepare_labels(np.array([0.0, 1.0]), "logistic")
    assert none is None and np.array_equal(y, [0.0, 1.0])
    with pytest.raises(DataValidationError):
        prepare_labels(np.array([0.0, 2.0]), "logistic")


def test_fixed_point_grid_and_shrink():
    assert round_to_grid(np.array([0.3]), 4)[0] == 5 / 16
    assert round_to_grid(np.array([1.0, -1.0]), 8).tolist() == [1.0, -1.0]
    c = fixed_point_shrink(9, 10)
    assert c == pytest.approx(1 - 3 * 2.0**-11 - 2.0**-48) and c < 1
    with pytest.raises(ConfigurationError, match="too coarse"):
        fixed_point_shrink(16, 1)   # sqrt(16) = 4 >= 2^(1+1)
