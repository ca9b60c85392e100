"""Declared preprocessing of a party's raw columns: 0/1 dummies of declared categories, imputation by a public constant.

Everything is *declared* by the party in its bounds (or config) file and nothing is derived from the data
(docs/data_preparation.md)::

    [categories]
    colour = ["red", "green", "blue"]   # a categorical column and its declared categories, in this order
    [impute]
    income = 40000                       # a missing cell of income becomes this public constant
    colour = "red"                       # (a categorical column imputes one of its declared categories)

* A categorical column c with declared categories (k_1, ..., k_m) becomes m columns named ``c=k_1``, ..., ``c=k_m``,
  x_{c=k_i} = 1 if the cell is k_i and 0 otherwise, each with the public bounds [0, 1]. A cell that is not a
  declared category is refused (a new category is never added silently).
* A missing cell (empty, ``NA``, ``N/A``, ``NaN``, ``nan``, ``NULL``, ``null``; a Parquet null) becomes the
  column's declared constant; a column without one refuses missing cells.

Why this keeps the guarantee: the map f acts on each row alone and its parameters are public, so data sets that
differ in one row still differ in one row after f, and a mechanism that is (epsilon, delta)-DP on the prepared rows
is (epsilon, delta)-DP on the raw rows (Dwork & Roth 2014, "The Algorithmic Foundations of Differential Privacy",
Sec. 2.3: DP is a property of the mechanism on neighbouring inputs; a row-wise public map preserves neighbours).
A constant or a category list taken from the data would not be public, and is not offered.

The model file records the map (:meth:`Preprocessing.to_record`) so that ``vfl predict`` applies the same one to
raw rows. Numeric and socket-free: cells in, float arrays out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError

__all__ = ["MISSING_CELLS", "Preprocessing", "is_missing", "dummy_name", "missing_hint"]

#: text cells read as missing values (after stripping blanks)
MISSING_CELLS = frozenset({"", "NA", "N/A", "NaN", "nan", "NULL", "null"})
#: the longest declared category and the most categories per column (a wire and file size bound)
MAX_CATEGORY_CHARS = 120
MAX_CATEGORIES = 1000


def is_missing(cell: Any) -> bool:
    """A missing cell: None, a float NaN, or one of :data:`MISSING_CELLS`."""
    if cell is None:
        return True
    if isinstance(cell, (float, np.floating)):
        return math.isnan(float(cell))
    return isinstance(cell, str) and cell.strip() in MISSING_CELLS


def _category_text(cell: Any) -> str:
    """A cell as a category name: stripped text; integral numbers (Parquet) without a trailing ``.0``."""
    if isinstance(cell, (bool, np.bool_)):
        return str(bool(cell)).lower()
    if isinstance(cell, (int, np.integer)):
        return str(int(cell))
    if isinstance(cell, (float, np.floating)) and float(cell).is_integer():
        return str(int(cell))
    return str(cell).strip()


def dummy_name(column: str, category: str) -> str:
    """The name of a dummy column: ``column=category``."""
    return f"{column}={category}"


@dataclass
class Preprocessing:
    """A party's declared categorical columns (``categories``: column -> categories) and imputation constants
    (``impute``: column -> a finite number, or a declared category of a categorical column)."""

    categories: dict[str, tuple[str, ...]] = field(default_factory=dict)
    impute: dict[str, float | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.categories = {str(c): tuple(str(k) for k in ks) for c, ks in self.categories.items()}
        self.impute = dict(self.impute)
        for col, ks in self.categories.items():
            if not ks:
                raise ConfigurationError(f"categorical column {col!r} declares no categories")
            if len(ks) > MAX_CATEGORIES or any(len(k) > MAX_CATEGORY_CHARS for k in ks):
                raise ConfigurationError(f"categorical column {col!r}: at most {MAX_CATEGORIES} categories of at "
                                         f"most {MAX_CATEGORY_CHARS} characters")
            bad = [k for k in ks if k != k.strip() or k in MISSING_CELLS]
            if bad:
                raise ConfigurationError(f"categorical column {col!r}: category {bad[0]!r} is empty, padded or a "
                                         "missing-value marker")
            dupes = sorted({k for k in ks if ks.count(k) > 1})
            if dupes:
                raise ConfigurationError(f"categorical column {col!r} declares {', '.join(map(repr, dupes))} twice")
        for col, value in self.impute.items():
            if col in self.categories:
                if not isinstance(value, str) or value not in self.categories[col]:
                    raise ConfigurationError(f"impute value of categorical column {col!r} must be one of its "
                                             f"declared categories ({', '.join(self.categories[col])}), got {value!r}")
            elif (isinstance(value, bool) or not isinstance(value, (int, float))
                  or not math.isfinite(float(value))):
                raise ConfigurationError(f"impute value of column {col!r} must be a finite number, got {value!r}")
            else:
                self.impute[col] = float(value)

    # ------------------------------------------------------------------ declarations
    @classmethod
    def from_tables(cls, categories: Any, impute: Any, *, source: str) -> Preprocessing:
        """From the ``[categories]`` and ``[impute]`` tables of a TOML file (either may be None)."""
        cats: dict[str, tuple[str, ...]] = {}
        if categories is not None:
            if not isinstance(categories, dict):
                raise ConfigurationError(f"{source}: [categories] must be a table: column = [\"a\", \"b\", ...]")
            for col, ks in categories.items():
                if (not isinstance(ks, list)
                        or not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in ks)):
                    raise ConfigurationError(f"{source}: categories of {col!r} must be a list of names, e.g. "
                                             f"{col} = [\"a\", \"b\"]")
                cats[str(col)] = tuple(str(k) for k in ks)
        imp: dict[str, float | str] = {}
        if impute is not None:
            if not isinstance(impute, dict):
                raise ConfigurationError(f"{source}: [impute] must be a table: column = CONSTANT")
            imp = {str(c): (str(v) if str(c) in cats and isinstance(v, int) and not isinstance(v, bool) else v)
                   for c, v in impute.items()}
        try:
            return cls(cats, imp)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{source}: {exc}") from None

    def __bool__(self) -> bool:
        return bool(self.categories or self.impute)

    @property
    def columns(self) -> set[str]:
        """Every column this declaration names."""
        return set(self.categories) | set(self.impute)

    def restrict(self, columns: Sequence[str]) -> Preprocessing:
        """The declarations of ``columns`` only (a shared file may declare other parties' columns)."""
        keep = set(columns)
        return Preprocessing({c: k for c, k in self.categories.items() if c in keep},
                             {c: v for c, v in self.impute.items() if c in keep})

    def output_names(self, columns: Sequence[str]) -> list[str]:
        """The prepared column names of raw ``columns``: a categorical column becomes its dummies."""
        return [name for _, name in self.expand(columns)]

    def expand(self, columns: Sequence[str]) -> list[tuple[str, str]]:
        """(raw source column, prepared column name) of each prepared column, in order."""
        out: list[tuple[str, str]] = []
        for col in columns:
            if col in self.categories:
                out += [(col, dummy_name(col, k)) for k in self.categories[col]]
            else:
                out.append((col, col))
        return out

    def bounds(self, columns: Sequence[str], declared: Mapping[str, tuple[float, float]] | None
               ) -> dict[str, tuple[float, float]] | None:
        """The declared bounds of the prepared columns: every dummy [0, 1], the others as declared.

        A bound declared for a categorical column is refused (its dummies' bounds are [0, 1] by construction), and
        so is an imputation constant outside its column's declared bounds. ``declared=None`` (no bounds declared):
        None unless there are dummies, whose bounds are known anyway.
        """
        out = dict(declared) if declared is not None else {}
        for col in columns:
            if col in self.categories:
                if declared is not None and col in declared:
                    raise ConfigurationError(f"column {col!r} is categorical: its dummies have the bounds [0, 1]; "
                                             "remove its [bounds] entry")
                out.pop(col, None)
                for k in self.categories[col]:
                    out[dummy_name(col, k)] = (0.0, 1.0)
            elif col in self.impute and declared is not None and col in declared:
                lo, hi = declared[col]
                value = float(self.impute[col])
                if not lo <= value <= hi:
                    raise ConfigurationError(f"impute value {value:g} of column {col!r} lies outside its declared "
                                             f"bounds [{lo:g}, {hi:g}]")
        return out if (declared is not None or out) else None

    # ------------------------------------------------------------------ the map
    def transform(self, column: str, cells: Sequence[Any], *, source: str = "data", first_row: int = 0
                  ) -> np.ndarray:
        """Prepared values of one raw column: (n, m) dummies of a categorical column, (n, 1) otherwise.

        Errors name the file/source, the column and the 1-based data row (``first_row`` rows precede ``cells``).
        """
        values = list(cells)
        where = f"{source}: column {column!r}, data row"
        if column in self.categories:
            cats = self.categories[column]
            index = {k: i for i, k in enumerate(cats)}
            fill = self.impute.get(column)
            out = np.zeros((len(values), len(cats)))
            for i, cell in enumerate(values):
                if is_missing(cell):
                    if fill is None:
                        raise DataValidationError(f"{where} {first_row + i + 1}: missing value "
                                                  f"({missing_hint(column)})")
                    key = str(fill)
                else:
                    key = _category_text(cell)
                    if key not in index:
                        raise DataValidationError(f"{where} {first_row + i + 1}: {key!r} is not a declared category "
                                                  f"({', '.join(cats)}); categories are never added from the data")
                out[i, index[key]] = 1.0
            return out
        fill = self.impute.get(column)
        out = np.empty(len(values))
        for i, cell in enumerate(values):
            if is_missing(cell):
                if fill is None:
                    raise DataValidationError(f"{where} {first_row + i + 1}: missing value ({missing_hint(column)})")
                out[i] = float(fill)
                continue
            try:
                v = float(cell.strip() if isinstance(cell, str) else cell)
            except (TypeError, ValueError):
                raise DataValidationError(f"{where} {first_row + i + 1}: {cell!r} is not a number") from None
            if not math.isfinite(v):
                raise DataValidationError(f"{where} {first_row + i + 1}: {cell!r} is not finite")
            out[i] = v
        return out[:, None]

    def transform_columns(self, columns: Sequence[str], cells: Mapping[str, Sequence[Any]], *,
                          source: str = "data", first_row: int = 0) -> np.ndarray:
        """The prepared matrix of raw ``columns`` (each a sequence of cells in ``cells``), columns in
        :meth:`output_names` order."""
        parts = [self.transform(c, cells[c], source=source, first_row=first_row) for c in columns]
        n = len(next(iter(cells.values()))) if cells else 0
        return np.hstack(parts) if parts else np.zeros((n, 0))

    # ------------------------------------------------------------------ model files
    def to_record(self, columns: Sequence[str]) -> dict[str, Any]:
        """What the model file keeps: the raw ``inputs`` and the declarations that apply to them."""
        own = self.restrict(columns)
        return {"inputs": list(columns), "categories": {c: list(k) for c, k in own.categories.items()},
                "impute": dict(own.impute)}

    @classmethod
    def from_record(cls, record: Any, features: Sequence[str] | None = None) -> tuple[Preprocessing, list[str]]:
        """(preprocessing, raw input columns) of a record; with ``features`` its prepared names must equal them."""
        if not isinstance(record, dict) or not isinstance(record.get("inputs"), list):
            raise ConfigurationError("malformed preprocessing record: no list of inputs")
        inputs = [str(c) for c in record["inputs"]]
        cats, imp = record.get("categories") or {}, record.get("impute") or {}
        if (not isinstance(cats, dict) or not isinstance(imp, dict)
                or not all(isinstance(v, list) for v in cats.values())):
            raise ConfigurationError("malformed preprocessing record: categories/impute must be tables")
        pp = cls({str(c): tuple(k) for c, k in cats.items()}, imp)
        if not pp.columns <= set(inputs):
            raise ConfigurationError("malformed preprocessing record: it declares columns that are not inputs")
        if features is not None and pp.output_names(inputs) != list(features):
            raise ConfigurationError("preprocessing record does not produce the registered feature names")
        return pp, inputs


def missing_hint(column: str) -> str:
    """How to fix a missing cell of ``column`` (one clause of an error line)."""
    return (f"declare a public constant to impute it, [impute] {column} = VALUE in the bounds file, or remove the "
            "row; see docs/data_preparation.md")
