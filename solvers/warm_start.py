"""Heuristic answers the exact models start from (CP-SAT hints), found through stax's registries.

The heuristics live in ``stax`` (greedy fusion, the candidate orders of section 7.5); when one
is not installed or fails, the models start cold (fusion) or from a plain topological order.
"""
from __future__ import annotations

import networkx as nx

from stax.errors import StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem, Partition
from stax.scheduler.strategies import run_fusion, run_order


def greedy_partition(problem: FusionProblem) -> Partition | None:
    """The greedy fusion partition (strategy "greedy"), or None when it is unavailable."""
    try:
        return run_fusion("greedy", problem).partition
    except (ImportError, StaxError):
        return None


def heuristic_order(problem: OrderProblem) -> tuple[str, ...]:
    """The best of the candidate orders (strategy "best"), else a topological order of the tasks."""
    try:
        return run_order("best", problem).order
    except (ImportError, StaxError):
        position = {t: i for i, t in enumerate(problem.tasks)}
        return tuple(nx.lexicographical_topological_sort(problem.dag(), key=position.__getitem__))
