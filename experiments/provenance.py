"""Where and with what a result was computed: code version, package versions, machine, date."""
from __future__ import annotations

import datetime
import functools
import hashlib
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("stax", "numpy", "ortools", "networkx", "pandas")
CODE = ("stax", "solvers", "instances", "experiments")
ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.cache
def code_version() -> str:
    """The stax version and a hash of the code that computes results (``*.py``, ``*.h`` of stax,
    solvers, instances, experiments): results of other code are not reused."""
    digest = hashlib.sha256()
    for package in CODE:
        for path in sorted((ROOT / package).rglob("*")):
            if path.suffix in (".py", ".h"):
                digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return f"{_version('stax')}-{digest.hexdigest()[:12]}"


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
            "cpu_count": os.cpu_count() or 0}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
