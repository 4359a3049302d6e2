"""Reference answers by enumeration, for tests only: every partition, every order, every packing.

``min_fusion_cost`` tries all set partitions (Bell(9) = 21147 at 9 nodes) under Definition 7.3;
``min_peak`` tries all topological orders under Definition 7.5; ``min_pool_size`` tries all
compacted packings of the memory pool of section 7.5.  Each refuses sizes it cannot finish.
"""
from __future__ import annotations

from collections.abc import Container, Iterator, Mapping, Sequence

import networkx as nx

from stax.errors import StaxError
from stax.memory.pool import Lifetimes
from stax.scheduler.problems import FusionProblem, OrderProblem, Partition

MAX_PARTITION_NODES = 9
MAX_ORDER_TASKS = 10
MAX_POOL_BUFFERS = 7


def _refuse(what: str, size: int, limit: int, instead: str) -> None:
    if size > limit:
        raise StaxError(f"brute force over {what} refuses {size} (limit {limit}); use {instead}")


def set_partitions(items: Sequence[str], apart: Container[frozenset[str]] = frozenset()) -> Iterator[list[list[str]]]:
    """Every partition of ``items`` into blocks that keep each pair in ``apart`` in different blocks."""
    blocks: list[list[str]] = []

    def place(k: int) -> Iterator[list[list[str]]]:
        if k == len(items):
            yield [list(b) for b in blocks]
            return
        item = items[k]
        for block in blocks:
            if not any(frozenset((item, other)) in apart for other in block):
                block.append(item)
                yield from place(k + 1)
                block.pop()
        blocks.append([item])
        yield from place(k + 1)
        blocks.pop()

    return place(0)


def _fits(problem: FusionProblem, blocks: list[list[str]], edges: list[tuple[str, str]],
          touches: dict[str, set[str]]) -> bool:
    """Kernel limits and an acyclic quotient (Definition 7.3); forbidden pairs are kept apart upstream."""
    for b in blocks:  # the limits bound fused blocks only, as in FusionProblem.validate
        touched = set().union(*(touches[v] for v in b))
        if len(b) > 1 and (len(b) > problem.max_nodes or len(touched) > problem.max_buffers):
            return False
    block_of = {v: i for i, b in enumerate(blocks) for v in b}
    quotient = nx.DiGraph((block_of[a], block_of[b]) for a, b in edges if block_of[a] != block_of[b])
    return nx.is_directed_acyclic_graph(quotient)


def min_fusion_cost(problem: FusionProblem) -> tuple[int, Partition]:
    """The least Definition 7.3 cost over all valid partitions, and one partition attaining it."""
    _refuse("set partitions of nodes", len(problem.nodes), MAX_PARTITION_NODES, "solvers.fusion.cpsat.CpSatFusion")
    apart = set(problem.forbidden_set())
    edges = list(problem.dag().edges)
    touches = {v: problem.buffers_of(v) for v in problem.nodes}
    best: tuple[int, Partition] | None = None
    for blocks in set_partitions(problem.nodes, apart):
        cost = problem.cost(blocks)
        if (best is None or cost < best[0]) and _fits(problem, blocks, edges, touches):
            best = (cost, tuple(tuple(b) for b in blocks))
    if best is None:
        raise StaxError(f"fusion problem {problem.name!r} has no valid partition")
    return best


def min_peak(problem: OrderProblem) -> tuple[int, tuple[str, ...]]:
    """The least Definition 7.5 peak over all topological orders, and one order attaining it."""
    _refuse("topological orders of tasks", len(problem.tasks), MAX_ORDER_TASKS, "solvers.order.dp.DownSetOrder")
    orders = (tuple(o) for o in nx.all_topological_sorts(problem.dag()))
    return min((problem.peak(o), o) for o in orders)


def min_pool_size(sizes: Mapping[str, int], lifetimes: Lifetimes) -> int:
    """The smallest memory pool holding every buffer at a fixed offset (section 7.5).

    Some optimal packing is compacted: each buffer sits at 0 or on top of a buffer whose lifetime
    meets its own, placed lower.  Placing buffers in increasing offset order therefore reaches
    it; the search tries every such sequence, pruned by the best size found.
    """
    boxes = [(size, lifetimes[name]) for name, size in sizes.items() if size > 0]
    _refuse("pool packings of buffers", len(boxes), MAX_POOL_BUFFERS, "solvers.order.pool_cpsat.solve_pool")
    meets = [[j for j, (_, (s, e)) in enumerate(boxes) if j != i and s <= life_i[1] and life_i[0] <= e]
             for i, (_, life_i) in enumerate(boxes)]
    best = sum(size for size, _ in boxes)
    offset: dict[int, int] = {}

    def place(height: int) -> None:
        nonlocal best
        if len(offset) == len(boxes):
            best = min(best, height)
            return
        for i, (size, _) in enumerate(boxes):
            if i in offset:
                continue
            for at in {0} | {offset[j] + boxes[j][0] for j in meets[i] if j in offset}:
                top = at + size
                clear = all(offset[j] >= top or offset[j] + boxes[j][0] <= at for j in meets[i] if j in offset)
                if clear and max(height, top) < best:
                    offset[i] = at
                    place(max(height, top))
                    del offset[i]

    place(0)
    return best
