"""``f.memory_report``: peak memory of a compiled program, estimated and measured (spec 7.5)."""
from __future__ import annotations

from dataclasses import dataclass

from stax.scheduler.problems import OrderProblem
from stax.scheduler.strategies import OrderResult
from stax.memory.plan import MemoryPlan
from stax.memory.pool import plan_order_pool


@dataclass
class MemoryReport:
    """Figures in bytes: each candidate order's estimated peak (Definition 7.5), the chosen order's,
    the wrapper plan's peak with reuse and in-place reuse, the size of a pool planned for the
    chosen order against its lower bound M*, and the peak measured on the last call (None before
    the first call)."""

    candidates: dict[str, int]
    chosen: str
    estimate: int
    planned: int
    pool_size: int
    lower_bound: int
    measured: int | None
    reuses: int
    inplace: int

    @classmethod
    def of(cls, problem: OrderProblem, order: OrderResult, plan: MemoryPlan, measured: int | None) -> "MemoryReport":
        pool = plan_order_pool(problem, order.order)
        strategy = order.info.strategy or "?"
        return cls(candidates=dict(order.info.candidates or {strategy: order.peak}),
                   chosen=order.info.chosen or strategy, estimate=order.peak,
                   planned=plan.peak, pool_size=pool.size, lower_bound=pool.lower_bound, measured=measured,
                   reuses=plan.reuses, inplace=plan.inplace)

    def __str__(self) -> str:
        lines = ["candidate orders (estimated peak, Definition 7.5):"]
        for name, peak in sorted(self.candidates.items(), key=lambda kv: kv[1]):
            lines.append(f"  {name:10s} {peak:>14,d} bytes{'  <- chosen' if name == self.chosen else ''}")
        lines.append(f"estimated peak of the chosen order (M*): {self.estimate:,d} bytes")
        lines.append(f"wrapper plan with {self.reuses} reuses and {self.inplace} in-place reuses: {self.planned:,d} bytes")
        lines.append(f"pool planned for this order: {self.pool_size:,d} bytes (lower bound {self.lower_bound:,d})")
        lines.append("measured peak of the last call: "
                     + (f"{self.measured:,d} bytes" if self.measured is not None else "not run yet"))
        return "\n".join(lines)
