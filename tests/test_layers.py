"""The import graph of the project's own modules: no cycle, and every import goes down the layers.

Every ``import`` statement counts, also those inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from tests.support import source_tree

pytestmark = pytest.mark.xdist_group("sources")  # one worker parses the project's modules (source_tree)

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("efa_stack", "k8s", "aws_constructs", "stacks")

# Lowest first: a module may import its own layer's package or a lower layer, never a higher one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("efa_stack.contract", "efa_stack.errors"),
    ("efa_stack.spec",),
    ("efa_stack.console",),
    ("efa_stack.names",),
    ("efa_stack.planning",),
    ("k8s", "aws_constructs", "efa_stack.nccl_report", "efa_stack.cluster"),
    ("efa_stack.checks",),
    ("stacks", "efa_stack.acceptance", "efa_stack.rehearsal"),
    ("efa_stack.tools", "app"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    found = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "imports" not in p.parts}
    found["app"] = ROOT / "app.py"
    return found


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from a import b`` counts ``a.b`` when that is a module)."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(source_tree(path)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def layer_of(module: str) -> int:
    if module == "efa_stack":  # the package's own __init__: a docstring and the version
        return 0
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def top_package(module: str) -> str:
    for prefixes in LAYERS:
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                return p
    return module


@cache
def graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {name: imports_of(path, name, known) for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
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
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_is_in_a_layer():
    assert len(graph()) > 60  # the scan sees the project
    for module in graph():
        layer_of(module)


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_imports_go_down_the_layers():
    upward = [
        f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
        for m, targets in graph().items()
        for t in sorted(targets)
        if layer_of(t) > layer_of(m)
    ]
    assert upward == []


def test_packages_of_one_layer_do_not_import_each_other():
    # k8s and aws_constructs, stacks and acceptance, ...: siblings, each built on the layers below
    across = [
        f"{m} imports {t}"
        for m, targets in graph().items()
        for t in sorted(targets)
        if layer_of(t) == layer_of(m) and top_package(t) != top_package(m)
    ]
    assert across == []


def test_the_checks_find_a_cycle_and_an_upward_import():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert layer_of("efa_stack.planning.plan") < layer_of("k8s.charts") < layer_of("stacks.cluster_stack")
