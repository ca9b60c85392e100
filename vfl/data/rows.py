"""Row sources: a table read (and re-read) in chunks of rows, so no process needs all n rows at once.

A *row source* has ``n_rows``, ``n_cols`` and ``iter_chunks(rows)``, an iterator of 2-D float arrays of at most
``rows`` rows each, covering the table in order; every call starts a fresh pass. :class:`ArrayRows` wraps an
in-memory array; :mod:`vfl.data.tables` reads CSV and Parquet files; :class:`MappedRows` applies a per-chunk,
row-wise transform (e.g. the FM preparation). :class:`RowCursor` re-cuts any chunk stream to requested sizes
(a responder takes exactly the rows of each incoming ciphertext chunk).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vfl.exceptions import DataValidationError

__all__ = ["RowSource", "ArrayRows", "MappedRows", "RowCursor", "as_row_source", "DEFAULT_CHUNK_ROWS"]

DEFAULT_CHUNK_ROWS = 65_536


@runtime_checkable
class RowSource(Protocol):
    """A table of ``n_rows x n_cols`` floats, read in chunks (see module docstring)."""

    n_rows: int
    n_cols: int

    def iter_chunks(self, rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[np.ndarray]:
        ...  # pragma: no cover - protocol


class ArrayRows:
    """A row source over an in-memory 2-D array (chunks are views, nothing is copied)."""

    def __init__(self, X: Any) -> None:
        X = np.asarray(X)
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        if X.ndim != 2:
            raise DataValidationError(f"a row source needs a 2-D array, got shape {X.shape}")
        self.X = X
        self.n_rows, self.n_cols = (int(s) for s in X.shape)

    def iter_chunks(self, rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[np.ndarray]:
        rows = max(1, int(rows))
        for start in range(0, self.n_rows, rows):
            yield self.X[start:start + rows]


class MappedRows:
    """``transform(chunk)`` applied to every chunk of ``source`` (the transform must act row by row)."""

    def __init__(self, source: RowSource, transform: Callable[[np.ndarray], np.ndarray], n_cols: int) -> None:
        self.source = source
        self.transform = transform
        self.n_rows = source.n_rows
        self.n_cols = int(n_cols)

    def iter_chunks(self, rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[np.ndarray]:
        for chunk in self.source.iter_chunks(rows):
            out = np.asarray(self.transform(chunk))
            if out.ndim == 1:
                out = out.reshape(-1, 1)
            if out.shape != (chunk.shape[0], self.n_cols):
                raise DataValidationError(f"row transform returned shape {out.shape} for a chunk of "
                                          f"{chunk.shape[0]} rows, expected ({chunk.shape[0]}, {self.n_cols})")
            yield out


def as_row_source(X: Any) -> RowSource:
    """``X`` itself if it is a row source, else :class:`ArrayRows` over ``np.asarray(X)``."""
    if isinstance(X, RowSource) and not isinstance(X, np.ndarray):
        return X
    return ArrayRows(X)


class RowCursor:
    """Takes exactly ``m`` rows at a time from a chunk iterator, whatever its chunk sizes."""

    def __init__(self, chunks: Iterator[np.ndarray], n_cols: int) -> None:
        self._chunks = chunks
        self._n_cols = n_cols
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self.taken = 0

    def take(self, m: int) -> np.ndarray:
        while self._buffered < m:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                raise DataValidationError(f"the table ended after {self.taken + self._buffered} rows, "
                                          f"{m - self._buffered} more were needed") from None
            if chunk.shape[0]:
                self._buffer.append(chunk)
                self._buffered += chunk.shape[0]
        joined = self._buffer[0] if len(self._buffer) == 1 else np.concatenate(self._buffer, axis=0)
        head, rest = joined[:m], joined[m:]
        self._buffer = [rest] if rest.shape[0] else []
        self._buffered = int(rest.shape[0])
        self.taken += m
        return head.reshape(m, self._n_cols)
