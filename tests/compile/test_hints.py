"""One-line errors with a hint for the common mistakes: numpy on a traced tensor, a mistyped name
(did you mean), a wrong count of shapes, an unknown dtype, a time limit at or below 0."""
import numpy as np
import pytest
from click.testing import CliRunner

import stax
from experiments.sweep.config import ConfigError, parse_config
from experiments.cli import main
from stax.util.suggest import closest, did_you_mean

X = np.random.default_rng(0).random((4, 8)).astype(np.float32)


@pytest.mark.parametrize("fn, hint", [
    (lambda x: np.exp(x), "np.exp on a traced tensor: use the tensor method: x.exp()"),
    (lambda x: np.sqrt(x), "np.sqrt on a traced tensor: use the tensor method: x.sqrt()"),
    (lambda x: np.absolute(x), "np.absolute on a traced tensor: use the tensor method: x.abs()"),
    (lambda x: np.maximum(x, 0), "np.maximum on a traced tensor: use the tensor method: x.maximum(y)"),
    (lambda x: np.sum(x, axis=-1), "np.sum on a traced tensor: use the tensor method: x.sum()"),
    (lambda x: np.max(x), "np.max on a traced tensor: use the tensor method: x.amax()"),
    (lambda x: np.where(x > 0, x, 0), "np.where on a traced tensor: use stax.where(cond, a, b)"),
    (lambda x: np.arctan(x), "np.arctan on a traced tensor: stax has no arctan; the closest tensor methods are"),
])
def test_numpy_function_on_a_traced_tensor_names_the_method(fn, hint):
    with pytest.raises(stax.UnsupportedError) as error:
        stax.compile(fn, X)
    assert str(error.value).startswith(hint) and "\n" not in str(error.value)


def test_numpy_scalars_on_the_left_still_compute():
    fn = lambda x: np.float32(2) * x - np.float64(1) + (np.float32(0.5) < x) + np.int64(3) // (x + 1)  # noqa: E731
    np.testing.assert_allclose(stax.compile(fn, X)(X), 2 * X - 1 + (0.5 < X) + 3 // (X + 1), rtol=1e-6)


def test_unsupported_method_names_only_the_closest():
    with pytest.raises(stax.UnsupportedError, match=r"^Tensor\.softmx is not supported by stax; the closest "
                                                     r"supported methods: softmax, log_softmax \(at test_hints\.py:\d+\)$"):
        stax.compile(lambda x: x.softmx(-1), X)


@pytest.mark.parametrize("call, message", [
    (lambda: stax.compile(lambda x: x, X, fusion="gredy"), "did you mean 'greedy'?"),
    (lambda: stax.compile(lambda x: x, X, order="lpfm"), "did you mean 'lpmf'?"),
    (lambda: stax.compile(lambda x: x, X, fusoin="greedy"), "did you mean 'fusion'?"),
    (lambda: stax.compile(lambda x: x, X, isa="avx52"), "did you mean 'avx512'?"),
    (lambda: stax.TensorSpec((3,), "floa32"), "did you mean 'float32'?"),
    (lambda: stax.compile(lambda x: x, X, fusion="cpsat", fusion_params={"time_limt": 3}), "did you mean 'time_limit'?"),
])
def test_name_typos_get_did_you_mean(call, message):
    with pytest.raises(stax.StaxError, match=message):
        call()


def test_closest_is_case_insensitive_and_empty_when_far():
    assert closest("GREEDY", ["greedy", "none"]) == ["greedy"]
    assert did_you_mean("zzzz", ["greedy", "none"]) == ""


BASE = {"fusion": ["greedy"], "order": ["best"], "families": [{"name": "layered", "sizes": [4]}]}
TIME_LIMIT = "a time limit must be a number of seconds above 0 (for example 5)"


@pytest.mark.parametrize("data, field", [
    (BASE | {"fusion": ["gredy"]}, "field 'fusion[0].name': expected a strategy name"),
    (BASE | {"families": [{"name": "layerd", "sizes": [4]}]}, "field 'families[0].name'"),
    (BASE | {"famlies": []}, "field 'famlies'"),
    (BASE | {"reference": {"order": "dpp"}}, "field 'reference.order'"),
    (BASE | {"measures": ["peak", "trafic"]}, "field 'measures'"),
    (BASE | {"dependence": ["paralel"]}, "field 'dependence'"),
])
def test_config_name_typos_get_did_you_mean(data, field):
    with pytest.raises(ConfigError, match=r"did you mean '[a-z_]+'\?$") as error:
        parse_config(data, "x.toml")
    assert field in str(error.value)


@pytest.mark.parametrize("data, where", [
    (BASE | {"reference": {"time_limit": 0}}, "x.toml: field 'reference.time_limit': time_limit=0: "),
    (BASE | {"cell_timeout": -1}, "x.toml: field 'cell_timeout': cell_timeout=-1: "),
    (BASE | {"fusion": [{"name": "cpsat", "params": {"time_limit": 0}}]}, "x.toml: field 'fusion[0]': params time_limit=0: "),
    (BASE | {"order": [{"name": "dp", "params": {"time_limit": -2}}]}, "x.toml: field 'order[0]': params time_limit=-2: "),
])
def test_time_limits_at_or_below_zero_are_refused_alike_in_configs(data, where):
    with pytest.raises(ConfigError) as error:
        parse_config(data, "x.toml")
    assert str(error.value) == where + TIME_LIMIT


@pytest.mark.parametrize("value", [0, -1, 0.0])
def test_time_limits_at_or_below_zero_are_refused_alike_in_compile(value):
    with pytest.raises(stax.StaxError) as error:
        stax.compile(lambda x: x + 1, X, fusion="cpsat", fusion_params={"time_limit": value})
    assert str(error.value) == f"fusion_params time_limit={value!r}: {TIME_LIMIT}"


@pytest.fixture
def two_inputs(tmp_path):
    path = tmp_path / "two.py"
    path.write_text("def add(x, y):\n    return x + y\n")
    return f"{path}:add"


@pytest.mark.parametrize("args, line", [
    (["--shapes", "4x8"], "Error: Invalid value for --shapes: 1 shape(s) for 2 argument(s) of add(x, y); give one "
                          "shape per argument, separated by commas, e.g. --shapes 64x128,64x128"),
    (["--shapes", "4x8,4x8", "--dtype", "floa32"], "Error: Invalid value for --dtype: dtype 'floa32' is not "
                                                   "supported; did you mean 'float32'? use one of float32, float64, "
                                                   "int32, int64, bool"),
    (["--shapes", "4x8,4x8", "--fusion-param", "time_limit=-1", "--fusion", "cpsat"],
     f"Error: --fusion-param time_limit=-1: {TIME_LIMIT}"),
    (["--shapes", "4x8,4x8", "--order", "cpsatt"], "Error: no order strategy named 'cpsatt'; did you mean 'cpsat'?"),
])
def test_compile_command_bad_inputs_end_in_one_line(two_inputs, args, line):
    result = CliRunner().invoke(main, ["compile", two_inputs, *args])
    assert result.exit_code == 2 if "--shapes" in line or "--dtype" in line else result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith(line)
    assert "Traceback" not in result.output
