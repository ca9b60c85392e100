"""``vfl predict``: score raw rows of a joined table with a released model (socket-free; the CLI is a thin face).

The rows go through the same declared preprocessing as at training (each party's record in the model file,
:mod:`vfl.data.preprocessing`), then through the bounds check: a model's released coefficients are only meant for
rows inside its public bounds (the domain its privacy and utility analysis assumed, docs/privacy.md), so a row
outside them is refused (default), flagged, or clipped to the bounds -- never scored silently. The output is a
CSV: the ``--id`` column passed through, the prediction column named after the label (or ``--output-column``),
and with ``flag`` an ``out_of_bounds`` column naming the columns that were outside.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vfl.data.preprocessing import Preprocessing
from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.models.modelio import FittedModel

__all__ = ["OUT_OF_BOUNDS_MODES", "Predictions", "model_inputs", "read_rows", "check_bounds", "predict_file",
           "format_value"]

OUT_OF_BOUNDS_MODES = ("refuse", "flag", "clip")
FLAG_COLUMN = "out_of_bounds"


def model_inputs(model: FittedModel) -> tuple[list[str], Preprocessing]:
    """The raw columns a row must have (in the model's order) and the parties' preprocessing merged into one map;
    its prepared names are the model's features."""
    inputs: list[str] = []
    categories: dict[str, tuple[str, ...]] = {}
    impute: dict[str, float | str] = {}
    for p in model.parties:
        if p.preprocessing is None:
            inputs += p.features
            continue
        pp, cols = Preprocessing.from_record(p.preprocessing, p.features)
        inputs += cols
        categories.update(pp.categories)
        impute.update(pp.impute)
    return inputs, Preprocessing(categories, impute)


def read_rows(model: FittedModel, path: str | Path, id_column: str | None = None
              ) -> tuple[np.ndarray, list[str] | None]:
    """The model's prepared columns of every row of ``path`` (raw columns by name, preprocessing applied) and the
    ``id_column`` cells (None without one)."""
    from vfl.data.config import read_party_csv

    inputs, pp = model_inputs(model)
    table = read_party_csv(path, inputs, id_column=id_column, preprocessing=pp if pp else None)
    if table.feature_names != model.feature_names_:   # a merged map whose names do not line up: refuse, not guess
        raise ConfigurationError("the model's preprocessing does not reproduce its feature names")
    return table.X, table.ids


def check_bounds(model: FittedModel, X: np.ndarray, mode: str) -> tuple[np.ndarray, list[str] | None, int]:
    """(rows to score, per-row names of the columns outside the bounds for ``flag``, number of rows outside) under
    the model's public bounds (:meth:`FittedModel.column_bounds`): ``refuse`` raises naming the first such row,
    column and value and how many rows are outside; ``clip`` clips them to the bounds; ``flag`` scores them as
    they are."""
    if mode not in OUT_OF_BOUNDS_MODES:
        raise ConfigurationError(f"--out-of-bounds must be one of {', '.join(OUT_OF_BOUNDS_MODES)}, got {mode!r}")
    b = model.column_bounds()
    lo, hi = b[:, 0], b[:, 1]
    with np.errstate(invalid="ignore"):   # NaN bounds (columns used as given) compare False: never outside
        outside = (X < lo) | (X > hi)
    rows = np.flatnonzero(outside.any(axis=1))
    names = model.feature_names_
    if mode == "refuse" and rows.size:
        r = int(rows[0])
        c = int(np.argmax(outside[r]))
        raise DataValidationError(f"data row {r + 1}: {names[c]} = {X[r, c]:g} lies outside the model's public bounds "
                                  f"[{lo[c]:g}, {hi[c]:g}] ({rows.size} of {X.shape[0]} rows are outside); refused, "
                                  "not scored: use --out-of-bounds flag or clip to score such rows")
    if mode == "clip":
        clipped = np.clip(X, np.nan_to_num(lo, nan=-np.inf), np.nan_to_num(hi, nan=np.inf))
        return clipped, None, int(rows.size)
    if mode == "flag":
        return X, [";".join(n for n, o in zip(names, row, strict=True) if o) for row in outside], int(rows.size)
    return X, None, 0


@dataclass
class Predictions:
    """What ``vfl predict`` writes: the CSV text and a count of rows outside the bounds (flagged or clipped)."""

    text: str
    n_rows: int
    n_outside: int
    unchecked: list[str]   # parties whose columns have no recorded bounds ((DP-)BCD): not checked


def format_value(v: float) -> str:
    """A prediction or score as text: 17 significant digits, so the float read back is the one computed (repr
    round-trip); `vfl predict` and `vfl score` write the same."""
    return f"{v:.17g}"


def output_column(model: FittedModel, name: str | None, proba: bool) -> str:
    """``--output-column``, else ``<label>_probability`` (``--proba``) or ``<label>_predicted``; ``probability`` /
    ``prediction`` for a model without a label name (schema version 1 files)."""
    if name:
        return name
    if model.label_name:
        return f"{model.label_name}_{'probability' if proba else 'predicted'}"
    return "probability" if proba else "prediction"


def predict_file(model: FittedModel, data: str | Path, *, id_column: str | None = None,
                 column: str | None = None, proba: bool = False, out_of_bounds: str = "refuse") -> Predictions:
    """Score every row of ``data``; everything is checked before a single line is produced."""
    if proba and model.model != "logistic":
        raise ConfigurationError("--proba is for logistic models (this one is linear)")
    name = output_column(model, column, proba)
    header = ([id_column] if id_column else []) + [name] + ([FLAG_COLUMN] if out_of_bounds == "flag" else [])
    if len(set(header)) != len(header):
        raise ConfigurationError(f"output column names must differ, got {', '.join(header)}")
    X, ids = read_rows(model, data, id_column)
    X, flags, n_outside = check_bounds(model, X, out_of_bounds)
    values = model.predict_proba(X) if proba else model.predict(X)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for i, v in enumerate(values):
        writer.writerow(([ids[i]] if ids is not None else []) + [format_value(v)] + ([flags[i]] if flags else []))
    unchecked = [p.name for p in model.parties if p.bounds is None and p.features]
    return Predictions(buf.getvalue(), len(values), n_outside, unchecked)
