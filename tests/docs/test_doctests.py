"""The examples in the docstrings run as written."""
import doctest
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import instances
import stax


def _modules_with_examples() -> list[str]:
    names = []
    for package in (stax, instances):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            spec = importlib.util.find_spec(info.name)
            if spec and spec.origin and spec.origin.endswith(".py") and ">>> " in Path(spec.origin).read_text():
                names.append(info.name)
    return names


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
