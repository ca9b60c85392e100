"""Parameter checks declared as data: :class:`Interval`, :class:`Options` and :func:`check_params` (issue 30).

A settings class states its constraints once, as a class attribute ``_parameter_constraints`` mapping a field to a
list of accepted constraints (``None`` accepts ``None``), in the style of scikit-learn's parameter constraints
(``Interval(Integral, 1, None, closed="left")``); :func:`check_params` checks the fields and raises one readable
:class:`~vfl.exceptions.ConfigurationError` line naming the option: ``--rounds must be an integer >= 1, got 0``.
Booleans are never integers or numbers here, and real numbers must be finite.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from vfl.exceptions import ConfigurationError, ProtocolError

__all__ = ["Interval", "Options", "Constraint", "check_param", "check_params", "describe", "is_name", "validate_name"]

#: party, site and column-owner names: 1-64 letters, digits, '_', '.', '-', starting with a letter or digit
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def is_name(v: Any) -> bool:
    """Whether ``v`` is a valid name (:data:`NAME_RE`)."""
    return isinstance(v, str) and bool(NAME_RE.fullmatch(v))


def validate_name(name: str, what: str = "party name") -> str:
    """Party names are short identifiers: letters, digits, '_', '.', '-' (at most 64 characters)."""
    if not is_name(name):
        raise ProtocolError(f"invalid {what} {name!r}: use 1-64 letters, digits, '_', '.', '-'")
    return name


@dataclass(frozen=True)
class Interval:
    """Numbers of type ``kind`` (``int`` for JSON-bound settings, :class:`numbers.Integral` to accept numpy integers,
    :class:`numbers.Real` for finite reals) between ``left`` and ``right`` (``None``: unbounded); ``closed`` is
    ``"both"``, ``"left"``, ``"right"`` or ``"neither"``. ``unit`` and ``note`` only extend the message."""

    kind: type
    left: float | None
    right: float | None
    closed: str = "both"
    unit: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.closed not in ("both", "left", "right", "neither"):
            raise ValueError(f"closed must be both, left, right or neither, got {self.closed!r}")

    def is_satisfied_by(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, self.kind):
            return False
        if not math.isfinite(value):
            return False
        lo_ok = self.left is None or (value >= self.left if self.closed in ("both", "left") else value > self.left)
        hi_ok = self.right is None or (value <= self.right if self.closed in ("both", "right") else value < self.right)
        return lo_ok and hi_ok

    def __str__(self) -> str:
        integral = issubclass(self.kind, Integral)
        noun = "an integer" if integral else "a number"
        lo_closed, hi_closed = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.left is not None and self.right is not None:
            text = f"{noun} in {'[' if lo_closed else '('}{self.left}, {self.right}{']' if hi_closed else ')'}"
        elif self.left is not None:
            if not integral and not lo_closed and self.left == 0:
                text = "a positive number"
            else:
                text = f"{noun if integral or not lo_closed else 'a finite number'} {'>=' if lo_closed else '>'} " \
                       f"{self.left}"
        elif self.right is not None:
            text = f"{noun} {'<=' if hi_closed else '<'} {self.right}"
        else:
            text = noun if integral else "a finite number"
        return text + (f" of {self.unit}" if self.unit else "") + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (strings, usually)."""

    values: tuple[Any, ...]

    def is_satisfied_by(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    def __str__(self) -> str:
        return "one of " + ", ".join(str(v) for v in self.values)


Constraint = Interval | Options | None


def describe(constraints: Iterable[Constraint]) -> str:
    """What the constraints accept, for a message (``None`` is left unsaid: an unset option is never reported)."""
    return " or ".join(str(c) for c in constraints if c is not None)


def check_param(option: str, value: Any, constraints: Iterable[Constraint]) -> Any:
    """``value`` if one of ``constraints`` accepts it, else :class:`ConfigurationError` naming ``option``."""
    constraints = list(constraints)
    for c in constraints:
        if (value is None) if c is None else c.is_satisfied_by(value):
            return value
    got = repr(value) if isinstance(value, str) else value
    raise ConfigurationError(f"{option} must be {describe(constraints)}, got {got}")


def check_params(obj: Any, constraints: Mapping[str, Iterable[Constraint]], *,
                 names: Mapping[str, str] | None = None, only: Iterable[str] | None = None) -> None:
    """Check the attributes of ``obj`` named in ``constraints`` (or just those in ``only``), in declaration order;
    ``names`` maps a field to the option users type (``n_parties`` -> ``--parties``)."""
    wanted = None if only is None else set(only)
    for field, accepted in constraints.items():
        if wanted is None or field in wanted:
            check_param((names or {}).get(field, field), getattr(obj, field), accepted)

