"""The minimum-cut step bound and the last-step bound (solvers/order/cut_bound.py) and window
improvement (solvers/order/window.py) against brute force on hundreds of seeded small graphs,
also with sizes of 2^40 bytes and more; the cut bound against a CP-SAT closure model on a
whole-model graph."""
import random

import networkx as nx
from ortools.sat.python import cp_model

from solvers.order.cut_bound import cut_lower_bound, group_bound, last_step_bound, output_sinks, step_bound
from solvers.order.decompose import Closure
from solvers.order.dp import bounded_order
from solvers.order.window import improve, solve_window
from stax.scheduler.problems import OrderProblem
from tests.solvers.test_order_exact import small_problems
from tests.solvers.test_solver_bounds import huge_sizes


def every_order(problem: OrderProblem) -> list[tuple[str, ...]]:
    return [tuple(o) for o in nx.all_topological_sorts(problem.dag())]


def small(count: int):
    """The small seeded problems of test_order_exact with at most 8 tasks, and each with huge sizes."""
    for p in small_problems(count):
        if len(p.tasks) <= 8:
            yield p
            yield huge_sizes(p, len(p.name))


def test_step_and_last_step_bounds_equal_the_least_live_bytes_over_all_orders():
    checked = 0
    for p in small(240):
        orders = every_order(p)
        for task in p.tasks:
            assert step_bound(p, task) == min(p.live_bytes(o)[o.index(task)] for o in orders), (p.name, task)
        assert last_step_bound(p) == min(p.live_bytes(o)[-1] for o in orders), p.name
        optimum = min(map(p.peak, orders))
        for order in orders[:: max(1, len(orders) // 5)]:
            assert cut_lower_bound(p, order) <= optimum, p.name
        checked += 1
    assert checked > 250


def test_group_bound_equals_the_least_live_bytes_at_the_last_of_the_group():
    rng = random.Random(3)
    for p in small(200):
        orders = every_order(p)
        for group in (rng.sample(p.tasks, rng.randint(1, len(p.tasks))), output_sinks(p)):
            if not group:
                continue
            last = [max(group, key=o.index) for o in orders]
            least = min(p.live_bytes(o)[o.index(w)] for o, w in zip(orders, last))
            assert group_bound(p, group) == least, (p.name, group)
            above = least + rng.choice([-1, 0, 1]) * rng.randint(0, least)
            early = group_bound(p, group, above=above)  # at most ``above`` exactly when the bound is
            assert early == least if least > above else early <= above, (p.name, group, above)


def test_window_reorder_is_the_least_peak_of_its_steps_and_improve_never_rises():
    rng = random.Random(5)
    for p in small(150):
        orders = every_order(p)
        order = rng.choice(orders)
        start = rng.randrange(len(order))
        stop = rng.randrange(start + 1, len(order) + 1)
        same_ends = [o for o in orders if o[:start] == order[:start] and o[stop:] == order[stop:]]
        better = solve_window(p, order, start, stop, 10 ** 6, None)
        assert better in same_ends, p.name
        assert max(p.live_bytes(better)[start:stop]) == min(max(p.live_bytes(o)[start:stop]) for o in same_ends)
        improved = improve(p, order, width=rng.randint(1, 3))
        assert p.validate(improved) and p.peak(improved) <= p.peak(order), p.name


def test_bounded_order_with_cut_bounds_equals_brute_force():
    proven = 0
    for p in small(200):
        optimum = min(map(p.peak, every_order(p)))
        result = bounded_order(p, max_states=3)  # the programme stops early: bounds and windows must carry it
        assert p.validate(result.order) and result.bound <= optimum <= result.peak, p.name
        proven += result.status == "optimal"
        assert (result.status == "optimal") == (result.bound == result.peak)
    assert proven > 100


def closure_minimum(problem: OrderProblem, task: str) -> int:
    """The least live bytes at ``task``'s step as a 0-1 model solved by CP-SAT: x[t] says t runs
    before ``task``; an independent formulation of the quantity ``step_bound`` computes by a cut."""
    closure = Closure.of(problem)
    v = closure.index[task]
    model = cp_model.CpModel()
    x = {t: model.new_bool_var(t) for t in problem.tasks}
    for t, i in closure.index.items():
        if closure.ancestors[v] >> i & 1:
            model.add(x[t] == 1)
        elif closure.descendants[v] >> i & 1 or t == task:
            model.add(x[t] == 0)
    for a, b in problem.dependencies().edges:
        model.add_implication(x[b], x[a])
    terms, produced = [], 0
    for buf in problem.buffers:
        if buf.producer == task:
            produced += buf.size
            continue
        live = model.new_bool_var(buf.name)
        if buf.is_output:
            model.add(live == x[buf.producer])
        for u in set(buf.users) - {buf.producer} if not buf.is_output else ():
            model.add(live >= x[buf.producer] - x[u])
        terms.append(buf.size * live)
    model.minimize(sum(terms))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(model) == cp_model.OPTIMAL
    return produced + round(solver.objective_value)


def test_whole_model_training_graph_is_proven_and_its_cut_bound_checked_by_cpsat():
    from instances.store import load
    p = load("data/models/gpt2-12-train.order").order_problem()
    result = bounded_order(p)
    assert result.status == "optimal" and result.peak == result.bound
    live = p.live_bytes(result.order)
    closure = Closure.of(p)
    tops = [t for t, bytes_ in zip(result.order, live) if bytes_ == result.peak]
    top = next(t for t in tops if step_bound(p, t, closure) == result.peak)  # the step that proves it
    assert closure_minimum(p, top) == result.peak
