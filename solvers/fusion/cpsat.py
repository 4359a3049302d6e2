"""Exact fusion: the partition of least Definition 7.3 cost, as a CP-SAT model.

Variables: a block position ``pos[v]`` in ``0..n-1`` per node and, per pair of nodes that may
share a kernel, a literal ``same[u, v]`` reified as ``pos[u] == pos[v]``.  Blocks are the
classes of equal positions.  Constraints:

* ``pos[u] <= pos[v]`` on every edge ``u -> v`` of D;
* ``pos[u] != pos[v]`` for every forbidden pair (Definition 7.3 (1), Theorem 7.1's pairs), and
  for every pair that no valid block holds: a loner, a forbidden pair or a loner between them
  (``fusion_decompose.Compatibility``; the proof of its item 1 shows a valid block never does);
* per node v: ``1 + sum_u same[u, v] <= max_nodes`` and the number of distinct buffers its block
  touches ``<= max_buffers`` (the per-kernel limits of section 7.4, which bound fused blocks
  only: a node that alone touches more buffers is kept apart from every other node).

Why the positions express exactly Definition 7.3 (2), an acyclic quotient D / P:

* every assignment gives an acyclic quotient: an edge between two different blocks goes from a
  smaller position to a strictly larger one, so block positions order the quotient
  topologically and it has no cycle;
* every partition with an acyclic quotient is reached: number its blocks along a topological
  order of D / P and give each node its block's number; an edge inside a block has equal
  positions and an edge between blocks follows the quotient's order, so ``pos[u] <= pos[v]``.

Cost (exactly ``FusionProblem.cost``): for a produced buffer of size s, ``s * write`` where
``write`` is forced to 1 when it is an output or some user is outside the producer's block,
plus ``s`` per distinct reader block other than the producer's: user u is counted unless it
shares the producer's block or the block of an earlier user.  A graph input pays ``s`` per
distinct block among its users.  The charge literals are only bounded from below; a minimum
sets each to its true value, so the optimum equals the Definition 7.3 cost.

The strategy ``CpSatFusion`` builds this model for each piece of the problem
(``fusion_decompose``) that greedy fusion does not already prove, under one time limit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Callable

import networkx as nx
from ortools.sat.python import cp_model

from stax.scheduler.problems import FusionProblem, Partition, block_index, quotient_graph
from stax.scheduler.strategies import FusionInfo, FusionResult, Status, ordered_blocks

from solvers.cpsat import SolverParams, run
from solvers.deadlines import OutOfTime, check_deadline, search_deadline, seconds_left
from solvers.fusion.bounds import compulsory_traffic
from solvers.fusion.decompose import Compatibility, piece_problems
from solvers.warm_start import greedy_partition

Pair = tuple[int, int]


def _pair(i: int, j: int) -> Pair:
    return (i, j) if i < j else (j, i)


class FusionModel:
    """The CP-SAT model of one FusionProblem; ``hint`` a partition, ``decode`` a solution."""

    def __init__(self, problem: FusionProblem, deadline: float | None = None):
        """Build the model; raises ``OutOfTime`` once ``deadline`` (a perf_counter time) passes."""
        self.problem, self.deadline = problem, deadline
        self.model = cp_model.CpModel()
        self.index = {v: i for i, v in enumerate(problem.nodes)}
        n = len(problem.nodes)
        self.pos = [self.model.new_int_var(0, max(n - 1, 0), f"pos_{v}") for v in problem.nodes]
        forbidden = {_pair(self.index[p.a], self.index[p.b]) for p in problem.forbidden if p.a != p.b}
        # A node touching more buffers than max_buffers can only be a kernel of its own.
        self.loners = {i for i, v in enumerate(problem.nodes) if len(problem.buffers_of(v)) > problem.max_buffers}
        self.same: dict[Pair, cp_model.IntVar] = {}
        together = Compatibility(problem)
        for k, (i, j) in enumerate(combinations(range(n), 2)):
            if k % 1024 == 0:
                check_deadline(deadline)
            if ((i, j) in forbidden or i in self.loners or j in self.loners
                    or not together(problem.nodes[i], problem.nodes[j])):
                self.model.add(self.pos[i] != self.pos[j])
                continue
            lit = self.same[i, j] = self.model.new_bool_var(f"same_{i}_{j}")
            self.model.add(self.pos[i] == self.pos[j]).only_enforce_if(lit)
            self.model.add(self.pos[i] != self.pos[j]).only_enforce_if(~lit)
        for a, b in problem.dag().edges:
            self.model.add(self.pos[self.index[a]] <= self.pos[self.index[b]])
        # Auxiliary literals and their value as a function of a block map (for complete hints).
        self.derived: list[tuple[cp_model.IntVar, Callable[[dict[int, int]], bool]]] = []
        self.cost = self._cost()
        self.model.minimize(self.cost)
        self._kernel_limits()

    # --- building blocks ---------------------------------------------------------------------
    def _together(self, pairs: list[Pair]) -> list[cp_model.IntVar]:
        return [self.same[p] for p in pairs if p in self.same]

    def _charge(self, groups: list[list[Pair]]) -> cp_model.IntVar | int:
        """A 0/1 term forced to 1 when, for some group, no pair of the group shares a block."""
        clauses = [self._together(group) for group in groups]
        if any(not lits for lits in clauses):
            return 1
        charge = self.model.new_bool_var("")
        for lits in clauses:
            self.model.add_bool_or([charge, *lits])
        self.derived.append((charge, lambda block: any(all(block[i] != block[j] for i, j in g) for g in groups)))
        return charge

    def _cost(self) -> cp_model.LinearExprT:
        terms: list[cp_model.LinearExprT] = []
        for buf in self.problem.buffers:
            if buf.size == 0:
                continue
            home = None if buf.producer is None else self.index[buf.producer]
            users = [u for u in dict.fromkeys(self.index[u] for u in buf.users) if u != home]
            if home is not None and (buf.is_output or users):
                write = 1 if buf.is_output else self._charge([[_pair(u, home)] for u in users])
                terms.append(buf.size * write)
            for k, u in enumerate(users):
                earlier = ([home] if home is not None else []) + users[:k]
                terms.append(buf.size * self._charge([[_pair(u, w) for w in earlier]]))
        return sum(terms)

    def _kernel_limits(self) -> None:
        p, n = self.problem, len(self.problem.nodes)
        if p.max_nodes < n:
            for i in range(n):
                self.model.add(1 + sum(self._together([_pair(i, j) for j in range(n) if j != i])) <= p.max_nodes)
        touchers = [{self.index[v] for v in ((b.producer,) if b.producer else ()) + b.users} for b in p.buffers]
        if p.max_buffers < len(p.buffers):
            for i in set(range(n)) - self.loners:  # alone, a node meets the limit; fused, its block must
                check_deadline(self.deadline)
                touched: list[cp_model.LinearExprT] = []
                for who in touchers:
                    if i in who:
                        touched.append(1)
                        continue
                    lits = self._together([_pair(i, j) for j in who])
                    if lits:
                        flag = self.model.new_bool_var("")
                        for lit in lits:
                            self.model.add_implication(lit, flag)
                        self.derived.append((flag, lambda block, i=i, who=who: any(block[i] == block[j] for j in who)))
                        touched.append(flag)
                self.model.add(sum(touched) <= p.max_buffers)

    # --- hints and decoding --------------------------------------------------------------------
    def hint(self, partition: Partition) -> None:
        """Give CP-SAT a complete solution: positions along the quotient's topological order."""
        blocks = list(partition)
        rank = {b: r for r, b in enumerate(nx.topological_sort(quotient_graph(self.problem.dag(), blocks)))}
        block_of = {self.index[v]: rank[b] for v, b in block_index(blocks).items()}
        for i, var in enumerate(self.pos):
            self.model.add_hint(var, block_of[i])
        for (i, j), lit in self.same.items():
            self.model.add_hint(lit, block_of[i] == block_of[j])
        for lit, value in self.derived:
            self.model.add_hint(lit, value(block_of))

    def decode(self, solver: cp_model.CpSolver) -> Partition:
        blocks: dict[int, list[str]] = {}
        for v, var in zip(self.problem.nodes, self.pos):
            blocks.setdefault(solver.value(var), []).append(v)
        return ordered_blocks(self.problem, list(blocks.values()))


@dataclass(frozen=True)
class PieceAnswer:
    """The best partition of one piece found so far, its cost and a certified lower bound."""

    partition: Partition
    cost: int
    bound: int

    @property
    def proven(self) -> bool:
        return self.cost == self.bound

    def better(self, other: PieceAnswer) -> PieceAnswer:
        """The cheaper partition of the two, with the higher of their bounds."""
        best = self if self.cost <= other.cost else other
        return PieceAnswer(best.partition, best.cost, max(self.bound, other.bound))


def start_answer(problem: FusionProblem, warm_start: bool, deadline: float) -> PieceAnswer:
    """Greedy's partition (no fusion without ``warm_start``, or once ``deadline`` has passed) and
    the compulsory traffic as its bound."""
    fusable = warm_start and len(problem.nodes) > 1 and time.perf_counter() < deadline
    start = greedy_partition(problem) if fusable else None
    partition = start or tuple((v,) for v in problem.nodes)
    return PieceAnswer(partition, problem.cost(partition), compulsory_traffic(problem))


def model_answer(problem: FusionProblem, best: PieceAnswer, params: SolverParams,
                 deadline: float) -> tuple[PieceAnswer, str]:
    """CP-SAT on ``problem`` hinted with ``best``, until ``deadline``: the better answer and the
    solver's status ("unbuilt" when the deadline passed while building the model)."""
    try:
        model = FusionModel(problem, deadline)
    except OutOfTime:
        return best, "unbuilt"
    model.hint(best.partition)
    solved = run(model.model, replace(params, time_limit=max(seconds_left(deadline), 0.01)))
    if not solved.has_solution:
        return PieceAnswer(best.partition, best.cost, max(best.bound, int(solved.bound or 0))), solved.status
    partition = model.decode(solved.solver)
    cost = problem.cost(partition)
    return best.better(PieceAnswer(partition, cost, int(solved.bound_for(cost)))), solved.status


class CpSatFusion:
    """Fusion strategy "cpsat": the minimum-cost partition of Definition 7.3 (see the module doc),
    piece by piece (``fusion_decompose``: the least cost is the sum of the pieces' least costs).

    Every piece starts from greedy's partition (``warm_start``) with its compulsory traffic as
    bound (``fusion_bounds``); a piece that greedy does not prove goes to CP-SAT hinted with it.
    One ``time_limit`` covers everything (``deadlines.search_deadline`` keeps a little of it for
    the answer's validation): first each open piece gets a share of the time left by its size
    (smallest pieces first), then pieces still open share what remains.  The bound is the sum of
    the pieces' bounds; ``status`` is "optimal" only when the cost reaches it, else "feasible"
    with a note naming the open pieces.  ``decompose=False`` solves the whole problem as one
    model (for experiments).
    """

    name = "cpsat"

    def __init__(self, time_limit: float = 10.0, workers: int = 2, warm_start: bool = True, seed: int = 0,
                 decompose: bool = True):
        self.params = SolverParams(time_limit, workers, seed)
        self.warm_start, self.decompose = warm_start, decompose

    def solve(self, problem: FusionProblem) -> FusionResult:
        began = time.perf_counter()
        deadline = search_deadline(began, self.params.time_limit)
        subs = piece_problems(problem) if self.decompose else [problem]
        answers = [start_answer(sub, self.warm_start, deadline) for sub in subs]
        statuses = ["" if a.proven else "unsolved" for a in answers]
        for _ in range(2):  # a share each, then what the pieces done early left
            open_ = sorted((k for k, a in enumerate(answers) if not a.proven), key=lambda k: len(subs[k].nodes))
            for n, k in enumerate(open_):
                size = sum(len(subs[j].nodes) for j in open_[n:])
                share = seconds_left(deadline) * len(subs[k].nodes) / size
                if share < 0.01:
                    break
                answers[k], statuses[k] = model_answer(subs[k], answers[k], self.params, time.perf_counter() + share)
        partition = ordered_blocks(problem, [b for a in answers for b in a.partition])
        cost, bound = problem.cost(partition), sum(a.bound for a in answers)
        open_ = sorted((k for k, a in enumerate(answers) if not a.proven), key=lambda k: len(subs[k].nodes))
        note = "" if not open_ else (
            f"not proven within {self.params.time_limit:g} s: {len(open_)} of {len(subs)} pieces open, the largest "
            f"of {len(subs[open_[-1]].nodes)} nodes (CP-SAT {statuses[open_[-1]]})")
        stats = {"warm_start": self.warm_start, "pieces": len(subs), "pieces_open": len(open_),
                 "largest_piece": max((len(sub.nodes) for sub in subs), default=0)}
        return FusionResult(partition, Status.OPTIMAL if cost == bound else Status.FEASIBLE, cost, float(bound),
                            time.perf_counter() - began, FusionInfo(note=note, stats=stats))
