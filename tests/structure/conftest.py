"""The import graph of the repository's packages, read from their source: every ``import``,
at module level, inside a function or under ``TYPE_CHECKING``, as an edge between modules."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("stax", "solvers", "instances", "experiments")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imported(node: ast.Import | ast.ImportFrom, package: str, known: dict[str, Path]) -> list[str]:
    """The repository modules an import statement names: ``from X import n`` imports module
    ``X.n`` when there is one, else ``X`` (``n`` is then a name defined in it)."""
    def owner(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None
    if isinstance(node, ast.Import):
        found = [owner(a.name) for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        found = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else owner(base) for a in node.names]
    return [name for name in found if name]


def build_graph() -> nx.DiGraph:
    """Modules as nodes; an edge ``a -> b`` (with the line of the first such import) when ``a``
    imports ``b``."""
    known = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(node, package, known):
                    if target != name and not graph.has_edge(name, target):
                        graph.add_edge(name, target, line=node.lineno)
    return graph


@pytest.fixture(scope="session")
def import_graph() -> nx.DiGraph:
    return build_graph()
