"""The shipped instances of real PyTorch graphs load and solve WITHOUT torch (never skipped)."""
from __future__ import annotations

import json
import sys

import pytest

from experiments.models.real_zoo import REAL_TRAINING
from experiments.models.zoo import TRAINING
from instances.store import load
from stax.errors import StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem
from stax.scheduler.strategies import run_fusion, run_order
from tests.helpers import ROOT

DATA = ROOT / "instances" / "data" / "torch"
MODELS = ("transformer_forward", "transformer_train", "mlp_forward", "mlp_train", "norm_net_train", "conv_net_train",
          "adam", *TRAINING)  # the zoo's names only: experiments.models.zoo imports torch when it builds a model


@pytest.mark.parametrize("model", MODELS)
def test_fusion_problem_loads_and_solves(model):
    path = DATA / f"{model}.fusion.json"
    problem = FusionProblem.load(path)
    assert problem.name.startswith(f"torch/{model} ")
    provenance = json.loads(path.read_text())["provenance"]
    assert provenance["torch"].startswith("2.13") and provenance["model"] and provenance["inputs"]
    greedy = run_fusion("greedy", problem)
    assert greedy.cost is None or greedy.cost <= problem.unfused_cost()
    assert problem.cost(greedy.partition) <= problem.unfused_cost()


@pytest.mark.parametrize("model", MODELS)
def test_order_problem_loads_and_solves(model):
    problem = OrderProblem.load(DATA / f"{model}.order.json")
    peaks = {name: problem.peak(run_order(name, problem).order) for name in ("original", "lpmf", "bfs", "dfs")}
    best = problem.peak(run_order("best", problem).order)
    assert best == min(peaks.values()) > 0


#: the real zoo's shipped training steps (experiments.models.real_zoo; gzip-compressed)
REAL = sorted(path.name.removesuffix(".order.json.gz") for path in (DATA / "real").glob("*.order.json.gz"))


def test_the_real_zoo_ships_its_training_steps():
    assert {f"real/{name}" for name in REAL} <= set(REAL_TRAINING) and len(REAL) >= 6


@pytest.mark.parametrize("model", REAL)
def test_real_zoo_order_problem_loads_and_solves(model):
    problem = load(f"data/torch/real/{model}.order").order
    peaks = {name: problem.peak(run_order(name, problem).order) for name in ("original", "lpmf", "bfs", "dfs")}
    assert problem.peak(run_order("best", problem).order) == min(peaks.values()) > 0


@pytest.mark.parametrize("model", [m for m in REAL if m.startswith("hf_")])  # the smaller graphs: seconds each
def test_real_zoo_fusion_problem_loads_and_solves(model):
    problem = load(f"data/torch/real/{model}.fusion").fusion
    assert problem.name.startswith(f"torch/real/{model} ") and len(problem.nodes) > 100
    assert problem.cost(run_fusion("greedy", problem).partition) <= problem.unfused_cost()


def test_training_graphs_are_large():
    assert len(FusionProblem.load(DATA / "transformer_train.fusion.json").nodes) > 50
    assert len(OrderProblem.load(DATA / "transformer_train.order.json").tasks) > 30


def test_front_end_without_torch_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes ``import torch`` fail, installed or not
    from stax.torch.capture import require_torch
    with pytest.raises(StaxError, match=r"pip install 'stax\[torch\]'"):
        require_torch()
