"""Random valid programs (for fuzzing and sweeps), as replayable, shrinkable data.

A :class:`FuzzProgram` is a list of inputs (shape, dtype, memory layout) and a list of steps
over a pool of values (the inputs first, then one value per step), plus the pool indices it
returns.  Every step is an entry of :data:`OPS` applied to pool values with JSON parameters,
so a program round-trips through JSON (regression files) and a shrinker can drop steps.

:func:`generate` draws programs by a random walk *inside* ``stax.trace``: it picks an op and
arguments among the live proxy tensors, tries it, and keeps it only if the front end accepts it
(so every program is valid by construction, whatever the mix of dtypes, broadcasting, views
and in-place updates).  Coverage: float32/float64/int32/int64/bool inputs and promotion,
broadcasting, transposes, permutes, reshapes (attention's heads split off a long row and merged
back too), slices, selects and expands, interleaving, constant padding (guarded loads) and
reflect, replicate and circular padding, concatenation, sliding windows and flips, indexing by
tensors (gather, scatter, scatter_add, scatter_reduce, index_select, slice_scatter), diagonals
and their scatters, reductions (variances, norms, log-sum-exp too) over one dim, several dims or all, with and without
``keepdim``, argmax, argmin and ``max(dim)``'s indices, casts, comparisons and ``where``,
constant powers (stax.passes.simplify's rewrites) and tensor powers, bitwise ``& | ^ ~``, integer
``//`` and truncating division (division by zero included), in-place updates of inputs and
intermediates, ``matmul`` (an extern kernel) and sums of matmuls (one accumulating extern,
stax.passes.matmul_sums), stride-1 convolutions and their weight gradients on the blocked kernels
(stax.kernels.direct_conv), shared subexpressions, several outputs (also inputs and repeated values), odd
sizes for vector tails, sizes 0 and 1, and now and then a long first dim.  Inputs may be
contiguous, transposed, flipped, strided or broadcast.

    >>> program = generate(5)
    >>> graph = program.trace(seed=0)  # traced on program.arrays(0)
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import stax
from stax.frontend.ops import gather
from stax.frontend.ops import nn
from stax.frontend.ops import pooling
from stax.frontend.ops import resample
from stax.frontend.ops.conv_forms import ConvForm, blocked_applies_in_trace
from stax.errors import StaxError

from instances.programs import Program

Shape = tuple[int, ...]
DTYPES = ("float32", "float32", "float32", "float64", "int32", "int64", "bool")
DIMS = (1, 2, 3, 5, 7, 8, 9, 16, 17, 33)
#: a first dim this long now and then: reductions over it run as split reductions
#: (``stax.Tuning.split_min_rows`` rows or more)
TALL = 300
#: now and then a last dim this long: rows of several attention heads, when the ops drawn from
#: include HEAD_OPS
HEADS_ROW = (32, 48, 64)
HEAD_OPS = ("heads", "merge_heads", "head_softmax")
LAYOUTS = ("c", "c", "c", "t", "flip", "step", "bcast")


# --- ops: name -> (arity, apply(args, params), sample params(rng, args)) -------------------------

def _none(rng: random.Random, args: list) -> tuple:
    return ()


def _dims(rng: random.Random, args: list) -> tuple:
    """A reduction's ``dim`` (None, an int or a list of ints) and ``keepdim``."""
    ndim = args[0].ndim
    kind = rng.random()
    if kind < 0.15 or ndim == 0:
        dim = None
    elif kind < 0.75:
        dim = rng.randrange(-ndim, ndim)
    else:
        dim = sorted(rng.sample(range(ndim), rng.randint(1, ndim)))
    return dim, rng.random() < 0.5


def _two_dims(rng: random.Random, args: list) -> tuple:
    ndim = max(args[0].ndim, 1)
    return rng.randrange(-ndim, ndim), rng.randrange(-ndim, ndim)


def _one_dim(extra: int = 0) -> Callable[[random.Random, list], tuple]:
    def sample(rng: random.Random, args: list) -> tuple:
        ndim = args[0].ndim + extra
        return (rng.randrange(-ndim, ndim) if ndim else 0,)
    return sample


def _choice(*values: Any) -> Callable[[random.Random, list], tuple]:
    return lambda rng, args: (rng.choice(values),)


def _slice_params(rng: random.Random, args: list) -> tuple:
    ndim = max(args[0].ndim, 1)
    return rng.randrange(ndim), rng.choice((0, 1, 2)), rng.choice((1, 1, 2, 3))


def _select_params(rng: random.Random, args: list) -> tuple:
    ndim = max(args[0].ndim, 1)
    return rng.randrange(ndim), rng.choice((0, -1, 1))


def _expand_params(rng: random.Random, args: list) -> tuple:
    return rng.choice((1, 2, 3, 5)), rng.random() < 0.5


def _pad_params(rng: random.Random, args: list) -> tuple:
    """(before, after) amounts for the last one or two dims (negative ones crop) and the value."""
    amounts = [rng.choice((-1, 0, 1, 2, 3)) for _ in range(rng.choice((2, 4)))]
    return amounts, rng.choice((0, 1.5, -2))


def _unfold_params(rng: random.Random, args: list) -> tuple:
    ndim = max(args[0].ndim, 1)
    return rng.randrange(-ndim, ndim), rng.choice((1, 2, 3)), rng.choice((1, 2, 3))


def _mode_pad_params(rng: random.Random, args: list) -> tuple:
    """(before, after) amounts for the last one or two dims and a non-constant mode."""
    amounts = [rng.choice((0, 1, 2, 3)) for _ in range(rng.choice((2, 4)))]
    return amounts, rng.choice(("reflect", "replicate", "circular"))


def _power(x: stax.Tensor, exponent: float) -> stax.Tensor:
    """``x ** exponent``, kept finite: a negative or fractional exponent of ``|x| + 0.5``."""
    if exponent < 0 or exponent != int(exponent):
        return (x.abs() + 0.5) ** exponent
    return (x ** exponent).clamp(-1e4, 1e4)


def _arg_extreme(x: stax.Tensor, op: str, dim: int | None, keep: bool) -> stax.Tensor:
    if op.startswith("max") or op.startswith("min"):
        return getattr(x, op[:3])(0 if dim is None else dim, keep)[1 if op.endswith("indices") else 0]
    return getattr(x, op)(dim, keep)


def _mask(t: stax.Tensor) -> stax.Tensor:
    return t if t.dtype == "bool" else t > 0


def _permuted(x: stax.Tensor, seed: int) -> stax.Tensor:
    order = list(range(x.ndim))
    random.Random(seed).shuffle(order)
    return x.permute(order)


def _sum_of_products(x: stax.Tensor, form: int) -> stax.Tensor:
    """Products of ``x`` and its transpose added (stax.passes.matmul_sums folds them into one accumulating
    extern): plain, one transposed into place (``(x (x - 1)^T)^T``), one transposed twice, and a
    third term."""
    xt = x.transpose(-1, -2)
    if form == 0:
        return x.matmul(xt) + (x * 2).matmul(xt)
    if form == 1:
        return x.matmul(xt) + x.matmul((x - 1).transpose(-1, -2)).transpose(-1, -2)
    return (x * 3).matmul(xt).transpose(-1, -2).transpose(-1, -2) + x.matmul(xt) + x.matmul(xt * 2)


def _split(x: stax.Tensor, dim: int, factor: int) -> stax.Tensor:
    d = dim % max(x.ndim, 1)
    if x.ndim == 0 or x.shape[d] % factor:
        raise StaxError(f"split: dim {d} of {x.shape} is not divisible by {factor}")
    return x.reshape(x.shape[:d] + (factor, x.shape[d] // factor) + x.shape[d + 1:])


def _merge(x: stax.Tensor, dim: int) -> stax.Tensor:
    if x.ndim < 2:
        raise StaxError("merge needs two dims")
    d = dim % (x.ndim - 1)
    return x.reshape(x.shape[:d] + (x.shape[d] * x.shape[d + 1],) + x.shape[d + 2:])


def _heads(x: stax.Tensor, size: int) -> stax.Tensor:
    """Attention's split into heads: the last dim as (heads, ``size``), the heads moved before the
    rows, ``(..., r, h * size) -> (..., h, r, size)``."""
    if x.ndim < 2 or x.shape[-1] % size or x.shape[-1] < 2 * size:
        raise StaxError(f"heads: the last dim of {x.shape} is not two or more heads of {size}")
    return x.reshape(x.shape[:-1] + (x.shape[-1] // size, size)).transpose(-2, -3)


def _head_size(rng: random.Random, args: list) -> tuple:
    """A head size of 8 or 16 that splits the last dim into two or more heads, when one does."""
    last = args[0].shape[-1] if args[0].ndim else 1
    return (rng.choice([size for size in (8, 16) if last % size == 0 and last >= 2 * size] or [8]),)


def _merge_heads(x: stax.Tensor) -> stax.Tensor:
    """The heads put back into rows, ``(..., h, r, d) -> (..., r, h * d)``: a reshape of a
    transposed view, read through divisions and modulos of the last index."""
    if x.ndim < 3:
        raise StaxError("merge_heads needs three dims")
    return x.transpose(-2, -3).reshape(x.shape[:-3] + (x.shape[-2], x.shape[-3] * x.shape[-1]))


def _interleave(x: stax.Tensor, y: stax.Tensor, phases: int) -> stax.Tensor:
    """``x`` and ``y`` (``x`` flipped when the shapes differ; ``x`` again for three phases)
    interleaved along the last dim, ``out[..., phases * i + r]`` the r-th of them at ``i``: the
    reads of a strided convolution's input gradient placing its phases (stax.codegen.forms.interleave)."""
    if x.ndim == 0:
        raise StaxError("interleave needs a dim")
    parts = [x, y if y.shape == x.shape else x.flip(-1), x][:phases]
    return nn.cat([p.unsqueeze(-1) for p in parts], -1).reshape(x.shape[:-1] + (phases * x.shape[-1],))


def _conv_params(rng: random.Random, args: list) -> tuple:
    """Output channels, kernel size and padding of a convolution op."""
    return rng.choice((1, 3, 9)), rng.choice((1, 2, 3)), rng.choice((0, 1))


def _conv_operands(x: stax.Tensor, y: stax.Tensor, channels: int, kernel: int,
                   padding: int) -> tuple[stax.Tensor, stax.Tensor, ConvForm | None]:
    """``x`` as one (1, rows, cols) image per leading row, a weight of ``channels`` outputs made of
    ``y``'s values, and the blocked form where it applies (float32 at an ISA level with vectors:
    ``stax.kernels.direct_conv``'s externs), else None (the rule's)."""
    image = x.float().reshape((1, 1) + ((1, x.numel()) if x.ndim < 2 else (x.shape[0], -1)))
    if min(image.shape[2:]) + 2 * padding < kernel:
        raise StaxError("the image is smaller than the kernel")
    taps = channels * kernel * kernel
    values = y.float().flatten()
    weight = (values[:taps] if values.numel() >= taps else values[:1].expand((taps,))) \
        if values.numel() else image.flatten()[:1].expand((taps,))
    form = ConvForm.BLOCKED if blocked_applies_in_trace(image, (1, 1), (1, 1), 1) else None
    return image, weight.reshape(channels, 1, kernel, kernel), form


def _conv(x: stax.Tensor, y: stax.Tensor, channels: int, kernel: int, padding: int) -> stax.Tensor:
    """The stride-1 convolution of ``_conv_operands``, back to 2-D."""
    image, weight, form = _conv_operands(x, y, channels, kernel, padding)
    out = nn.conv2d(image, weight, padding=padding, form=form)
    return out.reshape(out.shape[1] * out.shape[2], out.shape[3])


def _conv_epilogue(x: stax.Tensor, y: stax.Tensor, channels: int, kernel: int, padding: int) -> stax.Tensor:
    """``_conv``'s convolution through a per-channel chain that folds into its kernel
    (``stax.passes.conv_epilogues``): a mean subtracted, a scale, a bias and a ReLU, made of its weight's
    values."""
    image, weight, form = _conv_operands(x, y, channels, kernel, padding)
    channel = weight.reshape(channels, -1)[:, :1].reshape(1, channels, 1, 1)
    out = ((nn.conv2d(image, weight, padding=padding, form=form) - channel) * channel.sigmoid() + 0.5).relu()
    return out.reshape(out.shape[1] * out.shape[2], out.shape[3])


def _conv_weight_grad(x: stax.Tensor, y: stax.Tensor, channels: int, kernel: int, padding: int) -> stax.Tensor:
    """The weight gradient of ``_conv``'s convolution for an output gradient made from its output
    (its tanh), as (channels, kernel * kernel)."""
    image, weight, form = _conv_operands(x, y, channels, kernel, padding)
    grad = nn.conv2d(image, weight, padding=padding, form=form).tanh()
    return nn.conv2d_weight_grad(grad, image, weight.shape, padding=padding, form=form).reshape(channels, -1)


def _pool_params(rng: random.Random, args: list) -> tuple:
    """Max or average, kernel size, stride and padding (at most half the kernel) of a pooling op."""
    kernel = rng.choice((1, 2, 3))
    return rng.random() < 0.5, kernel, rng.choice((1, 2)), rng.choice((0, kernel // 2))


def _pool_grad(x: stax.Tensor, take_max: bool, kernel: int, stride: int, padding: int) -> stax.Tensor:
    """The gradient of a pooling of ``x`` (one image of one channel per leading row, as ``_conv``'s)
    for an output gradient made of its output (its tanh): the pooling forward, its indices and its
    backward in one op."""
    image = x.float().reshape((1, 1) + ((1, x.numel()) if x.ndim < 2 else (x.shape[0], -1)))
    if min(image.shape[2:]) + 2 * padding < kernel:
        raise StaxError("the image is smaller than the kernel")
    if take_max:
        values, indices = pooling.max_pool2d(image, kernel, stride, padding, return_indices=True)
        grad = pooling.max_pool2d_backward(values.tanh(), image, kernel, stride, padding, 1, False, indices)
    else:
        grad = pooling.avg_pool2d_backward(pooling.avg_pool2d(image, kernel, stride, padding).tanh(), image, kernel,
                                           stride, padding, False, True, None)
    return grad.reshape(image.shape[2:])


def _resample_params(rng: random.Random, args: list) -> tuple:
    """The resampling (adaptive average or max, nearest, bilinear, bilinear with aligned corners)
    and the output size's ratio to the input's, per dim."""
    return rng.choice(("adaptive", "adaptive_max", "nearest", "bilinear", "aligned")), rng.choice((0.5, 1.0, 1.5, 2.0)), \
        rng.choice((0.5, 1.0, 2.0, 3.0))


def _resample_grad(x: stax.Tensor, kind: str, *ratios: float) -> stax.Tensor:
    """The gradient of a resampling of ``x`` (one image of one channel per leading row, as
    ``_conv``'s) for an output gradient made of its output (its tanh)."""
    image = x.float().reshape((1, 1) + ((1, x.numel()) if x.ndim < 2 else (x.shape[0], -1)))
    if not image.numel():
        raise StaxError("an empty image")
    out = tuple(max(1, int(image.shape[2 + d] * ratios[d])) for d in (0, 1))
    if kind == "adaptive":
        y = resample.adaptive_avg_pool2d(image, out)
        return resample.adaptive_avg_pool2d_backward(y.tanh(), image).reshape(image.shape[2:])
    if kind == "adaptive_max":
        y, index = resample.adaptive_max_pool2d(image, out)
        return resample.adaptive_max_pool2d_backward(y.tanh(), image, index).reshape(image.shape[2:])
    if kind == "nearest":
        y = resample.upsample_nearest2d(image, out)
        return resample.upsample_nearest2d_backward(y.tanh(), out, image.shape).reshape(image.shape[2:])
    y = resample.upsample_bilinear2d(image, out, kind == "aligned")
    return resample.upsample_bilinear2d_backward(y.tanh(), out, image.shape, kind == "aligned").reshape(image.shape[2:])


def _unfold_fold(x: stax.Tensor, kernel: int, dilation: int, padding: int, stride: int) -> stax.Tensor:
    """The windows of ``x`` (as ``_resample_grad``'s image) as columns, their tanh folded back."""
    image = x.float().reshape((1, 1) + ((1, x.numel()) if x.ndim < 2 else (x.shape[0], -1)))
    geometry = ((kernel, kernel), (dilation, dilation), (padding, padding), (stride, stride))
    columns = pooling.unfold(image, *geometry)
    return pooling.fold(columns.tanh(), image.shape[2:], *geometry).reshape(image.shape[2:])


def _slice(x: stax.Tensor, dim: int, start: int, step: int) -> stax.Tensor:
    return x[(slice(None),) * dim + (slice(start, None, step),)]


def _select(x: stax.Tensor, dim: int, index: int) -> stax.Tensor:
    return x[(slice(None),) * dim + (index,)]


def _expand(x: stax.Tensor, size: int, lead: bool) -> stax.Tensor:
    if lead:
        return x.expand(size, *x.shape)
    ones = [d for d, s in enumerate(x.shape) if s == 1]
    if not ones:
        raise StaxError("expand: no size-1 dim")
    return x.expand(*(size if d == ones[0] else s for d, s in enumerate(x.shape)))


#: ``_index`` scales a value by this irrational-looking step before truncating it, so that the
#: values programs make exactly or nearly (integers, small fractions: a variance of integers) do
#: not sit on a boundary, where the kernels' and the reference's last ulp pick different indices
_INDEX_STEP, _INDEX_OFFSET = 0.6180339887, 0.3819660113


def _index(y: stax.Tensor, size: int) -> stax.Tensor:
    """An int64 index in ``[0, size)`` computed from ``y``'s values (NaN counts as 0)."""
    if size == 0:
        raise StaxError("an index into a dim of size 0")
    v = y.float()
    v = stax.where(v == v, v, 0).abs().clamp(max=1e6)
    return (v * _INDEX_STEP + _INDEX_OFFSET).long() % size


def _gather(x: stax.Tensor, y: stax.Tensor, dim: int) -> stax.Tensor:
    d = dim % max(x.ndim, 1)
    return x.gather(d, _index(y, x.shape[d] if x.ndim else 1))


def _scatter(x: stax.Tensor, y: stax.Tensor, z: stax.Tensor, dim: int, add: bool) -> stax.Tensor:
    d = dim % max(x.ndim, 1)
    index = _index(y, x.shape[d] if x.ndim else 1)
    return x.scatter_add(d, index, z) if add else x.scatter(d, index, z)


def _scatter_reduce(x: stax.Tensor, y: stax.Tensor, z: stax.Tensor, dim: int, reduce: str,
                    include_self: bool) -> stax.Tensor:
    """``scatter_reduce``, or the legacy ``scatter(reduce=)`` for 'add' and 'multiply'."""
    d = dim % max(x.ndim, 1)
    index = _index(y, x.shape[d] if x.ndim else 1)
    if reduce in ("add", "multiply"):
        return x.scatter(d, index, z, reduce=reduce)
    return x.scatter_reduce(d, index, z, reduce, include_self=include_self)


#: indices an index_select or an embedding takes at most: a short dim is selected from by a one-hot
#: reduction, which the numpy reference materializes (indices x rows x row length elements)
MAX_INDICES = 64


def _index_select(x: stax.Tensor, y: stax.Tensor, dim: int) -> stax.Tensor:
    d = dim % max(x.ndim, 1)
    return x.index_select(d, _index(y.flatten()[:MAX_INDICES], x.shape[d] if x.ndim else 1))


def _embedding_grad(x: stax.Tensor, y: stax.Tensor) -> stax.Tensor:
    """An embedding's lookup and gradient: ``x`` as a float table of rows along its first dim (by
    address from ``stax.frontend.ops.gather.ROWS_BY_ADDRESS`` rows), indexed by ``y``'s values; the rows'
    tanh added back at their indices."""
    table = x.float().reshape(x.shape[0] if x.ndim else 1, -1)
    index = _index(y.flatten()[:MAX_INDICES], table.shape[0])
    return gather.add_rows(table, index, table.index_select(0, index).tanh())


def _dropout(x: stax.Tensor, p: float) -> stax.Tensor:
    """Dropout's masks with a seed computed in the program (the count of ``x``'s nonzero
    elements, an exact integer everywhere): one mask read twice (as a forward and its gradient
    read it), and ``nn.dropout``'s own, a second stream of the seed."""
    seed = (x != 0).sum().long()
    keep, value = stax.bernoulli(seed, x.shape, 1 - p), x.float()
    return stax.where(keep, value, 0.0) * (1 / (1 - p)) + stax.where(keep, value.tanh(), 1.0) + nn.dropout(value, p, seed)


def _topk_params(rng: random.Random, args: list) -> tuple:
    x = args[0]
    if x.ndim == 0:
        return 0, rng.choice((0, 1)), True
    d = rng.randrange(x.ndim)
    n = x.shape[d]
    return d, rng.choice((0, 1, min(n, 2), n // 4, n)), rng.random() < 0.5


def _noise(x: stax.Tensor) -> stax.Tensor:
    """Uniform and normal noise (a seed as ``_dropout``'s): ``x * rand + randn``."""
    seed = (x != 0).sum().long()
    return x.float() * stax.rand(seed, x.shape) + stax.randn(seed, x.shape)


def _slice_scatter(x: stax.Tensor, dim: int, start: int, step: int) -> stax.Tensor:
    d = dim % max(x.ndim, 1)
    part = _slice(x, d, start, step)
    return x.slice_scatter(part * 2 if x.dtype != "bool" else ~part, d, start, None, step)


def _diagonal_params(rng: random.Random, args: list) -> tuple:
    ndim = max(args[0].ndim, 2)
    dim1, dim2 = rng.sample(range(-ndim, ndim), 2)
    return rng.choice((0, 0, 1, -1, 2)), dim1, dim2


def _diagonal(x: stax.Tensor, offset: int, dim1: int, dim2: int) -> stax.Tensor:
    if x.ndim < 2 or dim1 % x.ndim == dim2 % x.ndim:
        raise StaxError(f"diagonal needs two different dims of {x.shape}")
    return x.diagonal(offset, dim1, dim2)


def _diagonal_scatter(x: stax.Tensor, offset: int, dim1: int, dim2: int) -> stax.Tensor:
    part = _diagonal(x, offset, dim1, dim2)
    return x.diagonal_scatter(part * 2 if x.dtype != "bool" else ~part, offset, dim1, dim2)


@dataclass(frozen=True)
class Op:
    arity: int
    apply: Callable[..., stax.Tensor]
    sample: Callable[[random.Random, list], tuple] = _none
    weight: float = 1.0
    inplace: bool = False


def _unary(name: str, weight: float = 0.5) -> Op:
    return Op(1, lambda x: getattr(x, name)(), weight=weight)


OPS: dict[str, Op] = {
    **{name: _unary(name) for name in ("tanh", "sigmoid", "sin", "cos", "erf", "abs", "neg", "relu")},
    "exp": Op(1, lambda x: x.tanh().exp(), weight=0.4),
    "sqrt": Op(1, lambda x: x.abs().sqrt(), weight=0.3),
    "log1p": Op(1, lambda x: x.abs().log1p(), weight=0.3),
    "scale": Op(1, lambda x, c: x * c, _choice(0.5, 2, -1.5, 3), weight=1.0),
    "addc": Op(1, lambda x, c: x + c, _choice(1, -2, 0.25), weight=0.7),
    "square": Op(1, lambda x: (x ** 2).clamp(-1e4, 1e4), weight=0.3),
    "power": Op(1, _power, _choice(0, 1, 2, 3, 4, 5, 7, -1, -2, -3, 0.5, -0.5, 2.5), weight=0.8),
    "pow_tensor": Op(2, lambda x, y: x ** y, weight=0.3),
    "clamp": Op(1, lambda x, c: x.clamp(-c, c), _choice(1, 2), weight=0.4),
    "cast": Op(1, lambda x, t: x.clamp(-1e6, 1e6).to(t) if t != "bool" and x.dtype != "bool" else x.to(t),
               _choice("float32", "float64", "int32", "int64", "bool"), weight=1.0),
    "add": Op(2, lambda x, y: x + y, weight=2.0),
    "sub": Op(2, lambda x, y: x - y, weight=1.5),
    "mul": Op(2, lambda x, y: (x * y).clamp(-1e4, 1e4), weight=1.5),
    "maximum": Op(2, lambda x, y: x.maximum(y), weight=0.7),
    "minimum": Op(2, lambda x, y: x.minimum(y), weight=0.7),
    "div": Op(2, lambda x, y: x / (y.abs() + 1), weight=0.7),
    "floordiv": Op(2, lambda x, y: x // y, weight=0.4),
    "truncdiv": Op(2, lambda x, y: x.div(y, rounding_mode="trunc"), weight=0.3),
    "bitwise": Op(2, lambda x, y, op: getattr(x, op)(y), _choice("__and__", "__or__", "__xor__"), weight=0.5),
    "invert": Op(1, lambda x: ~x, weight=0.2),
    "mod": Op(2, lambda x, y: x % (y.abs() + 1), weight=0.4),
    "compare": Op(2, lambda x, y, op: getattr(x, op)(y), _choice("lt", "le", "gt", "ge", "eq", "ne"), weight=0.8),
    "logical": Op(2, lambda x, y, op: getattr(_mask(x), op)(_mask(y)), _choice("logical_and", "logical_or"),
                  weight=0.3),
    "where": Op(3, lambda c, a, b: stax.where(_mask(c), a, b), weight=0.8),
    "masked_fill": Op(2, lambda x, m, v: x.masked_fill(_mask(m), v), _choice(0, 1.5, -3), weight=0.4),
    "sum": Op(1, lambda x, dim, keep: x.sum(dim, keep), _dims, weight=1.2),
    "mean": Op(1, lambda x, dim, keep: x.mean(dim, keep), _dims, weight=0.6),
    "amax": Op(1, lambda x, dim, keep: x.amax(dim, keep), _dims, weight=0.8),
    "amin": Op(1, lambda x, dim, keep: x.amin(dim, keep), _dims, weight=0.5),
    "var": Op(1, lambda x, dim, keep: x.float().var(dim, unbiased=False, keepdim=keep), _dims, weight=0.4),
    "std": Op(1, lambda x, dim, keep: x.float().std(dim, unbiased=False, keepdim=keep), _dims, weight=0.3),
    "norm": Op(1, lambda x, p, dim, keep: x.float().norm(p, dim, keep),
               lambda rng, args: (rng.choice((1, 2, 2, 3, float("inf"), float("-inf"), 0)), *_dims(rng, args)),
               weight=0.5),
    "logsumexp": Op(1, lambda x, dim, keep: x.logsumexp(dim, keep), _dims, weight=0.3),
    "argmax": Op(1, _arg_extreme, lambda rng, args: (rng.choice(("argmax", "argmin", "max_values", "max_indices",
                                                                 "min_values", "min_indices")),
                                                     rng.choice((None, *_one_dim()(rng, args))), rng.random() < 0.5),
                 weight=0.7),
    "prod": Op(1, lambda x, dim, keep: x.sigmoid().prod(dim, keep) if x.is_floating_point() else x.bool().prod(dim, keep),
               lambda rng, args: (*_one_dim()(rng, args), rng.random() < 0.5), weight=0.3),
    "softmax": Op(1, lambda x, dim: x.float().softmax(dim), _one_dim(), weight=0.4),
    "cumsum": Op(1, lambda x, dim: x.cumsum(dim), _one_dim(), weight=0.4),
    "cumprod": Op(1, lambda x, dim: x.sigmoid().cumprod(dim) if x.is_floating_point() else x.bool().cumprod(dim),
                  _one_dim(), weight=0.2),
    "logcumsumexp": Op(1, lambda x, dim: x.float().logcumsumexp(dim), _one_dim(), weight=0.3),
    "matmul": Op(2, lambda x, y: x.matmul(y), weight=0.4),
    "matmul_sum": Op(1, _sum_of_products, _choice(0, 1, 2), weight=0.8),
    "transpose": Op(1, lambda x, a, b: x.transpose(a, b), _two_dims, weight=0.8),
    "permute": Op(1, _permuted, _choice(1, 2, 3, 4), weight=0.4),
    "split": Op(1, _split, lambda rng, args: (rng.randrange(max(args[0].ndim, 1)), rng.choice((2, 3))), weight=0.4),
    "merge": Op(1, _merge, _one_dim(), weight=0.4),
    "unsqueeze": Op(1, lambda x, d: x.unsqueeze(d), _one_dim(1), weight=0.4),
    "squeeze": Op(1, lambda x: x.squeeze(), weight=0.2),
    "slice": Op(1, _slice, _slice_params, weight=0.5),
    "select": Op(1, _select, _select_params, weight=0.3),
    "expand": Op(1, _expand, _expand_params, weight=0.4),
    "flatten": Op(1, lambda x: x.flatten(), weight=0.2),
    "pad": Op(1, lambda x, amounts, value: nn.pad(x, amounts, value=value), _pad_params, weight=0.5),
    "pad_mode": Op(1, lambda x, amounts, mode: nn.pad(x, amounts, mode=mode), _mode_pad_params, weight=0.4),
    "unfold": Op(1, lambda x, dim, size, step: x.unfold(dim, size, step), _unfold_params, weight=0.6),
    "flip": Op(1, lambda x, dim: x.flip(dim), _one_dim(), weight=0.3),
    "cat": Op(2, lambda x, y, dim: nn.cat([x, y], dim), _one_dim(), weight=0.5),
    "interleave": Op(2, _interleave, _choice(2, 3), weight=1.2),
    "conv": Op(2, _conv, _conv_params, weight=0.8),
    "conv_weight_grad": Op(2, _conv_weight_grad, _conv_params, weight=0.5),
    "conv_epilogue": Op(2, _conv_epilogue, _conv_params, weight=0.5),
    "pool_grad": Op(1, _pool_grad, _pool_params, weight=0.5),
    "resample_grad": Op(1, _resample_grad, _resample_params, weight=0.5),
    "unfold_fold": Op(1, _unfold_fold, lambda rng, args: (rng.randint(1, 3), rng.randint(1, 2), rng.randint(0, 2),
                                                          rng.randint(1, 3)), weight=0.3),
    "embedding_grad": Op(2, _embedding_grad, weight=0.5),
    "dropout": Op(1, _dropout, _choice(0.1, 0.5, 0.9), weight=0.4),
    "noise": Op(1, _noise, weight=0.3),
    "sort": Op(1, lambda x, dim, descending: x.sort(dim, descending).values,
               lambda rng, args: (*_one_dim()(rng, args), rng.random() < 0.5), weight=0.3),
    "topk": Op(1, lambda x, dim, k, largest: x.topk(k, dim, largest).indices, _topk_params, weight=0.3),
    "heads": Op(1, _heads, _head_size, weight=2.0),
    "merge_heads": Op(1, _merge_heads, weight=1.0),
    "head_softmax": Op(1, lambda x, size: _merge_heads(_heads(x.float(), size).softmax(-1)), _head_size, weight=2.0),
    "gather": Op(2, _gather, _one_dim(), weight=0.3),
    "scatter": Op(3, _scatter, lambda rng, args: (*_one_dim()(rng, args), False), weight=0.2),
    "scatter_add": Op(3, _scatter, lambda rng, args: (*_one_dim()(rng, args), True), weight=0.2),
    "scatter_reduce": Op(3, _scatter_reduce, lambda rng, args: (
        *_one_dim()(rng, args), rng.choice(("sum", "prod", "mean", "amax", "amin", "add", "multiply")),
        rng.random() < 0.5), weight=0.3),
    "index_select": Op(2, _index_select, _one_dim(), weight=0.2),
    "slice_scatter": Op(1, _slice_scatter, _slice_params, weight=0.2),
    "diagonal": Op(1, _diagonal, _diagonal_params, weight=0.3),
    "diagonal_scatter": Op(1, _diagonal_scatter, _diagonal_params, weight=0.2),
    "add_": Op(2, lambda x, y: x.add_(y), weight=0.8, inplace=True),
    "mul_": Op(2, lambda x, y: x.mul_(y.tanh()), weight=0.5, inplace=True),
    "sub_": Op(2, lambda x, y: x.sub_(y), weight=0.4, inplace=True),
    "copy_": Op(2, lambda x, y: x.copy_(y), weight=0.4, inplace=True),
    "clamp_": Op(1, lambda x: x.clamp_(-1, 1), weight=0.3, inplace=True),
    "relu_": Op(1, lambda x: x.relu_(), weight=0.3, inplace=True),
    "fill_": Op(1, lambda x, v: x.fill_(v), _choice(0, 2, -1.5), weight=0.1, inplace=True),
    "masked_fill_": Op(2, lambda x, m: x.masked_fill_(_mask(m), 1), weight=0.3, inplace=True),
}


# --- programs -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Input:
    shape: Shape
    dtype: str
    layout: str  # c | t (reversed dims) | flip (first dim reversed) | step (every 2nd) | bcast (stride 0)

    def make(self, rng: np.random.Generator) -> np.ndarray:
        """An array of this shape, dtype and layout with values drawn from ``rng``."""
        shape = self.shape
        if self.layout == "bcast" and shape:
            base = _values(rng, (1,) + shape[1:], self.dtype)
            return np.broadcast_to(base, shape)
        if self.layout == "t":
            return _values(rng, shape[::-1], self.dtype).transpose()
        if self.layout == "flip" and shape:
            return _values(rng, shape, self.dtype)[::-1]
        if self.layout == "step" and shape:
            wide = _values(rng, shape[:-1] + (2 * shape[-1],), self.dtype)
            return wide[..., ::2]
        return _values(rng, shape, self.dtype)

    @property
    def writable(self) -> bool:
        return self.layout != "bcast" or not self.shape


def _values(rng: np.random.Generator, shape: Shape, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.startswith("int"):
        return np.asarray(rng.integers(-5, 6, shape), dtype=dtype)
    return np.asarray(rng.standard_normal(shape), dtype=dtype)


@dataclass(frozen=True)
class Step:
    op: str
    args: tuple[int, ...]
    params: tuple = ()


@dataclass(frozen=True)
class FuzzProgram:
    """Inputs, steps and returned pool indices; call it on proxy tensors to replay it."""

    inputs: tuple[Input, ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]

    def __call__(self, *tensors: stax.Tensor) -> tuple:
        pool = list(tensors)
        for step in self.steps:
            pool.append(OPS[step.op].apply(*(pool[i] for i in step.args), *step.params))
        return tuple(pool[i] for i in self.outputs)

    def arrays(self, seed: int) -> list[np.ndarray]:
        """Input arrays (the same for the same seed, layouts included)."""
        rng = np.random.default_rng(seed)
        return [spec.make(rng) for spec in self.inputs]

    def trace(self, seed: int = 0) -> stax.Graph:
        return stax.trace(self, *self.arrays(seed))

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": [[list(i.shape), i.dtype, i.layout] for i in self.inputs],
                "steps": [[s.op, list(s.args), list(s.params)] for s in self.steps],
                "outputs": list(self.outputs)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FuzzProgram:
        return cls(tuple(Input(tuple(shape), dtype, layout) for shape, dtype, layout in data["inputs"]),
                   tuple(Step(op, tuple(args), tuple(params)) for op, args, params in data["steps"]),
                   tuple(data["outputs"]))

    def __str__(self) -> str:
        lines = [f"v{i} = input({list(s.shape)}, {s.dtype}, {s.layout})" for i, s in enumerate(self.inputs)]
        lines += [f"v{len(self.inputs) + k} = {s.op}({', '.join(f'v{a}' for a in s.args)}"
                  f"{''.join(f', {p!r}' for p in s.params)})" for k, s in enumerate(self.steps)]
        return "\n".join(lines + [f"return {', '.join(f'v{o}' for o in self.outputs)}"])


# --- generation -------------------------------------------------------------------------------------

def _draw_inputs(rng: random.Random, heads_rows: bool) -> tuple[Input, ...]:
    rank = rng.choice((0, 1, 1, 2, 2, 2, 3, 3))
    full = [rng.choice(DIMS) for _ in range(rank)]
    if full and rng.random() < 0.05:
        full[rng.randrange(rank)] = 0
    elif full and rng.random() < 0.1:
        full[0] = TALL
    elif heads_rows and len(full) >= 2 and rng.random() < 0.2:
        full[-1] = rng.choice(HEADS_ROW)
    shapes = [tuple(full)]
    for _ in range(rng.choice((0, 1, 1, 2))):
        kind = rng.random()
        if kind < 0.4:
            shapes.append(tuple(1 if rng.random() < 0.4 else d for d in full))
        elif kind < 0.7:
            shapes.append(tuple(full[rng.randrange(rank + 1):]))
        else:
            shapes.append(tuple(reversed(full)))
    return tuple(Input(s, rng.choice(DTYPES), rng.choice(LAYOUTS)) for s in shapes)


def _pick(rng: random.Random, n: int) -> int:
    """A pool index biased towards recent values (chains), older ones give shared subexpressions."""
    return max(rng.randrange(n), rng.randrange(n))


class _Walk:
    """The random walk over ops on live proxies (see the module docstring)."""

    def __init__(self, rng: random.Random, inputs: tuple[Input, ...], max_steps: int, ops: tuple[str, ...]):
        self.rng, self.inputs, self.max_steps = rng, inputs, max_steps
        self.steps: list[Step] = []
        self.outputs: tuple[int, ...] = ()
        self.names, self.weights = list(ops), [OPS[name].weight for name in ops]

    def __call__(self, *tensors: stax.Tensor) -> tuple:
        pool = list(tensors)
        owner = list(range(len(pool)))  # the pool slot of the object a slot holds (in-place results)
        wanted = self.rng.randint(1, self.max_steps)
        for _ in range(20 * wanted):
            if len(self.steps) == wanted:
                break
            name = self.rng.choices(self.names, self.weights)[0]
            op = OPS[name]
            args = tuple(_pick(self.rng, len(pool)) for _ in range(op.arity))
            if op.inplace and owner[args[0]] < len(self.inputs) and not self.inputs[owner[args[0]]].writable:
                continue
            params = op.sample(self.rng, [pool[i] for i in args])
            try:
                value = op.apply(*(pool[i] for i in args), *params)
            except StaxError:
                continue
            self.steps.append(Step(name, args, params))
            owner.append(owner[args[0]] if op.inplace else len(pool))
            pool.append(value)
        self.outputs = self._choose_outputs(len(pool))
        return tuple(pool[i] for i in self.outputs)

    def _choose_outputs(self, n: int) -> tuple[int, ...]:
        read = {a for s in self.steps for a in s.args}
        unread = [i for i in range(len(self.inputs), n) if i not in read]
        count = self.rng.randint(1, 3)
        extra = [_pick(self.rng, n) for _ in range(max(0, count - len(unread)))]
        return tuple(unread[-count:] + extra)


#: ops whose results are well defined and finite for any input: no integer division (a zero
#: divisor raises), no mean or log-sum-exp (NaN and -inf over an empty tensor), no tensor power;
#: scatter_reduce, matmul_sum, interleave and the head ops are left out so that the sweeps'
#: programs of a seed stay the ones measured
#: the ops of the sweeps' random programs; ops added to the fuzzer later (diagonals) are left out, so that
#: a sweep's instance random_program/SIZE/SEED stays the program it was
BENIGN_OPS = tuple(name for name in OPS if name not in ("diagonal", "diagonal_scatter", "floordiv", "truncdiv", "mean", "logsumexp", "pow_tensor",
                                                        "scatter_reduce", "matmul_sum", "interleave", "conv",
                                                        "conv_weight_grad", "conv_epilogue", "pool_grad",
                                                        "resample_grad", "unfold_fold", "embedding_grad", "dropout", "noise", "sort", "topk",
                                                        *HEAD_OPS))


def generate(seed: int, max_steps: int = 10, ops: tuple[str, ...] | None = None) -> FuzzProgram:
    """A random valid program drawing from ``ops`` (default: all of :data:`OPS`); the same seed
    always gives the same program."""
    rng = random.Random(seed)
    ops = ops or tuple(OPS)
    inputs = _draw_inputs(rng, heads_rows=any(op in HEAD_OPS for op in ops))
    walk = _Walk(rng, inputs, max_steps, ops)
    specs = [stax.TensorSpec(i.shape, i.dtype) for i in inputs]
    stax.trace(walk, *specs)
    return FuzzProgram(inputs, tuple(walk.steps), walk.outputs)


def random_program(seed: int, steps: int = 8) -> Program:
    """A benign random program (:data:`BENIGN_OPS`) as a suite Program for sweeps; its inputs
    ignore the size and columns (the generator draws the shapes)."""
    program = generate(seed, max_steps=steps, ops=BENIGN_OPS)
    return Program(f"random_{seed}", program, lambda size, columns, rng: program.arrays(seed),
                   f"random program {seed}: {', '.join(s.op for s in program.steps)}")
