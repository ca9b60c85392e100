"""Bounded-memory pieces of the PSI row alignment (issue 34): compact ID columns, wire chunks, bucketed intersection.

* :func:`id_array` (of an :class:`vfl.data.id_column.IdColumn` or any sequence): a party's row IDs as one numpy
  fixed-width UTF-8 array (``S{w}``: ``w`` bytes a row, no Python ``str`` per row), normalised as
  :func:`vfl.secure.psi.normalise_id` says (NFC, surrounding whitespace stripped, case-sensitive), chunk by chunk;
  missing, empty and duplicate IDs are refused with the same one-line errors as :func:`vfl.secure.psi.normalise_ids`.
* :data:`CHUNK_POINTS`: how many points one PSI_POINTS message carries (``VFL_PSI_CHUNK_POINTS`` overrides it, for
  tests and benchmarks), so a list of 10^7 points travels as ~150 messages of ~2 MB, never as one message of the
  256 MB limit.
* :class:`BucketStore`: the coordinator's fully blinded points, spilled to a private temporary directory in
  :data:`N_BUCKETS` buckets by the first byte of the point's 32-byte coordinate (pseudorandom under DDH, already
  visible to the coordinator), then intersected one bucket at a time, so its peak memory is one bucket, not K lists.
  The common points are ordered by (bucket, bytes): pseudorandom, independent of every ID's value.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vfl.data.id_column import ROWS as _ROWS
from vfl.data.id_column import IdColumn, as_array
from vfl.exceptions import DataValidationError, ProtocolError
from vfl.secure.psi import POINT_BYTES, normalise_id

__all__ = ["id_array", "CHUNK_POINTS", "chunk_points", "N_BUCKETS", "BucketStore", "bucket_cap", "points_array"]

#: points per PSI_POINTS message by default (2.1 MB of 32-byte points; the message limit is 256 MB)
CHUNK_POINTS = 65_536
#: buckets of the coordinator's intersection (2 x 10^7 points: ~80 000 a bucket, ~3 MB)
N_BUCKETS = 256


def chunk_points() -> int:
    """Points per wire chunk: ``VFL_PSI_CHUNK_POINTS`` if set (a positive integer), else :data:`CHUNK_POINTS`."""
    raw = os.environ.get("VFL_PSI_CHUNK_POINTS", "")
    if not raw:
        return CHUNK_POINTS
    if not raw.isdigit() or int(raw) < 1:
        raise DataValidationError(f"VFL_PSI_CHUNK_POINTS must be a positive integer, not {raw!r}")
    return int(raw)


def id_array(values: Sequence[Any], what: str = "row-ID column") -> np.ndarray:
    """The normalised IDs as one ``S{w}`` UTF-8 array in row order (:func:`vfl.secure.psi.normalise_id`); refuses a
    missing, empty or duplicate ID naming its data row(s) but never the ID. An :class:`IdColumn` whose IDs are
    already normal is returned without a copy."""
    raw = values.data if isinstance(values, IdColumn) else None
    parts: list[np.ndarray] = []
    changed = raw is None
    for start in range(0, len(values), _ROWS):
        cells = values[start:start + _ROWS] if raw is None else [b.decode() for b in raw[start:start + _ROWS]]
        out: list[bytes] = []
        for row, value in enumerate(cells, start=start + 1):
            try:
                text = normalise_id(value)
                if "\x00" in text:   # a fixed-width array cannot hold it (numpy strips trailing NULs)
                    raise DataValidationError("row ID with a NUL character")
            except DataValidationError as exc:
                raise DataValidationError(f"{what}: {exc} in data row {row}") from None
            out.append(text.encode())
        block = as_array(out)
        if raw is not None and not changed and np.array_equal(block, raw[start:start + _ROWS]):
            continue   # already normal: keep the caller's array
        if not changed:
            assert raw is not None
            parts = [raw[:start]]
            changed = True
        parts.append(block)
    if not len(values):
        raise DataValidationError(f"{what}: no rows")
    ids = raw if not changed else np.concatenate(parts)
    assert ids is not None
    _refuse_duplicates(ids, what)
    return ids


def _refuse_duplicates(ids: np.ndarray, what: str) -> None:
    order = np.argsort(ids, kind="stable")
    ranked = ids[order]
    same = np.flatnonzero(ranked[1:] == ranked[:-1])
    del ranked
    if same.size:
        later = order[same + 1]             # stable sort: within a run of equal IDs, rows ascend
        k = int(np.argmin(later))
        run_start = int(same[k])
        while run_start > 0 and ids[order[run_start - 1]] == ids[order[run_start]]:
            run_start -= 1
        raise DataValidationError(f"{what}: duplicate row ID in data rows {int(order[run_start]) + 1} and "
                                  f"{int(later[k]) + 1} (after normalisation: Unicode NFC, surrounding whitespace "
                                  "stripped)")


def points_array(blob: bytes) -> np.ndarray:
    """Concatenated points -> ``S{POINT_BYTES}`` array (a view of the bytes; the length is checked by the caller)."""
    return np.frombuffer(blob, dtype=f"S{POINT_BYTES}")


def _bucket_of(points: np.ndarray) -> np.ndarray:
    """First byte of each point's 32-byte coordinate (byte ``POINT_BYTES - 32``: after a compressed P-256 point's
    sign prefix, the first byte of an X25519/ristretto255 encoding); pseudorandom for a blinded point."""
    raw = points.view(np.uint8).reshape(-1, POINT_BYTES)
    return raw[:, POINT_BYTES - 32].astype(np.intp)


def bucket_cap(n: int) -> int:
    """The most points of a list of ``n`` pseudorandom points one bucket may hold: the mean ``mu = n / N_BUCKETS``
    plus the Chernoff margin ``t = c/3 + sqrt(c^2/9 + 2 c mu)``, ``c = 40 ln 2``, for which
    ``P(Bin(n, 1/N_BUCKETS) >= mu + t) <= exp(-t^2 / (2 (mu + t/3))) <= 2^-40`` (Chernoff's bound in Bernstein's
    form), so an honest list is refused with probability below ``K * N_BUCKETS * 2^-40``. A list piled into fewer
    buckets was not blinded by a key (review of issue 34: a last-hop party could make the coordinator hold a whole
    list in one bucket)."""
    mu, c = n / N_BUCKETS, 40 * math.log(2)
    return math.ceil(mu + c / 3 + math.sqrt(c * c / 9 + 2 * c * mu))


class BucketStore:
    """The K fully blinded lists on disk, bucketed; :meth:`intersect` walks the buckets in order.

    Records are (point, position) pairs in one file per (party, bucket) under a fresh private temporary directory
    (mode 0700, removed by :meth:`close`); memory is one chunk while adding and one bucket while intersecting.
    """

    def __init__(self, n_parties: int, *, folder: str | None = None) -> None:
        self.n_parties = n_parties
        self.dir = Path(tempfile.mkdtemp(prefix="vfl-psi-", dir=folder))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.dir), True)   # also if the run stops early
        self._dtype = np.dtype([("p", f"S{POINT_BYTES}"), ("i", "<i8")])
        self._counts = np.zeros((n_parties, N_BUCKETS), dtype=np.int64)   # points per (party, bucket) so far

    def _file(self, party: int, bucket: int) -> Path:
        return self.dir / f"{party}_{bucket}.bin"

    def add(self, party: int, offset: int, points: np.ndarray, *, cap: int | None = None) -> None:
        """Append ``points`` (positions ``offset, offset + 1, ...`` of ``party``'s list) to their buckets;
        ProtocolError, nothing written, if a bucket of ``party`` would hold more than ``cap`` points
        (:func:`bucket_cap`)."""
        buckets = _bucket_of(points)
        counts = self._counts[party] + np.bincount(buckets, minlength=N_BUCKETS)
        if cap is not None and int(counts.max()) > cap:
            raise ProtocolError(f"{int(counts.max())} of its points fall in one of the {N_BUCKETS} buckets, more "
                                f"than {cap} (for pseudorandom points: probability below 2^-40)")
        self._counts[party] = counts
        rec = np.empty(points.size, dtype=self._dtype)
        rec["p"] = points
        rec["i"] = np.arange(offset, offset + points.size, dtype=np.int64)
        order = np.argsort(buckets, kind="stable")
        rec, buckets = rec[order], buckets[order]
        edges = np.searchsorted(buckets, np.arange(N_BUCKETS + 1))
        for b in np.flatnonzero(np.diff(edges)):
            with open(self._file(party, int(b)), "ab") as fh:
                fh.write(rec[edges[b]:edges[b + 1]].tobytes())

    def _load(self, party: int, bucket: int) -> np.ndarray:
        path = self._file(party, bucket)
        return np.fromfile(path, dtype=self._dtype) if path.exists() else np.zeros(0, dtype=self._dtype)

    def intersect(self, venn: dict[tuple[int, ...], int]) -> list[np.ndarray]:
        """Each party's positions of the points common to all K lists, ordered by (bucket, point bytes); adds to
        ``venn`` how many points exactly each subset of parties holds. ProtocolError if a list repeats a point."""
        K = self.n_parties
        found: list[list[np.ndarray]] = [[] for _ in range(K)]
        for b in range(N_BUCKETS):
            recs = []
            for j in range(K):
                r = self._load(j, b)
                r = r[np.argsort(r["p"], kind="stable")]
                if r.size > 1 and np.any(r["p"][1:] == r["p"][:-1]):
                    raise ProtocolError(f"psi_points: party {j}'s fully blinded list repeats a point (duplicate IDs)")
                recs.append(r)
            common = recs[0]["p"]
            for r in recs[1:]:
                common = np.intersect1d(common, r["p"], assume_unique=True)
            for j, r in enumerate(recs):
                found[j].append(r["i"][np.searchsorted(r["p"], common)])
            if K <= 62:
                _add_venn(venn, [r["p"] for r in recs])
        return [np.concatenate(f).astype(np.int64) for f in found]

    def close(self) -> None:
        self._cleanup()


def _add_venn(venn: dict[tuple[int, ...], int], lists: list[np.ndarray]) -> None:
    """How many points exactly each subset of parties holds, within one bucket (docs and tests; never sent)."""
    every = np.concatenate(lists)
    if not every.size:
        return
    uniq, inverse = np.unique(every, return_inverse=True)
    mask = np.zeros(uniq.size, dtype=np.int64)
    start = 0
    for j, pts in enumerate(lists):
        np.bitwise_or.at(mask, inverse[start:start + pts.size], 1 << j)
        start += pts.size
    for m, count in zip(*np.unique(mask, return_counts=True), strict=True):
        key = tuple(j for j in range(len(lists)) if int(m) >> j & 1)
        venn[key] = venn.get(key, 0) + int(count)
