"""Progress reporting, decided in one place: a tqdm bar on a terminal, plain lines in a log file.

Every progress display of vfl (a party's encryption and secure products, the benchmarks, the examples) is made
by :func:`progress` or :func:`track`. Where the output goes decides what is written (issue 21):

* a terminal (``stream.isatty()``) or a Jupyter kernel: a tqdm bar (redrawn in place with ``\\r`` and ANSI codes);
* anything else (a file, a pipe, a service's journal): plain, complete lines without control codes, for example
  ``[progress] encrypting rows: 40% (6554/16384 items), 12 s elapsed, about 18 s left`` -- one whenever another
  10 % is done, at least every :data:`PLAIN_INTERVAL_SECONDS` while work continues, and one when it ends;
* ``enabled=False``: nothing.

tqdm is imported only when a bar is drawn, so importing this module costs nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TextIO, TypeVar

__all__ = ["Progress", "progress", "track", "is_interactive", "PLAIN_INTERVAL_SECONDS", "PLAIN_STEP"]

#: longest gap between two plain progress lines while the count moves on (seconds)
PLAIN_INTERVAL_SECONDS = 30.0
#: a plain line is written whenever another PLAIN_STEP of the total is done
PLAIN_STEP = 0.1

T = TypeVar("T")


class Progress(Protocol):
    """What every progress display offers (tqdm's names): ``update(n)``, ``close()``, a context manager."""

    def update(self, n: int = 1) -> Any: ...

    def close(self) -> None: ...

    def __enter__(self) -> Progress: ...

    def __exit__(self, *exc: object) -> Any: ...


def is_interactive(stream: TextIO) -> bool:
    """True when ``stream`` is a terminal, or when running inside a Jupyter kernel (tqdm draws a widget there)."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):   # closed or unusual streams
        return False
    return "ipykernel" in sys.modules


class _Silent:
    """``enabled=False``: counts nothing, writes nothing."""

    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class PlainProgress:
    """Plain progress lines for logs: no ``\\r``, no escape codes, one complete line per report."""

    def __init__(self, total: int | None, desc: str, *, unit: str = "items", stream: TextIO | None = None,
                 interval: float = PLAIN_INTERVAL_SECONDS, step: float = PLAIN_STEP,
                 clock: Any = time.monotonic) -> None:
        self.total = total if total and total > 0 else None
        self.desc, self.unit, self.interval, self.step = desc, unit, interval, step
        self.stream = stream
        self.n = 0
        self._clock = clock
        self._start = self._last = clock()
        self._next_fraction = step
        self._closed = False
        self._lock = threading.Lock()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more; write a line if another ``step`` of the total is done or ``interval`` has passed."""
        with self._lock:
            self.n += n
            now = self._clock()
            fraction = self.n / self.total if self.total else None
            crossed = fraction is not None and fraction + 1e-12 >= self._next_fraction and fraction < 1.0
            if crossed or now - self._last >= self.interval:
                if fraction is not None:
                    while self._next_fraction <= fraction + 1e-12:
                        self._next_fraction += self.step
                self._write(self._line(now))
                self._last = now

    def close(self) -> None:
        """The last line: ``done`` when the total was reached, ``stopped at`` when work ended before it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            now = self._clock()
            elapsed = _seconds(now - self._start)
            if self.total is None or self.n >= self.total:
                self._write(f"[progress] {self.desc}: done, {self.n} {self.unit} in {elapsed}")
            elif self.n > 0:
                self._write(f"[progress] {self.desc}: stopped at {self._count()} after {elapsed}")

    def _count(self) -> str:
        if self.total is None:
            return f"{self.n} {self.unit}"
        return f"{100 * self.n / self.total:.0f}% ({self.n}/{self.total} {self.unit})"

    def _line(self, now: float) -> str:
        elapsed = now - self._start
        line = f"[progress] {self.desc}: {self._count()}, {_seconds(elapsed)} elapsed"
        if self.total and 0 < self.n < self.total:
            line += f", about {_seconds(elapsed * (self.total - self.n) / self.n)} left"
        return line

    def _write(self, line: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):   # a closed log must not stop the computation
            pass

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def progress(total: int | None, desc: str, *, enabled: bool = True, unit: str = "items", leave: bool = False,
             stream: TextIO | None = None, interval: float = PLAIN_INTERVAL_SECONDS) -> Progress:
    """A progress display for ``total`` units of work (``None``: unknown), written to ``stream`` (stderr).

    A tqdm bar when :func:`is_interactive`, :class:`PlainProgress` lines otherwise, nothing when not ``enabled``.
    """
    if not enabled:
        return _Silent()
    out = stream if stream is not None else sys.stderr
    if is_interactive(out):
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, leave=leave, file=out)
    return PlainProgress(total, desc, unit=unit, stream=out, interval=interval)


def track(iterable: Iterable[T], desc: str, *, total: int | None = None, enabled: bool = True,
          unit: str = "items", leave: bool = False, stream: TextIO | None = None) -> Iterator[T]:
    """Iterate over ``iterable`` with a :func:`progress` display (``total`` defaults to ``len(iterable)``)."""
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    with progress(total, desc, enabled=enabled, unit=unit, leave=leave, stream=stream) as bar:
        for item in iterable:
            yield item
            bar.update(1)
