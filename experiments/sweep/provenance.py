"""Where and with what a result was computed: code version, settings, package versions, machine, date."""
from __future__ import annotations

import ast
import datetime
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

PACKAGES = ("stax", "numpy", "ortools", "networkx", "pandas")
ROOT = Path(__file__).resolve().parents[2]
#: the packages whose every source computes results (strategies load from solvers by entry point)
COMPUTING = ("stax", "solvers", "instances")
SOURCES = (".py", ".h", ".cpp")
#: the experiments module that computes a cell; the experiments modules it imports count too
CELL_MODULE = "experiments.sweep.measure"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cell_modules(start: str = CELL_MODULE) -> list[Path]:
    """The module ``start`` of experiments and the experiments modules it imports, directly or
    not (read from the source, so lazy imports inside functions count): plots, reports and the
    sweep's own machinery are not among them."""
    def path_of(name: str) -> Path | None:
        base = ROOT.joinpath(*name.split("."))
        return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.exists()), None)

    seen: dict[str, Path] = {}
    todo = [start]
    while todo:
        name = todo.pop()
        path = path_of(name) if name.startswith("experiments.") else None
        if name in seen or path is None:
            continue
        seen[name] = path
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
    return sorted(p for name, p in seen.items() if p.name != "__init__.py" or name == start)


@functools.cache
def code_parts() -> dict[str, str]:
    """A hash of each part of the code that computes results: the sources of stax, solvers and
    instances, and of the experiments modules a cell runs (:func:`cell_modules`)."""
    files = {package: sorted(p for p in (ROOT / package).rglob("*") if p.suffix in SOURCES) for package in COMPUTING}
    files["experiments"] = cell_modules()
    parts = {}
    for part, paths in files.items():
        digest = hashlib.sha256()
        for path in paths:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
        parts[part] = digest.hexdigest()[:12]
    return parts


@functools.cache
def code_version() -> str:
    """The stax version and a hash of :func:`code_parts`: results of other code are not reused,
    while an edit elsewhere (a figure, the report, a comment in the sweep runner) keeps them."""
    digest = hashlib.sha256(json.dumps(code_parts(), sort_keys=True).encode()).hexdigest()[:12]
    return f"{_version('stax')}-{digest}"


def settings(cell: Any) -> dict[str, Any]:
    """The settings a cell ran under, as row columns: measures, the reference solver and its limits,
    the cell's time limit, timing repeats and threads, and the code's parts."""
    return {"measures": ",".join(cell.measures), "reference_time_limit": cell.reference.time_limit,
            "reference_workers": cell.reference.workers, "reference_order": cell.reference.order,
            "cell_timeout": cell.timeout, "timing_repeat": cell.timing.repeat, "timing_threads": cell.timing.threads,
            "code_parts": json.dumps(code_parts(), sort_keys=True)}


def keep_config(config: Any, out: Path) -> None:
    """Copy the config file a sweep was read from into its results directory (``config.toml``)."""
    source = Path(config.source)
    if source.is_file() and source.resolve() != (out / "config.toml").resolve():
        shutil.copyfile(source, out / "config.toml")


def git() -> dict[str, str | bool]:
    """The checkout's commit and whether tracked files differ from it."""
    return {"git_commit": _git("rev-parse", "HEAD"),
            "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return ""


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@functools.cache
def environment() -> dict[str, str | int]:
    """Package versions and the machine of this process (computed once)."""
    return {"python": platform.python_version(), **{f"{p}_version": _version(p) for p in PACKAGES},
            "machine": platform.node(), "platform": platform.platform(), "cpu": _cpu(),
            "cpu_count": os.cpu_count() or 0, "isa": _isa(), "blas": _blas(), "gcc_version": _gcc()}


def _isa() -> str:
    """The vector level kernels compile for in this process (STAX_ISA, else the CPU's widest)."""
    from stax.environment import isa_from_env
    return isa_from_env().name


def _blas() -> str:
    """Whose gemm the extern matmuls call in this process (stax.kernels.blas), or np.matmul."""
    from stax.kernels import blas
    gemm = blas.gemm("float32")
    return gemm.provider if gemm else "np.matmul"


def _gcc() -> str | None:
    """The first line of ``g++ --version``, or None without a g++."""
    try:
        return subprocess.run(["g++", "--version"], capture_output=True, text=True, timeout=10,
                              check=True).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
