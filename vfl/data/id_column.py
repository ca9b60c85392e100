"""A row-ID column held compactly (issue 34): one numpy fixed-width UTF-8 array instead of a Python ``str`` a row.

10^7 IDs of 17 characters take 170 MB so, against ~740 MB as a list of ``str``. :class:`IdColumn` is a read-only
sequence of ``str`` to every reader (scoring, prediction); the PSI row alignment takes its array directly
(:func:`vfl.protocols.psi_stream.id_array`).

The array is as wide as the longest ID, for every row: one ID of 4096 characters would make 10^7 rows take up to
160 GB. An ID is therefore at most :data:`MAX_ID_CHARS` characters (an e-mail address, RFC 5321, fits), so the
array takes at most N x 4 x MAX_ID_CHARS bytes; a longer one is refused as the file is read, naming its data row
(:meth:`IdColumn.from_cells`), never stored whole or as a digest, so the PSI compares the IDs themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from vfl.exceptions import DataValidationError

__all__ = ["IdColumn", "as_array", "ROWS", "MAX_ID_CHARS", "check_length"]

#: rows converted per step (bounds the transient Python strings)
ROWS = 65_536
#: the longest row ID (characters, after normalisation: Unicode NFC, surrounding whitespace stripped); also the
#: bound of a scoring query's IDs (vfl.secure.psi.normalise_id, vfl.protocols.scoring.MAX_ID_BYTES)
MAX_ID_CHARS = 256


def check_length(cell: str, row: int) -> None:
    """Refuse a cell of the row-ID column longer than :data:`MAX_ID_CHARS` characters as written (blanks around it
    count: the array holds the cell as read), naming its 1-based data ``row`` but not the ID."""
    if len(cell) > MAX_ID_CHARS:
        raise DataValidationError(f"row-ID column: row ID longer than {MAX_ID_CHARS} characters in data row {row} "
                                  "(docs/psi.md)")


def as_array(values: list[bytes]) -> np.ndarray:
    return np.array(values, dtype=f"S{max(1, max(map(len, values), default=1))}")


class IdColumn(Sequence[str]):
    """A row-ID column read from a file, held as one ``S{w}`` array of UTF-8 bytes (a sequence of ``str`` to every
    reader; :func:`id_array` takes the array itself). Cells with a NUL character cannot be held so (numpy strips
    trailing NULs): :meth:`from_cells` then keeps a plain list."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    @classmethod
    def from_cells(cls, cells: Iterable[str]) -> Sequence[str]:
        parts: list[np.ndarray] = []
        block: list[bytes] = []
        it = iter(cells)
        for row, cell in enumerate(it, start=1):
            check_length(cell, row)   # before it widens the array of every row
            if "\x00" in cell:
                return [c.decode() for p in parts for c in p] + [b.decode() for b in block] + [cell, *it]
            block.append(cell.encode())
            if len(block) == ROWS:
                parts.append(as_array(block))
                block = []
        if block:
            parts.append(as_array(block))
        return cls(np.concatenate(parts) if parts else np.zeros(0, dtype="S1"))

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [b.decode() for b in self.data[i]]
        return bytes(self.data[i]).decode()

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), ROWS):
            yield from (b.decode() for b in self.data[start:start + ROWS])

    def __eq__(self, other: object) -> bool:
        """Equal to an IdColumn or a list/tuple holding the same strings in the same order."""
        if isinstance(other, IdColumn):
            return len(self) == len(other) and bool(np.array_equal(self.data, other.data))
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None   # type: ignore[assignment]  (mutable-like: compared by value)

    def __repr__(self) -> str:
        return f"IdColumn({len(self)} IDs)"

    def take(self, rows: np.ndarray) -> IdColumn:
        return IdColumn(self.data[np.asarray(rows, dtype=np.int64)])
