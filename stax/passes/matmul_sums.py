"""Sums of matmuls as one accumulating extern call, before lowering.

A weight used at every step of an unrolled recurrence gets its gradient as a sum of products,
``sum_t dG_t^T x_t`` (autograd adds the steps' ``mm`` results, often each transposed into the
weight's layout).  As traced, each product is an extern call writing a buffer of the weight's size
(which BLAS first zeroes), and the adds read them all back.  Here an ``add`` tree whose leaves
include two or more matmuls, each read only by that tree, becomes one ``matmul_sum`` node: its
inputs are the pairs ``(a_1, b_1, a_2, b_2, ...)`` and its value ``sum_i a_i @ b_i``, which
``stax.kernels.matmul.matmul_sum`` computes by gemm calls accumulating into the output (``beta = 1``),
the extern form of spec 7.1 (a whole-buffer dependency on every operand).  A transposed product
``permute(a @ b)`` (last two dims swapped) is the product ``b^T @ a^T``, whose operands lowering
reads in place (and an even number of such permutes, the product itself).  The other leaves
stay adds, on the sum's result.  The program's graph is left
as traced; the rewritten copy is what lowering sees.
"""
from __future__ import annotations

from dataclasses import replace

from stax.ir import graph as g

#: dtypes that BLAS accumulates (others keep their adds)
_BLAS_DTYPES = frozenset({"float32", "float64"})


class _Folder:
    """Builds the rewritten graph in program order; ``pairs`` holds each matmul-like node's
    products as operand pairs."""

    def __init__(self, graph: g.Graph):
        self.graph = graph
        self.users = graph.users()
        self.kept = set(graph.outputs) | set(graph.mutations.values())
        self.nodes: dict[str, g.Node] = {}
        self.pairs: dict[str, list[tuple[str, str]]] = {}

    def _sole_reader(self, name: str, reader: str) -> bool:
        return self.users[name] == [reader] and name not in self.kept

    def _transposed(self, operand: str) -> str:
        """``operand`` with its last two dims swapped, as a permute node (lowering reads it in place)."""
        node = self.nodes[operand]
        rank = len(node.shape)
        dims = tuple(range(rank - 2)) + (rank - 1, rank - 2)
        name = f"{operand}.T"
        if name not in self.nodes:
            shape = node.shape[:-2] + (node.shape[-1], node.shape[-2])
            self.nodes[name] = g.Node(name, "permute", (operand,), shape, node.dtype, (("dims", dims),))
        return name

    def _terms(self, name: str, reader: str, like: g.Node) -> tuple[list[tuple[str, str]], list[str]]:
        """The products and the other leaves that input ``name`` of the add ``reader`` contributes
        to its sum: an add read only there contributes its own terms."""
        node = self.nodes.get(name)
        if node is None or node.shape != like.shape or node.dtype != like.dtype or not self._sole_reader(name, reader):
            return [], [name]
        if name in self.pairs:
            return self.pairs[name], []
        if node.op == "add":
            terms = [self._terms(i, name, node) for i in node.inputs]
            return [p for pairs, _ in terms for p in pairs], [leaf for _, leaves in terms for leaf in leaves]
        swaps, outer = 0, name  # permutes swapping the last two dims, each read only by the next
        while g.is_transpose(self.nodes[outer]) and self._sole_reader(self.nodes[outer].inputs[0], outer):
            swaps, outer = swaps + 1, self.nodes[outer].inputs[0]
        inner = self.nodes[outer]
        if swaps and inner.op == "matmul" and all(len(self.nodes[i].shape) == len(inner.shape) for i in inner.inputs):
            a, b = inner.inputs
            return ([(self._transposed(b), self._transposed(a))] if swaps % 2 else [(a, b)]), []
        return [], [name]

    def _fold(self, node: g.Node) -> bool:
        """Rewrite the add ``node`` when two or more of its terms are products: their sum, plus the
        other leaves one add at a time."""
        pairs: list[tuple[str, str]] = []
        leaves: list[str] = []
        for i in node.inputs:
            more_pairs, more_leaves = self._terms(i, node.name, node)
            pairs += more_pairs
            leaves += more_leaves
        if len(pairs) < 2:
            return False
        name = f"{node.name}.sum" if leaves else node.name
        self.nodes[name] = g.Node(name, "matmul_sum", tuple(x for pair in pairs for x in pair), node.shape, node.dtype)
        self.pairs[name] = pairs
        for i, leaf in enumerate(leaves):
            total = node.name if i == len(leaves) - 1 else f"{node.name}.add{i}"
            self.nodes[total] = replace(node, name=total, inputs=(leaf, name))
            self.users[name] = [total]  # a new node is read by the next add only
            name = total
        return True

    def run(self) -> g.Graph:
        """The rewritten graph, or the graph itself when no sum was folded.  New nodes come after
        their inputs: a product's transposed operands and a sum are added when its add is met."""
        folded = False
        for node in self.graph.nodes.values():
            if node.op == "matmul":
                self.pairs[node.name] = [tuple(node.inputs)]
            if node.op == "add" and node.dtype in _BLAS_DTYPES and self._fold(node):
                folded = True
            else:
                self.nodes[node.name] = node
        if not folded:
            return self.graph
        live = set(self.graph.outputs) | set(self.graph.mutations.values()) | set(self.graph.inputs)
        for node in reversed(list(self.nodes.values())):  # the folded products and adds are read no more
            if node.name in live:
                live.update(node.inputs)
        nodes = {name: node for name, node in self.nodes.items() if name in live}
        return g.Graph(nodes, list(self.graph.inputs), list(self.graph.outputs), dict(self.graph.mutations),
                       {n: p for n, p in self.graph.conv_plans.items() if n in nodes})


def fold_matmul_sums(graph: g.Graph) -> g.Graph:
    """A copy of ``graph`` with its sums of matmuls made ``matmul_sum`` nodes (see the module
    docstring); the graph itself when it has none."""
    if not any(n.op == "matmul" for n in graph.nodes.values()):
        return graph
    return _Folder(graph).run()
