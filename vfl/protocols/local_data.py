"""A party's table with its public declarations, and the checks a party makes on it before anything leaves it.

:class:`LocalData` (raw columns, declared public bounds, label, row IDs, the table's preprocessing record),
:func:`check_declared_bounds` (private by default: every column needs public bounds unless the operator allows
data-derived ones) and :func:`load_party_data` (the table as ``vfl party`` and ``vfl check`` read it: a chunked
file, an in-memory CSV or a built-in data set). Socket-free: the party role (:mod:`vfl.net.party`), the Python
API (:mod:`vfl.api`) and the CLI use the same objects (issue 30).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.data.id_column import IdColumn
from vfl.exceptions import ConfigurationError, DataBoundsWarning, DataValidationError, ProtocolError
from vfl.fm.domain import ColumnBounds, resolve_bounds, to_unit_interval
from vfl.protocols.policy import BOUNDED_MECHANISMS, PartyPolicy
from vfl.protocols.psi_stream import id_array
from vfl.validation import validate_name

__all__ = ["LocalData", "DATA_DERIVED_BOUNDS_WARNING", "missing_bounds", "check_declared_bounds", "load_party_data"]


@dataclass
class LocalData:
    """A party's data in raw units with its *declared* public bounds (None: inferred after the PLAN, and only
    for mechanisms that need them, with a DataBoundsWarning)."""

    name: str
    X: np.ndarray
    feature_names: list[str]
    y: np.ndarray | None
    bounds: ColumnBounds | None
    label_bounds: tuple[float, float] | None
    #: normalised row IDs (vfl.secure.psi.normalise_id; one fixed-width UTF-8 array read as a sequence of str,
    #: vfl.data.id_column.IdColumn: issue 34), or None: rows are aligned by position
    ids: Sequence[str] | None
    #: optional FM view of the same features (raw units and bounds; see vfl.data.config.LocalTable.fm_columns)
    fm_view: tuple[np.ndarray, ColumnBounds] | None = None
    #: public: the label column's name (label owner; recorded in the model file) and the declared preprocessing
    #: that made ``feature_names`` from raw columns (vfl.data.preprocessing record; recorded for `vfl predict`)
    label_name: str | None = None
    preprocessing: dict | None = None

    @classmethod
    def build(cls, name: str, X: Any, y: Any = None, *, feature_names: Sequence[str] | None = None,
              bounds: Any = None, label_bounds: Sequence[float] | None = None, ids: Sequence[Any] | None = None,
              use_bounds: bool = True, fm_columns: Any = None, fm_bounds: Any = None) -> LocalData:
        """Validate the party's table, its row IDs (normalised; no missing, empty or duplicate ID) and its declared
        bounds (``bounds=None``: none declared)."""
        try:
            validate_name(name)
        except ProtocolError as exc:  # a user's typo, not a peer's protocol violation (CLI exit code 2, not 4)
            raise ConfigurationError(str(exc)) from None
        X = np.asarray(X, dtype=float)
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        if X.ndim != 2:
            raise DataValidationError(f"party {name}: X must be 2-D, got shape {X.shape}")
        if X.shape[1] == 0 and y is None:
            raise DataValidationError(f"party {name} has neither features nor the label")
        if not np.all(np.isfinite(X)):
            raise DataValidationError(f"party {name}: X contains NaN or infinity")
        names = list(feature_names) if feature_names is not None else [f"{name}_x{j}" for j in range(X.shape[1])]
        if len(names) != X.shape[1]:
            raise DataValidationError(f"party {name}: {len(names)} feature names for {X.shape[1]} columns")
        if len(set(names)) != len(names):
            raise DataValidationError(f"party {name}: duplicate feature names")
        yv = None
        if y is not None:
            yv = np.asarray(y, dtype=float).ravel()
            if yv.shape[0] != X.shape[0]:
                raise DataValidationError(f"party {name}: y has {yv.shape[0]} rows, X has {X.shape[0]}")
            if not np.all(np.isfinite(yv)):
                raise DataValidationError(f"party {name}: y contains NaN or infinity")
        cb = None
        if use_bounds and X.shape[1] > 0 and bounds is not None:
            cb = resolve_bounds(bounds, X, names, what=f"features of party {name}")
            # checked here, before connecting: the same check after the PLAN would fail remotely, and its message
            # (which quotes the offending value) is a local matter
            to_unit_interval(X, cb, feature_names=names)
        lb = None
        if label_bounds is not None:
            lo, hi = (float(v) for v in label_bounds)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise DataValidationError(f"party {name}: label bounds must be finite with lo < hi")
            lb = (lo, hi)
            if use_bounds and yv is not None:
                to_unit_interval(yv[:, None], ColumnBounds(np.array([lo]), np.array([hi])), feature_names=["label"])
        fm_view = None
        if fm_columns is not None:
            Xf = np.asarray(fm_columns, dtype=float)
            if Xf.shape != X.shape or not np.all(np.isfinite(Xf)):
                raise DataValidationError(f"party {name}: the FM view must be finite with the shape of X")
            cf = resolve_bounds(fm_bounds, Xf, names, what=f"features of party {name}")
            to_unit_interval(Xf, cf, feature_names=names)
            fm_view = (Xf, cf)
        id_list: IdColumn | None = None
        if ids is not None:
            id_list = IdColumn(id_array(ids, what=f"party {name}: row-ID column"))
            if len(id_list) != X.shape[0]:
                raise DataValidationError(f"party {name}: ids has {len(id_list)} entries, X has {X.shape[0]} rows")
        return cls(name, X, names, yv, cb, lb, id_list, fm_view)

    @classmethod
    def from_table(cls, name: str, table: Any, *, bounds: Any, label_bounds: Sequence[float] | None = None
                   ) -> LocalData:
        """A party whose features stay on disk (:class:`vfl.data.tables.TableFile`, already validated in chunks):
        ``X`` is the table's row source, read chunk by chunk by the FM release; only the label is loaded. The
        declared ``bounds`` are checked against the table's column minima and maxima."""
        try:
            validate_name(name)
        except ProtocolError as exc:
            raise ConfigurationError(str(exc)) from None
        if table.id_column is not None:
            raise ConfigurationError("row alignment by ID (--id) reorders rows: load the table in memory "
                                     "(LocalData.build with ids=) instead of streaming it from disk")
        names = list(table.feature_names)
        X = table.features
        cb = None
        if names and bounds is not None:
            cb = resolve_bounds(bounds, np.zeros((1, len(names))), names, what=f"features of party {name}")
            for j, col in enumerate(names):
                lo, hi = table.column_min[col], table.column_max[col]
                if lo < cb.lower[j] or hi > cb.upper[j]:
                    raise DataValidationError(f"party {name}: column {col!r} has values in [{lo:g}, {hi:g}], "
                                              f"outside its declared bounds [{cb.lower[j]:g}, {cb.upper[j]:g}]")
        y = None
        if table.label is not None:
            y = np.asarray(table.label)[:, 0]
        lb = None
        if label_bounds is not None:
            lo, hi = (float(v) for v in label_bounds)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise DataValidationError(f"party {name}: label bounds must be finite with lo < hi")
            lb = (lo, hi)
            if y is not None:
                to_unit_interval(y[:, None], ColumnBounds(np.array([lo]), np.array([hi])), feature_names=["label"])
        if not names and y is None:
            raise DataValidationError(f"party {name} has neither features nor the label")
        return cls(name, X, names, y, cb, lb, None)

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    def take(self, rows: np.ndarray) -> LocalData:
        """The same party restricted to ``rows`` in that order (after the row alignment; bounds unchanged)."""
        fm_view = None if self.fm_view is None else (self.fm_view[0][rows], self.fm_view[1])
        ids = None if self.ids is None else (self.ids.take(rows) if hasattr(self.ids, "take")
                                             else [self.ids[int(i)] for i in rows])
        return LocalData(self.name, self.X[rows], self.feature_names, None if self.y is None else self.y[rows],
                         self.bounds, self.label_bounds, ids, fm_view, self.label_name, self.preprocessing)


#: the warning of a party whose operator opted in to bounds taken from its private data
DATA_DERIVED_BOUNDS_WARNING = (
    "party {name} takes the bounds of {what} from its private data ({flag}): its min/max shape the release, so "
    "the model is NOT formally differentially private (its report says formal DP: no)")


def missing_bounds(data: LocalData, *, model: str | None = None) -> list[str]:
    """What of this party lacks declared public bounds: its feature columns, its label (a linear model's; ``model``
    None: not known yet -- before the PLAN -- so any label). A built-in data set's documented bounds count."""
    missing = []
    declared = data.fm_view[1] if data.fm_view is not None else data.bounds
    if data.X.shape[1] and (declared is None or declared.from_data):
        names = data.feature_names
        missing.append(f"its columns {', '.join(names[:5])}" + (f" (+{len(names) - 5} more)" if len(names) > 5 else ""))
    if data.y is not None and data.label_bounds is None and model in (None, "linear"):
        missing.append(f"its label {data.label_name}" if data.label_name else "its label")
    return missing


def check_declared_bounds(data: LocalData, policy: PartyPolicy, *, allow: bool, model: str | None = None,
                          how: str = "--bounds FILE or an inline [bounds] table in --config: column = [lo, hi] for "
                                     "every column and the label (a logistic model's 0/1 label: [0, 1])",
                          flag: str = "--allow-data-derived-bounds") -> None:
    """Private by default (issue 21): a party whose policy allows a mechanism whose guarantee rests on public bounds
    (:data:`vfl.protocols.policy.BOUNDED_MECHANISMS`) refuses to start without declared bounds for every column it
    contributes and for its label, unless its operator opted in (``allow``: a loud warning; the privacy report then
    says formal DP: no, through the existing ``bounds_from_data`` path). A party that allows only mechanisms that
    use no bounds (``none``, ``bcd``, ``dp-bcd``: none of them formally DP anyway) needs none.

    Before the PLAN the party cannot know the model, so the label's bounds are required whatever it is (``model``,
    when a caller knows it: a logistic label is checked to be 0/1 and needs none)."""
    if not policy.allow_mechanisms & BOUNDED_MECHANISMS:
        return
    missing = missing_bounds(data, model=model)
    if not missing:
        return
    what = " and ".join(missing)
    if allow:
        warnings.warn(DATA_DERIVED_BOUNDS_WARNING.format(name=data.name, what=what, flag=flag), DataBoundsWarning,
                      stacklevel=3)
        return
    raise ConfigurationError(f"party {data.name} has no public bounds for {what}: declare them ({how}; "
                             f"docs/data_preparation.md), or pass {flag} (the model is then NOT formally DP)")



def load_party_data(cfg: Any, config: str | None) -> Any:
    """The party's table with its public declarations (:class:`vfl.net.party.LocalData`), read as ``vfl party``
    reads it (``cfg``: the command's settings with data, dataset, features, label, id, bounds; ``config``: the
    ``--config`` file), checked before connecting; shared by ``vfl party`` and ``vfl check``."""
    from dataclasses import replace

    from vfl.data.config import load_dataset_table, open_party_table, party_declarations, read_party_csv

    feature_spec: list[str] | str = cfg.features if len(cfg.features) != 1 else cfg.features[0]
    # public declarations: a bounds file (--bounds / bounds = ...) or the config's inline [bounds], [categories],
    # [impute] tables (both: refused); declared preprocessing maps raw columns before the bounds check
    decl = party_declarations(cfg, config)
    pp = decl.preprocessing if decl is not None else None
    if cfg.data and decl is not None and not cfg.id:
        # declared bounds: the columns stay on disk and are read in chunks (issue 8); with --id the PSI alignment
        # reorders the rows, so the table is loaded in memory
        file_table = open_party_table(cfg.data, feature_spec, label=cfg.label, id_column=cfg.id, preprocessing=pp)
        declared, label_bounds, record = decl.resolve(file_table.inputs, cfg.label)
        local = LocalData.from_table(cfg.name, file_table, bounds=declared,  # type: ignore[arg-type]
                                     label_bounds=label_bounds)
    else:
        if cfg.dataset:
            table = load_dataset_table(cfg.dataset, feature_spec, label=cfg.label)
        else:
            table = read_party_csv(cfg.data, feature_spec, label=cfg.label, id_column=cfg.id,  # type: ignore
                                   preprocessing=pp)
        declared, label_bounds, record = (decl.resolve(table.inputs or table.feature_names, cfg.label) if decl
                                          else (table.bounds, (table.bounds or {}).get(cfg.label or ""), None))
        if cfg.dataset and record:
            raise ConfigurationError("declared preprocessing ([categories]/[impute]) applies to --data files, not "
                                     f"to the built-in data set {cfg.dataset}")
        fm_view: dict[str, Any] = {} if decl else {"fm_columns": table.fm_columns, "fm_bounds": table.fm_bounds}
        local = LocalData.build(cfg.name, table.X, table.y, feature_names=table.feature_names,  # type: ignore
                                bounds=declared, label_bounds=label_bounds, ids=table.ids, **fm_view)
    local = replace(local, label_name=cfg.label, preprocessing=record)
    return local
