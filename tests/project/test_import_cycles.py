"""No import cycles inside the packages (issue 25): a module's imports of the package's modules,
at module level or deferred inside a function, form a graph without cycles, so each layer can
be read, tested and moved on its own. Imports under `if TYPE_CHECKING:` are for annotations
only and are left out; a package importing its own submodules, and a submodule its parent
package, are what Python's package import does and are left out too."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set

from helpers.fixtures import REPO

PACKAGES = ("tfrecord_beam", "pipelines")


def _modules() -> Dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST) -> Iterator[ast.AST]:
    """Every import statement, skipping `if TYPE_CHECKING:` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST) -> Iterator[ast.AST]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def import_graph() -> Dict[str, Set[str]]:
    """module -> the package modules it imports (resolved to the nearest module that exists)."""
    modules = _modules()
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: List[str] = []
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
                continue
            assert isinstance(node, ast.ImportFrom)
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets += [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        deps = set()
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                deps.add(target)
        graph[name] = deps
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_in_the_packages():
    graph = import_graph()
    assert len(graph) > 50 and graph["tfrecord_beam.records"]  # the walk found the modules and their imports
    assert cycles(graph) == [], "import cycles (module sets that import each other)"


def test_the_cycle_finder_finds_a_cycle_through_a_deferred_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("import os\ndef f():\n    from . import x\nif TYPE_CHECKING:\n    from . import y\n")
    assert [ast.unparse(n) for n in _imports(tree)] == ["import os", "from . import x"]
