"""Chunked table reading (CSV via pandas, Parquet via pyarrow) and chunk-wise exact single-party statistics."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.data.rows import ArrayRows, MappedRows, RowCursor
from vfl.data.tables import TableFile, table_columns
from vfl.exceptions import ConfigurationError, DataValidationError


def write_csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    X = np.round(rng.uniform(-5, 5, (57, 3)), 6)
    y = np.round(rng.uniform(0, 1, 57), 6)
    ids = [f"id{i}" for i in range(57)]
    rows = [[ids[i], *X[i], "txt", y[i]] for i in range(57)]
    return write_csv(tmp_path / "t.csv", ["id", "a", "b", "c", "note", "y"], rows), X, y


def _id_digest(ids):
    """The documented TableFile.id_digest: SHA-256 over the length-prefixed, stripped IDs in row order."""
    import hashlib

    h = hashlib.sha256()
    for value in ids:
        blob = value.strip().encode()
        h.update(len(blob).to_bytes(4, "big") + blob)
    return h.hexdigest()


def test_chunked_csv_equals_the_values_written(table):
    from vfl.data.config import read_party_csv

    path, X, y = table
    t = TableFile(path, ["a", "b", "c"], label="y", id_column="id", chunk_rows=5)
    assert t.n_rows == 57 and t.id_digest == _id_digest([f"id{i}" for i in range(57)])
    X_t, y_t = t.load()
    assert np.array_equal(X_t, X) and np.array_equal(y_t, y)
    ref = read_party_csv(path, "a:c", label="y", id_column="id")   # the CLI's reader goes through TableFile
    assert np.array_equal(ref.X, X) and ref.ids == t.read_ids() == [f"id{i}" for i in range(57)]
    assert ref.feature_names == ["a", "b", "c"]
    chunks = list(t.features.iter_chunks(8))
    assert [len(c) for c in chunks] == [8] * 7 + [1]
    assert np.array_equal(np.concatenate(chunks), X)
    assert t.column_min["a"] == X[:, 0].min() and t.column_max["y"] == y.max()
    assert table_columns(path) == ["id", "a", "b", "c", "note", "y"]


def test_parquet_reads_like_csv(table, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path, X, y = table
    pq.write_table(pa.table({"id": [f"id{i}" for i in range(57)], "a": X[:, 0], "b": X[:, 1], "c": X[:, 2],
                             "y": y}), tmp_path / "t.parquet", row_group_size=10)
    t = TableFile(tmp_path / "t.parquet", ["a", "b", "c"], label="y", id_column="id", chunk_rows=7)
    assert t.id_digest == TableFile(path, ["a"], id_column="id").id_digest
    assert t.read_ids() == TableFile(path, ["a"], id_column="id").read_ids() == [f"id{i}" for i in range(57)]
    assert np.array_equal(np.concatenate(list(t.features.iter_chunks(9))), X)
    assert np.array_equal(t.load()[1], y)


@pytest.mark.parametrize("cell,message", [("abc", r"column 'b', data row 4: 'abc' is not a number"),
                                          ("", r"data row 4: '' is not a number"),
                                          ("nan", "is not finite"), ("inf", "is not finite")])
def test_bad_cells_name_file_column_and_row(tmp_path, cell, message):
    rows = [[1, 2], [3, 4], [5, 6], [7, cell], [9, 10]]
    path = write_csv(tmp_path / "bad.csv", ["a", "b"], rows)
    with pytest.raises(DataValidationError, match=message):
        TableFile(path, ["a", "b"], chunk_rows=2)


def test_parquet_nulls_and_nan_are_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1.0, None, 3.0]}), tmp_path / "n.parquet")
    with pytest.raises(DataValidationError, match="data row 2"):
        TableFile(tmp_path / "n.parquet", ["a"])
    pq.write_table(pa.table({"a": [1.0, 2.0, float("nan")]}), tmp_path / "m.parquet")
    with pytest.raises(DataValidationError, match="data row 3: nan is not finite"):
        TableFile(tmp_path / "m.parquet", ["a"])


def test_file_level_errors_are_one_clear_line(tmp_path):
    with pytest.raises(ConfigurationError, match="not found"):
        TableFile(tmp_path / "missing.csv", ["a"])
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataValidationError, match="empty file"):
        TableFile(tmp_path / "empty.csv", ["a"])
    path = write_csv(tmp_path / "h.csv", ["a", "b"], [])
    with pytest.raises(DataValidationError, match="no data rows"):
        TableFile(path, ["a"])
    for ragged in ([3, 4, 5], [3]):
        path = write_csv(tmp_path / "r.csv", ["a", "b"], [[1, 2], ragged])
        with pytest.raises(DataValidationError, match=f"data row 2 has {len(ragged)} cells, the header has 2"):
            TableFile(path, ["a"])
    path = write_csv(tmp_path / "d.csv", ["a", "a"], [[1, 2]])
    with pytest.raises(DataValidationError, match="unique"):
        TableFile(path, ["a"])
    path = write_csv(tmp_path / "ok.csv", ["a", "b"], [[1, 2]])
    with pytest.raises(DataValidationError, match="unknown label column 'z'"):
        TableFile(path, ["a"], label="z")
    with pytest.raises(ConfigurationError, match="also selected as a feature"):
        TableFile(path, ["a", "b"], label="b")


def test_row_cursor_recuts_any_chunking():
    X = np.arange(30.0).reshape(15, 2)
    cursor = RowCursor(ArrayRows(X).iter_chunks(4), 2)
    got = [cursor.take(m) for m in (1, 6, 8)]
    assert np.array_equal(np.concatenate(got), X)
    with pytest.raises(DataValidationError, match="ended after 15 rows"):
        cursor.take(1)
    doubled = MappedRows(ArrayRows(X), lambda c: 2 * c, 2)
    assert np.array_equal(np.concatenate(list(doubled.iter_chunks(7))), 2 * X)


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_single_party_blocks_accumulated_over_chunks_are_bit_identical(model):
    """The released single-party blocks from chunk-wise exact integer statistics equal the whole-table ones bit
    for bit (same generator), at p = 52 where float sums would visibly round."""
    from vfl.fm.dissection import DissectionPlan
    from vfl.fm.domain import round_to_grid
    from vfl.privacy.fixed_point import (
        accumulate_single_party_raw,
        release_single_party_block,
        single_party_block,
    )
    from vfl.privacy.mechanisms import make_mechanism

    p, n = 52, 3001
    rng = np.random.default_rng(5)
    X = round_to_grid(rng.uniform(-0.5, 0.5, (n, 3)), p)
    y = round_to_grid(rng.uniform(-1, 1, n) if model == "linear" else rng.integers(0, 2, n) * 1.0, p)
    plan = DissectionPlan([3, 2], 0, model=model)
    mech = make_mechanism("gaussian-fm", plan=plan, n_samples=n, epsilon=1.0, delta=1e-5)
    for block in plan.single_party_blocks(0):
        whole = single_party_block(plan, mech, block, X, y, n_samples=n, precision_bits=p,
                                   rng=np.random.default_rng(1))
        chunks = ((X[i:i + 256], y[i:i + 256]) for i in range(0, n, 256))
        raw = accumulate_single_party_raw(plan, block, chunks, precision_bits=p)
        streamed = release_single_party_block(plan, mech, block, raw, n_samples=n, precision_bits=p,
                                              rng=np.random.default_rng(1))
        assert np.array_equal(whole, streamed), block.name


def test_float_parser_reads_every_spelling_to_the_nearest_double(tmp_path):
    """The C float parser (the fast path) reads each cell to Python's correctly rounded ``float(cell)`` in every
    spelling a CSV writer produces, and equals the cell-by-cell path (strings, ``to_numeric``) where that one is
    correctly rounded too (it is off by one unit in the last place on some ``+``-prefixed cells)."""
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.uniform(-1e3, 1e3, 300), rng.normal(0, 1e-7, 100),
                             10.0 ** rng.uniform(-300, 300, 100)])
    spellings = [repr, lambda v: f"{v:.6f}", lambda v: f"{v:.17e}", lambda v: f" {v:.9g}", lambda v: f'"{v!r}"',
                 lambda v: f"+{v!r}" if v >= 0 else repr(v)]
    cells = [spellings[i % len(spellings)](float(v)) for i, v in enumerate(values)]
    path = write_csv(tmp_path / "f.csv", ["a"], [[c] for c in cells])
    t = TableFile(path, ["a"], chunk_rows=64)
    nearest = np.array([float(c.strip().strip('"')) for c in cells])
    fast = np.concatenate(list(t._float_chunks(64, ["a"])))[:, 0]
    assert np.array_equal(fast, nearest)
    assert np.array_equal(np.concatenate(list(t.features.iter_chunks(50)))[:, 0], nearest)
    checked = np.concatenate([t._matrix(frame, ["a"], start) for start, frame in t._raw_chunks(64, ["a"])])[:, 0]
    unsigned = np.array([not c.startswith("+") for c in cells])
    assert np.array_equal(fast[unsigned], checked[unsigned])


def test_clean_csv_never_takes_the_cell_by_cell_path(table, monkeypatch):
    path, X, y = table

    def refuse(*args, **kwargs):
        raise AssertionError("the cell-by-cell path ran on a clean file")

    monkeypatch.setattr(TableFile, "_matrix", refuse)
    t = TableFile(path, ["a", "b", "c"], label="y", chunk_rows=5)
    assert np.array_equal(np.concatenate(list(t.features.iter_chunks(8))), X) and np.array_equal(t.load()[1], y)


def test_a_cell_spoiled_after_validation_is_named_by_the_reread(tmp_path):
    """A file changed between validation and a later re-read: the float parser stops at the bad chunk, the checked
    path serves the rest and names the cell (chunks before it were already served once)."""
    path = write_csv(tmp_path / "s.csv", ["a"], [[i] for i in range(10)])
    t = TableFile(path, ["a"], chunk_rows=3)
    write_csv(path, ["a"], [[i] for i in range(7)] + [["x"], [8], [9]])
    got = []
    with pytest.raises(DataValidationError, match=r"column 'a', data row 8: 'x' is not a number"):
        for block in t.features.iter_chunks(3):
            got.append(block)
    assert np.array_equal(np.concatenate(got)[:, 0], np.arange(6.0))
