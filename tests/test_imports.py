"""The module graph: no import cycle among our modules, lazy imports included.

A cycle that only closes through an import inside a function still couples
the modules (``download -> github -> mirror -> download`` was one); only
``if TYPE_CHECKING:`` imports are left out, since they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Import name -> source folder.
PACKAGES = {
    "llama_runtime.updater": ROOT / "llama_runtime" / "updater",
    "llama_runtime.runtime": ROOT / "llama_runtime" / "runtime",
}


def our_modules() -> dict[str, Path]:
    found = {"llama_runtime": ROOT / "llama_runtime" / "__init__.py"}
    for prefix, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            found[".".join([prefix, *parts])] = path
    return found


class _Imports(ast.NodeVisitor):
    def __init__(self, *, type_only: bool = False) -> None:
        self.names: set[str] = set()
        self.type_only = type_only

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if not self.type_only and (
            (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
        ):
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module:  # our code uses absolute imports only
            self.names.add(node.module)
            self.names.update(f"{node.module}.{alias.name}" for alias in node.names)


def import_graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """Each module's imports of our modules; with ``type_only`` the ``if TYPE_CHECKING:`` ones too."""
    modules = our_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        visitor = _Imports(type_only=type_only)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        graph[name] = {imported for imported in visitor.names if imported in modules and imported != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_no_import_cycle_among_our_modules() -> None:
    graph = import_graph()
    assert len(graph) > 40, "the scan found our modules"
    assert cycles(graph) == []


def test_cycle_finder_finds_a_cycle_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_runtime_never_imports_updater() -> None:
    graph = import_graph()
    leaks = {m: sorted(i for i in imps if i.startswith("llama_runtime.updater")) for m, imps in graph.items()}
    assert {m: i for m, i in leaks.items() if m.startswith("llama_runtime.runtime") and i} == {}


def test_no_import_cycle_even_through_imports_made_only_for_type_checking() -> None:
    # A type-only cycle still makes two modules one concept to a reader, a type checker and an IDE.
    assert cycles(import_graph(type_only=True)) == []
