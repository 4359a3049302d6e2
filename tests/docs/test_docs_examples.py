"""The ```python examples of every docs/ page run as written, each page's in order in one
namespace in a scratch folder (a block importing torch only where torch is installed); every
page, the README too, names files, modules and pages that exist."""
from __future__ import annotations

import importlib.util
import re

import pytest
from tests.helpers import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md") if "```python" in p.read_text())


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    blocks = re.findall(r"^```python\n(.*?)^```$", (DOCS / page).read_text(), re.M | re.S)
    runnable = [code for code in blocks if importlib.util.find_spec("torch") or not re.search(r"^import torch$", code, re.M)]
    if not runnable:
        pytest.skip(f"{page}'s examples need PyTorch ('.[torch]')")
    for number, code in enumerate(runnable):
        exec(compile(code, f"{page} block {number}", "exec"), namespace)


@pytest.mark.parametrize("page", ["../README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_page_names_files_modules_and_pages_that_exist(page):
    text, root = (DOCS / page).read_text(), DOCS.parent
    for path in re.findall(r"`((?:stax|solvers|instances|experiments|tests)/[\w/.]*)", text):
        path = path.rstrip(".")
        assert (root / path).exists(), f"{page} names {path}, which does not exist"
    for module in re.findall(r"python -m (experiments\.\w+|instances\.\w+)", text):
        assert importlib.util.find_spec(module), f"{page} runs {module}, which does not exist"
    for link in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]+)?\)", text):
        target = ((DOCS / page).parent / link).resolve()
        assert target.exists(), f"{page} links {link}, which does not exist"
