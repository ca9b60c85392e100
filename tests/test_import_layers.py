"""Import direction: no module of a lower layer imports a module of a higher one (docs/architecture.md).

Layers, bottom to top:

0. ``base``      – exceptions, seeding (``vfl.exceptions``, ``vfl.rng``)
1. ``secure``    – cryptography (``vfl.secure.*``): Paillier products, discrete noise, secure aggregation, PSI
2. ``core``      – privacy mathematics and models: objectives, mechanisms, accounting, solvers, estimators
3. ``protocols`` – socket-free protocol phases (``vfl.protocols.*``): both sides of each protocol, message in/out
4. ``net``       – wire format, transport, local data, model files and the networked roles
5. ``faces``     – what users call: ``vfl`` itself, ``vfl.api``, ``vfl.cli``, ``vfl.demo``

A module may import modules of its own or a lower layer only. ZeroMQ is imported only by ``net`` and
``faces``; click only by ``faces``. Every module must be classified: a new module fails this test until
it is given a layer here (directories ``vfl/secure`` and ``vfl/protocols`` are classified by path).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vfl"

LAYER_NUMBER = {"base": 0, "secure": 1, "core": 2, "protocols": 3, "net": 4, "faces": 5}

TOP_LEVEL_LAYER = {
    "exceptions": "base",
    "rng": "base",
    "calibration": "core",
    "objective": "core",
    "domain": "core",
    "dissection": "core",
    "sensitivity": "core",
    "mechanisms": "core",
    "accounting": "core",
    "cape_accounting": "core",
    "solver": "core",
    "fixed_point": "core",
    "estimators": "core",
    "baselines": "core",
    "audit": "core",
    "bcd": "core",
    "capefm": "core",
    "datasets": "core",
    "plots": "core",
    "messages": "net",
    "transport": "net",
    "config": "net",
    "modelio": "net",
    "coordinator": "net",
    "party": "net",
    "__init__": "faces",
    "api": "faces",
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
    if parts[1] in ("secure", "protocols"):
        return parts[1]
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
                # ``from vfl import datasets`` imports the submodule vfl.datasets, not the package face
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
    ("from vfl.transport import Endpoint\n", "vfl.solver", ["vfl.transport (net)"]),
    ("def f():\n    import zmq\n", "vfl.mechanisms", ["zmq (only from layer net up)"]),
    ("from ..estimators import LinearRegression\n", "vfl.secure.products", ["vfl.estimators (core)"]),
    ("from vfl import party\n", "vfl.protocols.alignment", ["vfl.party (net)"]),
    ("import click\n", "vfl.coordinator", ["click (only from layer faces up)"]),
    ("from vfl.objective import linear_objective\nimport numpy\n", "vfl.solver", []),
])
def test_the_checker_catches_upward_imports(source: str, me: str, expected: list[str]) -> None:
    """The rule can fail: each planted upward import is reported, a downward one is not."""
    assert upward_imports(source, me) == expected
