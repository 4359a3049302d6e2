"""Fusion strategies on a FusionProblem: no fusion, and the greedy Algorithm 7.1.

Legality (``FusionGroups.why_illegal``, the problem's rules) is kept apart from preference
(``score``, and the vetoes of ``GreedyFusion.why_not_preferred``), as TorchInductor keeps
``can_fuse`` apart from ``score_fusion``; every rejected pair is recorded
with a ``WhyNoFuse`` reason (TorchInductor's), as typed events (``stax.scheduler.events``).

Choices the spec leaves open:

- a *group* is a tuple of node names in node order; its name joins them with ``_`` (``op0_op1``);
- a group is of reduction type when one of its nodes has ``node_info[n]["kind"] == "reduction"``;
- ``delta`` (distance in the original order) is, as in TorchInductor, the larger of the two
  gaps between one group's first node and the other's last node;
- ``window`` (TorchInductor's ``max_fusion_buffer_group_pairwise_attempts``, 64): two groups
  that share a buffer are a candidate only when at most ``window`` places apart in the current
  topological order of the groups (renumbered each round).  A round then has at most
  ``window`` candidates per use of a buffer, and Proposition 7.1's cycle test searches only
  the groups between the two.  ``None``: every pair that shares a buffer, as the spec writes
  Algorithm 7.1; a window at least the number of nodes gives the same answer;
- ``max_peak_growth`` (the spec's "do not raise peak memory significantly"): when set, a merge
  is illegal if the peak (Definition 7.5) of the kernels, run in the topological order closest
  to node order (``stax.scheduler.orders.original_order``), would exceed the current one by more
  than this fraction (0.0: never raise it).  Graph inputs belong to the caller and do not count.
  ``None`` (the default) skips the check, which costs one kernel-order scan per candidate (the
  one part of the strategy whose work grows with the graph per candidate).

Under the cost of Definition 7.3 a merge never costs more, and saves at least ``sigma`` bytes
(every shared buffer is read by one block fewer), so the greedy partition never costs more than
no fusion.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterator

from stax.errors import StaxError
from stax.scheduler.orders import original_order
from stax.scheduler.problems import FusionProblem, Partition, kernel_order_problem
from stax.scheduler.strategies import FusionInfo, FusionResult, Status, ordered_blocks
from stax.scheduler.events import Event, Fused, FusionKind, Group, NotFused, Round, Score, WhyNoFuse, fusion_kind, group_name


#: Spec 7.3: when two candidates' saved bytes differ by more than this factor, only they count.
SIGMA_RATIO = 16
#: TorchInductor's ``max_fusion_buffer_group_pairwise_attempts``: how many places apart a candidate may be.
WINDOW = 64
#: The widest window whose cycle tests are recorded as bits (``window / 4`` bytes a group); wider ones search.
BITS_WINDOW_MAX = 1024


class FusionGroups:
    """The current groups of Algorithm 7.1 and their quotient graph D / P (Definition 7.3), kept
    in a topological order that each merge repairs where it changes (Pearce and Kelly's dynamic
    topological order), so that neither a cycle test nor a merge looks at the whole graph.

    Groups are numbered inside; a number is never reused, so what holds for a pair of groups
    (``pair_key``: its score) stays true until one of them merges.  ``sharing_pairs`` with a
    window also records, for each group, which groups up to the window after it a path of two
    or more edges reaches (bits of an int), so that until the next merge a cycle test is one
    bit (Proposition 7.1); after a merge it searches between the two groups.
    """

    def __init__(self, problem: FusionProblem):
        self.problem = problem
        self.position = {n: i for i, n in enumerate(problem.nodes)}
        self.size = {b.name: b.size for b in problem.buffers}
        self._buffer = {b.name: b for b in problem.buffers}
        self.forbidden: dict[str, dict[str, str]] = {n: {} for n in problem.nodes}
        forbidden = self.forbidden
        for pair in problem.forbidden:
            a, b, reason = pair.a, pair.b, pair.reason
            forbidden[a][b] = forbidden[b][a] = reason
        self._id = dict(self.position)  # node -> the number of its group
        self._members: dict[int, Group] = {i: (n,) for n, i in self._id.items()}
        touched: dict[int, set[str]] = {i: set() for i in self._members}
        self._holders: dict[str, set[int]] = {}  # buffer -> the groups that touch it
        for buf in problem.buffers:
            holders = self._holders[buf.name] = {self._id[n] for n in ((buf.producer,) if buf.producer else ()) + buf.users}
            for g in holders:
                touched[g].add(buf.name)
        self._buffers = {g: frozenset(names) for g, names in touched.items()}
        self._reduction = {i: problem.node_info.get(n, {}).get("kind", "pointwise") == "reduction"
                           for n, i in self._id.items()}
        dag = problem.dependencies()
        self._succ: dict[int, set[int]] = {i: set() for i in self._members}
        self._pred: dict[int, set[int]] = {i: set() for i in self._members}
        for a, b in dag.edges:
            self._succ[self._id[a]].add(self._id[b])
            self._pred[self._id[b]].add(self._id[a])
        self._rank = {self._id[n]: r for r, n in enumerate(dag.topological_order(key=self.position.__getitem__))}
        self._next = len(problem.nodes)
        self._longer: dict[int, int] | None = None  # group -> bit k: a path of >= 2 edges to the group k places on
        self._longer_window = 0
        self._peak: int | None = None

    def _of(self, group: Group) -> int:
        return self._id[group[0]]

    def pair_key(self, a: Group, b: Group) -> tuple[int, int]:
        """A key for two current groups that no later pair of groups has."""
        return self._of(a), self._of(b)

    def first(self, group: Group) -> int:
        """Position of a group's first node in ``problem.nodes``."""
        return self.position[group[0]]

    def groups(self) -> list[Group]:
        """Current groups, by the position of their first node."""
        return sorted(self._members.values(), key=self.first)

    def partition(self) -> Partition:
        return ordered_blocks(self.problem, self.groups())

    def buffers(self, group: Group) -> frozenset[str]:
        """The buffers a group's nodes read or write."""
        return self._buffers[self._of(group)]

    def shared(self, a: Group, b: Group) -> frozenset[str]:
        return self.buffers(a) & self.buffers(b)

    def is_reduction(self, group: Group) -> bool:
        return self._reduction[self._of(group)]

    def distance(self, a: Group, b: Group) -> int:
        """The larger gap between one group's first node and the other's last (groups are in node order)."""
        position = self.position
        return max(abs(position[a[0]] - position[b[-1]]), abs(position[b[0]] - position[a[-1]]))

    def kind(self, a: Group, b: Group) -> FusionKind:
        """``fusion_kind`` of a merge, read from the buffers both groups touch (a dependency
        between them is one of those)."""
        return fusion_kind(self.problem, a, b, [self._buffer[name] for name in self.shared(a, b)])

    def sharing_pairs(self, window: int | None = None) -> Iterator[tuple[Group, Group]]:
        """Algorithm 7.1 line 2: pairs of groups that share at least one buffer, in node order
        (by first nodes), made one group at a time; with ``window``, only those at most
        ``window`` places apart in the groups' topological order (renumbered here from 0, the
        order itself unchanged).  Valid until the next merge."""
        ranked = sorted(self._members, key=self._rank.__getitem__)
        self._rank = rank = {g: r for r, g in enumerate(ranked)}
        if window is not None and window <= BITS_WINDOW_MAX:
            self._longer, self._longer_window = self._longer_paths(ranked, window), window
        rows = {name: sorted(rank[g] for g in holders) for name, holders in self._holders.items() if len(holders) > 1}
        members, position, reach = self._members, self.position, len(ranked) if window is None else window
        for a in sorted(members, key=lambda g: position[members[g][0]]):
            first, partners = position[members[a][0]], set()
            for name in self._buffers[a]:
                row = rows.get(name, ())
                lo, hi = bisect_left(row, rank[a] - reach), bisect_right(row, rank[a] + reach)
                partners.update(row[lo:hi])
            later = [members[ranked[r]] for r in partners if position[members[ranked[r]][0]] > first]
            later.sort(key=lambda g: position[g[0]])
            yield from ((members[a], b) for b in later)

    def _longer_paths(self, ranked: list[int], window: int) -> dict[int, int]:
        """For each group (``ranked``: in the topological order, ranks dense), bit k set when a
        path of two or more edges leads to the group k <= ``window`` places after it; such a
        path runs through groups between the two, along edges of at most ``window`` places."""
        rank, mask = self._rank, (1 << (window + 1)) - 1
        reach: dict[int, int] = {}  # paths of one edge or more
        longer: dict[int, int] = {}
        for g in reversed(ranked):
            one = more = 0
            for h in self._succ[g]:
                step = rank[h] - rank[g]
                if step <= window:
                    one |= 1 << step
                    more |= reach[h] << step
            reach[g], longer[g] = (one | more) & mask, more & mask
        return longer

    def _reached(self, start: int, stop: int, edges: dict[int, set[int]]) -> set[int] | None:
        """The groups strictly between ``start`` and ``stop`` in the topological order that
        ``start`` reaches along ``edges`` (successors or predecessors), or None when one of them
        has an edge to ``stop``.  Every path between the two runs through groups between them."""
        rank, seen, stack = self._rank, set(), [start]
        low, high = (rank[start], rank[stop]) if rank[start] < rank[stop] else (rank[stop], rank[start])
        while stack:
            g = stack.pop()
            for h in edges[g]:
                if h == stop:
                    if g != start:
                        return None
                elif h not in seen and low < rank[h] < high:
                    seen.add(h)
                    stack.append(h)
        return seen

    def _ranked(self, a: Group, b: Group) -> tuple[int, int]:
        """The two groups' numbers, the one earlier in the topological order first."""
        x, y = self._id[a[0]], self._id[b[0]]
        return (x, y) if self._rank[x] < self._rank[y] else (y, x)

    def creates_cycle(self, a: Group, b: Group) -> bool:
        """Proposition 7.1 for groups: merging closes a cycle iff a path from one to the other
        runs through a third group, which then lies between them in the topological order."""
        low, high = self._ranked(a, b)
        gap = self._rank[high] - self._rank[low]
        if self._longer is not None and gap <= self._longer_window:
            return bool(self._longer[low] >> gap & 1)
        return self._reached(low, high, self._succ) is None

    def _forbidden_clash(self, a: Group, b: Group) -> NotFused | None:
        """The first forbidden pair (x in a, y in b) in node order, each side scanned from
        whichever of a node's partners and the other group is smaller."""
        inside = None
        for x in a:
            partners = self.forbidden[x]
            if not partners:
                continue
            if len(b) <= len(partners):
                clash = next((y for y in b if y in partners), None)
            else:
                inside = inside or set(b)
                hits = partners.keys() & inside
                clash = min(hits, key=self.position.__getitem__) if hits else None
            if clash is not None:
                return NotFused(a, b, WhyNoFuse.FORBIDDEN, partners[clash])
        return None

    def broken_rule(self, a: Group, b: Group) -> NotFused | None:
        """The first rule of the problem the merge breaks apart from acyclicity (these depend on
        the two groups alone, not on the others): a forbidden pair, then the kernel limits."""
        if len(a) == len(b) == 1:  # the common case, without the general scan
            reason = self.forbidden[a[0]].get(b[0])
            if reason is not None:
                return NotFused(a, b, WhyNoFuse.FORBIDDEN, reason)
        else:
            clash = self._forbidden_clash(a, b)
            if clash is not None:
                return clash
        if len(a) + len(b) > self.problem.max_nodes:
            return NotFused(a, b, WhyNoFuse.TOO_MANY_NODES)
        mine, theirs, limit = self._buffers[self._id[a[0]]], self._buffers[self._id[b[0]]], self.problem.max_buffers
        if len(mine) + len(theirs) > limit and len(mine) + len(theirs) - len(mine & theirs) > limit:
            return NotFused(a, b, WhyNoFuse.TOO_MANY_BUFFERS)
        return None

    def why_illegal(self, a: Group, b: Group) -> NotFused | None:
        """Legality of merging two groups under the problem's rules (Definition 7.3: no
        forbidden pair, the kernel limits, an acyclic quotient by Proposition 7.1): None, or why
        not.  Any strategy that merges groups may call it; it holds no preference."""
        return self.broken_rule(a, b) or (NotFused(a, b, WhyNoFuse.CYCLE) if self.creates_cycle(a, b) else None)

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
        """Merge two current groups whose merge keeps D / P acyclic; returns the new group."""
        low, high = self._ranked(a, b)
        if {self._members[low], self._members[high]} != {a, b}:
            raise ValueError(f"merge takes two current groups, not {group_name(a)} and {group_name(b)}")
        after = self._reached(low, high, self._succ)
        if after is None:
            raise ValueError(f"merging {group_name(a)} with {group_name(b)} closes a cycle (Proposition 7.1)")
        before = self._reached(high, low, self._pred)
        fused = tuple(sorted(a + b, key=self.position.__getitem__))
        new, self._next = self._next, self._next + 1
        del self._members[low], self._members[high]
        self._members[new] = fused
        for n in fused:
            self._id[n] = new
        self._buffers[new] = self._buffers.pop(low) | self._buffers.pop(high)
        self._reduction[new] = self._reduction.pop(low) | self._reduction.pop(high)
        for name in self._buffers[new]:
            self._holders[name] -= {low, high}
            self._holders[name].add(new)
        for edges, back in ((self._succ, self._pred), (self._pred, self._succ)):
            edges[new] = (edges.pop(low) | edges.pop(high)) - {low, high}
            for g in edges[new]:
                back[g] -= {low, high}
                back[g].add(new)
        # Pearce and Kelly: of the groups between the two, those that reach the later one move
        # before the merged group, those the earlier one reaches after it, in their own order.
        rank = self._rank
        moved = sorted(before, key=rank.__getitem__) + [new] + sorted(after, key=rank.__getitem__)
        slots = sorted([rank.pop(low), rank.pop(high)] + [rank[g] for g in before | after])
        rank.update(zip(moved, slots))
        self._peak, self._longer = None, None
        return fused


def score(groups: FusionGroups, a: Group, b: Group) -> Score:
    """Spec 7.3: (tau, sigma, omega, -delta), compared lexicographically.

    tau: 1 when both are reductions or both pointwise and they share data; sigma: bytes of the
    buffers both touch (example 7.1: 32768 + 256 = 33024); omega: how many; delta: distance.
    """
    shared = groups.shared(a, b)
    tau = int(bool(shared) and groups.is_reduction(a) == groups.is_reduction(b))
    return tau, sum(groups.size[name] for name in shared), len(shared), -groups.distance(a, b)


def compare_scores(s: Score, t: Score) -> int:
    """Lexicographic, except that sigmas more than 16x apart decide alone (spec 7.3)."""
    if max(s[1], t[1]) > SIGMA_RATIO * min(s[1], t[1]):
        return (s[1] > t[1]) - (s[1] < t[1])
    return (s > t) - (s < t)


def best_first(candidates: list[tuple[Score, Group, Group]]) -> list[tuple[Score, Group, Group]]:
    """Candidates by ``compare_scores``, best first, equal scores in their given order: the
    stable sort ``sorted(..., key=cmp_to_key(compare_scores), reverse=True)`` gives.

    ``compare_scores`` is a strict total order (the sigma rule never closes a cycle:
    ``tests/scheduler/test_greedy.py`` checks it on random triples), and within one tau it is the tuple
    order; so the two tau classes are sorted as tuples and merged, one comparison a candidate.
    """
    alike, unlike = ([c for c in candidates if c[0][0] == tau] for tau in (1, 0))
    alike.sort(key=lambda c: c[0], reverse=True)
    unlike.sort(key=lambda c: c[0], reverse=True)
    merged, i, j = [], 0, 0
    while i < len(alike) and j < len(unlike):
        if compare_scores(alike[i][0], unlike[j][0]) > 0:
            merged.append(alike[i])
            i += 1
        else:
            merged.append(unlike[j])
            j += 1
    return merged + alike[i:] + unlike[j:]


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

    def __init__(self, max_rounds: int = 10, min_shared_bytes: int = 0, max_peak_growth: float | None = None,
                 window: int | None = WINDOW):
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise StaxError(f"greedy window={window!r}: give how many places apart in the topological order "
                            f"two groups may be to be a candidate, a whole number >= 1 ({WINDOW} as TorchInductor), "
                            "or None for every pair")
        self.max_rounds = max_rounds
        self.min_shared_bytes = min_shared_bytes
        self.max_peak_growth = max_peak_growth
        self.window = window
        self.parameters = {"max_rounds": max_rounds, "min_shared_bytes": min_shared_bytes,
                           "max_peak_growth": max_peak_growth, "window": window}

    def can_fuse(self, groups: FusionGroups, a: Group, b: Group) -> NotFused | None:
        """Whether Algorithm 7.1 merges two groups: None, or why not (legality, then the
        preference vetoes ``min_shared_bytes`` and ``max_peak_growth``)."""
        return groups.why_illegal(a, b) or self.why_not_preferred(groups, a, b)

    def why_not_preferred(self, groups: FusionGroups, a: Group, b: Group) -> NotFused | None:
        """The heuristic vetoes of this strategy's parameters on a legal merge: None, or which."""
        if self.min_shared_bytes and sum(groups.size[name] for name in groups.shared(a, b)) < self.min_shared_bytes:
            return NotFused(a, b, WhyNoFuse.SHARED_BYTES_BELOW_THRESHOLD)
        return self._peak_veto(groups, a, b)

    def _peak_veto(self, groups: FusionGroups, a: Group, b: Group) -> NotFused | None:
        if self.max_peak_growth is not None and \
                groups.kernel_peak((a, b)) > (1 + self.max_peak_growth) * groups.kernel_peak():
            return NotFused(a, b, WhyNoFuse.PEAK_GROWTH, f"{self.max_peak_growth:.0%}")
        return None

    def _still_fusable(self, groups: FusionGroups, a: Group, b: Group) -> NotFused | None:
        """``can_fuse`` for a candidate after earlier merges of its round: of its checks only
        acyclicity and the peak depend on the other groups, so only they can have changed."""
        return NotFused(a, b, WhyNoFuse.CYCLE) if groups.creates_cycle(a, b) else self._peak_veto(groups, a, b)

    def solve(self, problem: FusionProblem) -> FusionResult:
        groups = FusionGroups(problem)
        log = _Events()
        scores: dict[tuple[int, int], Score] = {}  # last round's candidates: a score holds while its groups do
        for round_ in range(1, self.max_rounds + 1):
            candidates, kept = [], {}
            for a, b in groups.sharing_pairs(self.window):
                veto = self.can_fuse(groups, a, b)
                if veto is not None:
                    log.add(veto)
                    continue
                key = groups.pair_key(a, b)
                kept[key] = scores[key] if key in scores else score(groups, a, b)
                candidates.append((kept[key], a, b))
            scores = kept
            log.add(Round(round_, len(candidates)))
            fused_now: set[str] = set()  # the first nodes of the groups merged this round
            for pair_score, a, b in best_first(candidates):
                if a[0] in fused_now or b[0] in fused_now:
                    log.add(NotFused(a, b, WhyNoFuse.FUSED_THIS_ROUND))
                    continue
                veto = self._still_fusable(groups, a, b)
                if veto is not None:
                    log.add(veto)
                    continue
                log.add(Fused(a, b, pair_score, groups.kind(a, b)))
                groups.merge(a, b)
                fused_now.update((a[0], b[0]))
            if not fused_now:
                break
        partition = groups.partition()
        return FusionResult(partition, Status.HEURISTIC, cost=problem.cost(partition), info=log.info())


#: At most this many pairs kept apart are recorded (about 250 bytes each); the rest are counted
#: (``info.stats["rejections_not_logged"]``), so that no problem file can fill the memory.
MAX_LOGGED_REJECTIONS = 200_000


class _Events:
    """The events of one run: every round and merge, the rejections up to ``MAX_LOGGED_REJECTIONS``."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.rejections = self.unlogged = 0

    def add(self, event: Event) -> None:
        if isinstance(event, NotFused):
            self.rejections += 1
            if self.rejections > MAX_LOGGED_REJECTIONS:
                self.unlogged += 1
                return
        self.events.append(event)

    def info(self) -> FusionInfo:
        return FusionInfo(events=self.events, stats={"rejections_not_logged": self.unlogged} if self.unlogged else {})
