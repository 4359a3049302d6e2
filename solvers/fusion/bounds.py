"""A certified lower bound on the least fusion traffic (Definition 7.3): compulsory traffic.

Whatever the partition: a graph input that some node uses is read at least once; a produced
output is written once; and a produced buffer with a user that may not share its producer's
kernel (a forbidden pair) crosses a kernel boundary, so it is written once and read at least
once.  The bound sums these per buffer; it needs no solver and is valid at any size.
"""
from __future__ import annotations

from stax.scheduler.problems import FusionProblem

from solvers.fusion.index import NodeIndex


def compulsory_traffic(problem: FusionProblem) -> int:
    """Bytes every valid partition moves (module doc): at most the least Definition 7.3 cost."""
    index = NodeIndex(problem)
    loners = {v for v in problem.nodes if len(index.touches[v]) > problem.max_buffers}
    total = 0
    for buf in problem.buffers:
        if buf.producer is None:
            total += buf.size if buf.users else 0
            continue
        apart = index.partners[buf.producer]
        crosses = any(u != buf.producer and (u in apart or u in loners or buf.producer in loners) for u in buf.users)
        total += buf.size * ((buf.is_output or crosses) + crosses)
    return total
