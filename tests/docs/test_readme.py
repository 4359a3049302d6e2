"""The README's examples run as written.

Its ```python blocks run in order in one namespace, in a scratch folder (the block that imports
torch runs alone, only where torch is installed and the ``stax`` backend registered); a ```toml
block is written to the file its first line names; the ```sh commands that take seconds run
through the ``stax`` command.  The long ones are checked, not run: ``stax main-job`` (its
subcommand exists), ``python -m pytest`` (pytest and tests/ are there), ``pip install -e
'.[EXTRA]'`` (pyproject declares the extra) and the virtual environment's creation."""
from __future__ import annotations

import importlib.util
import re
import shlex
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from experiments.cli import main
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()
BLOCKS = [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w+)\n(.*?)^```$", README, re.M | re.S)]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _uses_torch(code: str) -> bool:
    return bool(re.search(r"^import torch$", code, re.M))


def _check_long_command(command: str) -> bool:
    """True when ``command`` is one of the long ones, after checking what it relies on exists."""
    if command in ("python3 -m venv .venv", ". .venv/bin/activate"):
        assert importlib.util.find_spec("venv")
    elif extra := re.fullmatch(r"pip install -e '\.\[(\w+)\]'", command):
        assert extra.group(1) in EXTRAS, f"README installs the extra {extra.group(1)!r}, which pyproject lacks"
    elif command.startswith("python -m pytest"):
        assert importlib.util.find_spec("pytest") and (ROOT / "tests").is_dir()
    elif command == "stax main-job":
        result = CliRunner().invoke(main, ["main-job", "--help"])
        assert result.exit_code == 0 and "main.toml" in result.output
    else:
        return False
    return True


def _run_shell(text: str) -> None:
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        for command in (part.strip() for part in line.split("&&")):
            if _check_long_command(command):
                continue
            words = shlex.split(command)
            assert words[0] == "stax", f"the README runs {command!r}: only stax commands run here"
            result = CliRunner().invoke(main, words[1:], catch_exceptions=False)
            assert result.exit_code == 0, f"{command}: {result.output}"


def test_readme_fits_two_screens_and_defines_the_spec():
    assert len(README.splitlines()) <= 150
    assert "the spec" in README and "seed" not in README.lower()


def test_readme_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    kinds = [kind for kind, _ in BLOCKS]
    assert kinds.count("python") >= 5 and "sh" in kinds and "toml" in kinds
    for number, (kind, text) in enumerate(BLOCKS):
        if kind == "python" and not _uses_torch(text):
            exec(compile(text, f"README.md block {number}", "exec"), namespace)
            if "softmax" in namespace and not Path("model.py").exists():  # the command line's model.py
                Path("model.py").write_text(re.search(r"^def softmax\(x\):\n(?:    .*\n)+", text, re.M).group(0))
        elif kind == "toml":
            name = text.splitlines()[0].removeprefix("# ").strip()
            tomllib.loads(text)
            Path(name).write_text(text)
        elif kind == "sh":
            _run_shell(text)


def test_readme_torch_compile_block():
    blocks = [text for kind, text in BLOCKS if kind == "python" and _uses_torch(text)]
    assert len(blocks) == 1
    torch = pytest.importorskip("torch", reason="the README's torch.compile example needs PyTorch ('.[torch]')")
    from torch._dynamo import list_backends
    if "stax" not in list_backends(exclude_tags=()):
        pytest.skip("torch is installed but no torch.compile backend named 'stax' is registered")
    exec(compile(blocks[0], "README.md torch block", "exec"), {"torch": torch})
