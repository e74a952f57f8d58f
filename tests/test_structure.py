"""The package's modules import one another without circles, counting imports inside functions too (a lazy
import still ties two modules together: neither can be understood, tested or moved without the other)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "routing_grpo"

# Circles still tolerated (none: the frontier, which report and mini.oracle both read, is a module of its own).
KNOWN: set[frozenset[str]] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in the file)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # `from routing_grpo import plots` names a module; `from routing_grpo.x import f` does not.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "routing_grpo":
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    assert "routing_grpo.grading" in graph["routing_grpo.rewards"]  # imported inside a function
    assert "routing_grpo.report" in graph["routing_grpo.plots"]
    assert "routing_grpo.completions" in graph["routing_grpo.countdown"]


def test_no_import_cycles():
    found = [c for c in cycles(import_graph()) if frozenset(c) not in KNOWN]
    assert not found, f"modules that import each other: {found}"


def test_the_two_broken_circles_stay_broken():
    graph = import_graph()
    assert (
        "routing_grpo.rewards" not in graph["routing_grpo.countdown"]
    )  # countdown reads completions directly
    assert "routing_grpo.plots" not in graph["routing_grpo.report"]  # the figure writer is passed in


def test_the_miniature_has_no_import_cycle():
    graph = import_graph()
    assert "routing_grpo.report" not in graph["routing_grpo.mini.oracle"]  # the frontier is its own module
    assert not [c for c in cycles(graph) if any(m.startswith("routing_grpo.mini") for m in c)]
