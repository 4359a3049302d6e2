"""Fusion by regions (solvers/fusion/decompose.py): the cost is additive over regions, and the
strategy "cpsat", which solves pieces, equals its undecomposed model (``decompose=False``) and
brute force on hundreds of seeded graphs."""
import random
from itertools import islice

import networkx as nx
import pytest

from instances.dags import fusion_problem, layered_dag, series_parallel_dag
from solvers.brute_force import min_fusion_cost, set_partitions
from solvers.fusion.bounds import compulsory_traffic
from solvers.fusion.decompose import piece_problems, pieces, region_problem, regions
from stax.errors import InvalidScheduleError
from stax.scheduler.problems import ForbiddenPair, FusionProblem
from stax.scheduler.strategies import run_fusion


def with_externs(seed: int) -> FusionProblem:
    """A small random DAG (a chain of two pieces through a join, or one piece) in which a few
    nodes are forbidden with every other node, as extern kernels are."""
    rng = random.Random(seed)
    g = (layered_dag if seed % 2 else series_parallel_dag)(rng.randint(3, 5), seed)
    if seed % 3:
        h = nx.relabel_nodes(series_parallel_dag(rng.randint(2, 4), seed + 1), lambda v: f"n{int(v[1:]) + 20}")
        g.add_edges_from(h.edges)
        g.add_nodes_from(h.nodes)
        g.add_edges_from((v, "n19") for v in list(g) if g.out_degree(v) == 0 and v not in h and v != "n19")
        g.add_edges_from(("n19", v) for v in h if h.in_degree(v) == 0)
    p = fusion_problem(g, seed, forbidden_fraction=0.1)
    externs = rng.sample(p.nodes, k=min(len(p.nodes), rng.randint(1, 3)))
    pairs = {frozenset((q.a, q.b)) for q in p.forbidden}
    extra = [ForbiddenPair(x, v, "extern") for x in externs for v in p.nodes
             if v != x and frozenset((x, v)) not in pairs and (v not in externs or x < v)]
    return FusionProblem(p.nodes, p.buffers, p.forbidden + tuple(extra), name=f"externs-{seed}")


def valid(problem: FusionProblem, blocks) -> bool:
    try:
        problem.validate(blocks)
    except InvalidScheduleError:
        return False
    return True


def sharing_parts(problem: FusionProblem, block) -> list[list[str]]:
    """``block`` split into the connected parts of its sharing graph (a common buffer or an extra edge)."""
    g = nx.Graph()
    g.add_nodes_from(block)
    for buf in problem.buffers:
        touch = [v for v in (buf.producer, *buf.users) if v in g]
        g.add_edges_from(zip(touch, touch[1:]))
    g.add_edges_from((a, b) for a, b in problem.extra_edges if a in g and b in g)
    return [sorted(c) for c in nx.connected_components(g)]


def random_valid_partition(problem: FusionProblem, rng: random.Random) -> list[list[str]]:
    """Singletons merged two blocks at a time at random, each merge kept when valid."""
    blocks = [[v] for v in problem.nodes]
    for _ in range(3 * len(blocks)):
        if len(blocks) < 2:
            break
        a, b = rng.sample(range(len(blocks)), 2)
        merged = [blk for k, blk in enumerate(blocks) if k not in (a, b)] + [blocks[a] + blocks[b]]
        if valid(problem, merged):
            blocks = merged
    return blocks


def test_splitting_blocks_into_sharing_parts_keeps_validity_and_cost_and_lands_in_pieces():
    """Item 1 of the pieces' proof, on random valid partitions, and that the optimum of brute
    force lies in the pieces once split."""
    checked = 0
    for seed in range(120):
        p = with_externs(seed)
        piece_of = {v: k for k, piece in enumerate(pieces(p)) for v in piece}
        rng = random.Random(seed)
        for _ in range(8):
            blocks = random_valid_partition(p, rng)
            split = [part for b in blocks for part in sharing_parts(p, b)]
            assert valid(p, split) and p.cost(split) == p.cost(blocks), p.name
            assert all(len({piece_of[v] for v in part}) == 1 for part in split), p.name
            checked += len(blocks) < len(p.nodes)
    assert checked > 500


def test_cost_is_additive_over_regions_and_pieces():
    checked = 0
    for seed in range(300):
        p = with_externs(seed)
        parts = regions(p) if seed % 2 else pieces(p)
        assert sorted(v for r in parts for v in r) == sorted(p.nodes)
        subs = [region_problem(p, r) for r in parts]
        rng = random.Random(seed)
        for _ in range(5):  # random partitions within regions: valid exactly when every region's is
            blocks = [b for r in parts for b in rng.choice(list(islice(set_partitions(list(r)), 50)))]
            per_region = [[b for b in blocks if set(b) <= set(r)] for r in parts]
            assert valid(p, blocks) == all(valid(sub, bs) for sub, bs in zip(subs, per_region)), p.name
            if valid(p, blocks):
                assert p.cost(blocks) == sum(sub.cost(bs) for sub, bs in zip(subs, per_region)), p.name
                checked += 1
    assert checked > 200


def test_decomposed_cpsat_equals_the_undecomposed_model_and_brute_force():
    split = brute = 0
    for seed in range(300):
        p = with_externs(seed)
        result = run_fusion("cpsat", p, workers=1)
        split += len(pieces(p)) > len(regions(p)) > 1
        assert result.status == "optimal" and result.bound == result.cost, p.name
        assert result.info.stats["pieces"] == len(pieces(p)), p.name
        whole = run_fusion("cpsat", p, workers=1, decompose=False)
        assert whole.status == "optimal" and result.cost == whole.cost, p.name
        if len(p.nodes) <= 9:
            assert result.cost == min_fusion_cost(p)[0], p.name
            brute += 1
    assert split > 100 and brute > 100


def test_piece_problems_are_the_region_problems_of_the_pieces():
    for seed in range(40):
        p = with_externs(seed)
        found = [q.to_dict() for q in piece_problems(p)]
        assert found == [region_problem(p, part).to_dict() for part in pieces(p)], p.name


def test_large_training_fusion_file_matches_its_order_file():
    from instances.store import load
    large, order = load("data/large/gpt2-12-train.fusion"), load("data/models/gpt2-12-train.order")
    assert len(large.fusion.nodes) == 826
    a, b = large.order_problem(), order.order_problem()
    assert (a.tasks, a.buffers, a.extra_edges) == (b.tasks, b.buffers, b.extra_edges)


@pytest.mark.slow
def test_large_training_fusion_is_proven_by_pieces():
    """A whole-model training step of more than 500 nodes: every piece proven (or met by greedy)."""
    from instances.store import load
    p = load("data/large/gpt2-12-train.fusion").fusion
    result = run_fusion("cpsat", p, time_limit=300, workers=2)
    assert p.validate(result.partition) and result.status == "optimal" and result.bound == result.cost
    assert compulsory_traffic(p) < result.cost <= run_fusion("greedy", p).cost
