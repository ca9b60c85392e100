"""Lazy public names of a package (PEP 562): ``import vfl`` stays cheap and ``vfl.X`` imports X's module on first use.

Used by ``vfl/__init__.py`` and ``vfl/secure/__init__.py`` so that ``vfl --help`` loads no scipy, phe or zmq.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, namespace: dict[str, Any], table: Mapping[str, str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``table`` (name -> module) is imported from its module on
    first access and cached in ``namespace`` (the package's ``globals()``); any other name is an AttributeError."""

    def getattr_(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(table))

    return getattr_, dir_
