"""Fusion strategies on a FusionProblem: no fusion, and the greedy Algorithm 7.1.

Legality (``FusionGroups.why_illegal``, the problem's rules) is kept apart from preference
(``score``, and the vetoes of ``GreedyFusion.why_not_preferred``), as TorchInductor keeps
``can_fuse`` apart from ``score_fusion``; every rejected pair is recorded
with a ``WhyNoFuse`` reason (TorchInductor's), as typed events (``stax.scheduler.events``).

Choices the seed leaves open:

- a *group* is a tuple of node names in node order; its name joins them with ``_`` (``op0_op1``);
- a group is of reduction type when one of its nodes has ``node_info[n]["kind"] == "reduction"``;
- ``delta`` (distance in the original order) is, as in TorchInductor, the larger of the two
  gaps between one group's first node and the other's last node;
- ``max_peak_growth`` (the seed's "do not raise peak memory significantly"): when set, a merge
  is illegal if the peak (Definition 7.5) of the kernels, run in the topological order closest
  to node order (``stax.memory.orders.original_order``), would exceed the current one by more
  than this fraction (0.0: never raise it).  Graph inputs belong to the caller and do not count.
  ``None`` (the default) skips the check, which costs one kernel-order scan per candidate.

Under the cost of Definition 7.3 a merge never costs more, and saves at least ``sigma`` bytes
(every shared buffer is read by one block fewer), so the greedy partition never costs more than
no fusion.
"""
from __future__ import annotations

from functools import cmp_to_key
from typing import Any


from ..memory.orders import original_order
from ..problems import FusionProblem, Partition, kernel_order_problem
from ..strategy import FusionInfo, FusionResult, Status, ordered_blocks
from .events import Event, Fused, Group, NotFused, Round, Score, WhyNoFuse, fusion_kind


#: Seed 7.3: when two candidates' saved bytes differ by more than this factor, only they count.
SIGMA_RATIO = 16


class FusionGroups:
    """The current groups of Algorithm 7.1, with the per-node facts computed once."""

    def __init__(self, problem: FusionProblem):
        self.problem = problem
        self.position = {n: i for i, n in enumerate(problem.nodes)}
        self.size = {b.name: b.size for b in problem.buffers}
        self.forbidden: dict[str, dict[str, str]] = {n: {} for n in problem.nodes}
        for pair in problem.forbidden:
            self.forbidden[pair.a][pair.b] = self.forbidden[pair.b][pair.a] = pair.reason
        touched: dict[str, set[str]] = {n: set() for n in problem.nodes}
        for buf in problem.buffers:
            for node in ((buf.producer,) if buf.producer else ()) + buf.users:
                touched[node].add(buf.name)
        self.group_of: dict[str, Group] = {n: (n,) for n in problem.nodes}
        self.buffers: dict[Group, frozenset[str]] = {(n,): frozenset(touched[n]) for n in problem.nodes}
        self.ancestors: dict[Group, frozenset[str]] = {}
        dag = problem.dependencies()
        for n in dag.topological_order():
            preds = list(dag.predecessors(n))
            self.ancestors[(n,)] = frozenset(preds).union(*(self.ancestors[(p,)] for p in preds))
        self._peak: int | None = None

    def first(self, group: Group) -> int:
        """Position of a group's first node in ``problem.nodes``."""
        return self.position[group[0]]

    def groups(self) -> list[Group]:
        """Current groups, by the position of their first node."""
        return sorted(set(self.group_of.values()), key=self.first)

    def partition(self) -> Partition:
        return ordered_blocks(self.problem, self.groups())

    def shared(self, a: Group, b: Group) -> frozenset[str]:
        return self.buffers[a] & self.buffers[b]

    def is_reduction(self, group: Group) -> bool:
        return any(self.problem.node_info.get(n, {}).get("kind", "pointwise") == "reduction" for n in group)

    def distance(self, a: Group, b: Group) -> int:
        pa, pb = [self.position[n] for n in a], [self.position[n] for n in b]
        return max(abs(min(pa) - max(pb)), abs(min(pb) - max(pa)))

    def sharing_pairs(self) -> list[tuple[Group, Group]]:
        """Algorithm 7.1 line 2: pairs of groups that share at least one buffer, in node order."""
        holders: dict[str, set[Group]] = {}
        for group, names in self.buffers.items():
            for name in names:
                holders.setdefault(name, set()).add(group)
        pairs = set()
        for groups in holders.values():
            ranked = sorted(groups, key=self.first)
            pairs.update((a, b) for i, a in enumerate(ranked) for b in ranked[i + 1:])
        return sorted(pairs, key=lambda p: (self.first(p[0]), self.first(p[1])))

    def creates_cycle(self, a: Group, b: Group) -> bool:
        """Proposition 7.1 for groups: merging closes a cycle iff a third group is both reachable
        from a and b together and reaches them in the quotient graph.

        The ancestor sets of the original nodes are computed once.  New ancestry arises only
        through fused groups, so the upward search expands only groups of two or more nodes
        (a single node's ancestors are already among those of the node that led to it).
        """
        merged = frozenset(a + b)
        seen = {a, b}
        stack = [a, b]
        while stack:
            for node in self.ancestors[stack.pop()]:
                above = self.group_of[node]
                if above in seen:
                    continue
                if self.ancestors[above] & merged:
                    return True
                seen.add(above)
                if len(above) > 1:
                    stack.append(above)
        return False

    def why_illegal(self, a: Group, b: Group) -> NotFused | None:
        """Legality of merging two groups under the problem's rules (Definition 7.3: no
        forbidden pair, the kernel limits, an acyclic quotient by Proposition 7.1): None, or why
        not.  Any strategy that merges groups may call it; it holds no preference."""
        for x in a:
            clash = next((y for y in b if y in self.forbidden[x]), None)
            if clash is not None:
                return NotFused(a, b, WhyNoFuse.FORBIDDEN, self.forbidden[x][clash])
        if len(a) + len(b) > self.problem.max_nodes:
            return NotFused(a, b, WhyNoFuse.TOO_MANY_NODES)
        if len(self.buffers[a] | self.buffers[b]) > self.problem.max_buffers:
            return NotFused(a, b, WhyNoFuse.TOO_MANY_BUFFERS)
        if self.creates_cycle(a, b):
            return NotFused(a, b, WhyNoFuse.CYCLE)
        return None

    def kernel_peak(self, merging: tuple[Group, Group] | None = None) -> int:
        """Peak (Definition 7.5) of the kernels in their original-like order, optionally after a merge."""
        if merging is None and self._peak is not None:
            return self._peak
        blocks = self.groups()
        if merging is not None:
            a, b = merging
            blocks = [g for g in blocks if g not in merging] + [a + b]
        order_problem = kernel_order_problem(self.problem, ordered_blocks(self.problem, blocks))
        peak = order_problem.peak(original_order(order_problem))
        if merging is None:
            self._peak = peak
        return peak

    def merge(self, a: Group, b: Group) -> Group:
        fused = tuple(sorted(a + b, key=self.position.__getitem__))
        for n in fused:
            self.group_of[n] = fused
        self.buffers[fused] = self.buffers.pop(a) | self.buffers.pop(b)
        self.ancestors[fused] = self.ancestors.pop(a) | self.ancestors.pop(b)
        self._peak = None
        return fused


def score(groups: FusionGroups, a: Group, b: Group) -> Score:
    """Seed 7.3: (tau, sigma, omega, -delta), compared lexicographically.

    tau: 1 when both are reductions or both pointwise and they share data; sigma: bytes of the
    buffers both touch (example 7.1: 32768 + 256 = 33024); omega: how many; delta: distance.
    """
    shared = groups.shared(a, b)
    tau = int(bool(shared) and groups.is_reduction(a) == groups.is_reduction(b))
    return tau, sum(groups.size[name] for name in shared), len(shared), -groups.distance(a, b)


def compare_scores(s: Score, t: Score) -> int:
    """Lexicographic, except that sigmas more than 16x apart decide alone (seed 7.3)."""
    if max(s[1], t[1]) > SIGMA_RATIO * min(s[1], t[1]):
        return (s[1] > t[1]) - (s[1] < t[1])
    return (s > t) - (s < t)


class NoFusion:
    """Every node its own kernel: the baseline every fusion is measured against."""

    name = "none"
    parameters: dict[str, Any] = {}

    def solve(self, problem: FusionProblem) -> FusionResult:
        return FusionResult(tuple((n,) for n in problem.nodes), Status.HEURISTIC, cost=problem.unfused_cost())


class GreedyFusion:
    """Algorithm 7.1: rounds of merging the best-scoring legal pairs of groups.

    ``info.events`` has what it decided (``stax.scheduler.events``): each round's count of
    candidates, each merge with its score and kind, each pair kept apart with its reason.
    """

    name = "greedy"

    def __init__(self, max_rounds: int = 10, min_shared_bytes: int = 0, max_peak_growth: float | None = None):
        self.max_rounds = max_rounds
        self.min_shared_bytes = min_shared_bytes
        self.max_peak_growth = max_peak_growth
        self.parameters = {"max_rounds": max_rounds, "min_shared_bytes": min_shared_bytes,
                           "max_peak_growth": max_peak_growth}

    def can_fuse(self, groups: FusionGroups, a: Group, b: Group) -> NotFused | None:
        """Whether Algorithm 7.1 merges two groups: None, or why not (legality, then the
        preference vetoes ``min_shared_bytes`` and ``max_peak_growth``)."""
        return groups.why_illegal(a, b) or self.why_not_preferred(groups, a, b)

    def why_not_preferred(self, groups: FusionGroups, a: Group, b: Group) -> NotFused | None:
        """The heuristic vetoes of this strategy's parameters on a legal merge: None, or which."""
        if sum(groups.size[name] for name in groups.shared(a, b)) < self.min_shared_bytes:
            return NotFused(a, b, WhyNoFuse.SHARED_BYTES_BELOW_THRESHOLD)
        if self.max_peak_growth is not None and \
                groups.kernel_peak((a, b)) > (1 + self.max_peak_growth) * groups.kernel_peak():
            return NotFused(a, b, WhyNoFuse.PEAK_GROWTH, f"{self.max_peak_growth:.0%}")
        return None

    def solve(self, problem: FusionProblem) -> FusionResult:
        groups = FusionGroups(problem)
        events: list[Event] = []
        for round_ in range(1, self.max_rounds + 1):
            candidates = []
            for a, b in groups.sharing_pairs():
                veto = self.can_fuse(groups, a, b)
                if veto is None:
                    candidates.append((score(groups, a, b), a, b))
                else:
                    events.append(veto)
            events.append(Round(round_, len(candidates)))
            candidates.sort(key=cmp_to_key(lambda s, t: compare_scores(s[0], t[0])), reverse=True)
            fused_now: set[Group] = set()
            for pair_score, a, b in candidates:
                if a in fused_now or b in fused_now:
                    events.append(NotFused(a, b, WhyNoFuse.FUSED_THIS_ROUND))
                    continue
                veto = self.can_fuse(groups, a, b)  # earlier merges of this round may close a cycle
                if veto is not None:
                    events.append(veto)
                    continue
                events.append(Fused(a, b, pair_score, fusion_kind(problem, a, b)))
                groups.merge(a, b)
                fused_now.update((a, b))
            if not fused_now:
                break
        partition = groups.partition()
        return FusionResult(partition, Status.HEURISTIC, cost=problem.cost(partition), info=FusionInfo(events=events))
