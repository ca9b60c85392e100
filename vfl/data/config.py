"""A party's local configuration: which file, which columns, which label, which public bounds.

Sources of a party's data, in the order the CLI resolves them:

* a CSV file (``--data FILE.csv``) with a header row; ``--features`` selects columns by name, by
  name range ``first:last`` (inclusive, header order) or by 0-based index / index range ``2-5``;
  ``--label`` names the label column (label owner only); ``--id`` names a row-ID column (any text): the
  parties align their rows by a private set intersection of these IDs (docs/psi.md; no ID ever leaves in clear);
* a built-in data set (``dataset = "forestfires" | "garment"`` in a config file), preprocessed as in
  :mod:`vfl.data.datasets`, with its documented public bounds;
* a party config file (TOML)::

      [party]
      name = "A"
      connect = "tcp://127.0.0.1:5555"
      dataset = "forestfires"          # or: data = "file.csv"
      features = ["X", "Y", "temp"]
      label = "log_area"               # label owner only
      id = "row_id"                    # or: rows_aligned = true (the operator states the rows are aligned)
      bounds = "bounds.toml"           # optional, relative to the config file

      [bounds]                         # ... or the declarations inline, in the config file itself
      age = [18, 90]

* a bounds file (TOML) ``[bounds] col = [lo, hi]`` declaring the public domain of each column (and of
  the label), with optional ``[categories]`` (0/1 dummies of declared categories) and ``[impute]`` (public
  constants for missing cells) tables (:mod:`vfl.data.preprocessing`, docs/data_preparation.md). The same
  tables may stand inline in the party config instead; declaring them in both places is refused. Without
  bounds a party does not start (:func:`vfl.net.party.check_declared_bounds`) unless its operator passes
  ``--allow-data-derived-bounds``: they are then taken from the data with a loud
  :class:`vfl.exceptions.DataBoundsWarning` and the model is not formally DP.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vfl.data.preprocessing import Preprocessing
from vfl.exceptions import ConfigurationError, DataValidationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["PartyConfig", "LocalTable", "Declarations", "check_row_alignment", "load_party_config", "load_bounds_file",
           "load_declarations", "party_declarations", "select_columns", "read_party_csv", "open_party_table",
           "load_dataset_table"]

#: the tables of public declarations a bounds file (or a party config, inline) may hold
DECLARATION_TABLES = ("bounds", "categories", "impute")


@dataclass
class Declarations:
    """A party's public declarations: column (and label) bounds and the preprocessing of its raw columns, from a
    bounds file or from the inline tables of its config file (``source`` names which)."""

    bounds: dict[str, tuple[float, float]] | None
    preprocessing: Preprocessing
    source: str

    def for_columns(self, inputs: list[str]) -> tuple[dict[str, tuple[float, float]] | None, dict | None]:
        """(bounds of the prepared columns, preprocessing record) for a party whose raw columns are ``inputs``:
        dummies get [0, 1]; a bound on a categorical column or an imputation constant outside its bounds is
        refused (naming ``source``)."""
        own = self.preprocessing.restrict(inputs)
        try:
            bounds = own.bounds(inputs, self.bounds)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.source}: {exc}") from None
        return bounds, (own.to_record(inputs) if own else None)

    def resolve(self, inputs: list[str], label: str | None
                ) -> tuple[dict[str, tuple[float, float]] | None, tuple[float, float] | None, dict | None]:
        """(bounds of the prepared columns, the label's bounds, preprocessing record): :meth:`for_columns` plus the
        label's declared bounds (None if it has none)."""
        bounds, record = self.for_columns(inputs)
        label_bounds = self.bounds.get(label) if (label and self.bounds) else None
        return bounds, label_bounds, record


@dataclass
class PartyConfig:
    """Everything `vfl party` needs; CLI options override the config file's values."""

    name: str | None = None
    connect: str | None = None
    data: str | None = None
    dataset: str | None = None
    features: list[str] = field(default_factory=list)
    label: str | None = None
    id: str | None = None
    bounds: str | None = None
    curve_dir: str | None = None
    identity_dir: str | None = None   # NAME.sign.secret and the pinned *.sign.pub (vfl.secure.identity)
    #: the privacy ledger (vfl.privacy.ledger; None: the default file), the lifetime budget "EPSILON[,DELTA]" per
    #: dataset (None: record only) and the declared dataset name (a refreshed table continues the same budget)
    ledger: str | None = None
    budget: str | None = None
    dataset_name: str | None = None
    #: the operator states that this table's rows are in the same order as every co-party's, row by row (without
    #: ``id`` a party runs only then: :func:`check_row_alignment`)
    rows_aligned: bool = False
    #: inline ``[bounds]``/``[categories]``/``[impute]`` tables of the config file (None: none there)
    declarations: Declarations | None = None


@dataclass
class LocalTable:
    """A party's selected columns (raw units), optional label and row IDs (raw cells), and declared bounds."""

    X: np.ndarray
    feature_names: list[str]
    y: np.ndarray | None = None
    label_name: str | None = None
    ids: list[str] | None = None
    bounds: dict[str, tuple[float, float]] | None = None
    #: FM runs: the same columns in raw units with their documented bounds. The paper's z-scoring (for BCD) uses
    #: the data's own mean and sd; z-space bounds would reveal them, while the unit-interval map, and hence the
    #: FM release, is the same for (z, z-bounds) and (raw, raw bounds).
    fm_columns: np.ndarray | None = None
    fm_bounds: dict[str, tuple[float, float]] | None = None
    #: the raw columns read (``feature_names`` are the prepared ones: declared dummies, vfl.data.preprocessing)
    inputs: list[str] | None = None


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigurationError(f"{what} {path} not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{what} {path} is not valid TOML: {exc}") from None


ROWS_ALIGNED_HOW = ("state that every party's table holds the same people in the same row order with --rows-aligned "
                    "(rows_aligned = true in --config), or give --id COLUMN on every party to align the rows by a "
                    "private set intersection of their IDs (docs/psi.md)")


def check_row_alignment(cfg: PartyConfig) -> None:
    """Aligned rows or a refusal (issue 31): without ``id`` the parties pair their rows by position, so row i of
    every table must be the same person. Nothing in the protocol can check that (the tables never meet), so a
    party runs without ``id`` only if its operator states it (``--rows-aligned`` / ``rows_aligned = true``); a
    built-in data set (``dataset = ...``) is aligned by construction. ``id`` with ``rows_aligned`` is refused
    (they contradict each other). Checked before the table is read or anything is sent: one line, exit code 2."""
    if cfg.id and cfg.rows_aligned:
        raise ConfigurationError(f"party {cfg.name}: --rows-aligned and --id exclude each other (--id aligns the rows "
                                 "by their IDs, in any order); give one of them")
    if not cfg.id and not cfg.rows_aligned and not cfg.dataset:
        raise ConfigurationError(f"party {cfg.name}: without --id the parties pair their rows by position; "
                                 + ROWS_ALIGNED_HOW)


def load_party_config(path: str | Path) -> PartyConfig:
    """Read a ``[party]`` TOML config; relative ``data``/``bounds``/``curve_dir``/``identity_dir``/``ledger`` paths
    resolve against its folder."""
    p = Path(path)
    doc = _read_toml(p, "party config")
    section = doc.get("party")
    if not isinstance(section, dict):
        raise ConfigurationError(f"{p}: missing [party] section")
    stray = sorted(set(doc) - {"party", *DECLARATION_TABLES})
    if stray:
        raise ConfigurationError(f"{p}: unknown table(s) {', '.join(stray)}; a party config holds [party] and, "
                                 f"optionally, inline {', '.join(f'[{t}]' for t in DECLARATION_TABLES)}")
    allowed = {"name", "connect", "data", "dataset", "features", "label", "id", "bounds", "curve_dir", "identity_dir",
               "ledger", "budget", "dataset_name"}
    unknown = set(section) - allowed - {"rows_aligned"}
    if unknown:
        raise ConfigurationError(f"{p}: unknown key(s) in [party]: {', '.join(sorted(unknown))}")
    aligned = section.get("rows_aligned", False)
    if not isinstance(aligned, bool):
        raise ConfigurationError(f"{p}: [party] rows_aligned must be true or false, got {aligned!r}"[:300])
    for key in sorted(allowed - {"features"}):
        if key in section and not isinstance(section[key], str):
            raise ConfigurationError(f"{p}: [party] {key} must be a string, got {type(section[key]).__name__} "
                                     f"{section[key]!r}"[:300])
    cfg = PartyConfig(**{k: section.get(k) for k in allowed if k != "features"}, rows_aligned=aligned)
    feats = section.get("features", [])
    if isinstance(feats, str):
        feats = [feats]
    if not isinstance(feats, list) or not all(isinstance(f, str) for f in feats):
        raise ConfigurationError(f"{p}: features must be a list of column names")
    cfg.features = feats
    for key in ("data", "bounds", "curve_dir", "identity_dir", "ledger"):
        value = getattr(cfg, key)
        if value is not None and not Path(value).is_absolute():
            setattr(cfg, key, str((p.parent / value).resolve()))
    if cfg.data and cfg.dataset:
        raise ConfigurationError(f"{p}: give either data or dataset, not both")
    if any(t in doc for t in DECLARATION_TABLES):
        if cfg.bounds:
            raise ConfigurationError(f"{p}: public bounds are declared twice, inline ([bounds]/[categories]/[impute] "
                                     f"tables) and in the bounds file {cfg.bounds}; keep one of them")
        cfg.declarations = _declarations(doc, f"{p}")
    return cfg


def _declarations(doc: dict[str, Any], source: str) -> Declarations:
    """The ``[bounds]``, ``[categories]`` and ``[impute]`` tables of a TOML document (bounds checked as in
    :func:`load_bounds_file`)."""
    bounds = _bounds_table(doc["bounds"], source) if "bounds" in doc else None
    pp = Preprocessing.from_tables(doc.get("categories"), doc.get("impute"), source=source)
    return Declarations(bounds, pp, source)


def load_declarations(path: str | Path) -> Declarations:
    """A party's bounds file: ``[bounds]`` and, optionally, ``[categories]`` and ``[impute]`` (module docstring)."""
    p = Path(path)
    doc = _read_toml(p, "bounds file")
    if not any(t in doc for t in DECLARATION_TABLES):
        raise ConfigurationError(f"{p}: missing [bounds] section")
    stray = sorted(set(doc) - set(DECLARATION_TABLES))
    if stray:
        raise ConfigurationError(f"{p}: unknown table(s) {', '.join(stray)}; a bounds file holds "
                                 f"{', '.join(f'[{t}]' for t in DECLARATION_TABLES)}")
    return _declarations(doc, str(p))


def party_declarations(cfg: PartyConfig, config_path: str | None = None) -> Declarations | None:
    """The declarations a party runs with: its bounds file (``--bounds`` or ``bounds = ...``) or its config's
    inline tables; both at once is one clear error."""
    if cfg.declarations is not None and cfg.bounds:
        raise ConfigurationError(f"public bounds are declared twice, inline in {config_path or 'the config file'} "
                                 f"and in --bounds {cfg.bounds}; keep one of them")
    if cfg.bounds:
        return load_declarations(cfg.bounds)
    return cfg.declarations


def load_bounds_file(path: str | Path) -> dict[str, tuple[float, float]]:
    """``[bounds] column = [lo, hi]`` -> {column: (lo, hi)}; every pair finite with lo < hi. For a file without
    preprocessing (capeFM sites): ``[categories]``/``[impute]`` tables are refused, not ignored."""
    p = Path(path)
    doc = _read_toml(p, "bounds file")
    section = doc.get("bounds")
    if not isinstance(section, dict):
        raise ConfigurationError(f"{p}: missing [bounds] section")
    declared = [f"[{t}]" for t in DECLARATION_TABLES[1:] if t in doc]
    if declared:
        raise ConfigurationError(f"{p}: {' and '.join(declared)} (declared preprocessing) are read by `vfl party` "
                                 "only")
    return _bounds_table(section, str(p))


def _bounds_table(section: Any, p: str) -> dict[str, tuple[float, float]]:
    if not isinstance(section, dict):
        raise ConfigurationError(f"{p}: [bounds] must be a table: column = [lo, hi]")
    out: dict[str, tuple[float, float]] = {}
    for col, pair in section.items():
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair)):
            raise ConfigurationError(f"{p}: bounds for {col!r} must be [lo, hi]")
        lo, hi = float(pair[0]), float(pair[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ConfigurationError(f"{p}: bounds for {col!r} must be finite with lo < hi, got {pair}")
        out[str(col)] = (lo, hi)
    return out


_INDEX_RANGE = re.compile(r"^\d+(-\d+)?$")  # "3" or "2-5"; "-1", "3-" are unknown features, not tracebacks


def select_columns(spec: list[str] | str, header: list[str], *, source: str = "data") -> list[str]:
    """Resolve a feature selection to column names (see module docstring); unknown names raise."""
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    items = [s for s in items if s]
    if not items:
        raise DataValidationError("no features selected (use --features NAMES, RANGES or INDICES)")
    # a selection is stripped, so header names match stripped too (the garment file's dummy "department_finishing ")
    position = {name.strip(): i for i, name in enumerate(header)}
    chosen: list[str] = []
    unknown: list[str] = []
    for item in items:
        if item in position:
            chosen.append(header[position[item]])
        elif ":" in item and all(part.strip() in position for part in item.split(":", 1)):
            a, b = (position[part.strip()] for part in item.split(":", 1))
            chosen += header[min(a, b):max(a, b) + 1]
        elif _INDEX_RANGE.fullmatch(item):
            parts = item.split("-", 1)
            a, b = int(parts[0]), int(parts[-1])
            if not (0 <= a < len(header) and 0 <= b < len(header)):
                unknown.append(item)
                continue
            chosen += header[min(a, b):max(a, b) + 1]
        else:
            unknown.append(item)
    if unknown:
        raise DataValidationError(f"unknown feature(s) {', '.join(map(repr, unknown))} in {source}; "
                                  f"columns are: {', '.join(header)}")
    dupes = sorted({c for c in chosen if chosen.count(c) > 1})
    if dupes:
        raise DataValidationError(f"feature(s) selected twice: {', '.join(dupes)}")
    return chosen




def read_party_csv(path: str | Path, features: list[str] | str, *, label: str | None = None,
                   id_column: str | None = None, preprocessing: Preprocessing | None = None) -> LocalTable:
    """Read a CSV (or Parquet: ``.parquet``/``.pq``) table with a header; select features (names/ranges/indices),
    label and ID columns.

    Only the selected columns must be numeric (the ID column may hold any text). A label owner may
    select no features (empty ``features``). The file is validated and read in chunks
    (:class:`vfl.data.tables.TableFile`), so only the selected columns' float arrays are ever held whole. A
    declared ``preprocessing`` maps the selected raw columns (dummies, imputation) as they are read.
    """
    p = Path(path)
    table = open_party_table(p, features, label=label, id_column=id_column, preprocessing=preprocessing)
    X, y = table.load()
    return LocalTable(X, table.feature_names, y, label, table.read_ids(), inputs=list(table.inputs))


def open_party_table(path: str | Path, features: list[str] | str, *, label: str | None = None,
                     id_column: str | None = None, preprocessing: Preprocessing | None = None) -> Any:
    """The :class:`vfl.data.tables.TableFile` of a party's CSV/Parquet file with its selection resolved (see
    :func:`read_party_csv`): validated in one chunked pass, columns left on disk."""
    from vfl.data.tables import TableFile, table_columns

    p = Path(path)
    header = table_columns(p)
    for what, col in (("label", label), ("id", id_column)):
        if col is not None and col not in header:
            raise DataValidationError(f"unknown {what} column {col!r} in {p}; columns are: {', '.join(header)}")
    candidates = [h for h in header if h not in (label, id_column)]
    requested = [s.strip() for s in (features.split(",") if isinstance(features, str) else features)]
    for what, col in (("label", label), ("row-ID", id_column)):
        if col is not None and col in requested:
            raise ConfigurationError(f"the {what} column {col!r} is also selected as a feature in {p}")
    if label is not None and not features:
        names: list[str] = []  # a label owner without features
    else:
        names = select_columns(features, candidates, source=str(p))
    return TableFile(p, names, label=label, id_column=id_column, preprocessing=preprocessing)


def load_dataset_table(dataset: str, features: list[str] | str, *, label: str | None = None) -> LocalTable:
    """Columns of a built-in data set (:mod:`vfl.data.datasets`) with its documented public bounds."""
    from vfl.data import datasets

    loaders = {"forestfires": datasets.forest_fires, "garment": datasets.garment}
    if dataset not in loaders:
        raise ConfigurationError(f"unknown dataset {dataset!r}; known: {', '.join(loaders)}")
    data = loaders[dataset]()
    names = select_columns(features, list(data.feature_names), source=f"dataset {dataset}")
    X = data.X[:, data.column_indices(names)]
    y = None
    if label is not None:
        if label != data.target_name:
            raise DataValidationError(f"dataset {dataset} has label {data.target_name!r}, not {label!r}")
        y = np.asarray(data.y, dtype=float)
    bounds = datasets.public_bounds(dataset, dataset=data)
    if y is not None:
        # the documented label domain, as the in-process FM clips it (garment: UCI documents actual_productivity in
        # [0, 1], the file holds values up to 1.12; vfl.data.datasets.BOUNDS_PROVENANCE): clipping to a public bound
        # is data-independent, so the guarantee holds
        y = np.clip(y, *bounds[data.target_name])
    scaled = [n for n in names if n in data.scaling]
    fm_columns, fm_bounds = None, None
    if scaled:
        raw_bounds = datasets.public_bounds(dataset, space="raw")
        fm_columns = X.copy()
        fm_bounds = {k: tuple(v) for k, v in bounds.items()}
        for j, col in enumerate(names):
            if col in data.scaling:
                mean, sd = data.scaling[col]
                lo, hi = raw_bounds[col]
                # undo the z-scoring; the clip only absorbs float round-off (the raw values lie in [lo, hi])
                fm_columns[:, j] = np.clip(X[:, j] * sd + mean, lo, hi)
                fm_bounds[col] = (float(lo), float(hi))
    # built-in data sets are aligned by construction (same file, same row order): no row IDs, no PSI
    return LocalTable(X, names, y, label, None, {k: tuple(v) for k, v in bounds.items()}, fm_columns, fm_bounds)
