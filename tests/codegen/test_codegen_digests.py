"""The C++ of the suite, a seeded fuzz sample and the model zoo is byte-identical to the digests
saved in tests/data/cpp_digests.json; a change that means to alter code generation writes them
again (``python -m experiments.studies.codegen_digests --write tests/data/cpp_digests.json``) and says so."""
from __future__ import annotations

import importlib.util
import json

import pytest

from experiments.studies.codegen_digests import digests
from tests.helpers import ROOT

SAVED = json.loads((ROOT / "tests" / "data" / "cpp_digests.json").read_text())


@pytest.mark.parametrize("group", ["suite", "fuzz", "zoo"])
def test_generated_cpp_is_the_saved_cpp(group):
    if group == "zoo" and importlib.util.find_spec("torch") is None:
        pytest.skip("the model zoo needs the optional PyTorch front end: pip install -e '.[torch]'")
    made = digests((group,))
    assert len(made) >= 60
    assert {case: digest for case, digest in made.items() if SAVED.get(case) != digest} == {}
