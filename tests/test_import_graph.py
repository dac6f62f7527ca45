"""The import graph of ``src/fastdata`` (docs/architecture.md): no module imports, through
any chain, a module that imports it back, and no stage (a package such as ``sources/`` or a
top-level module such as ``workers.py``) imports one that imports it back, so the imports
run one way down the data flow. Imports at module level count, those of ``TYPE_CHECKING``
blocks included ("not even for annotations"); an import inside a function runs when it is
called and does not count."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import fastdata

SRC = Path(fastdata.__file__).parent
ROOT = "fastdata"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join((ROOT, *(parts[:-1] if parts[-1] == "__init__" else parts)))


MODULES = {module_name(path): path for path in SRC.rglob("*.py")}
EXTENSIONS = {  # C extensions (fastdata.decode._jpeg, from _jpeg.c): leaves, no imports to read
    module_name(path.with_suffix(".py")) for path in SRC.rglob("*.c")
}


def module_level(nodes: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements run when a module is imported: at its top level and inside
    top-level ``if`` / ``try`` blocks, not inside functions or classes."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If | ast.Try):
            handlers = [h for h in getattr(node, "handlers", [])]
            inner = node.body + node.orelse + getattr(node, "finalbody", [])
            yield from module_level(inner + [s for h in handlers for s in h.body])


def imported(name: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The fastdata modules an import statement of module ``name`` loads by name (fastdata
    imports absolutely: a relative import is an error here)."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        assert node.level == 0 and node.module, f"{name}: a relative import"
        known = MODULES.keys() | EXTENSIONS
        named = [f"{node.module}.{alias.name}" for alias in node.names]
        targets = [target if target in known else node.module for target in named]
    return {target for target in targets if target in MODULES and target != name}


def graph() -> dict[str, set[str]]:
    """Each fastdata module -> the fastdata modules it imports at module level."""
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges[name] = set().union(*(imported(name, node) for node in module_level(tree.body)))
    return edges


def stage(name: str) -> str:
    """The stage a module belongs to: its top-level package or module under fastdata."""
    return ".".join(name.split(".")[:2])


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert circles(graph()) == []


def test_no_stage_imports_one_that_imports_it_back() -> None:
    stages: dict[str, set[str]] = {}
    for source, targets in graph().items():
        stages.setdefault(stage(source), set()).update(
            stage(t) for t in targets if stage(t) != stage(source)
        )
    assert circles(stages) == []


def test_a_circle_is_found_through_any_chain() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []


def test_module_level_imports_count_and_function_level_ones_do_not() -> None:
    code = (
        "import fastdata.workers\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from fastdata.sources import stream\n"
        "def later():\n"
        "    import fastdata.tune\n"
    )
    found = set().union(
        *(imported("fastdata.errors", n) for n in module_level(ast.parse(code).body))
    )
    assert found == {"fastdata.workers", "fastdata.sources.stream"}
