"""Algebraic simplification of a traced graph before lowering: powers with a constant exponent,
and permutations of permutations.

A power whose exponent is a Python scalar of the program (a ``constant`` node) is rewritten the
way TorchInductor's ``pow`` lowering does it, so no vector ``powf`` is called for it:

- an integer exponent ``e`` with ``|e| < MAX_MULTIPLIED_EXPONENT`` becomes multiplications by
  repeated squaring (``x ** 5`` is ``((x * x) * (x * x)) * x``); a negative one multiplies the
  ``reciprocal`` of ``x``, so that a result below the normal range is subnormal as ``pow``'s,
  except ``x ** -2``, which is ``1 / (x * x)`` as torch computes it; ``x ** 1`` is ``x`` and
  ``x ** 0`` is ones (NaN included, as ``pow``);
- ``0.5``, ``-0.5`` and ``-1.0`` become ``sqrt``, ``rsqrt`` and ``reciprocal``: what torch's CPU
  kernel computes for a scalar exponent, so ``(-inf) ** 0.5`` is NaN and ``(-0.0) ** 0.5`` is
  ``-0.0`` (C's ``pow`` gives ``inf`` and ``0.0``; a tensor exponent, even 0-d, keeps ``pow``,
  as torch does).

A product of ``n`` factors is within about ``n`` rounding units of the power (the float32
``x ** 31`` within 31, ``x ** -31`` within twice that).  Other exponents keep ``pow``.

A ``permute`` of a ``permute`` becomes one ``permute`` of the first one's input, and nothing
when the two cancel: an ATen backward graph transposes a matmul's result back and forth
(``permute(permute(mm, [1, 0]), [1, 0])``), which lowering would otherwise copy into an
output buffer of its own.  The program's graph is left as traced; the rewritten copy is what
lowering sees.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from stax.ir import graph as g
from stax.dtypes import is_floating

#: integer exponents below this in magnitude become multiplications (TorchInductor's bound)
MAX_MULTIPLIED_EXPONENT = 32
_UNARY_POWERS = {0.5: "sqrt", -0.5: "rsqrt", -1.0: "reciprocal"}


class _Rewriter:
    """Builds the simplified graph: nodes in program order, users of a replaced node redirected."""

    def __init__(self, graph: g.Graph):
        self.graph = graph
        self.nodes: dict[str, g.Node] = {}
        self.rename: dict[str, str] = {}

    def add(self, node: g.Node) -> str:
        self.nodes[node.name] = node
        return node.name

    def derived(self, like: g.Node, name: str, op: str, inputs: tuple[str, ...], **attrs: Any) -> str:
        """A node of ``like``'s shape and dtype."""
        return self.add(g.Node(name, op, inputs, like.shape, like.dtype, tuple(sorted(attrs.items()))))

    def ones(self, node: g.Node) -> str:
        """``1`` broadcast to ``node``'s shape, the last node named as ``node``."""
        one = g.Node(f"{node.name}.one" if node.shape else node.name, "constant", (), (), node.dtype,
                     (("value", 1.0 if is_floating(node.dtype) else 1),))
        if not node.shape:
            return self.add(one)
        ones = (1,) * len(node.shape)
        reshaped = self.add(g.Node(f"{node.name}.ones", "reshape", (self.add(one),), ones, node.dtype,
                                   (("shape", ones),)))
        return self.derived(node, node.name, "expand", (reshaped,), shape=node.shape)

    def product(self, node: g.Node, base: str, exponent: int, final: bool) -> str:
        """``base ** exponent`` (``exponent >= 1``) by repeated squaring; the outermost product is
        named as ``node`` when ``final``."""
        if exponent == 1:
            return base
        half = self.product(node, base, exponent // 2, False)
        name = node.name if final and exponent % 2 == 0 else f"{node.name}.p{exponent // 2 * 2}"
        square = self.derived(node, name, "mul", (half, half))
        if exponent % 2 == 0:
            return square
        return self.derived(node, node.name if final else f"{node.name}.p{exponent}", "mul", (square, base))

    def power(self, node: g.Node, base: str, exponent: Any) -> str | None:
        """The rewritten ``base ** exponent``, or None to keep ``pow``."""
        floating = is_floating(node.dtype)
        if floating and float(exponent) in _UNARY_POWERS:
            return self.derived(node, node.name, _UNARY_POWERS[float(exponent)], (base,))
        if float(exponent) != int(exponent) or abs(int(exponent)) >= MAX_MULTIPLIED_EXPONENT:
            return None
        e = int(exponent)
        if e == 0:
            return self.ones(node)
        if e > 0:
            return self.product(node, base, e, True)
        if not floating:  # the front end refuses these; keep torch's error path in pow
            return None
        if e == -2:
            return self.derived(node, node.name, "reciprocal", (self.product(node, base, 2, False),))
        return self.product(node, self.derived(node, f"{node.name}.inverse", "reciprocal", (base,)), -e, True)

    def permutation(self, node: g.Node) -> str | None:
        """``node``, a permute of a permute, as one permute of the inner one's input (that input
        itself when the two cancel), or None when its input is no permute."""
        inner = self.nodes.get(node.inputs[0])
        if inner is None or inner.op != "permute":
            return None
        first, second = inner.attr("dims"), node.attr("dims")
        dims = tuple(first[d] for d in second)
        if dims == tuple(range(len(dims))):
            return inner.inputs[0]
        return self.derived(node, node.name, "permute", (inner.inputs[0],), dims=dims)

    def rewrite(self, node: g.Node) -> str | None:
        """The name of what replaces ``node``, or None to keep it."""
        if node.op == "permute":
            return self.permutation(node)
        exponent = self.graph.constant_value(node.inputs[1]) if node.op == "pow" else None
        return None if exponent is None else self.power(node, node.inputs[0], exponent)

    def run(self) -> g.Graph:
        for node in self.graph.nodes.values():
            node = replace(node, inputs=tuple(self.rename.get(i, i) for i in node.inputs))
            result = self.rewrite(node)
            if result is None:
                self.add(node)
            elif result != node.name:
                self.rename[node.name] = result
        outputs = [self.rename.get(o, o) for o in self.graph.outputs]
        mutations = {inp: self.rename.get(v, v) for inp, v in self.graph.mutations.items()}
        mutations = {inp: v for inp, v in mutations.items() if inp != v}
        live = set(outputs) | set(mutations.values()) | set(self.graph.inputs)
        for node in reversed(self.nodes.values()):  # exponents' constants and inner permutes are read no more
            if node.name in live:
                live.update(node.inputs)
        nodes = {name: node for name, node in self.nodes.items() if name in live}
        plans = {self.rename.get(n, n): plan for n, plan in self.graph.conv_plans.items()}
        return g.Graph(nodes, list(self.graph.inputs), outputs, mutations, {n: p for n, p in plans.items() if n in nodes})


def _rewritable(graph: g.Graph, node: g.Node) -> bool:
    if node.op == "pow":
        return graph.constant_value(node.inputs[1]) is not None
    return node.op == "permute" and graph.nodes[node.inputs[0]].op == "permute"


def simplify(graph: g.Graph) -> g.Graph:
    """A copy of ``graph`` with its constant powers and nested permutes rewritten (see the module
    docstring); the graph itself when there is nothing to rewrite."""
    if not any(_rewritable(graph, n) for n in graph.nodes.values()):
        return graph
    return _Rewriter(graph).run()
