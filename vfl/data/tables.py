"""A party's table on disk, read in chunks: CSV (pandas' chunked C reader) and Parquet (pyarrow, extra ``parquet``).

:class:`TableFile` validates the whole file once, chunk by chunk (selected columns numeric and finite, label and
row-ID columns present, row-ID digest, per-column min/max), then serves the selected columns as row sources
(:mod:`vfl.data.rows`) that re-read the file in chunks: memory stays bounded by the chunk size whatever the
number of rows. The errors are those of :func:`vfl.data.config.read_party_csv` (one line, file, column and data
row named). Column *selection* (names, ranges, indices) is resolved by the caller from :func:`table_columns`.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vfl.data.id_column import IdColumn
from vfl.data.preprocessing import Preprocessing, is_missing
from vfl.data.preprocessing import missing_hint as _missing_hint
from vfl.data.rows import DEFAULT_CHUNK_ROWS
from vfl.exceptions import ConfigurationError, DataValidationError

__all__ = ["TableFile", "table_columns", "TableColumns"]

PARQUET_SUFFIXES = (".parquet", ".pq")


def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() in PARQUET_SUFFIXES


def _parquet_file(path: Path) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - depends on the optional extra
        raise ConfigurationError(f"{path}: reading Parquet needs pyarrow: pip install 'vfl[parquet]'") from None
    try:
        return pq.ParquetFile(path)
    except FileNotFoundError:
        raise ConfigurationError(f"data file {path} not found") from None
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError types
        raise DataValidationError(f"cannot read {path}: {exc}") from None


def table_columns(path: str | Path) -> list[str]:
    """The column names of a CSV (header row) or Parquet file, validated unique."""
    p = Path(path)
    if _is_parquet(p):
        header = [str(name) for name in _parquet_file(p).schema_arrow.names]
    else:
        try:
            with open(p, newline="", encoding="utf-8-sig") as fh:
                header = next((row for row in csv.reader(fh) if row), None)
        except FileNotFoundError:
            raise ConfigurationError(f"data file {p} not found") from None
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise DataValidationError(f"cannot read {p}: {exc}") from None
        if header is None:
            raise DataValidationError(f"{p}: empty file, expected a header row")
        header = [h.strip() for h in header]
    if len(set(header)) != len(header):
        raise DataValidationError(f"{p}: column names must be unique")
    return header


class TableColumns:
    """Row source over some numeric columns of a :class:`TableFile` (re-reads the file in chunks)."""

    def __init__(self, table: TableFile, columns: Sequence[str]) -> None:
        self.table = table
        self.columns = list(columns)
        self.n_rows = table.n_rows
        self.n_cols = len(self.columns)

    def iter_chunks(self, rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[np.ndarray]:
        yield from self.table._frames(rows, self.columns)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.n_cols)

    @property
    def ndim(self) -> int:
        return 2

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The whole columns in memory (for code that needs them at once, e.g. (DP-)BCD's QR)."""
        parts = list(self.iter_chunks(self.table.chunk_rows))
        out = np.concatenate(parts, axis=0) if parts else np.zeros((0, self.n_cols))
        return out if dtype is None else out.astype(dtype)


class TableFile:
    """A party's CSV or Parquet table: ``features`` (resolved names), optional ``label`` and ``id_column``.

    Construction reads the file once in chunks of ``chunk_rows`` to validate it and compute ``n_rows``,
    ``id_digest`` (SHA-256 over the length-prefixed, stripped row IDs in row order), ``column_min`` / ``column_max``.
    """

    def __init__(self, path: str | Path, features: Sequence[str], *, label: str | None = None,
                 id_column: str | None = None, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 preprocessing: Preprocessing | None = None) -> None:
        self.path = Path(path)
        self.parquet = _is_parquet(self.path)
        self.header = table_columns(self.path)
        #: the raw columns read from the file; ``feature_names`` are the prepared ones (dummies of declared
        #: categorical columns, vfl.data.preprocessing), equal to the raw ones without preprocessing
        self.inputs = [str(f) for f in features]
        pp = preprocessing.restrict(self.inputs) if preprocessing else None
        self.preprocessing = pp if pp else None
        if preprocessing is not None and label is not None and label in preprocessing.columns:
            raise ConfigurationError(f"the label column {label!r} cannot be categorical or imputed ({self.path})")
        expanded = self.preprocessing.expand(self.inputs) if self.preprocessing else [(c, c) for c in self.inputs]
        self.feature_names = [name for _, name in expanded]
        self._source = {name: src for src, name in expanded}
        self.label_name = label
        self.id_column = id_column
        self.chunk_rows = max(1, int(chunk_rows))
        for what, col in (("label", label), ("id", id_column)):
            if col is not None and col not in self.header:
                raise DataValidationError(f"unknown {what} column {col!r} in {self.path}; columns are: "
                                          f"{', '.join(self.header)}")
        for what, col in (("label", label), ("row-ID", id_column)):
            if col is not None and col in self.inputs:
                raise ConfigurationError(f"the {what} column {col!r} is also selected as a feature in {self.path}")
        unknown = [f for f in self.inputs if f not in self.header]
        if unknown:
            raise DataValidationError(f"unknown feature(s) {', '.join(map(repr, unknown))} in {self.path}")
        self.numeric = self.feature_names + ([label] if label is not None else [])
        self._validate()

    # ------------------------------------------------------------------ row sources
    @property
    def features(self) -> TableColumns:
        return TableColumns(self, self.feature_names)

    @property
    def label(self) -> TableColumns | None:
        return None if self.label_name is None else TableColumns(self, [self.label_name])

    def load(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Everything in memory ``(X, y)`` (small tables; the streaming paths use the row sources)."""
        parts = list(self._frames(self.chunk_rows, self.numeric))
        full = np.concatenate(parts, axis=0) if parts else np.zeros((0, len(self.numeric)))
        d = len(self.feature_names)
        return full[:, :d], (full[:, d] if self.label_name is not None else None)

    # ------------------------------------------------------------------ reading
    def _raw_chunks(self, rows: int, columns: Sequence[str]) -> Iterator[tuple[int, Any]]:
        """``(first data row, pandas DataFrame of str/number cells)`` per chunk, in file order."""
        if not columns:
            columns = [self.header[0]]
        if self.parquet:
            start = 0
            for batch in _parquet_file(self.path).iter_batches(batch_size=rows, columns=list(columns)):
                frame = batch.to_pandas()
                yield start, frame
                start += len(frame)
            return
        pd = _pandas()
        try:
            reader = pd.read_csv(self.path, usecols=list(columns), dtype=str, keep_default_na=False, na_filter=False,
                                 chunksize=rows, encoding="utf-8-sig", skip_blank_lines=True, engine="c")
            start = 0
            with reader:
                for frame in reader:
                    frame.columns = [str(c).strip() for c in frame.columns]
                    yield start, frame
                    start += len(frame)
        except FileNotFoundError:
            raise ConfigurationError(f"data file {self.path} not found") from None
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as exc:
            raise DataValidationError(f"cannot read {self.path}: {str(exc).strip().splitlines()[0]}") from None

    def _numeric(self, frame: Any, column: str, first_row: int) -> np.ndarray:
        """One column of a chunk as finite floats, or the error naming file, column and data row."""
        pd = _pandas()

        cells = frame[column]
        values = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            cell = cells.iloc[i]
            cell = cell.item() if isinstance(cell, np.generic) else cell
            if isinstance(cell, str):
                what = "is not finite" if _parses_as_float(cell) else "is not a number"
            else:  # Parquet: a null is not a number, a NaN/inf float is not finite
                what = "is not finite" if isinstance(cell, float) else "is not a number"
            hint = f" (a missing value: {_missing_hint(column)})" if is_missing(cell) else ""
            raise DataValidationError(f"{self.path}: column {column!r}, data row {first_row + i + 1}: {cell!r} {what}"
                                      f"{hint}")
        return values

    def _sources(self, columns: Sequence[str]) -> list[str]:
        """The raw file columns that the prepared ``columns`` are computed from (each once, in order)."""
        return list(dict.fromkeys(self._source.get(c, c) for c in columns))

    def _matrix(self, frame: Any, columns: Sequence[str], first_row: int) -> np.ndarray:
        """The prepared ``columns`` of one chunk: numeric columns checked by :meth:`_numeric`, declared categorical
        or imputed columns mapped by the party's :class:`vfl.data.preprocessing.Preprocessing`."""
        pp = self.preprocessing
        if pp is None:
            return np.column_stack([self._numeric(frame, c, first_row) for c in columns])
        mapped: dict[str, np.ndarray] = {}
        parts = []
        for c in columns:
            src = self._source.get(c, c)
            if src not in pp.columns:
                parts.append(self._numeric(frame, c, first_row))
                continue
            if src not in mapped:
                block = pp.transform(src, frame[src].tolist(), source=str(self.path), first_row=first_row)
                mapped.update(zip(pp.output_names([src]), block.T, strict=True))
            parts.append(mapped[c])
        return np.column_stack(parts)

    def read_ids(self) -> Sequence[str] | None:
        """The row-ID column's cells as strings in file order (None without ``id_column``), for the PSI row
        alignment (``--id``); the IDs are held whole (as one fixed-width UTF-8 array, :class:`IdColumn`), the
        numeric columns are not."""
        if self.id_column is None:
            return None
        if self.parquet:
            return IdColumn.from_cells(str(v) for _, frame in self._raw_chunks(self.chunk_rows, [self.id_column])
                                       for v in frame[self.id_column].tolist())
        pos = self.header.index(self.id_column)
        try:
            with open(self.path, newline="", encoding="utf-8-sig") as fh:
                rows = (r for r in csv.reader(fh) if r)
                next(rows, None)
                return IdColumn.from_cells(r[pos] for r in rows)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise DataValidationError(f"cannot read {self.path}: {exc}") from None

    def _frames(self, rows: int, columns: Sequence[str]) -> Iterator[np.ndarray]:
        """The prepared ``columns`` chunk by chunk: pandas' C float parser when it can (plain numeric CSV columns),
        else, and for the rest of the file after any cell it refuses, the checked cell-by-cell path."""
        done = 0
        if self._float_path(columns):
            try:
                for block in self._float_chunks(rows, columns):
                    if not np.all(np.isfinite(block)):
                        break   # a NaN/inf cell: the cell-by-cell path below names it
                    yield block
                    done += len(block)
                else:
                    return
            except (ValueError, OSError, UnicodeDecodeError, LookupError):
                pass   # a cell the float parser refuses (or any other trouble): the checked path decides
        for start, frame in self._raw_chunks(rows, self._sources(columns)):
            if start + len(frame) <= done:
                continue   # already served by the float parser (both readers chunk the file alike)
            if not columns:
                yield np.zeros((len(frame), 0))
                continue
            yield self._matrix(frame, columns, start)

    def _float_path(self, columns: Sequence[str]) -> bool:
        """Whether ``columns`` can be read by the C float parser: a CSV file, columns present, none of them mapped
        by the declared preprocessing (categories, imputation)."""
        if self.parquet or not columns:
            return False
        pp = self.preprocessing
        return pp is None or not any(self._source.get(c, c) in pp.columns for c in columns)

    def _float_chunks(self, rows: int, columns: Sequence[str]) -> Iterator[np.ndarray]:
        """Numeric CSV columns straight from pandas' C parser as float64 (about 10x less CPU than strings and
        ``to_numeric``; the same values: both parse to the nearest double). Raises ``ValueError`` on any cell it
        cannot read as a float (empty, text, ``nan``); the caller then falls back to the checked path."""
        pd = _pandas()
        reader = pd.read_csv(self.path, usecols=list(columns), dtype=float, na_filter=False, chunksize=rows,
                             encoding="utf-8-sig", skip_blank_lines=True, engine="c")
        with reader:
            for frame in reader:
                frame.columns = [str(c).strip() for c in frame.columns]
                yield frame[list(columns)].to_numpy(dtype=float)

    def _csv_structure(self) -> tuple[int, str | None]:
        """Streaming csv pass: every data row has the header's cell count; row count and row-ID digest."""
        digest = hashlib.sha256()
        id_pos = self.header.index(self.id_column) if self.id_column is not None else None
        n = 0
        try:
            with open(self.path, newline="", encoding="utf-8-sig") as fh:
                rows = (r for r in csv.reader(fh) if r)
                next(rows, None)
                for n, r in enumerate(rows, start=1):  # noqa: B007 - n is the row count afterwards
                    if len(r) != len(self.header):
                        raise DataValidationError(f"{self.path}: data row {n} has {len(r)} cells, the header has "
                                                  f"{len(self.header)}")
                    if id_pos is not None:
                        blob = r[id_pos].strip().encode()
                        digest.update(len(blob).to_bytes(4, "big") + blob)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise DataValidationError(f"cannot read {self.path}: {exc}") from None
        return n, (digest.hexdigest() if id_pos is not None else None)

    def _validate(self) -> None:
        """Pass(es) over the file: structure, numeric checks, row count, row-ID digest, column min/max."""
        digest = hashlib.sha256()
        if not self.parquet:
            n_csv, csv_digest = self._csv_structure()
            if n_csv == 0:
                raise DataValidationError(f"{self.path}: no data rows")
        cols = self._sources(self.numeric) + ([self.id_column] if self.id_column is not None and self.parquet else [])
        n = 0
        lo = np.full(len(self.numeric), np.inf)
        hi = np.full(len(self.numeric), -np.inf)
        if self._float_path(self.numeric):   # CSV numeric columns: the C float parser (falls back by itself)
            for values in self._frames(self.chunk_rows, self.numeric):
                if len(values):
                    lo = np.minimum(lo, values.min(axis=0))
                    hi = np.maximum(hi, values.max(axis=0))
                n += len(values)
        else:
            for start, frame in self._raw_chunks(self.chunk_rows, cols):
                if self.numeric:
                    values = self._matrix(frame, self.numeric, start)
                    if len(values):
                        lo = np.minimum(lo, values.min(axis=0))
                        hi = np.maximum(hi, values.max(axis=0))
                if self.id_column is not None and self.parquet:
                    for value in frame[self.id_column].tolist():
                        blob = str(value).strip().encode()
                        digest.update(len(blob).to_bytes(4, "big") + blob)
                n += len(frame)
        if n == 0:
            raise DataValidationError(f"{self.path}: no data rows")
        self.n_rows = n
        self.id_digest = digest.hexdigest() if self.id_column is not None else None
        if not self.parquet:
            if n != n_csv:  # pandas and csv disagree on the rows (e.g. quoting): refuse rather than guess
                raise DataValidationError(f"{self.path}: {n_csv} data rows by the csv module, {n} by pandas")
            self.id_digest = csv_digest
        self.column_min = dict(zip(self.numeric, lo.tolist(), strict=True))
        self.column_max = dict(zip(self.numeric, hi.tolist(), strict=True))


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:  # pragma: no cover - depends on the optional extra
        raise ConfigurationError("reading tables in chunks needs pandas: pip install 'vfl[tables]'") from None
    return pandas


def _parses_as_float(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
