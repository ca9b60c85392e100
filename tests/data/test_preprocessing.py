"""vfl.data.preprocessing: declared dummies and imputation, their bounds and records; TableFile reading through
them."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.data.preprocessing import Preprocessing, is_missing
from vfl.data.tables import TableFile
from vfl.exceptions import ConfigurationError, DataValidationError


def _pp() -> Preprocessing:
    return Preprocessing({"colour": ("red", "green", "blue")}, {"income": 50, "colour": "green"})


def test_declared_categories_become_one_dummy_each_in_declared_order():
    pp = _pp()
    assert pp.output_names(["age", "colour", "income"]) == ["age", "colour=red", "colour=green", "colour=blue",
                                                            "income"]
    out = pp.transform("colour", ["blue", " red", "", "green", "NA"])
    np.testing.assert_array_equal(out, [[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 1, 0]])  # missing -> green


def test_an_undeclared_category_is_refused_naming_row_and_value():
    with pytest.raises(DataValidationError, match=r"f.csv: column 'colour', data row 12: 'purple' is not a declared "
                                                  r"category \(red, green, blue\)"):
        _pp().transform("colour", ["red", "purple"], source="f.csv", first_row=10)


def test_a_declared_constant_imputes_missing_cells_and_only_those():
    out = _pp().transform("income", ["10", "", "nan", None, float("nan"), 7.5, " 3 "])
    np.testing.assert_array_equal(out[:, 0], [10, 50, 50, 50, 50, 7.5, 3])


def test_missing_cells_without_a_constant_are_refused_with_the_fix():
    pp = Preprocessing({"colour": ("a", "b")}, {})
    with pytest.raises(DataValidationError, match=r"data row 2: missing value \(declare a public constant to impute "
                                                  r"it, \[impute\] colour = VALUE"):
        pp.transform("colour", ["a", ""])
    with pytest.raises(DataValidationError, match="'x' is not a number"):
        _pp().transform("income", ["1", "x"])
    with pytest.raises(DataValidationError, match="'inf' is not finite"):
        _pp().transform("income", ["inf"])


def test_missing_markers():
    assert all(is_missing(c) for c in ["", " ", "NA", "N/A", "NaN", "nan", "NULL", "null", None, float("nan")])
    assert not any(is_missing(c) for c in ["0", "none?", 0, 0.0, "n"])


def test_bounds_of_prepared_columns():
    pp = _pp()
    declared = {"age": (18.0, 90.0), "income": (0.0, 100.0), "y": (0.0, 1.0)}
    b = pp.bounds(["age", "colour", "income"], declared)
    assert b["colour=red"] == b["colour=blue"] == (0.0, 1.0) and b["age"] == (18.0, 90.0) and "colour" not in b
    with pytest.raises(ConfigurationError, match="impute value 50 of column 'income' lies outside its declared bounds"):
        pp.bounds(["income"], {"income": (0.0, 10.0)})
    with pytest.raises(ConfigurationError, match="column 'colour' is categorical: its dummies have the bounds"):
        pp.bounds(["colour"], {"colour": (0.0, 3.0)})
    assert Preprocessing().bounds(["age"], None) is None
    assert pp.bounds(["colour"], None) == {"colour=red": (0, 1), "colour=green": (0, 1), "colour=blue": (0, 1)}


@pytest.mark.parametrize("categories, impute, text", [
    ({"c": []}, {}, "declares no categories"),
    ({"c": ["a", "a"]}, {}, "declares 'a' twice"),
    ({"c": ["a", ""]}, {}, "is empty, padded or a missing-value marker"),
    ({"c": ["a", "NA"]}, {}, "missing-value marker"),
    ({"c": ["a"]}, {"c": "b"}, "must be one of its declared categories"),
    ({}, {"x": "abc"}, "must be a finite number"),
    ({}, {"x": float("inf")}, "must be a finite number"),
    ({}, {"x": True}, "must be a finite number"),
])
def test_bad_declarations_are_refused(categories, impute, text):
    with pytest.raises(ConfigurationError, match=text):
        Preprocessing.from_tables(categories, impute, source="b.toml")


def test_toml_shapes_and_integer_categories():
    with pytest.raises(ConfigurationError, match="b.toml: categories of 'c' must be a list"):
        Preprocessing.from_tables({"c": "abc"}, None, source="b.toml")
    with pytest.raises(ConfigurationError, match=r"b.toml: \[impute\] must be a table"):
        Preprocessing.from_tables(None, [1], source="b.toml")
    pp = Preprocessing.from_tables({"level": [1, 2, 3]}, {"level": 2}, source="b.toml")
    np.testing.assert_array_equal(pp.transform("level", ["3", "", 1, 2.0]), [[0, 0, 1], [0, 1, 0], [1, 0, 0],
                                                                            [0, 1, 0]])


def test_records_round_trip_and_are_checked_against_the_feature_names():
    pp = _pp()
    record = pp.to_record(["colour", "age"])       # the income declaration is not this party's: left out
    assert record == {"inputs": ["colour", "age"], "categories": {"colour": ["red", "green", "blue"]},
                      "impute": {"colour": "green"}}
    back, inputs = Preprocessing.from_record(record, ["colour=red", "colour=green", "colour=blue", "age"])
    assert inputs == ["colour", "age"] and back.categories == {"colour": ("red", "green", "blue")}
    with pytest.raises(ConfigurationError, match="does not produce the registered feature names"):
        Preprocessing.from_record(record, ["colour", "age"])
    with pytest.raises(ConfigurationError, match="declares columns that are not inputs"):
        Preprocessing.from_record({**record, "inputs": ["age"]})
    with pytest.raises(ConfigurationError, match="no list of inputs"):
        Preprocessing.from_record({"categories": {}})


def test_table_file_reads_through_the_preprocessing_in_chunks(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,age,colour,income,y\n" + "r1,30,red,10,1\nr2,40,blue,,2\nr3,50,green,NA,3\nr4,60,red,5,4\n")
    pp = _pp()
    whole = TableFile(path, ["age", "colour", "income"], label="y", id_column="id", preprocessing=pp)
    chunked = TableFile(path, ["age", "colour", "income"], label="y", preprocessing=pp, chunk_rows=1)
    assert whole.feature_names == ["age", "colour=red", "colour=green", "colour=blue", "income"]
    assert whole.inputs == ["age", "colour", "income"]
    X, y = whole.load()
    expected = [[30, 1, 0, 0, 10], [40, 0, 0, 1, 50], [50, 0, 1, 0, 50], [60, 1, 0, 0, 5]]
    np.testing.assert_array_equal(X, expected)
    np.testing.assert_array_equal(y, [1, 2, 3, 4])
    np.testing.assert_array_equal(np.asarray(chunked.features), expected)   # the streaming row source
    assert chunked.column_min["colour=blue"] == 0 and chunked.column_max["income"] == 50
    with pytest.raises(ConfigurationError, match="the label column 'y' cannot be categorical or imputed"):
        TableFile(path, ["age"], label="y", preprocessing=Preprocessing({}, {"y": 0}))


def test_a_missing_cell_of_an_undeclared_column_names_the_fix(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("age,income\n30,1\n40,\n")
    with pytest.raises(DataValidationError, match=r"column 'income', data row 2: '' is not a number \(a missing value: "
                                                  r"declare a public constant"):
        TableFile(path, ["age", "income"])


def test_parquet_nulls_and_integer_categories(tmp_path):
    """Parquet: a null is a missing cell; integer categories (read back as floats next to a null) match "1", "3"."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"age": [30.0, None, 50.0], "level": pa.array([1, 3, None], type=pa.int64()),
                             "y": [1.0, 2.0, 3.0]}), path)
    pp = Preprocessing.from_tables({"level": [1, 2, 3]}, {"age": 40, "level": 2}, source="b.toml")
    X, y = TableFile(path, ["age", "level"], label="y", preprocessing=pp).load()
    np.testing.assert_array_equal(X, [[30, 1, 0, 0], [40, 0, 0, 1], [50, 0, 1, 0]])
    np.testing.assert_array_equal(y, [1, 2, 3])
