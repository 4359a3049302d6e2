"""What a newcomer reads when something is wrong or counted: a traced function's shape error and
numpy keyword name the user's file and line, a config's unknown key is named, and the command line
counts kernels the same way when it schedules and when it builds (issue 53)."""
from __future__ import annotations

import importlib.util
import re
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

import stax
from experiments.cli import main
from experiments.sweep.config import ConfigError, parse_config

MODEL = '''\
def add_mismatched(x, y):
    z = x.exp()
    return z + y


def numpy_keyword(x):
    return x.sum(axis=1)


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)
'''


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    spec = importlib.util.spec_from_file_location("model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _line_of(text: str) -> int:
    return MODEL.splitlines().index(text) + 1


def test_a_shape_mismatch_names_the_users_line(model):
    with pytest.raises(stax.ShapeError) as error:
        stax.schedule(model.add_mismatched, np.ones((3, 4), np.float32), np.ones(5, np.float32))
    message = str(error.value)
    assert "cannot be broadcast" in message and "\n" not in message
    assert message.endswith(f"(at model.py:{_line_of('    return z + y')})")


def test_numpys_axis_keyword_says_use_dim_and_where(model):
    with pytest.raises(stax.UnsupportedError) as error:
        stax.schedule(model.numpy_keyword, np.ones((3, 4), np.float32))
    message = str(error.value)
    assert "use dim= instead" in message and "axis=" in message
    assert message.endswith(f"(at model.py:{_line_of('    return x.sum(axis=1)')})")


def test_numpys_sum_with_axis_names_the_method_and_dim():
    with pytest.raises(stax.UnsupportedError) as error:
        stax.schedule(lambda x: np.sum(x, axis=-1), np.ones((3, 4), np.float32))
    message = str(error.value)
    assert message.startswith("np.sum on a traced tensor: use the tensor method: x.sum()")
    assert "axis= is the method's dim=" in message and "(at test_error_lines.py:" in message


def test_an_unknown_config_key_is_named_with_the_closest_known_one():
    data = {"fusion": ["greedy"], "order": ["best"], "reference": {"tim_limit": 5},
            "families": [{"name": "layered", "sizes": [8]}]}
    with pytest.raises(ConfigError) as error:
        parse_config(data, "sweep.toml")
    message = str(error.value)
    assert message.startswith("sweep.toml: field 'reference.tim_limit' is not a known key")
    assert "did you mean 'time_limit'?" in message and "an unknown key" not in message


def test_modeled_traffic_is_an_attribute_and_the_old_call_warns(model):
    f = stax.compile(model.softmax, np.ones((8, 16), np.float32))
    expected = f.fusion_problem.cost(f.fusion.partition)
    assert f.modeled_traffic == expected and isinstance(f.modeled_traffic, int)
    with pytest.warns(DeprecationWarning, match="attribute now"):
        assert f.modeled_traffic() == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f"traffic {f.modeled_traffic} B" in repr(f)


def test_schedule_and_compile_print_one_kernel_count(model, tmp_path):
    target, schedule_file = f"{model.__file__}:softmax", str(tmp_path / "s.json")
    common = ["--shapes", "16x32", "--fusion", "none"]
    scheduled = CliRunner().invoke(main, ["schedule", target, *common, "-o", schedule_file], catch_exceptions=False)
    built = CliRunner().invoke(main, ["compile", target, *common, "--no-log"], catch_exceptions=False)
    replayed = CliRunner().invoke(main, ["compile", target, "--schedule", schedule_file, "--no-log"],
                                  catch_exceptions=False)
    count = re.compile(r"(\d+) kernels? in (\d+) calls?")
    counts = [count.search(r.output).groups() for r in (scheduled, built, replayed)]
    f = stax.compile(model.softmax, np.ones((16, 32), np.float32), fusion="none")
    assert counts == [(str(len(f.block_kernels)), str(len(f.kernels)))] * 3
    assert len(f.block_kernels) == len(f.fusion.partition) > len(f.kernels)  # 4 unfused kernels share a region
    assert count.search(repr(f)).groups() == counts[0]
