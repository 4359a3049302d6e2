"""What a strategy is (the FusionStrategy and OrderStrategy protocols) and what it returns: a
Status and a typed info, also when a strategy gives plain strings and dicts."""
from __future__ import annotations

import pytest

import stax
from instances import store
from stax.errors import StaxError
from stax.scheduler.problems import kernel_order_problem
from stax.scheduler.strategies import (FusionInfo, FusionResult, FusionStrategy, OrderInfo, OrderStrategy, Status, fusion_strategies,
                           order_strategies, run_fusion, run_order)


@pytest.mark.parametrize("registry, protocol", [(fusion_strategies, FusionStrategy), (order_strategies, OrderStrategy)])
def test_every_registered_strategy_is_what_its_protocol_states(registry, protocol):
    for name in registry.names():
        if name == "replay":  # made from a saved schedule: it needs one
            continue
        assert isinstance(registry.resolve(name), protocol), name


def test_a_strategys_strings_and_dict_become_a_status_and_a_typed_info():
    problem = store.load("layered/8/0").fusion

    class Plain:
        name = "plain"

        def solve(self, p):
            return FusionResult(tuple((n,) for n in p.nodes), "optimal", info={"note": "n", "tries": 3})

    result = run_fusion(Plain(), problem)
    assert result.status is Status.OPTIMAL and result.status == "optimal"
    assert result.info == FusionInfo(strategy="plain", note="n", stats={"tries": 3})
    assert result.info.as_dict() == {"strategy": "plain", "note": "n", "tries": 3}
    assert FusionInfo.of(result.info.as_dict()) == result.info


def test_a_status_no_strategy_gives_is_refused():
    with pytest.raises(StaxError, match="status 'solved'; use one of heuristic, optimal, feasible, unknown"):
        FusionResult((("a",),), "solved")


def test_best_reports_its_candidates_in_typed_fields():
    fusion = store.load("layered/8/0").fusion
    problem = kernel_order_problem(fusion, [(n,) for n in fusion.nodes])
    best = run_order("best", problem)
    assert isinstance(best.info, OrderInfo) and best.info.strategy == "best"
    assert best.info.candidates[best.info.chosen] == best.peak == min(best.info.candidates.values())
    assert stax.run_order("original", problem).info.as_dict() == {"strategy": "original"}
