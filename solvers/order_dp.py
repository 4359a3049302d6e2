"""Exact ordering by dynamic programming over down-sets (Serenity-style), Definition 7.5.

The bytes live while task t runs depend only on the set S of tasks run before it (a down-set:
closed under predecessors): the buffers produced in S that are outputs or still have a user
outside S, plus t's own buffers.  Hence

    best(S + t) = min over the last task t of  max(best(S), resident(S) + produced(t)),

and best(all tasks) is the least peak over all topological orders.  The programme walks the
down-sets layer by layer (by size) and refuses, with ``StaxError``, when a layer would exceed
``max_states`` (or the optional ``time_limit`` runs out): their number grows exponentially
with the width of the DAG.
"""
from __future__ import annotations

import time

from stax.errors import StaxError
from stax.problems import OrderProblem
from stax.strategy import OrderResult


class DownSetOrder:
    """Order strategy "dp": the least-peak order by dynamic programming over down-sets."""

    name = "dp"

    def __init__(self, max_states: int = 200_000, time_limit: float | None = None):
        self.max_states = max_states
        self.time_limit = time_limit

    def solve(self, problem: OrderProblem) -> OrderResult:
        began = time.perf_counter()
        tasks = problem.tasks
        index = {t: i for i, t in enumerate(tasks)}
        bit = {t: 1 << i for i, t in enumerate(tasks)}
        preds = [0] * len(tasks)
        for a, b in problem.dag().edges:
            preds[index[b]] |= bit[a]
        produced = [0] * len(tasks)
        # (producer bit, users mask, size, is_output) of every buffer
        lives: list[tuple[int, int, int, bool]] = []
        for buf in problem.buffers:
            produced[index[buf.producer]] += buf.size
            lives.append((bit[buf.producer], sum(bit[u] for u in buf.users), buf.size, buf.is_output))

        def resident(done: int) -> int:
            """Bytes produced in ``done`` still live at the next step (outputs, or a user yet to run)."""
            return sum(size for p, users, size, output in lives if done & p and (output or users & ~done))

        # state -> (peak so far, resident bytes, last task index, previous state)
        layer: dict[int, tuple[int, int, int, int]] = {0: (0, 0, -1, -1)}
        history = [layer]
        for size in range(len(tasks)):
            nxt: dict[int, tuple[int, int, int]] = {}  # state -> (peak, last task index, previous state)
            for done, (peak, held, _, _) in layer.items():
                for i in range(len(tasks)):
                    if done >> i & 1 or preds[i] & ~done:
                        continue
                    state = done | 1 << i
                    candidate = max(peak, held + produced[i])
                    if state not in nxt or candidate < nxt[state][0]:
                        nxt[state] = (candidate, i, done)
            if self.time_limit is not None and time.perf_counter() - began > self.time_limit:
                raise StaxError(f"order dp: time limit {self.time_limit} s reached after {size + 1} of {len(tasks)} "
                                "layers of down-sets; use the CP-SAT order strategy or raise time_limit")
            if len(nxt) > self.max_states:
                raise StaxError(f"order dp: {len(nxt)} down-sets of size {size + 1} already exceed max_states="
                                f"{self.max_states} ({len(tasks)} tasks); use the CP-SAT order strategy "
                                "(run_order('cpsat', problem)) or raise max_states")
            layer = {s: (peak, resident(s), i, prev) for s, (peak, i, prev) in nxt.items()}
            history.append(layer)
        order, state = [], (1 << len(tasks)) - 1
        for layer in reversed(history[1:]):
            _, _, i, state = layer[state]
            order.append(tasks[i])
        order.reverse()
        peak = history[-1][(1 << len(tasks)) - 1][0] if tasks else 0
        return OrderResult(tuple(order), "optimal", problem.peak(order), float(peak),
                           info={"down_sets": sum(len(h) for h in history)})
