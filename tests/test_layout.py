"""The layout shows the architecture (issue 30; docs/architecture.md): sizes a reader can hold, and ``vfl/net/`` only
the network.

- no module of ``vfl/`` over 700 lines, no class over 250, no function over 80 (the project's style rules);
- every module of ``vfl/net/`` imports ZeroMQ, the transport or the runtime, or a role of ``vfl/net/`` that does (a
  subclass of a hub), or is one of the wire modules named in ``WIRE`` with the reason it belongs to the network
  without opening a socket itself. Model files, configs, file
  prediction and local data live in the layers below (``vfl/models/``, ``vfl/data/``, ``vfl/protocols/``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_import_layers import MODULE_FILES, PACKAGE, imported_modules, module_name

MAX_MODULE_LINES = 700
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 80

#: vfl/net/ modules that do not import the transport: the wire itself, named with the reason
WIRE = {
    "vfl.net": "the package face",
    "vfl.net.messages": "the wire format every role and the transport speak",
    "vfl.net.message_specs": "the one declaration of every message type (fields, frames, sender -> receiver, doc)",
    "vfl.net.notices": "the network's waiting, silence and refusal lines and the --bind rule",
    "vfl.net.http_guard": "the HTTP server of the online scoring service (stdlib sockets, not ZeroMQ)",
    "vfl.net.scoring_http": "the HTTP face of the scoring hub, on http_guard's server",
    "vfl.net.model_check": "a party's check of the model at the end of a networked run (the run's PLAN and RESULT)",
}

NETWORK_MODULES = ("zmq", "vfl.net.transport", "vfl.net.runtime")


def _lines(node: ast.AST) -> int:
    return int(node.end_lineno or 0) - int(node.lineno) + 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", MODULE_FILES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_module_class_and_function_sizes(path: Path):
    source = path.read_text()
    assert source.count("\n") <= MAX_MODULE_LINES, f"{path.name}: {source.count(chr(10))} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            assert _lines(node) <= MAX_CLASS_LINES, f"class {node.name}: {_lines(node)} lines"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert _lines(node) <= MAX_FUNCTION_LINES, f"function {node.name}: {_lines(node)} lines"


NET_FILES = [p for p in MODULE_FILES if module_name(p).startswith("vfl.net")]


def _network_modules() -> set[str]:
    """The vfl/net/ modules that import ZeroMQ, the transport or the runtime, directly or through another role."""
    imports = {module_name(p): imported_modules(p.read_text(), module_name(p), is_package=p.name == "__init__.py")
               for p in NET_FILES}
    network = {m for m, names in imports.items()
               if any(n == x or n.startswith(x + ".") for n in names for x in NETWORK_MODULES)}
    grew = True
    while grew:   # a role built on a role (capeDJICA's aggregator on capeFM's)
        more = {m for m, names in imports.items() if m not in network and m not in WIRE
                and any(n == x or n.startswith(x + ".") for n in names for x in network)}
        network |= more
        grew = bool(more)
    return network


@pytest.mark.parametrize("path", NET_FILES, ids=lambda p: module_name(p))
def test_every_net_module_is_network_code(path: Path):
    me = module_name(path)
    assert me in WIRE or me in _network_modules(), (
        f"{me} imports neither ZeroMQ, the transport, the runtime nor a role built on them: move it to the layer "
        f"it belongs to (or name it in WIRE with the reason)")


def test_the_wire_list_names_only_existing_modules():
    """A stale entry would hide a future module of the same name."""
    assert set(WIRE) <= {module_name(p) for p in NET_FILES}
