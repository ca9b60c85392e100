"""Import direction: no module of a lower layer imports a module of a higher one (docs/architecture.md).

Layers, bottom to top (a subpackage is one layer):

0. ``base``      – exceptions, seeding, data sets, party configs (``vfl.exceptions``, ``vfl.rng``, ``vfl.data``)
1. ``secure``    – cryptography (``vfl.secure``): Paillier products, discrete noise, secure aggregation, PSI
2. ``fm``        – the FM objective, its domain, dissection and solver (``vfl.fm``)
3. ``privacy``   – calibration, sensitivities, mechanisms, fixed-point release, accounting, audit (``vfl.privacy``)
4. ``models``    – estimators, baselines, BCD, capeFM, CAPE ICA, plots (``vfl.models``, ``vfl.plots``)
5. ``protocols`` – socket-free protocol phases (``vfl.protocols``): both sides of each protocol, message in/out
6. ``net``       – wire format, transport, the runtime and the roles (``vfl.net``)
7. ``faces``     – what users call: ``vfl`` itself, ``vfl.api``, ``vfl.cli``, ``vfl.demo``

A module may import modules of its own or a lower layer only. ZeroMQ is imported only by ``net`` and
``faces``; click only by ``faces``. Every module must be classified: a new top-level module fails this
test until it is given a layer here; modules inside a subpackage take the subpackage's layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vfl"

LAYER_NUMBER = {"base": 0, "secure": 1, "fm": 2, "privacy": 3, "models": 4, "protocols": 5, "net": 6, "faces": 7}

SUBPACKAGE_LAYER = {"data": "base", "secure": "secure", "fm": "fm", "privacy": "privacy", "models": "models",
                    "protocols": "protocols", "net": "net"}

TOP_LEVEL_LAYER = {
    "exceptions": "base",
    "rng": "base",
    "progress": "base",
    "lazy": "base",
    "process_memory": "base",
    "plots": "models",
    "__init__": "faces",
    "api": "faces",
    "api_scoring": "faces",
    "cli": "faces",
    "demo": "faces",
}

# third-party packages only some layers may import: package -> lowest layer allowed
RESTRICTED_PACKAGES = {"zmq": "net", "click": "faces"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    """Layer of a dotted module name inside vfl (raises KeyError for an unclassified module)."""
    parts = module.split(".")
    if len(parts) == 1:
        return TOP_LEVEL_LAYER["__init__"]
    if parts[1] in SUBPACKAGE_LAYER:
        return SUBPACKAGE_LAYER[parts[1]]
    return TOP_LEVEL_LAYER[parts[1]]


def imported_modules(source: str, me: str, is_package: bool = False) -> set[str]:
    """Absolute names of everything ``source`` (module ``me``) imports, relative and function-local ones included."""
    package = me if is_package else me.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                # ``from vfl import datasets`` imports the submodule vfl.data.datasets, not the package face
                submodule = f"{prefix}.{alias.name}"
                names.add(submodule if prefix.startswith("vfl") and _is_module(submodule) else prefix)
    return names


def _is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or path.is_dir()


def upward_imports(source: str, me: str, is_package: bool = False) -> list[str]:
    """Imports of module ``me`` that point to a higher layer or to a restricted third-party package."""
    my_layer = LAYER_NUMBER[layer_of(me)]
    upward = []
    for name in sorted(imported_modules(source, me, is_package)):
        top = name.split(".")[0]
        if name == "vfl":
            if me != "vfl":
                upward.append("vfl (the package face)")
        elif top == "vfl":
            target = name  # vfl.secure.keys.PublicKey -> vfl.secure.keys
            while target.count(".") > 1 and not _is_module(target):
                target = target.rpartition(".")[0]
            if LAYER_NUMBER[layer_of(target)] > my_layer:
                upward.append(f"{target} ({layer_of(target)})")
        elif top in RESTRICTED_PACKAGES and my_layer < LAYER_NUMBER[RESTRICTED_PACKAGES[top]]:
            upward.append(f"{top} (only from layer {RESTRICTED_PACKAGES[top]} up)")
    return upward


MODULE_FILES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unclassified = []
    for path in MODULE_FILES:
        try:
            layer_of(module_name(path))
        except KeyError:
            unclassified.append(module_name(path))
    assert not unclassified, f"give these modules a layer in tests/test_import_layers.py: {unclassified}"


@pytest.mark.parametrize("path", MODULE_FILES, ids=module_name)
def test_imports_point_down(path: Path) -> None:
    me = module_name(path)
    upward = upward_imports(path.read_text(), me, is_package=path.name == "__init__.py")
    assert not upward, f"{me} ({layer_of(me)}) imports from above its layer: {upward}"


@pytest.mark.parametrize(("source", "me", "expected"), [
    ("from vfl.net.transport import Endpoint\n", "vfl.fm.solver", ["vfl.net.transport (net)"]),
    ("from vfl.privacy.mechanisms import release\n", "vfl.fm.domain", ["vfl.privacy.mechanisms (privacy)"]),
    ("from vfl.models.bcd import run_bcd\n", "vfl.privacy.accounting", ["vfl.models.bcd (models)"]),
    ("def f():\n    import zmq\n", "vfl.privacy.mechanisms", ["zmq (only from layer net up)"]),
    ("from ..models.estimators import LinearRegression\n", "vfl.secure.products", ["vfl.models.estimators (models)"]),
    ("from vfl.net import party\n", "vfl.protocols.alignment", ["vfl.net.party (net)"]),
    ("import click\n", "vfl.net.coordinator", ["click (only from layer faces up)"]),
    ("from vfl.fm.objective import linear_objective\nimport numpy\n", "vfl.fm.solver", []),
])
def test_the_checker_catches_upward_imports(source: str, me: str, expected: list[str]) -> None:
    """The rule can fail: each planted upward import is reported, a downward one is not."""
    assert upward_imports(source, me) == expected
