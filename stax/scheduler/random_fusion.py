"""A seeded random fusion strategy: a baseline for sweeps, and the source of arbitrary valid
partitions for tests (any partition the validator accepts must compute the same outputs)."""
from __future__ import annotations

import random

from stax.errors import InvalidScheduleError
from stax.scheduler.problems import FusionProblem
from stax.scheduler.strategies import FusionInfo, FusionResult, Status, ordered_blocks


class RandomFusion:
    """Merges random pairs of blocks, keeping each merge the validator accepts (Definition 7.3)."""

    name = "random"

    def __init__(self, seed: int = 0, attempts: int | None = None):
        self.seed, self.attempts = seed, attempts
        self.parameters = {"seed": seed, "attempts": attempts}

    def solve(self, problem: FusionProblem) -> FusionResult:
        rng = random.Random(self.seed)
        blocks = [[n] for n in problem.nodes]
        for _ in range(self.attempts if self.attempts is not None else 4 * len(blocks)):
            if len(blocks) < 2:
                break
            i, j = rng.sample(range(len(blocks)), 2)
            merged = blocks[i] + blocks[j]
            candidate = [b for k, b in enumerate(blocks) if k not in (i, j)] + [merged]
            try:
                problem.validate(candidate)
            except InvalidScheduleError:
                continue
            blocks = candidate
        partition = ordered_blocks(problem, blocks)
        return FusionResult(partition, Status.HEURISTIC, cost=problem.cost(partition),
                            info=FusionInfo(stats={"seed": self.seed}))
