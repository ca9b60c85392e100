"""No import cycle inside vfl (issue 30; docs/architecture.md).

The graph is the one tests/test_import_layers.py reads (every ``import`` in a module's AST: top-level, function-local
and ``TYPE_CHECKING`` ones alike, relative imports resolved); an edge ``a -> b`` means module ``a`` names module
``b`` in an import. A strongly connected component of more than one module (Tarjan 1972) is a cycle: those modules
cannot be read, tested or moved apart. The implicit import of a parent package's ``__init__`` is not an edge (the
package faces are lazy tables).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_import_layers import MODULE_FILES, PACKAGE, _is_module, imported_modules, module_name


def _target(name: str) -> str | None:
    """The vfl module an imported name refers to (``vfl.secure.keys.PublicKey`` -> ``vfl.secure.keys``)."""
    if name.split(".")[0] != "vfl":
        return None
    while name.count(".") and not _is_module(name):
        name = name.rpartition(".")[0]
    return name


def import_graph(files: list[Path] = MODULE_FILES) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in files:
        me = module_name(path)
        names = imported_modules(path.read_text(), me, is_package=path.name == "__init__.py")
        graph[me] = {t for t in map(_target, names) if t is not None and t != me}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_vfl_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) == len(MODULE_FILES) > 50
    found = cycles(graph)
    assert not found, "import cycles (each list is one strongly connected component): " + "; ".join(
        " <-> ".join(c) for c in found)


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b", "c"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
])
def test_tarjan_finds_every_cycle(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    """The check can fail: planted cycles are reported, an acyclic graph is not."""
    assert cycles(graph) == expected


def test_a_function_local_import_back_is_an_edge(tmp_path: Path) -> None:
    """``native -> fastmath`` was function-local; such an import still closes a cycle."""
    names = imported_modules("def f():\n    from vfl.secure.fastmath import mpz\n", "vfl.secure.native")
    assert _target(next(iter(names))) == "vfl.secure.fastmath"
    assert PACKAGE.name == "vfl"
