"""The agreed dependency direction: stax <- solvers <- instances, experiments (the command line
lives in experiments); nothing under stax/ imports the packages above it, at any depth of a module."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ABOVE = {"experiments", "instances", "solvers"}


def imported_packages(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_under_stax_imports_experiments_instances_or_solvers():
    offenders = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & ABOVE)
                 for path in sorted((ROOT / "stax").rglob("*.py")) if imported_packages(path) & ABOVE}
    assert offenders == {}


def test_the_stax_command_is_the_command_line_in_experiments():
    import tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["stax"] == "experiments.cli:main"
    from experiments.cli import main
    assert {"compile", "schedule", "diff", "sweep"} <= set(main.commands)
