"""The package's import graph (read with ``ast``, nothing imported): no import cycle at module level in
``src/trainsys``, and no module of ``src/`` imports the tests.

An import at module level runs when the module is first imported, so two modules that import each other there
load half-initialised, in an order that depends on which is imported first: that is the defect. An import inside
a function runs when the function is called; those edges are counted separately (:func:`import_graph`) and
checked too: a cycle closed only by a deferred import is the same layering problem, hidden. Imports under
``if TYPE_CHECKING:`` never run and are not counted.
"""

from __future__ import annotations

import ast
import functools
import warnings
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

KNOWN_CYCLES: set[frozenset[str]] = set()  # none: a new cycle is a defect
IMPORTS_TESTS: set[str] = set()  # none: the package stands without its tests (make bench runs tests/bench.py)


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, name: str) -> list[tuple[str, bool]]:
    """``(imported module, at module level?)`` for every import statement of one file; relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            top = False
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, top)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.extend((f"{base}.{alias.name}", top) for alias in node.names)  # a submodule, or a name in base
            found.append((base, top))
        for child in ast.iter_child_nodes(node):
            visit(child, top)

    with warnings.catch_warnings():  # a file's invalid escape in a docstring is not this test's business
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        visit(ast.parse(path.read_text()), True)
    return found


@functools.cache
def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]]]:
    """``(module-level edges, function-level edges, top-level packages imported)`` between the modules of
    ``src/``: ``a → {b, …}`` when ``a`` imports ``b`` (the deepest module of ``src`` the statement names)."""
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    top: dict[str, set[str]] = {m: set() for m in files}
    inner: dict[str, set[str]] = {m: set() for m in files}
    roots: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for target, at_top in _imports(path, module):
            roots[module].add(target.split(".")[0])
            parts = target.split(".")
            deepest = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in files),
                           None)
            if deepest is not None and deepest != module:
                (top if at_top else inner)[module].add(deepest)
    for module in files:
        inner[module] -= top[module]
    return top, inner, roots


def cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def test_no_import_cycle_in_trainsys() -> None:
    top, inner, _ = import_graph()
    at_top = [sorted(c) for c in cycles(top)]
    assert not at_top, f"module-level import cycles in src/: {at_top}"
    found = set(cycles({m: top[m] | inner[m] for m in top}))
    deferred = [sorted(c) for c in found - KNOWN_CYCLES]
    assert not deferred, f"import cycles closed by a function-level import (a layering problem, deferred): {deferred}"
    fixed = [sorted(c) for c in KNOWN_CYCLES - found]
    assert not fixed, f"these cycles are gone: remove them from KNOWN_CYCLES: {fixed}"


def test_no_module_of_src_imports_the_tests() -> None:
    _, _, roots = import_graph()
    importers = {m for m, names in roots.items() if "tests" in names}
    assert importers <= IMPORTS_TESTS, f"modules of src/ that import tests: {sorted(importers - IMPORTS_TESTS)}"
    assert IMPORTS_TESTS <= importers, f"no longer import tests: remove from IMPORTS_TESTS: {sorted(IMPORTS_TESTS - importers)}"


def test_the_graph_sees_known_edges_and_a_planted_cycle() -> None:
    top, inner, _ = import_graph()
    assert "trainsys._validation" in top["trainsys.lesson"]  # from trainsys._validation import describe
    assert "trainsys.grading.mlp" in top["trainsys.grading"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
