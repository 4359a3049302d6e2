"""The traced program: a list of nodes in topological order (the contract between front end,
reference evaluator and lowering).

Every elementwise node's inputs already have the node's shape and a common dtype: the front end
inserts explicit ``expand`` (broadcasting) and ``cast`` (type promotion) nodes, so the reference
evaluator and the lowering never re-derive torch's rules.

Ops and their attributes:

- ``input``: ``index`` (position in the call), ``strides`` (element strides the compiled code
  assumes).
- ``constant``: ``value``; shape ``()``.
- unary elementwise (``UNARY_OPS``) and ``cast`` (``dtype``).
- binary elementwise (``BINARY_OPS``); comparisons (``COMPARE_OPS``) return bool.
- ``where``: inputs ``(cond, a, b)``.
- reductions (``REDUCTION_OPS``): ``dims`` (sorted, non-negative), ``keepdim``; ``m2`` is the sum
  of squared deviations from the mean over ``dims`` (variance's numerator, float only).
- scans (``SCAN_OPS``: ``cumsum``, ``cumprod``, ``logcumsumexp``): ``dim`` (non-negative); the
  output has the input's shape, and the input is already cast to the result dtype (int and bool
  scan in int64, as torch; ``logcumsumexp`` is float only).  Spec 7.7: a loop-carried dependence
  along ``dim`` only.
- views: ``permute`` (``dims``), ``reshape`` (``shape``), ``expand`` (``shape``, same rank, size-1
  dims broadcast), ``slice`` (``dim``, ``start``, ``stop``, ``step``), ``unfold`` (``dim``,
  ``size``, ``step``: torch's sliding windows, a new last dim of ``size``), ``flip`` (``dims``).
- ``pad``: ``low``, ``high``, ``interior`` per dim and ``value`` (XLA's pad): source element ``j``
  of a dim lands at ``low + j * (interior + 1)``, every other element is ``value``; a negative
  ``low``/``high`` crops.  Constant padding, and the zero insertion of a strided convolution's
  input gradient.
- ``matmul``: an extern call on 2-D or batched 3-D operands, or a 2-D left operand times a
  batched 3-D right one (spec 7.1: whole-buffer dependency).
- ``matmul_sum``: inputs ``(a_1, b_1, a_2, b_2, ...)``, the extern call ``sum_i a_i @ b_i``; made
  by ``stax.passes.matmul_sums`` before lowering, never traced.
- ``conv2d``: inputs ``(padded, weight)``, float32 ``(N, C, HP, WP)`` and ``(C_out, C, kH, kW)``: the
  extern call of ``stax.kernels.direct_conv``, a stride-1 convolution of one group (the blocked form of
  ``stax.frontend.ops.conv_forms``).  Before lowering, ``stax.passes.conv_epilogues`` may give it an epilogue: the
  attributes ``scale``, ``shift`` and ``relu`` (true when present), and after the weight the scale
  and the shift it has, ``(C_out,)`` each: ``relu(conv * scale + shift)`` per output channel.
- ``conv2d_weight``: inputs ``(padded, grad)``, float32 ``(N, C, HP, WP)`` and ``(N, C_out, OH, OW)``:
  the weight gradient ``(C_out, C, HP - OH + 1, WP - OW + 1)`` of that convolution, on the same
  kernel's tile.

- ``take_rows``: inputs ``(table, index)``, ``(V, D)`` and int64 ``(T,)``: the extern call of
  ``stax.kernels.row_index`` giving ``(T, D)``, the table's rows ``index[i]`` (an embedding's lookup).
- ``add_rows``: inputs ``(values, index)``, float ``(T, D)`` and int64 ``(T,)``, attribute ``rows``
  (``V``): ``(V, D)``, each row the sum of the values whose index is that row (its gradient).
- ``bernoulli``: input ``(seed,)``, an int64 ``()``; attributes ``p`` and ``stream``: the extern call
  of ``stax.kernels.random_draws``, a bool tensor of the node's shape, each element true with probability
  ``p``, a function of the seed, the stream and its position (dropout's mask).
- ``uniform``: input ``(seed,)``; attribute ``stream``: the same extern's float draws in [0, 1)
  (``rand``, and ``randn`` from two of them).

In-place methods on graph inputs are functionalized: ``Graph.mutations`` maps an input's name
to the node holding its final value, which the compiled function writes back (spec 7.1, renaming).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UNARY_OPS = frozenset({
    "exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "sigmoid", "tanh", "relu", "erf",
    "log1p", "expm1", "sin", "cos", "logical_not", "bitwise_not",
})
BINARY_OPS = frozenset({"add", "sub", "mul", "div", "floordiv", "truncdiv", "mod", "pow", "maximum", "minimum",
                        "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"})
COMPARE_OPS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})
#: the ops that draw random numbers from the program's seed (``stax.kernels.random_draws``)
RANDOM_OPS = frozenset({"bernoulli", "uniform"})
REDUCTION_OPS = frozenset({"sum", "prod", "amax", "amin", "m2"})
#: each scan op and its combine op (``ComputedBuffer.scan``): logcumsumexp runs log(e^a + e^b)
SCAN_COMBINE = {"cumsum": "sum", "cumprod": "prod", "logcumsumexp": "logaddexp"}
SCAN_OPS = frozenset(SCAN_COMBINE)
VIEW_OPS = frozenset({"permute", "reshape", "expand", "slice", "unfold", "flip"})
ELEMENTWISE_OPS = UNARY_OPS | BINARY_OPS | COMPARE_OPS | {"cast", "where"}
#: the extern products, which read an operand stored transposed in place (BLAS's transpose flag)
PRODUCT_OPS = frozenset({"matmul", "matmul_sum"})
EXTERN_OPS = PRODUCT_OPS | RANDOM_OPS | {"conv2d", "conv2d_weight", "take_rows", "add_rows"}


@dataclass(frozen=True)
class Node:
    """One traced op. ``attrs`` is a sorted tuple of (key, value) pairs so nodes hash (for CSE)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def is_transpose(node: Node) -> bool:
    """A ``permute`` that swaps the last two dims (``w.t()``, ``x.transpose(-1, -2)``)."""
    dims = node.attr("dims") if node.op == "permute" else None
    return dims is not None and len(dims) >= 2 and dims == tuple(range(len(dims) - 2)) + (len(dims) - 1, len(dims) - 2)


@dataclass
class Graph:
    """A traced program; ``nodes`` is in topological order."""

    nodes: dict[str, Node] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    mutations: dict[str, str] = field(default_factory=dict)
    #: each convolution's result node -> its ``stax.frontend.ops.conv_forms.ConvPlan`` (the form it was traced in)
    conv_plans: dict[str, Any] = field(default_factory=dict)
    #: each traced node -> the user's (file, line) that made it (``stax.frontend.user_frames.user_location``);
    #: where the code is written, not what it computes, so graphs compare without it
    sources: dict[str, tuple[str, int]] = field(default_factory=dict, compare=False)

    def users(self) -> dict[str, list[str]]:
        """Map from node name to the names of the nodes that read it, in program order."""
        result: dict[str, list[str]] = {name: [] for name in self.nodes}
        for node in self.nodes.values():
            for inp in node.inputs:
                if node.name not in result[inp]:
                    result[inp].append(node.name)
        return result

    def constant_value(self, name: str) -> Any:
        """The value of ``name`` when it is a Python scalar of the program (a ``constant`` node,
        looked at through ``reshape`` and ``expand``), else None (a tensor, even a 0-d one)."""
        node = self.nodes[name]
        while node.op in ("reshape", "expand"):
            node = self.nodes[node.inputs[0]]
        return node.attr("value") if node.op == "constant" else None

    def __str__(self) -> str:
        lines = []
        for n in self.nodes.values():
            attrs = ", ".join(f"{k}={v!r}" for k, v in n.attrs)
            lines.append(f"{n.name}: {n.dtype}{list(n.shape)} = {n.op}({', '.join(n.inputs)}{', ' if attrs and n.inputs else ''}{attrs})")
        lines.append(f"return {', '.join(self.outputs)}")
        for inp, val in self.mutations.items():
            lines.append(f"mutate {inp} <- {val}")
        return "\n".join(lines)
