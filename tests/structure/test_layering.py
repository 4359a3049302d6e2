"""The agreed dependency direction: stax <- solvers <- instances <- experiments (the command line
lives in experiments), and inside stax the order of its packages that docs/architecture.md
declares, each importing only what sits at or below its own layer (lazy imports included)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
ABOVE = {"experiments", "instances", "solvers"}
#: the repository's packages, lowest first
PACKAGE_ORDER = ("stax", "solvers", "instances", "experiments")


def imported_packages(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def stax_layers() -> list[set[str]]:
    """The layers of stax's packages and top modules, lowest first, as docs/architecture.md lists
    them: the numbered lines of its section "The order of stax's packages", each naming its
    members in backquotes before a colon."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The order of stax's packages", 1)[1].split("\n## ", 1)[0]
    return [set(re.findall(r"`([a-z_]+)`", line.split(":", 1)[0]))
            for line in section.splitlines() if re.match(r"\d+\. ", line)]


def stax_unit(module: str) -> str:
    """A stax module's package (``scheduler``), or its own name for a top module (``compiler``);
    ``stax`` for the package's ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "stax"


def test_nothing_under_stax_imports_experiments_instances_or_solvers():
    offenders = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & ABOVE)
                 for path in sorted((ROOT / "stax").rglob("*.py")) if imported_packages(path) & ABOVE}
    assert offenders == {}


def test_each_package_imports_only_the_packages_below_it(import_graph: nx.DiGraph):
    rank = {name: i for i, name in enumerate(PACKAGE_ORDER)}
    upward = [f"{a} imports {b} (line {line})" for a, b, line in import_graph.edges(data="line")
              if rank[a.split(".")[0]] < rank[b.split(".")[0]]]
    assert upward == []


def test_the_declared_order_places_every_package_of_stax_once(import_graph: nx.DiGraph):
    layers = stax_layers()
    declared = [unit for layer in layers for unit in layer]
    assert len(declared) == len(set(declared)), "a package is listed in two layers"
    present = {stax_unit(m) for m in import_graph if m.split(".")[0] == "stax"}
    assert present - set(declared) == set(), "place every package and top module of stax in docs/architecture.md"


def test_arrows_point_down_the_pipeline(import_graph: nx.DiGraph):
    layer_of = {unit: i for i, layer in enumerate(stax_layers()) for unit in layer}
    upward = [f"{a} imports {b} (line {line}): {stax_unit(a)} is below {stax_unit(b)}"
              for a, b, line in import_graph.edges(data="line")
              if a.split(".")[0] == b.split(".")[0] == "stax"
              and layer_of.get(stax_unit(a), -1) < layer_of.get(stax_unit(b), -1)]
    assert upward == []


def test_the_stax_command_is_the_command_line_in_experiments():
    import tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["stax"] == "experiments.cli:main"
    from experiments.cli import main
    assert {"compile", "schedule", "diff", "sweep"} <= set(main.commands)
