"""Loom's packages import downwards only, and no package's modules import each other in a circle.

Layers, bottom up: ``runtime``; ``tools``, ``retrieval``,
``memory``; ``orchestrator``; the edge: ``evals`` (suites, ``bench sessions``) and
``api``; on top the face, ``loom`` (``import loom`` and the ``loom`` command line, ``loom.cli``).  A library
package that imported a front-end or ``evals`` would drag the edge into every
user of the library; a circle between two modules makes neither readable on
its own.  Every import statement counts, including those inside functions and
under ``TYPE_CHECKING``: a circle hidden in a function is still a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "tools", "retrieval", "memory", "orchestrator", "evals", "api", "loom")
LEAVES = {"loom.version", "loom.json_types", "loom.python_ast"}  # import nothing of Loom's: every layer may use them
MAY_IMPORT = {
    "runtime": set(),
    "tools": {"runtime"},
    "retrieval": {"runtime"},
    "memory": {"runtime"},
    "orchestrator": {"runtime", "tools", "retrieval", "memory"},
    "evals": {"runtime", "tools", "retrieval", "memory", "orchestrator"},
    "api": {"runtime", "tools", "retrieval", "memory", "orchestrator"},
    "loom": {"runtime", "tools", "retrieval", "memory", "orchestrator", "evals", "api"},  # the face and the CLI
}


def _modules() -> dict[str, Path]:
    """Every module by its installed name: ``runtime/engine.py`` is ``loom.runtime.engine``."""
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts if pkg == "loom" else ["loom", *parts])] = f
    return out


def layer(module: str) -> str:
    """The package a module belongs to: ``loom.runtime.engine`` -> ``runtime``; the face itself -> ``loom``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "loom"


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Loom modules ``name`` imports (``from pkg import sub`` is an import of ``pkg.sub``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(pkg + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
    return {m for m in found if m.split(".")[0] == "loom" and m != name and m not in LEAVES}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _circles(nodes: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v] & nodes:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                circles.append(sorted(comp + [v]))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return circles


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    upward = sorted(f"{name} -> {dep}" for name, deps in GRAPH.items() if layer(name) == package
                    for dep in deps if layer(dep) not in MAY_IMPORT[package] | {package})
    assert upward == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_circle_of_imports_inside_a_package(package: str) -> None:
    assert _circles({m for m in MODULES if layer(m) == package}) == []


def test_the_checker_sees_a_circle_and_an_upward_import() -> None:
    """The two checks above can fail: a planted circle and a planted upward arrow are found."""
    GRAPH["loom.orchestrator.step"].add("loom.orchestrator.agent")
    GRAPH["loom.retrieval.types"].add("loom.evals.harness")
    try:
        assert any("loom.orchestrator.step" in c for c in _circles({m for m in MODULES if layer(m) == "orchestrator"}))
        with pytest.raises(AssertionError):
            test_a_package_imports_only_the_layers_below_it("retrieval")
    finally:
        GRAPH["loom.orchestrator.step"].discard("loom.orchestrator.agent")
        GRAPH["loom.retrieval.types"].discard("loom.evals.harness")
