import doctest
import json

import pytest

import stax.scheduler.problems
from stax.errors import InstanceFormatError, InvalidScheduleError
from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem, OrderProblem, kernel_order_problem


def test_doctests():
    assert doctest.testmod(stax.scheduler.problems).failed == 0


def chain():
    return FusionProblem(
        nodes=("a", "b", "c"),
        buffers=(Buffer("x", 10, None, ("a", "c")), Buffer("ta", 4, "a", ("b",)),
                 Buffer("tb", 4, "b", ("c",)), Buffer("y", 2, "c", (), is_output=True)),
        forbidden=(ForbiddenPair("a", "c", "test"),),
    )


def test_cost_counts_reads_per_block_and_writes_once():
    p = chain()
    assert p.cost([("a",), ("b",), ("c",)]) == 10 + 10 + 4 + 4 + 4 + 4 + 2
    assert p.cost([("a", "b"), ("c",)]) == 10 + 10 + 4 + 4 + 2


def test_validator_rejects_forbidden_pair_and_cycle():
    p = chain()
    with pytest.raises(InvalidScheduleError, match="forbidden pair"):
        p.validate([("a", "b", "c")])
    q = FusionProblem(nodes=("a", "b", "c"),
                      buffers=(Buffer("ta", 1, "a", ("b",)), Buffer("tb", 1, "b", ("c",))))
    with pytest.raises(InvalidScheduleError, match="cycle"):
        q.validate([("a", "c"), ("b",)])
    with pytest.raises(InvalidScheduleError, match="in no block"):
        q.validate([("a", "b")])


def test_json_round_trip(tmp_path):
    p = chain()
    path = tmp_path / "p.json"
    p.save(path)
    assert FusionProblem.load(path) == p


def test_malformed_file_names_field(tmp_path):
    data = chain().to_dict()
    data["buffers"][1]["size"] = "big"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InstanceFormatError, match=r"bad.json.*buffers\[1\].size"):
        FusionProblem.load(path)


def test_order_peak_and_validation():
    op = kernel_order_problem(chain(), [("a",), ("b",), ("c",)], names=["k0", "k1", "k2"])
    assert op.peak(["k0", "k1", "k2"]) == 4 + 4  # step 1 holds ta (read) and tb (written)
    assert op.lifetimes(["k0", "k1", "k2"])["y"] == (2, 2)
    with pytest.raises(InvalidScheduleError, match="not topological"):
        op.validate(["k1", "k0", "k2"])
    assert OrderProblem.from_dict(op.to_dict()) == op
