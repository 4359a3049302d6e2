"""Memory pool planning for inference (spec 7.5, last paragraphs): one pool, fixed offsets.

The pool is a tree.  A time split holds children whose lifetimes are pairwise disjoint; they
start at the same address and share it.  A space split puts two children side by side.
Buffers are inserted by size descending, longer lifetime first; each insertion first tries the
existing time splits and opens new space only when that fails: beside a buffer it overlaps,
or, as a last resort, at the end of the pool.  This is a greedy approximation of dynamic
storage allocation; ``lower_bound`` is M* of Definition 7.5, which no placement can beat.

Lifetimes are inclusive step intervals ``[start, last]`` (``OrderProblem.lifetimes``).

    >>> plan = plan_pool({"a": 4, "b": 4, "c": 2}, {"a": (0, 1), "b": (2, 3), "c": (1, 2)})
    >>> plan.offsets, plan.size, plan.lower_bound
    ({'a': 0, 'b': 0, 'c': 4}, 6, 6)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from stax.scheduler.problems import OrderProblem

Lifetimes = Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class _Slot:
    """A leaf: one buffer."""

    name: str
    size: int
    start: int
    last: int

    def width(self) -> int:
        return self.size

    def slots(self) -> Iterator["_Slot"]:
        yield self

    def meets(self, other: "_Slot") -> bool:
        return self.start <= other.last and other.start <= self.last

    def place(self, offset: int, offsets: dict[str, int]) -> None:
        offsets[self.name] = offset


@dataclass
class _TimeSplit:
    """Children with pairwise disjoint lifetimes, all at this node's offset."""

    children: list["_Slot | _SpaceSplit"] = field(default_factory=list)

    def width(self) -> int:
        return max((c.width() for c in self.children), default=0)

    def slots(self) -> Iterator[_Slot]:
        for child in self.children:
            yield from child.slots()

    def insert(self, slot: _Slot, room: float) -> bool:
        """Place ``slot`` within ``room`` bytes from this node's offset; False if it does not fit."""
        if slot.size > room:
            return False
        overlapping = [c for c in self.children if any(s.meets(slot) for s in c.slots())]
        if not overlapping:
            self.children.append(slot)
            return True
        if len(overlapping) > 1:
            return False
        child = overlapping[0]
        if isinstance(child, _SpaceSplit):
            return child.insert(slot, room)
        if child.size + slot.size > room:
            return False
        beside = _SpaceSplit(_TimeSplit([child]), _TimeSplit([slot]))
        self.children[self.children.index(child)] = beside
        return True

    def place(self, offset: int, offsets: dict[str, int]) -> None:
        for child in self.children:
            child.place(offset, offsets)


@dataclass
class _SpaceSplit:
    """Two children side by side; the left one never grows once the right one exists."""

    left: _TimeSplit
    right: _TimeSplit

    def width(self) -> int:
        return self.left.width() + self.right.width()

    def slots(self) -> Iterator[_Slot]:
        yield from self.left.slots()
        yield from self.right.slots()

    def insert(self, slot: _Slot, room: float) -> bool:
        fixed = self.left.width()
        return self.left.insert(slot, fixed) or self.right.insert(slot, room - fixed)

    def place(self, offset: int, offsets: dict[str, int]) -> None:
        self.left.place(offset, offsets)
        self.right.place(offset + self.left.width(), offsets)


@dataclass(frozen=True)
class PoolPlan:
    offsets: dict[str, int]
    size: int
    lower_bound: int


def plan_pool(sizes: Mapping[str, int], lifetimes: Lifetimes) -> PoolPlan:
    """Place every buffer at a fixed offset in one pool (spec 7.5, time and space splits)."""
    slots = sorted((_Slot(name, sizes[name], *lifetimes[name]) for name in sizes),
                   key=lambda s: (-s.size, s.start - s.last, s.name))
    root = _TimeSplit()
    for slot in slots:
        if not root.insert(slot, math.inf):
            root = _TimeSplit([_SpaceSplit(root, _TimeSplit([slot]))])
    offsets: dict[str, int] = {}
    root.place(0, offsets)
    return PoolPlan(offsets, root.width(), max_live_bytes(sizes, lifetimes))


def plan_order_pool(problem: OrderProblem, order: Sequence[str]) -> PoolPlan:
    """The pool of an order's buffers, with lifetimes from Definition 7.5."""
    return plan_pool({b.name: b.size for b in problem.buffers}, problem.lifetimes(order))


def max_live_bytes(sizes: Mapping[str, int], lifetimes: Lifetimes) -> int:
    """M* of Definition 7.5: the most bytes live at one step (a lower bound on any pool)."""
    events: dict[int, int] = {}
    for name, (start, last) in lifetimes.items():
        events[start] = events.get(start, 0) + sizes[name]
        events[last + 1] = events.get(last + 1, 0) - sizes[name]
    peak = live = 0
    for step in sorted(events):
        live += events[step]
        peak = max(peak, live)
    return peak


def address_conflicts(sizes: Mapping[str, int], lifetimes: Lifetimes,
                      offsets: Mapping[str, int]) -> list[tuple[str, str]]:
    """Pairs of buffers live at a common step whose address ranges overlap (empty: a valid plan)."""
    names = sorted(n for n in sizes if sizes[n] > 0)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
            if lifetimes[a][0] <= lifetimes[b][1] and lifetimes[b][0] <= lifetimes[a][1]
            and offsets[a] < offsets[b] + sizes[b] and offsets[b] < offsets[a] + sizes[a]]
