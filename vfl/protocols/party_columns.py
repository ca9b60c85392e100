"""A party's columns as the FM release uses them: mapped into the public domain and onto the public 2^-p grid.

Socket-free, lazy: the prepared columns are row sources (:mod:`vfl.data.rows`) mapped chunk by chunk from the
party's table, never materialised. Each feature column goes through its declared public bounds into the domain of
the run (``l2``: ``||x|| <= 1`` with the public constant column ``1/sqrt(d)`` when this party carries the intercept;
``linf``: every entry in ``[-1, 1]``; :func:`vfl.fm.domain.prepare_party_block`), the label through its public
bounds (:func:`vfl.fm.domain.prepare_labels`), and every value onto the fixed-point grid of the secure products
(:func:`vfl.privacy.fixed_point.prepare_fixed_point`), so every released block is an exact integer statistic plus
exact integer noise (no floating-point porosity: Mironov 2012). Without an intercept anywhere in the plan the maps
are pure scalings ``x / m`` with the symmetric bounds ``(-m, m)`` (an affine map would re-introduce a hidden
intercept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.data.rows import ArrayRows, MappedRows, RowSource, as_row_source
from vfl.fm.dissection import DissectionPlan
from vfl.fm.domain import prepare_labels, prepare_party_block, resolve_bounds
from vfl.privacy.fixed_point import prepare_fixed_point
from vfl.protocols.contracts import ReadyBody

__all__ = ["PreparedColumns"]


@dataclass(frozen=True)
class PreparedColumns:
    """``X``: the party's prepared feature columns (plus the constant column if it carries the intercept); ``y``:
    the prepared label (label owner only); ``label_bounds``: the label's public bounds; ``ready``: the READY body
    that states the public bounds used (and whether any came from the data)."""

    X: RowSource
    y: RowSource | None
    label_bounds: tuple[float, float] | None
    ready: ReadyBody

    @classmethod
    def of(cls, data: Any, plan: DissectionPlan, params: Any, index: int, *, intercept: bool, no_intercept: bool,
           seeded: bool) -> PreparedColumns:
        """``data``: the party's :class:`vfl.net.party.LocalData`; ``params``: the run's FM parameters (``domain``,
        ``precision_bits``); ``index``: this party's place in ``plan``."""
        d, total = data, plan.n_features
        X_fm, declared = d.fm_view if d.fm_view is not None else (d.X, d.bounds)
        ready: dict[str, Any] = {"seeded": seeded}
        bounds = None
        if X_fm.shape[1]:
            bounds = declared or resolve_bounds(None, X_fm, d.feature_names, what=f"features of party {d.name}")
            # without intercept the map is x / m with the symmetric bounds (-m, m), m = max(|lo|, |hi|): those are
            # the public bounds the model file maps back with (intercept exactly 0)
            public = bounds.symmetric() if no_intercept else bounds
            ready.update(bounds=public.to_list(), bounds_from_data=bool(bounds.from_data))
        # public constant column, scaled like every other column so ||x|| <= 1 still holds (spec pitfall 4)
        constant = (1.0 / np.sqrt(total) if params.domain == "l2" else 1.0) if intercept else None

        def prepare(chunk: np.ndarray) -> np.ndarray:
            U = np.zeros((chunk.shape[0], 0))
            if bounds is not None:
                U, _ = prepare_party_block(chunk, bounds=bounds, domain=params.domain,  # type: ignore[arg-type]
                                           n_features_total=total, feature_names=d.feature_names,
                                           symmetric=no_intercept)
            if constant is not None:
                U = np.hstack([U, np.full((chunk.shape[0], 1), constant)])
            return prepare_fixed_point(U, precision_bits=params.precision_bits, domain=params.domain,
                                       n_features_total=total)

        X = MappedRows(as_row_source(X_fm), prepare, X_fm.shape[1] + int(intercept))
        y, label_bounds = cls._label(d, plan, params, index, no_intercept, ready)
        return cls(X, y, label_bounds, ReadyBody(**ready))

    @staticmethod
    def _label(d: Any, plan: DissectionPlan, params: Any, index: int, no_intercept: bool, ready: dict[str, Any]
               ) -> tuple[RowSource | None, tuple[float, float] | None]:
        """The label owner's prepared label and its public bounds (added to ``ready``); (None, None) otherwise."""
        if index != plan.label_owner:
            return None, None
        assert d.y is not None
        _, yb = prepare_labels(d.y, plan.model, y_bounds=d.label_bounds,  # checks; bounds (from data: warns)
                               symmetric=no_intercept)
        y_bounds = None if yb is None else (float(yb.lower[0]), float(yb.upper[0]))

        def prepare_y(chunk: np.ndarray) -> np.ndarray:
            yp, _ = prepare_labels(chunk[:, 0], plan.model, y_bounds=y_bounds, symmetric=no_intercept)
            return prepare_fixed_point(yp, precision_bits=params.precision_bits, domain="linf",
                                       n_features_total=plan.n_features).reshape(-1, 1)

        y = MappedRows(ArrayRows(d.y.reshape(-1, 1)), prepare_y, 1)
        if yb is None or y_bounds is None:
            return y, None
        ready.update(label_bounds=list(y_bounds), label_bounds_from_data=bool(yb.from_data))
        return y, y_bounds
