"""Reference evaluator: runs a traced :class:`~stax.ir.graph.Graph` op by op with numpy.

It is the oracle of every correctness test, so it follows torch's eager semantics literally:
NaN propagates through ``maximum``/``minimum``/``amax``/``amin``, integer ``//`` and ``%`` by
zero raise :class:`~stax.errors.KernelError` (torch raises "ZeroDivisionError"), and in-place
updates of inputs (``Graph.mutations``) are written into the caller's arrays after every output
has been computed (spec 7.1: the mutation is ordered after every read of the old value).

With ``upcast=True`` every float32 value is computed in float64 (inputs, constants, casts); the
outputs are rounded back to the graph's dtypes. Use it as the reference for long reductions.

With a ``rounding`` generator the values are perturbed as rounding in some order could perturb
them (Monte Carlo arithmetic): every float op's result but the exact ones' (a max, a select, a
view) by a random relative error of up to
ROUNDING_UNITS units of its dtype's rounding and rounded to that dtype, and the terms of a reduction, scan or matmul by
their count times that, the backward error of summing them in any order.  How far such runs
land from the unperturbed one measures how much an output depends on rounding (the cosine of a
float32 sum of 300 terms near 674 moves by 1e-4 from one order of the additions to another).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from stax.kernels.random_draws import bernoulli_mask, uniform_values
from stax.errors import CallError, KernelError, StaxError
from stax.ir.graph import REDUCTION_OPS, SCAN_OPS, VIEW_OPS, Graph, Node

Array = np.ndarray

_erf = np.vectorize(math.erf, otypes=[np.float64])

_UNARY: dict[str, Callable[[Array], Array]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "neg": np.negative, "tanh": np.tanh,
    "log1p": np.log1p, "expm1": np.expm1, "sin": np.sin, "cos": np.cos, "logical_not": np.logical_not,
    "bitwise_not": np.invert,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "erf": lambda x: _erf(x).astype(x.dtype),
}
_BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "truncdiv": lambda a, b: _truncdiv(a, b),
    "maximum": np.maximum, "minimum": np.minimum,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}
_INTEGER_DIVISIONS = frozenset({"floordiv", "truncdiv", "mod"})
#: a perturbed op's relative error, in units of its dtype's rounding (2**-24 for float32): the
#: kernels' float32 exp and erf and libm's functions are within a few
ROUNDING_UNITS = 4
_UNIT_ROUNDING = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}
#: ops whose result is one of their operands' values, never rounded: a perturbed run keeps them exact, so
#: that a max still equals one of the values it was taken of (a max pooling's index finds it)
_VALUE_PRESERVING = VIEW_OPS | {"pad", "constant", "amax", "amin", "maximum", "minimum", "where", "neg", "abs", "relu"}


def _m2(x: Array, axis: tuple[int, ...], keepdims: bool) -> Array:
    """The sum of squared deviations from the mean, by the two-pass formula (0 over no element)."""
    if not all(x.shape[d] for d in axis):
        return np.zeros_like(x).sum(axis, keepdims=keepdims)
    return ((x - x.mean(axis, keepdims=True)) ** 2).sum(axis, keepdims=keepdims)


def _bool_or_number(reduce: Callable[..., Array], empty: bool) -> Callable[..., Array]:
    """``reduce`` (numpy's max or min), on bool arrays from ``empty``, so that ``any()`` and
    ``all()`` of no element are False and True."""
    def run(x: Array, axis: tuple[int, ...], keepdims: bool) -> Array:
        return reduce(x, axis, keepdims=keepdims, **({"initial": empty} if x.dtype == np.bool_ else {}))
    return run


_REDUCTIONS: dict[str, Callable[..., Array]] = {"sum": np.sum, "prod": np.prod, "amax": _bool_or_number(np.max, False),
                                                "amin": _bool_or_number(np.min, True), "m2": _m2}
_SCANS: dict[str, Callable[..., Array]] = {"cumsum": np.cumsum, "cumprod": np.cumprod,
                                           "logcumsumexp": np.logaddexp.accumulate}


def _np_dtype(dtype: str, upcast: bool) -> np.dtype:
    return np.dtype("float64" if upcast and dtype == "float32" else dtype)


def _truncdiv(a: Array, b: Array) -> Array:
    """torch's ``div(rounding_mode="trunc")``: ``trunc(a / b)`` for floats, C's division for
    integers (exact, by the truncated remainder ``fmod``)."""
    if a.dtype.kind == "f":
        return np.trunc(a / b)
    return (a - np.fmod(a, b)) // b


def _pow(a: Array, b: Array, scalar: float | None) -> Array:
    """torch's pow: a Python scalar exponent of 0.5, -0.5 or -2 is ``sqrt``, ``rsqrt`` or
    ``1 / (x * x)`` (so ``(-inf) ** 0.5`` is NaN and ``1e20 ** -2`` is 0 in float32), other
    exponents C's ``pow``; an integer to a negative integer power is 0 except for bases 1 and -1
    (torch's ``powi``; numpy raises)."""
    if a.dtype.kind == "f":
        if scalar in (0.5, -0.5):
            root = np.sqrt(a)
            return root if scalar > 0 else 1 / root
        if scalar == -2:
            return 1 / (a * a)
        # numpy takes a power of 0.5 as sqrt, whose values at -inf and -0.0 are not C's pow's
        half = b == 0.5
        return np.where(half & (a == -np.inf), np.inf, np.where(half & (a == 0), 0, np.power(a, b))).astype(a.dtype)
    a, b = np.broadcast_arrays(a, b)
    negative = b < 0
    result = np.power(a, np.where(negative, 0, b))
    odd = (np.abs(b) % 2) == 1
    return np.where(negative, np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)), result).astype(a.dtype)


def _slice(x: Array, node: Node) -> Array:
    index = [slice(None)] * x.ndim
    index[node.attr("dim")] = slice(node.attr("start"), node.attr("stop"), node.attr("step"))
    return x[tuple(index)]


def _unfold(x: Array, node: Node) -> Array:
    """torch's ``unfold`` through numpy's own sliding windows (windows of ``size`` every ``step``)."""
    dim, step = node.attr("dim"), node.attr("step")
    windows = np.lib.stride_tricks.sliding_window_view(x, node.attr("size"), axis=dim)
    return windows[(slice(None),) * dim + (slice(None, None, step),)]


def _pad(x: Array, node: Node) -> Array:
    """XLA's pad: spread each dim by ``interior``, ``np.pad`` by the positive ``low``/``high``,
    crop by the negative ones."""
    low, high, every = node.attr("low"), node.attr("high"), [i + 1 for i in node.attr("interior")]
    spread = np.full([(n - 1) * k + 1 if n else 0 for n, k in zip(x.shape, every)], node.attr("value"), x.dtype)
    spread[tuple(slice(None, None, k) for k in every)] = x
    padded = np.pad(spread, [(max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high)], constant_values=node.attr("value"))
    return padded[tuple(slice(max(-lo, 0), n - max(-hi, 0)) for lo, hi, n in zip(low, high, padded.shape))]


def _evaluate_node(node: Node, args: list[Array], upcast: bool, zero_division: str = "raise",
                   exponent: float | None = None) -> Array:
    """One node's value; ``exponent``: a ``pow``'s exponent when it is a Python scalar."""
    op = node.op
    if op == "constant":
        return np.array(node.attr("value"), dtype=_np_dtype(node.dtype, upcast))
    if op == "cast":
        return args[0].astype(_np_dtype(node.dtype, upcast))
    if op in _UNARY:
        return _UNARY[op](args[0])
    if op == "pow":
        return _pow(*args, exponent)
    if op in _BINARY:
        a, b = args
        if op in _INTEGER_DIVISIONS and a.dtype.kind in "iu" and not np.all(b):
            if zero_division == "raise":
                raise KernelError(f"integer division by zero in {op} (node {node.name}), or an index out of range "
                                  "(gather, scatter and index_select check their indices so)")
            a, b = np.broadcast_arrays(a, b)
            return np.where(b == 0, np.iinfo(a.dtype).max, _BINARY[op](a, np.where(b == 0, 1, b)))
        return _BINARY[op](a, b)
    if op == "where":
        return np.where(*args)
    if op in _REDUCTIONS:
        return _REDUCTIONS[op](args[0], axis=node.attr("dims"), keepdims=node.attr("keepdim"))
    if op in _SCANS:
        return _SCANS[op](args[0], axis=node.attr("dim"))
    if op == "permute":
        return np.transpose(args[0], node.attr("dims"))
    if op == "reshape":
        return np.reshape(args[0], node.attr("shape"))
    if op == "expand":
        return np.broadcast_to(args[0], node.attr("shape"))
    if op == "slice":
        return _slice(args[0], node)
    if op == "unfold":
        return _unfold(args[0], node)
    if op == "flip":
        return np.flip(args[0], node.attr("dims"))
    if op == "pad":
        return _pad(args[0], node)
    if op == "matmul":
        return np.matmul(*args)
    if op == "conv2d":  # every window of the padded input times the weight (stax.kernels.direct_conv's extern)
        windows = sliding_window_view(args[0], args[1].shape[2:], axis=(2, 3))
        out = np.einsum("ncyxij,ocij->noyx", windows, args[1], optimize=True).astype(args[0].dtype, copy=False)
        return _conv_epilogue(out, node, args[2:])
    if op in ("take_rows", "add_rows"):  # by address (stax.kernels.row_index); an index out of range is zeros
        source, index = args
        rows = source.shape[0] if op == "take_rows" else node.attr("rows")
        valid = (index >= 0) & (index < rows)
        out = np.zeros(node.shape, source.dtype)
        if op == "take_rows":
            out[valid] = source[index[valid]]
        else:
            np.add.at(out, index[valid], source[valid])
        return out
    if op == "bernoulli":  # the same bits as the compiled draws (stax.kernels.random_draws)
        return bernoulli_mask(int(args[0]), node.attr("stream"), node.shape, node.attr("p"))
    if op == "uniform":
        return uniform_values(int(args[0]), node.attr("stream"), node.shape, node.dtype)
    if op == "conv2d_weight":  # the gradient times the input's windows, summed over images and outputs
        kernel = tuple(args[0].shape[d] - args[1].shape[d] + 1 for d in (2, 3))
        windows = sliding_window_view(args[0], kernel, axis=(2, 3))
        return np.einsum("noyx,ncyxij->ocij", args[1], windows, optimize=True).astype(args[0].dtype, copy=False)
    raise StaxError(f"reference: node {node.name} has unknown op {op!r}")


def _conv_epilogue(out: Array, node: Node, channels: list[Array]) -> Array:
    """A ``conv2d`` node's epilogue (``stax.passes.conv_epilogues``): times its scale, plus its shift,
    per output channel, then a ReLU, as its attributes say."""
    given = iter(channels)
    for key, apply in (("scale", np.multiply), ("shift", np.add)):
        if node.attr(key, False):
            out = apply(out, next(given).reshape(-1, 1, 1))
    return _UNARY["relu"](out) if node.attr("relu", False) else out


def _check_inputs(graph: Graph, arrays: tuple[Array, ...]) -> None:
    if len(arrays) != len(graph.inputs):
        raise CallError(f"the graph takes {len(graph.inputs)} inputs, got {len(arrays)}")
    for name, array in zip(graph.inputs, arrays):
        node = graph.nodes[name]
        if not isinstance(array, np.ndarray):
            raise CallError(f"input {name}: expected a numpy array, got {type(array).__name__}")
        if array.shape != node.shape or array.dtype != np.dtype(node.dtype):
            raise CallError(f"input {name}: expected {node.dtype}{list(node.shape)}, got {array.dtype}{list(array.shape)}")
        if name in graph.mutations and not array.flags.writeable:
            raise CallError(f"input {name} is updated in place but the array is read-only")


def _perturbed(x: Array, dtype: str, terms: int, rounding: np.random.Generator) -> Array:
    """``x`` times 1 + e, e uniform within ROUNDING_UNITS * ``terms`` units of ``dtype``'s rounding,
    then rounded to ``dtype`` as a kernel's result is (so an upcast run underflows where the
    kernels must: a product of many factors below 1 that float32 cannot hold is 0 in every order)."""
    if x.dtype.kind != "f" or dtype not in _UNIT_ROUNDING:
        return x
    bound = ROUNDING_UNITS * terms * _UNIT_ROUNDING[dtype]
    return (x * (1 + rounding.uniform(-bound, bound, x.shape))).astype(dtype).astype(x.dtype, copy=False)


def _shifted(x: Array, dtype: str, terms: int, rounding: np.random.Generator) -> Array:
    """``x`` plus e, e uniform within ROUNDING_UNITS * ``terms`` units of ``dtype``'s rounding."""
    bound = ROUNDING_UNITS * terms * _UNIT_ROUNDING[dtype]
    return x + rounding.uniform(-bound, bound, x.shape).astype(x.dtype)


def _with_rounded_terms(node: Node, args: list[Array], dtypes: list[str],
                        rounding: np.random.Generator) -> list[Array]:
    """The arguments of an accumulating op with its terms perturbed by their count's backward error."""
    if node.op in _VALUE_PRESERVING:
        return args
    if node.op in REDUCTION_OPS:
        terms = math.prod(args[0].shape[d] for d in node.attr("dims"))
    elif node.op in SCAN_OPS:
        terms = args[0].shape[node.attr("dim")]
    elif node.op == "matmul":
        terms = args[0].shape[-1]
    elif node.op == "conv2d":
        terms = math.prod(args[1].shape[1:])
    elif node.op == "conv2d_weight":
        terms = args[1].shape[0] * args[1].shape[2] * args[1].shape[3]  # N * OH * OW
    elif node.op == "add_rows":
        terms = args[0].shape[0]  # at most every row of the values
    else:
        return args
    if node.op == "logcumsumexp":  # its terms are exp(x): their relative error is an absolute one of x
        return [_shifted(args[0], dtypes[0], terms, rounding)]
    return [_perturbed(args[0], dtypes[0], terms, rounding), *args[1:]]


def evaluate(graph: Graph, *arrays: Array, upcast: bool = False, zero_division: str = "raise",
             rounding: np.random.Generator | None = None) -> tuple[Array, ...]:
    """Run ``graph`` on ``arrays``; returns one new array per output and applies
    ``graph.mutations`` to the caller's arrays in place, as torch's in-place methods do.

    Integer division by zero raises ``KernelError`` (torch's eager behaviour); with
    ``zero_division="sentinel"`` those elements become the dtype's largest value instead, so a
    caller can check that results which never needed them are still right.  ``rounding``
    perturbs the values as rounding could (the module's docstring)."""
    _check_inputs(graph, arrays)
    exponents = {n.name: graph.constant_value(n.inputs[1]) for n in graph.nodes.values() if n.op == "pow"}
    env: dict[str, Array] = {}
    with np.errstate(all="ignore"):  # torch computes inf/NaN silently
        for node in graph.nodes.values():
            if node.op == "input":
                value = arrays[node.attr("index")]
                value = value.astype(np.float64) if upcast and node.dtype == "float32" else value
            else:
                args = [env[i] for i in node.inputs]
                if rounding is not None:
                    args = _with_rounded_terms(node, args, [graph.nodes[i].dtype for i in node.inputs], rounding)
                value = np.asarray(_evaluate_node(node, args, upcast, zero_division, exponents.get(node.name)))
                value = value.astype(_np_dtype(node.dtype, upcast), copy=False)
                if rounding is not None and node.op not in _VALUE_PRESERVING:
                    value = _perturbed(value, node.dtype, 1, rounding)
            if value.shape != node.shape:
                raise StaxError(f"reference: node {node.name} ({node.op}) computed shape {value.shape}, "
                                f"the graph says {node.shape}")
            env[node.name] = value
        outputs = tuple(np.array(env[o], dtype=graph.nodes[o].dtype) for o in graph.outputs)
        updates = {inp: np.array(env[val]) for inp, val in graph.mutations.items()}
        for inp, value in updates.items():
            np.copyto(arrays[graph.nodes[inp].attr("index")], value, casting="unsafe")
    return outputs
