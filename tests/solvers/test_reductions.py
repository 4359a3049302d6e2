"""Theorem 7.1 and Proposition 7.4 checked numerically, plus the solvers they rest on.

Exact optima come from the ``cpsat`` fusion strategy and the ``dp`` order strategy.
"""
import doctest
import itertools

import networkx as nx
import pytest

import solvers.fusion.multiway_cut
import solvers.theory.vertex_separation
from instances.dags import fusion_problem, layered_dag, series_parallel_dag
from instances.graphs import FAMILIES, choose_terminals, grid_graph, planar_graph, random_graph, tree_graph
from solvers.fusion.repair import repair_labels
from solvers.fusion.multiway_cut import (brute_force_multiway_cut, exact_multiway_cut, is_multiway_cut,
                                  isolating_multiway_cut)
from solvers.fusion.mwc import cut_graph
from solvers.theory.reductions import (cut_from_partition, fusion_from_multiway_cut, order_from_separation,
                                order_from_vertex_separation, order_threshold, partition_from_cut)
from solvers.theory.vertex_separation import vs_cpsat, vs_dp, vs_of_order
from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem
from stax.scheduler.strategies import run_fusion, run_order



def graphs(sizes, seeds):
    """(family, graph, terminals) for every family, size and seed."""
    for family, make in FAMILIES.items():
        for n in sizes:
            for seed in seeds:
                h = make(n, seed)
                if h.number_of_nodes() >= 3:
                    yield family, h, choose_terminals(h, seed)


def optimal_fusion_cost(problem: FusionProblem) -> int:
    result = run_fusion("cpsat", problem, workers=1)
    assert result.status == "optimal"
    return result.cost


def optimal_peak(problem) -> int:
    result = run_order("dp", problem)
    assert result.status == "optimal"
    return result.peak


def test_doctests():
    assert doctest.testmod(solvers.fusion.multiway_cut).failed == 0
    assert doctest.testmod(solvers.theory.vertex_separation).failed == 0


# --- generators --------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [random_graph, grid_graph, planar_graph, tree_graph])
def test_generators_are_seeded_connected_and_integer_weighted(make):
    for n in (3, 7, 12):
        h = make(n, seed=5)
        assert nx.utils.graphs_equal(h, make(n, seed=5))
        assert nx.is_connected(h)
        assert all(isinstance(w, int) and w >= 1 for _, _, w in h.edges(data="weight"))
    assert nx.check_planarity(planar_graph(20, seed=1))[0]
    assert nx.is_tree(tree_graph(15, seed=2))


# --- multiway cut -----------------------------------------------------------------------------

def test_multiway_cut_solvers_agree_and_isolating_is_within_2_minus_2_over_k():
    for _, h, terminals in graphs(sizes=(6, 9), seeds=range(4)):
        exact, brute = exact_multiway_cut(h, terminals), brute_force_multiway_cut(h, terminals)
        approx = isolating_multiway_cut(h, terminals)
        assert exact.weight == brute.weight
        for cut in (exact, brute, approx):
            assert is_multiway_cut(h, terminals, cut.edges)
            assert len({cut.labels[t] for t in terminals}) == len(terminals)
        assert 3 * approx.weight <= 4 * exact.weight  # (2 - 2/3) * OPT


def test_isolating_guarantee_with_four_terminals():
    for seed in range(6):
        h = random_graph(10, seed, p=0.4)
        terminals = choose_terminals(h, seed, k=4)
        assert 2 * isolating_multiway_cut(h, terminals).weight <= 3 * exact_multiway_cut(h, terminals).weight


# --- vertex separation ------------------------------------------------------------------------

def test_vs_of_order_follows_the_definition():
    path = nx.path_graph(4)  # 0-1-2-3
    assert vs_of_order(path, [0, 1, 2, 3]) == 1
    assert vs_of_order(path, [0, 3, 1, 2]) == 2  # prefix {0, 3}: both have a neighbour outside
    with pytest.raises(ValueError):
        vs_of_order(path, [0, 1, 2])


@pytest.mark.parametrize("graph, vs", [(nx.path_graph(7), 1), (nx.cycle_graph(7), 2), (nx.star_graph(6), 1),
                                       (nx.complete_graph(6), 5), (nx.grid_2d_graph(3, 5), 3)])
def test_vs_of_known_graphs(graph, vs):
    assert vs_dp(graph).vs == vs
    assert vs_of_order(graph, vs_dp(graph).order) == vs


def test_vs_dp_and_cpsat_match_all_permutations():
    for seed in range(8):
        h = random_graph(6, seed, p=0.4)
        best = min(vs_of_order(h, p) for p in itertools.permutations(h.nodes))
        dp, cp = vs_dp(h), vs_cpsat(h)
        assert dp.vs == cp.vs == best
        assert vs_of_order(h, dp.order) == vs_of_order(h, cp.order) == best
    for seed in range(3):
        h = planar_graph(12, seed)
        assert vs_dp(h).vs == vs_cpsat(h).vs


# --- Theorem 7.1 --------------------------------------------------------------------------------

def test_theorem_7_1_optimal_fusion_is_twice_the_multiway_cut():
    for _, h, terminals in graphs(sizes=(5, 7), seeds=range(3)):
        reduction = fusion_from_multiway_cut(h, terminals)
        assert optimal_fusion_cost(reduction.problem) == 2 * exact_multiway_cut(h, terminals).weight


def test_theorem_7_1_proof_partition_attains_twice_the_cut():
    for _, h, terminals in graphs(sizes=(7, 12), seeds=range(3)):
        reduction = fusion_from_multiway_cut(h, terminals)
        for cut in (exact_multiway_cut(h, terminals), isolating_multiway_cut(h, terminals)):
            partition = reduction.problem.validate(partition_from_cut(reduction, cut.edges))
            assert reduction.problem.cost(partition) == 2 * cut.weight
            back = cut_from_partition(reduction, partition)
            assert is_multiway_cut(h, terminals, back.edges) and back.weight <= cut.weight


def test_theorem_7_1_construction_names_and_forbidden_pairs():
    h = nx.Graph([(0, 1, {"weight": 3}), (1, 2, {"weight": 4})])
    problem = fusion_from_multiway_cut(h, (0, 1, 2)).problem
    assert set(problem.nodes) == {"x_0_1", "x_1_2", "n_0", "n_1", "n_2"}
    assert {frozenset((p.a, p.b)) for p in problem.forbidden} == {
        frozenset(("n_0", "n_1")), frozenset(("n_0", "n_2")), frozenset(("n_1", "n_2"))}
    assert problem.cost([("x_0_1", "n_0"), ("x_1_2", "n_1"), ("n_2",)]) == 2 * 3 + 2 * 4


# --- Proposition 7.4 --------------------------------------------------------------------------

def test_proposition_7_4_least_peak_lies_in_the_interval():
    for _, h, _ in graphs(sizes=(4, 6), seeds=range(3)):
        reduction = order_from_vertex_separation(h)
        vs = vs_dp(h).vs
        low, high = reduction.bounds(vs)
        peak = optimal_peak(reduction.problem)
        assert low <= peak <= high
        assert peak <= order_threshold(reduction, vs) and peak > order_threshold(reduction, vs - 1)


def test_proposition_7_4_proof_order_attains_the_upper_bound():
    for _, h, _ in graphs(sizes=(8, 14), seeds=range(3)):
        reduction = order_from_vertex_separation(h)
        separation = vs_dp(h)
        order = reduction.problem.validate(order_from_separation(reduction, separation.order))
        low, high = reduction.bounds(separation.vs)
        assert low <= reduction.problem.peak(order) <= high


def test_proposition_7_4_rejects_isolated_vertices():
    h = nx.Graph([(0, 1)])
    h.add_node(2)
    with pytest.raises(ValueError):
        order_from_vertex_separation(h)


# --- the mwc fusion strategy ------------------------------------------------------------------

def test_mwc_finds_the_optimum_on_reduced_instances():
    for _, h, terminals in graphs(sizes=(6, 10), seeds=range(3)):
        reduction = fusion_from_multiway_cut(h, terminals)
        optimum = 2 * exact_multiway_cut(h, terminals).weight
        exact = run_fusion("mwc", reduction.problem)
        assert exact.cost == optimum and exact.bound == optimum and exact.status == "optimal"
        isolating = run_fusion("mwc", reduction.problem, method="isolating")
        assert 3 * isolating.cost <= 4 * optimum


def test_mwc_is_valid_on_general_problems_with_tight_limits():
    for make in (layered_dag, series_parallel_dag):
        for seed in range(3):
            base = fusion_problem(make(12, seed), seed, forbidden_fraction=0.15)
            problem = FusionProblem(base.nodes, base.buffers, base.forbidden, max_nodes=3, max_buffers=9)
            exact = run_fusion("mwc", problem, time_limit=2)  # run_fusion validates
            isolating = run_fusion("mwc", problem, method="isolating")
            assert exact.bound <= min(exact.cost, isolating.cost)
            optimum = run_fusion("cpsat", problem, time_limit=5, workers=1)
            assert optimum.bound is None or optimum.bound <= min(exact.cost, isolating.cost)


def test_repair_breaks_a_cyclic_labelling_and_keeps_an_acyclic_one():
    # a -> b -> c: labelling {a, c} together and b apart makes a cycle in the quotient.
    problem = FusionProblem(nodes=("a", "b", "c"), buffers=(
        Buffer("ta", 4, "a", ("b",)), Buffer("tb", 4, "b", ("c",)), Buffer("y", 1, "c", (), is_output=True)))
    # The push-down of step 2 pulls b and a into c's rank: one block, the cheapest answer.
    assert problem.validate(repair_labels(problem, {"a": 0, "b": 1, "c": 0})) == (("a", "b", "c"),)
    forbid_ac = FusionProblem(problem.nodes, problem.buffers, (ForbiddenPair("a", "c", "test"),))
    assert len(forbid_ac.validate(repair_labels(forbid_ac, {"a": 0, "b": 1, "c": 0}))) == 2
    assert repair_labels(problem, {"a": 0, "b": 0, "c": 1}) == (("a", "b"), ("c",))


def test_cut_graph_prices_a_single_user_buffer_at_write_plus_read():
    problem = FusionProblem(nodes=("p", "u", "v"), buffers=(
        Buffer("x", 5, None, ("p", "v")), Buffer("t", 3, "p", ("u",))),
        forbidden=(ForbiddenPair("p", "u", "test"),))
    g = cut_graph(problem)
    assert g.edges["p", "u"]["weight"] == 2 * 3 and g.edges["p", "v"]["weight"] == 5
