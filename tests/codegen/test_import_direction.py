"""Code generation imports downward only (issue 52, as TorchInductor's kernel forms do): the
builder (``kernel.py`` on ``analysis.py`` and ``access.py``) imports no form and not
``generate.py``, which chooses among the forms; and no module of ``stax/codegen`` takes part in
an import cycle there, lazy or type-only imports included."""
from __future__ import annotations

import ast
from pathlib import Path

CODEGEN = Path(__file__).resolve().parents[2] / "stax" / "codegen"
BUILDER = ("kernel", "analysis", "access", "kernel_parts", "exprs")


def module_name(path: Path) -> str:
    parts = path.relative_to(CODEGEN.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def codegen_imports() -> dict[str, set[str]]:
    """Each codegen module and the codegen modules it imports anywhere in its text."""
    modules = {module_name(p): p for p in CODEGEN.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def test_the_builder_imports_no_form_and_not_the_generator():
    graph = codegen_imports()
    upward = {f"stax.codegen.{m}": sorted(t for t in graph[f"stax.codegen.{m}"]
                                          if t.startswith("stax.codegen.forms") or t == "stax.codegen.generate")
              for m in BUILDER}
    assert {m: t for m, t in upward.items() if t} == {}


def test_no_import_cycle_in_codegen():
    graph = codegen_imports()
    state: dict[str, str] = {}
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                cycles.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = "done"
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []
