"""Exact fusion: the partition of least Definition 7.3 cost, as a CP-SAT model.

Variables: a block position ``pos[v]`` in ``0..n-1`` per node and, per pair of nodes that may
share a kernel, a literal ``same[u, v]`` reified as ``pos[u] == pos[v]``.  Blocks are the
classes of equal positions.  Constraints:

* ``pos[u] <= pos[v]`` on every edge ``u -> v`` of D;
* ``pos[u] != pos[v]`` for every forbidden pair (Definition 7.3 (1), Theorem 7.1's pairs);
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
"""
from __future__ import annotations

from itertools import combinations
from typing import Callable

import networkx as nx
from ortools.sat.python import cp_model

from stax.problems import FusionProblem, Partition, block_index, quotient_graph
from stax.strategy import FusionInfo, FusionResult, Status, ordered_blocks

from .cpsat_common import SolverParams, run
from .warm_start import greedy_partition

Pair = tuple[int, int]


def _pair(i: int, j: int) -> Pair:
    return (i, j) if i < j else (j, i)


class FusionModel:
    """The CP-SAT model of one FusionProblem; ``hint`` a partition, ``decode`` a solution."""

    def __init__(self, problem: FusionProblem):
        self.problem = problem
        self.model = cp_model.CpModel()
        self.index = {v: i for i, v in enumerate(problem.nodes)}
        n = len(problem.nodes)
        self.pos = [self.model.new_int_var(0, max(n - 1, 0), f"pos_{v}") for v in problem.nodes]
        forbidden = {_pair(self.index[p.a], self.index[p.b]) for p in problem.forbidden if p.a != p.b}
        # A node touching more buffers than max_buffers can only be a kernel of its own.
        self.loners = {i for i, v in enumerate(problem.nodes) if len(problem.buffers_of(v)) > problem.max_buffers}
        self.same: dict[Pair, cp_model.IntVar] = {}
        for i, j in combinations(range(n), 2):
            if (i, j) in forbidden or i in self.loners or j in self.loners:
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


class CpSatFusion:
    """Fusion strategy "cpsat": the minimum-cost partition of Definition 7.3 (see the module doc).

    ``status`` is "optimal" only when CP-SAT proved it; "feasible" means the time limit ran out
    with a solution that is *not* proven optimal (``bound`` is then CP-SAT's best lower bound, read
in integers: ``cpsat_common.integer_bound``).
    If time runs out with no solution at all, the warm-start partition (else no fusion) is
    returned with status "heuristic".
    """

    name = "cpsat"

    def __init__(self, time_limit: float = 10.0, workers: int = 2, warm_start: bool = True, seed: int = 0):
        self.params = SolverParams(time_limit, workers, seed)
        self.warm_start = warm_start

    def solve(self, problem: FusionProblem) -> FusionResult:
        model = FusionModel(problem)
        start = greedy_partition(problem) if self.warm_start else None
        if start is not None:
            model.hint(start)
        solved = run(model.model, self.params)
        stats = {"warm_start": start is not None, "solver_seconds": solved.seconds}
        note = ""
        if solved.has_solution:
            partition, status = model.decode(solved.solver), Status(solved.status)
        else:
            partition, status = start or tuple((v,) for v in problem.nodes), Status.HEURISTIC
            note = (f"CP-SAT ended with status {solved.status} within {self.params.time_limit} s; "
                    f"the {'greedy' if start else 'unfused'} partition is returned")
        cost = problem.cost(partition)
        return FusionResult(partition, status, cost, solved.bound_for(cost), solved.seconds,
                            FusionInfo(note=note, stats=stats))
