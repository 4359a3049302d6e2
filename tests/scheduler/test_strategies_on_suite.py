"""Every strategy compiles the program suite into kernels that compute the right outputs:
exact fusion and orders (CP-SAT, the down-set DP), the cut-based fusion (mwc), the random
baseline; every partition and order passes the validators (run_fusion / run_order)."""
import numpy as np
import pytest

import stax
from instances.programs import PROGRAMS
from stax.reference import evaluate
from stax.scheduler.strategies import run_order

COMBINATIONS = [
    ("cpsat", "cpsat", {"fusion_params": {"time_limit": 5.0}, "order_params": {"time_limit": 5.0}}),
    ("mwc", "dp", {}),
    ("random", "lpmf", {}),
]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("fusion,order,params", COMBINATIONS, ids=[f"{f}-{o}" for f, o, _ in COMBINATIONS])
def test_suite_compiles_correctly_with_every_strategy(name, fusion, order, params):
    program = PROGRAMS[name]
    arrays = program.inputs(16, seed=5)
    compiled = stax.compile(program.fn, *arrays, fusion=fusion, order=order, **params)
    got = compiled(*[a.copy() for a in arrays])
    got = got if isinstance(got, tuple) else (got,)
    want = evaluate(compiled.graph, *[a.copy() for a in arrays], upcast=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    greedy = stax.compile(program.fn, *arrays, fusion="greedy")
    if compiled.fusion.status == "optimal":  # the exact optimum is never above the heuristic
        assert compiled.modeled_traffic <= greedy.modeled_traffic
    if compiled.order.status == "optimal":  # and the optimal order never above the best heuristic
        assert compiled.order.peak <= run_order("best", compiled.order_problem).peak
