"""One-pass variances: the two-pass form a program writes, ``((x - x.mean(D)) ** 2).sum(D)``
(also ``c * c`` for ``c = x - mean``, and the ``mean`` around it), becomes the ``m2`` reduction of
``x`` over ``D``, which Welford's update computes in the same pass as the mean's sum.

The two-pass form reads ``x`` a second time after the mean is known.  Over a cached row that
costs little, and the two passes stay (layer norm's rows); where the data the second pass reads
again is larger than ``CostModel.cached_pass_bytes`` (a column statistic reads every row before
any mean is known, a long row leaves the cache) it means a second trip to memory or a column
walk, and the rewrite is applied.  Batch-norm statistics of a 4096 x 4096 input: one split
reduction streaming the rows, instead of column strips read twice.

The result agrees with the two-pass formula up to rounding (both are stable: Welford's update
and Chan's merge of partial results never subtract two large sums).  The program's graph is
left as traced; the rewritten copy is what lowering sees.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from stax.ir import graph as g
from stax.dtypes import ITEMSIZE, is_floating


def _centered(graph: g.Graph, square: g.Node) -> str | None:
    """``c`` when ``square`` is ``c * c`` or ``c ** 2``."""
    if square.op == "mul" and square.inputs[0] == square.inputs[1]:
        return square.inputs[0]
    if square.op == "pow" and graph.constant_value(square.inputs[1]) == 2:
        return square.inputs[0]
    return None


def _is_mean_broadcast(graph: g.Graph, name: str, x: g.Node, dims: tuple[int, ...]) -> bool:
    """Whether ``name`` is ``x.mean(dims)`` broadcast back over ``dims`` of ``x``: ``sum(x, dims) /
    count``, reshaped to ``x``'s shape with ones at ``dims`` and expanded (or kept with keepdim)."""
    node = graph.nodes[name]
    if node.op == "expand":
        node = graph.nodes[node.inputs[0]]
    kept_shape = tuple(1 if d in dims else s for d, s in enumerate(x.shape))
    if node.shape != kept_shape:
        return False
    if node.op == "reshape":
        node = graph.nodes[node.inputs[0]]
    if node.op != "div":
        return False
    total = graph.nodes[node.inputs[0]]
    count = prod(x.shape[d] for d in dims)
    return total.op == "sum" and total.inputs == (x.name,) and tuple(total.attr("dims")) == dims and \
        graph.constant_value(node.inputs[1]) == count


def _reread_bytes(x: g.Node, dims: tuple[int, ...]) -> int:
    """Bytes the two-pass form's second pass reads again before it can reuse what the first
    pass brought into cache: one output's elements when they are a row (the innermost dim is
    reduced), else all of ``x`` (columns: every row is read before any mean is known)."""
    itemsize = ITEMSIZE[x.dtype]
    if x.shape and len(x.shape) - 1 in dims:
        return prod(x.shape[d] for d in dims) * itemsize
    return x.numel * itemsize


def one_pass_variances(graph: g.Graph, cached_pass_bytes: int) -> g.Graph:
    """A copy of ``graph`` in which every two-pass sum of squared deviations whose second pass
    would re-read more than ``cached_pass_bytes`` is an ``m2`` reduction of the same name."""
    nodes = dict(graph.nodes)
    for name, node in graph.nodes.items():
        if node.op != "sum" or not is_floating(node.dtype):
            continue
        centered = _centered(graph, graph.nodes[node.inputs[0]])
        sub = graph.nodes[centered] if centered else None
        if sub is None or sub.op != "sub":
            continue
        x, dims = graph.nodes[sub.inputs[0]], tuple(node.attr("dims"))
        if x.dtype == node.dtype and _is_mean_broadcast(graph, sub.inputs[1], x, dims) and \
                _reread_bytes(x, dims) > cached_pass_bytes:
            nodes[name] = replace(node, op="m2", inputs=(x.name,))
    if nodes == graph.nodes:
        return graph
    return g.Graph(nodes, list(graph.inputs), list(graph.outputs), dict(graph.mutations), dict(graph.conv_plans))
