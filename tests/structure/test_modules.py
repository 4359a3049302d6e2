"""The shape of the code: no file over 800 lines, at most 15 modules at the top of stax/, and no
method patched onto a class at import time (every method is defined in its class's body)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("stax", "solvers", "instances", "experiments", "tests")
MAX_LINES = 800
MAX_TOP_MODULES = 15


def sources(packages: tuple[str, ...] = CHECKED) -> list[Path]:
    return [p for package in packages for p in sorted((ROOT / package).rglob("*.py"))]


def test_no_python_file_is_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_at_most_15_modules_at_the_top_of_stax():
    top = sorted(p.name for p in (ROOT / "stax").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, top


def patched_classes(path: Path) -> list[str]:
    """Module-level statements of ``path`` that set an attribute of a class the module defines or
    imports: ``Cls.x = ...``, ``Cls.x += ...``, ``setattr(Cls, ...)``, in a loop or an ``if`` too."""
    tree = ast.parse(path.read_text(), str(path))
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    classes |= {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names if (a.asname or a.name)[:1].isupper()}
    found = []

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, (ast.For, ast.While, ast.If, ast.With, ast.Try)):
                for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []),
                              *(h.body for h in getattr(node, "handlers", []))):
                    visit(block)
                continue
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
                        target.value.id in classes:
                    found.append(f"line {node.lineno}: {target.value.id}.{target.attr} = ...")
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "setattr" \
                        and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id in classes:
                    found.append(f"line {call.lineno}: setattr({call.args[0].id}, ...)")
    visit(tree.body)
    return found


def test_no_method_is_patched_onto_a_class_at_import_time():
    patched = {str(p.relative_to(ROOT)): found for p in sources(CHECKED[:-1]) if (found := patched_classes(p))}
    assert patched == {}
