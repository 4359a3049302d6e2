"""The series decomposition of orders (solvers/order/decompose.py) and the pruned down-set DP
against brute force, the undecomposed DP and CP-SAT on hundreds of seeded small graphs."""
import random

import networkx as nx

from instances.dags import layered_dag, order_problem, series_parallel_dag
from instances.training import training_order
from solvers.brute_force import min_peak
from solvers.order.decompose import join, live_set_lower_bound, segment_problems, segments
from solvers.order.dp import bounded_order
from solvers.order.downsets import least_peak
from stax.scheduler.problems import Buffer, OrderProblem
from stax.scheduler.strategies import run_order


def chained(seed: int) -> OrderProblem:
    """Two or three small random DAGs in series (every sink of one feeds a join task that feeds
    the next), with buffers skipping over joins, early outputs and dead buffers: segments that
    inherit buffers, sources that are pinned and some that are not."""
    rng = random.Random(seed)
    g, last = nx.DiGraph(), None
    for b in range(rng.choice([2, 3])):
        part = (layered_dag if rng.random() < 0.5 else series_parallel_dag)(rng.randint(2, 3), seed * 7 + b)
        part = nx.relabel_nodes(part, {v: f"b{b}{v}" for v in part})
        g.update(part)
        if last is not None:
            g.add_edges_from((last, v) for v in part if part.in_degree(v) == 0)
        last = f"j{b}"
        g.add_edges_from((v, last) for v in part if part.out_degree(v) == 0)
    tasks = tuple(nx.lexicographical_topological_sort(g))
    buffers = [Buffer(f"o_{v}", rng.randint(1, 64), v, tuple(g.successors(v)), g.out_degree(v) == 0 or rng.random() < 0.15)
               for v in tasks]
    for v in rng.sample(tasks, 2):  # dead buffers: live at their producer's step only
        buffers.append(Buffer(f"dead_{v}", rng.randint(1, 64), v, ()))
    for k in range(rng.randint(1, 3)):  # skips: an early task's buffer read much later
        a, b = sorted(rng.sample(range(len(tasks)), 2))
        buffers.append(Buffer(f"skip{k}", rng.randint(1, 64), tasks[a], (tasks[b],)))
    return OrderProblem(tasks, tuple(buffers), name=f"chained-{seed}")


def small_problems(count: int):
    for seed in range(count):
        if seed % 3 == 0:
            yield chained(seed)
        else:
            g = (layered_dag if seed % 3 == 1 else series_parallel_dag)(3 + seed % 6, seed)
            yield order_problem(g, seed)


def random_orders(problem: OrderProblem, count: int, seed: int):
    rng, dag = random.Random(seed), problem.dependencies()
    for _ in range(count):
        yield tuple(dag.topological_order(key=lambda t: rng.random()))


def test_every_order_peaks_at_its_worst_segment():
    """Item 2 of the composition proof: live bytes at a step depend on its segment's order only."""
    for p in small_problems(150):
        parts, pieces = segments(p), segment_problems(p)
        for order in random_orders(p, 5, len(p.tasks)):
            restricted = [tuple(t for t in order if t in set(part)) for part in parts]
            assert order == tuple(t for r in restricted for t in r), p.name  # orders are concatenations
            with_before = [seg.tasks[:len(seg.tasks) - len(r)] + r for seg, r in zip(pieces, restricted)]
            assert join(with_before, pieces) == order
            assert p.peak(order) == max(seg.peak(r) for seg, r in zip(pieces, with_before)), p.name


def test_decomposed_dp_equals_undecomposed_and_brute_force():
    multi = 0
    for p in small_problems(200):
        optimum = min_peak(p)[0] if len(p.tasks) <= 7 else None
        undecomposed = p.peak(least_peak(p, run_order("original", p).order, 10 ** 6, None)[0])
        composed = max(p_.peak(least_peak(p_, p_.tasks, 10 ** 6, None)[0]) for p_ in segment_problems(p))
        result = bounded_order(p)
        multi += len(segments(p)) > 1
        assert p.validate(result.order) and result.status == "optimal", p.name
        assert result.peak == result.bound == undecomposed == composed == run_order("dp", p).peak, p.name
        assert live_set_lower_bound(p) <= result.peak
        if optimum is not None:
            assert result.peak == optimum, p.name
    assert multi > 60  # the decomposition is exercised


def test_decomposed_dp_equals_cpsat_on_larger_chains():
    for seed in range(20):
        p = chained(1000 + seed)
        assert bounded_order(p).peak == run_order("cpsat", p, workers=1).peak, p.name


def test_training_family_is_proven_and_a_stopped_search_is_bounded():
    p = training_order(300, 1)
    result = bounded_order(p)
    assert result.status == "optimal" and result.peak == result.bound
    assert result.peak <= run_order("best", p).peak
    wide = order_problem(layered_dag(30, seed=3, layers=3), 3)
    stopped, proven = bounded_order(wide, max_states=50), bounded_order(wide)
    assert proven.status == "optimal" and stopped.status == "feasible"
    assert stopped.bound <= proven.peak < stopped.peak


MODEL_NODES = {"gpt2-12-forward.fusion": 255, "gpt2-12-train.order": 826, "gpt2-30-train.order": 2068,
               "bert-12-forward.fusion": 276, "bert-12-train.order": 829, "resnet-8-forward.fusion": 40,
               "resnet-8-train.fusion": 195, "mixer-8-forward.fusion": 99, "mixer-8-train.fusion": 441}


def test_whole_model_instances_load_with_their_node_counts():
    from instances.store import load, shipped
    names = [n for n in shipped() if n.startswith("data/models/")]
    assert sorted(n.removeprefix("data/models/") for n in names) == sorted(MODEL_NODES)
    for name in names:
        inst = load(name)
        assert len(inst.order_problem().tasks) == MODEL_NODES[name.removeprefix("data/models/")], name
        assert len(inst.content_hash()) == 16
    assert load("training/500/2").kind == "order" and load("training_fusion/60/2").kind == "fusion"


def test_forward_model_order_is_proven_by_decomposition():
    from instances.store import load
    p = load("data/models/gpt2-12-forward.fusion").order_problem()
    result = bounded_order(p)
    assert result.status == "optimal" and result.peak == result.bound <= run_order("best", p).peak
    assert result.info.stats["segments"] > 100
