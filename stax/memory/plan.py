"""How the wrapper gets storage for each buffer (spec 7.5, 7.6 step 6).

For a kernel order, each allocated buffer gets one of:

- ``alloc``: fresh storage at its producer, freed after its last user (Definition 7.5);
- ``reuse``: the storage of a buffer freed earlier, with the same dtype and storage size, held
  in the free pool meanwhile (7.5's two rules).  A pooled buffer is never a graph output or an
  input's storage, and a reuse is taken only when holding the pooled storage until then does
  not raise the running peak above the plan's peak without reuse;
- ``inplace``: the storage of a buffer the producing kernel reads for the last time, when dtype
  and size agree and the kernel reads it exactly at the index it writes (the argument of
  Proposition 7.2).  The spec also allows a slightly smaller result; stax requires equal sizes
  so that a storage is always released with the size it was allocated with;
- ``pool``: a fixed offset in one preallocated pool (inference mode), planned with the tree of
  time and space splits (``memory.pool``).

``MemoryPlan.peak`` predicts the bytes the wrapper holds at its worst step; the runtime's
allocation accounting measures the same quantity.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from stax.errors import StaxError
from stax.scheduler.problems import OrderProblem
from stax.memory.pool import plan_pool

POOL_ALIGNMENT = 64


@dataclass
class Storage:
    """Where buffer ``name`` lives: ``kind`` is alloc, reuse, inplace or pool."""

    name: str
    kind: str
    source: str | None = None  # the buffer whose storage is taken (reuse, inplace)
    offset: int = 0  # pool offset in bytes


@dataclass
class MemoryPlan:
    order: tuple[str, ...]
    storage: dict[str, Storage]
    releases: dict[int, list[str]]  # step -> buffers whose storage is released after it
    live: list[int]  # bytes held at each step
    pool_size: int = 0
    estimate: int = 0  # Definition 7.5's peak of the order (no reuse)
    reuses: int = 0
    inplace: int = 0
    candidates: dict[str, int] = field(default_factory=dict)

    @property
    def peak(self) -> int:
        return max(self.live, default=0)


def plan_memory(problem: OrderProblem, order: Sequence[str], *, reuse: bool = True, inplace: bool = True,
                pool: bool = False, dtypes: dict[str, str], inplace_ok: Callable[[str, str], bool]) -> MemoryPlan:
    """Plan storage for ``problem``'s buffers in ``order``.

    ``inplace_ok(buffer, source)`` says whether the kernel producing ``buffer`` reads ``source``
    only at the index it writes (asked of the code generator's view of the kernel).
    """
    order = tuple(order)
    lifetimes = problem.lifetimes(order)
    size = {b.name: b.size for b in problem.buffers}
    outputs = {b.name for b in problem.buffers if b.is_output}
    live = list(problem.live_bytes(order))
    estimate = max(live, default=0)
    storage = {b.name: Storage(b.name, "alloc") for b in problem.buffers}
    if pool:
        return _pool_plan(problem, order, lifetimes, size, outputs, live, estimate, storage)
    producer_step = {name: start for name, (start, _) in lifetimes.items()}
    reads_at: dict[int, list[str]] = {}
    for b in problem.buffers:
        reads_at.setdefault(lifetimes[b.name][1], []).append(b.name)
    free: list[str] = []  # released buffers whose storage may be taken, in release order
    taken: set[str] = set()
    reuses = inplace_count = 0
    for step in range(len(order)):
        for name in sorted((n for n, s in producer_step.items() if s == step), key=lambda n: -size[n]):
            source = None
            if inplace:
                source = next((s for s in reads_at.get(step, []) if s not in taken and s not in outputs
                               and s != name and lifetimes[s][0] < step and dtypes[s] == dtypes[name]
                               and size[s] == size[name] and inplace_ok(name, s)), None)
            if source is not None:
                storage[name] = Storage(name, "inplace", source)
                taken.add(source)
                live[step] -= size[name]
                inplace_count += 1
                continue
            if reuse:
                source = next((s for s in free if s not in taken and dtypes[s] == dtypes[name] and size[s] == size[name]
                               and all(live[t] + size[s] <= estimate for t in range(lifetimes[s][1] + 1, step))), None)
                if source is not None:
                    storage[name] = Storage(name, "reuse", source)
                    taken.add(source)
                    for t in range(lifetimes[source][1] + 1, step):
                        live[t] += size[source]
                    reuses += 1
        free += [n for n in reads_at.get(step, []) if n not in outputs]
    releases: dict[int, list[str]] = {}
    for name, (_, last) in lifetimes.items():
        if name not in taken and name not in outputs:
            releases.setdefault(last, []).append(name)
    return MemoryPlan(order, storage, releases, live, estimate=estimate, reuses=reuses, inplace=inplace_count)


def _pool_plan(problem: OrderProblem, order: tuple[str, ...], lifetimes: dict[str, tuple[int, int]],
               size: dict[str, int], outputs: set[str], live: list[int], estimate: int,
               storage: dict[str, Storage]) -> MemoryPlan:
    """Inference mode: every intermediate at a fixed offset of one pool; outputs allocated."""
    pooled = [b.name for b in problem.buffers if b.name not in outputs]
    aligned = {n: -(-size[n] // POOL_ALIGNMENT) * POOL_ALIGNMENT for n in pooled}
    plan = plan_pool({n: aligned[n] for n in pooled}, {n: lifetimes[n] for n in pooled})
    for n in pooled:
        storage[n] = Storage(n, "pool", offset=plan.offsets[n])
    held = [plan.size + sum(size[o] for o in outputs if lifetimes[o][0] <= t) for t in range(len(order))]
    return MemoryPlan(tuple(order), storage, {}, held, pool_size=plan.size, estimate=estimate)


def grouped_live(plan: MemoryPlan, problem: OrderProblem, spans: Sequence[tuple[int, int]]) -> list[int]:
    """Bytes held at each step when the wrapper runs each span of steps as one call (kernels
    sharing a parallel region): storage the span allocates is taken before the call, and storage
    it frees is freed after it."""
    size = {b.name: b.size for b in problem.buffers}
    lifetimes = problem.lifetimes(plan.order)
    live = list(plan.live)
    for first, last in spans:
        for name, where in plan.storage.items():
            start = lifetimes[name][0]
            if where.kind == "alloc" and first < start <= last:
                for t in range(first, start):
                    live[t] += size[name]
        for t in range(first, last):
            for name in plan.releases.get(t, []):
                for u in range(t + 1, last + 1):
                    live[u] += size[name]
    return live


def check_plan(plan: MemoryPlan, problem: OrderProblem) -> None:
    """Raise unless ``plan`` is safe for ``problem`` in ``plan.order`` (a plan read from a file):
    buffers sharing a storage have its size and disjoint lifetimes, an in-place buffer starting
    where its source is last read; pooled buffers live at the same time do not overlap."""
    lifetimes = problem.lifetimes(plan.order)
    size = {b.name: b.size for b in problem.buffers}
    outputs = {b.name for b in problem.buffers if b.is_output}
    holders: dict[str, list[str]] = {}
    for name, where in plan.storage.items():
        root, hops = name, 0
        while plan.storage[root].kind in ("reuse", "inplace"):
            source = plan.storage[root].source
            if size[source] != size[root] or source in outputs or hops > len(plan.storage):
                raise StaxError(f"storage of {root!r} takes that of {source!r}, an output, a buffer of another size "
                                "or a cycle of takings")
            root, hops = source, hops + 1
        holders.setdefault(root, []).append(name)
    for names in holders.values():
        names.sort(key=lambda n: lifetimes[n][0])
        for before, after in zip(names, names[1:]):
            end, start = lifetimes[before][1], lifetimes[after][0]
            shared_step = end == start and plan.storage[after] == Storage(after, "inplace", before)
            if end >= start and not shared_step:
                raise StaxError(f"buffers {before!r} and {after!r} share a storage while both are live "
                                f"(steps {lifetimes[before]} and {lifetimes[after]})")
    pooled = sorted((n for n, w in plan.storage.items() if w.kind == "pool"), key=lambda n: plan.storage[n].offset)
    for i, a in enumerate(pooled):
        low, high = plan.storage[a].offset, plan.storage[a].offset + size[a]
        if low < 0 or high > plan.pool_size:
            raise StaxError(f"pooled buffer {a!r} at [{low}, {high}) lies outside the pool of {plan.pool_size} bytes")
        for b in pooled[i + 1:]:
            if plan.storage[b].offset >= high:
                break
            if lifetimes[a][0] <= lifetimes[b][1] and lifetimes[b][0] <= lifetimes[a][1]:
                raise StaxError(f"pooled buffers {a!r} and {b!r} overlap in the pool while both are live")
