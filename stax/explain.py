"""What each ``STAX_LOGS`` channel says about a pass, in the user's op names (``stax.util.logs``).

Every function returns lines; ``stax.compiler`` writes them to the channel right after the pass
that decided them, so they appear as the compiler works.
"""
from __future__ import annotations

import time
from typing import Mapping, Sequence

from stax.codegen.kernel import Kernel
from stax.util.logs import log
from stax.memory.plan import MemoryPlan
from stax.scheduler.problems import OrderProblem, Partition
from stax.scheduler.events import Labels, group_name
from stax.scheduler.fusion_log import fusion_decisions
from stax.decisions import Schedule
from stax.scheduler.strategies import OrderResult


def block_names(partition: Partition, names: Sequence[str], labels: Labels) -> dict[str, str]:
    """Each kernel's name (``cpp_fused_op0_op1``) -> the ops it computes, in the user's words."""
    return {name: group_name(block, labels) for name, block in zip(names, partition)}


def order_lines(problem: OrderProblem, order: OrderResult, ops: Mapping[str, str]) -> list[str]:
    """The order strategy's answer (Definition 7.5's peak, the candidates ``best`` compared) and
    each step's kernel."""
    info = order.info
    lines = [f"strategy {info.strategy or '?'}: {order.status}, {len(order.order)} kernels, "
             f"estimated peak {order.peak} bytes"]
    if info.candidates:
        lines.append("candidates (estimated peak): " + ", ".join(
            f"{name} {peak} B{' (chosen)' if name == info.chosen else ''}" for name, peak in info.candidates.items()))
    lines += [f"step {t}: {name} ({ops.get(name, name)})" for t, name in enumerate(order.order)]
    return lines


def log_saved_decisions(sched: Schedule) -> None:
    """Write a saved schedule's fusion decisions and order to their channels, as scheduling it did."""
    ops = block_names(sched.partition, sched.order_problem.tasks, sched.labels)  # tasks: the blocks' kernel names
    log("fusion", lambda: fusion_decisions(sched.fusion_problem, sched.fusion, sched.labels))
    log("order", lambda: order_lines(sched.order_problem, sched.order, ops))


def memory_lines(plan: MemoryPlan) -> list[str]:
    """The plan's peak and where each allocated buffer lives (spec 7.6 step 6)."""
    lines = [f"planned peak {plan.peak} bytes (order's estimate {plan.estimate}), {plan.reuses} reuses, "
             f"{plan.inplace} in place" + (f", pool of {plan.pool_size} bytes" if plan.pool_size else "")]
    for name, where in plan.storage.items():
        taken = f" of {where.source}" if where.source else f" at offset {where.offset}" if where.kind == "pool" else ""
        lines.append(f"{name}: {where.kind}{taken}")
    return lines


def kernel_lines(kernels: Sequence[Kernel], ops: Mapping[str, str], width: int) -> list[str]:
    """Each block kernel's form, vector width and parallel depth (Algorithm 8.1), and its ops."""
    return [f"{k.name}: {k.form}, width {1 if k.extern else width}, parallel depth {max(k.depths, default=0)}: "
            f"{ops.get(k.name, k.name)}" for k in kernels]


class Stopwatch:
    """The seconds of consecutive passes, for ``STAX_LOGS=timing``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = now - self._last
        self._last = now

    def line(self, stage: str) -> str:
        """``schedule: lower 0.0040 s, fusion 0.0010 s, ...``."""
        return f"{stage}: " + ", ".join(f"{name} {s:.4f} s" for name, s in self.seconds.items())
