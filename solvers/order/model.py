"""The CP-SAT model of an OrderProblem (Definition 7.5): the topological order of least peak memory.

Variables: the step ``pos[t]`` of every task, all different in ``0..T-1`` and ``pos[u] < pos[v]``
on every edge.  A buffer of size b is an interval of demand b over the steps
``[def, last]`` of Definition 7.5: ``def = pos[producer]``, ``last = max(pos[users])`` (at
least ``def``), or ``T - 1`` for an output.  A cumulative constraint whose capacity is the
variable ``peak`` bounds the bytes live at every step; minimizing ``peak`` gives M* of the best
order.  Two bounds that CP-SAT does not see at once are added to ``peak``'s domain: every task
holds its inputs and outputs at its own step, and every output is live at the last step.
"""
from __future__ import annotations

from ortools.sat.python import cp_model

from stax.scheduler.problems import OrderProblem


def step_lower_bound(problem: OrderProblem) -> int:
    """A peak no order can beat: the bytes a task touches at its step, and all outputs at the end."""
    held = {t: 0 for t in problem.tasks}
    for buf in problem.buffers:
        for task in {buf.producer, *buf.users}:
            held[task] += buf.size
    outputs = sum(b.size for b in problem.buffers if b.is_output)
    return max([outputs, *held.values()])


class OrderModel:
    """The CP-SAT model of one OrderProblem; ``hint`` an order, ``decode`` a solution."""

    def __init__(self, problem: OrderProblem):
        self.problem = problem
        self.model = cp_model.CpModel()
        last_step = len(problem.tasks) - 1
        self.pos = {t: self.model.new_int_var(0, last_step, f"pos_{t}") for t in problem.tasks}
        self.model.add_all_different(self.pos.values())
        for a, b in problem.dag().edges:
            self.model.add(self.pos[a] + 1 <= self.pos[b])
        total = sum(b.size for b in problem.buffers)
        self.peak = self.model.new_int_var(min(step_lower_bound(problem), total), total, "peak")
        intervals, demands = [], []
        self.ends: list[tuple[str, cp_model.IntVar | None, cp_model.IntVar]] = []  # (buffer, last, length)
        for buf in problem.buffers:
            if buf.size == 0:
                continue
            start = self.pos[buf.producer]
            if buf.is_output:
                last: cp_model.LinearExprT = last_step
                last_var = None
            else:
                last = self.model.new_int_var(0, last_step, f"last_{buf.name}")
                self.model.add_max_equality(last, [start, *(self.pos[u] for u in buf.users)])
                last_var = last
            length = self.model.new_int_var(1, last_step + 1, f"length_{buf.name}")
            self.ends.append((buf.name, last_var, length))
            intervals.append(self.model.new_interval_var(start, length, last + 1, f"life_{buf.name}"))
            demands.append(buf.size)
        self.model.add_cumulative(intervals, demands, self.peak)
        self.model.minimize(self.peak)

    def hint(self, order: tuple[str, ...]) -> None:
        """Give CP-SAT a complete solution: steps, lifetimes and the peak of ``order``."""
        for step, task in enumerate(order):
            self.model.add_hint(self.pos[task], step)
        lifetimes = self.problem.lifetimes(order)
        for name, last, length in self.ends:
            start, end = lifetimes[name]
            if last is not None:
                self.model.add_hint(last, end)
            self.model.add_hint(length, end - start + 1)
        self.model.add_hint(self.peak, self.problem.peak(order))

    def decode(self, solver: cp_model.CpSolver) -> tuple[str, ...]:
        return tuple(sorted(self.problem.tasks, key=lambda t: solver.value(self.pos[t])))
