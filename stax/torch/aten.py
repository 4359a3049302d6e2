"""ATen ops as stax front-end calls: the translation table of :mod:`stax.torch.capture`.

Each entry maps an ATen overload packet name (``"add"`` for ``aten.add.Tensor`` and
``aten.add.Scalar``) to a function of the FX node's arguments, with every tensor argument
already a traced :class:`~stax.frontend.tensor.Tensor`. The functions follow the ATen schemas
(``native_functions.yaml``) and PyTorch's own decompositions; none of them imports torch.
Device, layout, ``pin_memory`` and ``memory_format`` arguments are ignored (stax runs on the CPU,
in contiguous layout). An op missing here is reported by the caller as unsupported.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

from stax import dtypes
from stax.frontend.ops import conv3d
from stax.frontend.ops import gather
from stax.frontend.ops import nn
from stax.frontend.ops import pooling
from stax.frontend.ops import resample
from stax.frontend.ops import sorting
from stax.torch import strided_views
from stax.errors import UnsupportedError
from stax.frontend.elementwise import where
from stax.frontend.ops.random import bernoulli, rand, randn
from stax.frontend.reductions import vector_norm
from stax.frontend.tensor import Tensor

Handler = Callable[..., Any]


def dtype_name(dtype: Any) -> str:
    """A torch dtype (``torch.float32``) as a stax dtype name; unsupported ones raise."""
    name = str(dtype).removeprefix("torch.")
    if name not in dtypes.SUPPORTED:
        raise UnsupportedError(f"dtype {dtype} is not supported by stax; use one of {', '.join(dtypes.SUPPORTED)}")
    return name


def full(like: Tensor, value: Any, shape: Sequence[int], dtype: str) -> Tensor:
    """A constant ``value`` of ``shape`` and ``dtype`` in ``like``'s trace (a broadcast scalar)."""
    return like._tracer.constant(value, dtype, tuple(shape))


def _full_like(x: Tensor, value: Any, *, dtype: Any = None, **_: Any) -> Tensor:
    return full(x, value, x.shape, dtype_name(dtype) if dtype is not None else x.dtype)


def _to_copy(x: Tensor, *, dtype: Any = None, **_: Any) -> Tensor:
    return x.to(dtype_name(dtype)) if dtype is not None else x.clone()


def _as_tensor(a: Any, other: Tensor) -> Tensor:
    """A Python scalar in a tensor position (decompositions record ``1 - y`` as
    ``aten.sub.Tensor(1, y)``) as a 0-d constant of the dtype torch gives ``a op other``."""
    if isinstance(a, Tensor):
        return a
    return full(other, a, (), dtypes.result_type((other.dtype, other.ndim), a))


def _binary(method: str) -> Handler:
    def handler(a: Any, b: Any) -> Tensor:
        return getattr(_as_tensor(a, b), method)(b)
    return handler


def _with_alpha(method: str) -> Handler:
    def handler(a: Any, b: Any, *, alpha: Any = 1) -> Tensor:
        return getattr(_as_tensor(a, b), method)(b, alpha=alpha)
    return handler


def _rsub(a: Tensor, b: Any, *, alpha: Any = 1) -> Tensor:
    """``b - alpha * a``."""
    return (a if alpha == 1 else a * alpha).neg() + b


def _div(a: Any, b: Any, *, rounding_mode: str | None = None) -> Tensor:
    return _as_tensor(a, b).div(b, rounding_mode=rounding_mode)


def _pow(a: Any, b: Any) -> Tensor:
    return a ** b if isinstance(a, Tensor) else b.__rpow__(a)


# --- activations and their gradients (PyTorch's decompositions) ----------------------------
def _gelu(x: Tensor, *, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + inner.tanh())
    return 0.5 * x * (1 + (x * math.sqrt(0.5)).erf())


def _gelu_backward(grad: Tensor, x: Tensor, *, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        t = (k * (x + c * x * x * x)).tanh()
        return grad * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x))
    cdf = 0.5 * (1 + (x * math.sqrt(0.5)).erf())
    pdf = (x * x * -0.5).exp() * (0.5 * math.sqrt(2 / math.pi))
    return grad * (cdf + x * pdf)


def _silu(x: Tensor) -> Tensor:
    return x * x.sigmoid()


def _leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return where(x > 0, x, x * negative_slope)


def _threshold_backward(grad: Tensor, x: Tensor, threshold: float) -> Tensor:
    return where(x <= threshold, 0, grad)


def _sigmoid_backward(grad: Tensor, y: Tensor) -> Tensor:
    return grad * y * (1 - y)


def _tanh_backward(grad: Tensor, y: Tensor) -> Tensor:
    return grad * (1 - y * y)


# --- reductions and normalizations -----------------------------------------------------------
def _reduction(method: str) -> Handler:
    def handler(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        if dtype is not None:
            x = x.to(dtype_name(dtype))
        return getattr(x, method)(dim, keepdim)
    return handler


def _max_min(method: str) -> Handler:
    """``max`` / ``min``: over all elements (``.default``), elementwise (``.other``), or along a
    dim with the indices (``.dim``: a (values, indices) pair)."""
    def handler(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
        result = getattr(x, method)(dim, keepdim)
        return list(result) if isinstance(result, tuple) else result
    return handler


def _vector_norm(x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return vector_norm(x, ord, dim, keepdim, dtype=None if dtype is None else dtype_name(dtype))


def _var(x: Tensor, dim: Any = None, *, correction: float | None = None, keepdim: bool = False) -> Tensor:
    dims = range(x.ndim) if dim is None or dim == [] else dim
    count = math.prod(x.shape[d] for d in dims)
    centered = x - x.mean(dim, keepdim=True)
    return (centered * centered).sum(dim, keepdim) / max(count - (1 if correction is None else correction), 0)


def _var_mean(x: Tensor, dim: Any = None, *, correction: float | None = None, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return _var(x, dim, correction=correction, keepdim=keepdim), x.mean(dim, keepdim)


def _softmax(x: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    return x.softmax(dim)


def _log_softmax(x: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    return x.log_softmax(dim)


def _softmax_backward(grad: Tensor, y: Tensor, dim: int, input_dtype: Any = None) -> Tensor:
    g = grad * y
    return g - y * g.sum(dim, keepdim=True)


def _log_softmax_backward(grad: Tensor, y: Tensor, dim: int, input_dtype: Any = None) -> Tensor:
    return grad - y.exp() * grad.sum(dim, keepdim=True)


def _scaled_shifted(out: Tensor, weight: Tensor | None, bias: Tensor | None, shape: Sequence[int]) -> Tensor:
    """``out * weight + bias`` with the parameters reshaped to ``shape`` (either may be None)."""
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _standardized(x: Tensor, dims: Sequence[int], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) * rstd over ``dims``, with the mean and rstd (size-1 dims kept)."""
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    rstd = ((centered * centered).mean(dims, keepdim=True) + eps).rsqrt()
    return centered * rstd, mean, rstd


def _layer_norm(x: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, bias: Tensor | None,
                eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``native_layer_norm``: (output, mean, rstd), statistics kept with size-1 dims."""
    out, mean, rstd = _standardized(x, tuple(range(x.ndim - len(normalized_shape), x.ndim)), eps)
    return _scaled_shifted(out, weight, bias, tuple(normalized_shape)), mean, rstd


def _channels(x: Tensor) -> tuple[int, ...]:
    """The shape that broadcasts a per-channel (dim 1) vector over ``x``."""
    return (1, -1) + (1,) * (x.ndim - 2)


def _group_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, n: int, c: int, hw: int, groups: int,
                eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``native_group_norm``: (output, mean, rstd), the statistics (N, groups) over each group's
    channels and positions."""
    out, mean, rstd = _standardized(x.reshape(n, groups, -1), (2,), eps)
    out = _scaled_shifted(out.reshape(x.shape), weight, bias, _channels(x))
    return out, mean.reshape(n, groups), rstd.reshape(n, groups)


def _batch_norm_inference(x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, var: Tensor,
                          momentum: float, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``_native_batch_norm_legit_no_training``: normalize with running statistics (channels at dim 1)."""
    out = (x - mean.reshape(_channels(x))) * (var.reshape(_channels(x)) + eps).rsqrt()
    empty = full(x, 0, (0,), x.dtype)
    return _scaled_shifted(out, weight, bias, _channels(x)), empty, empty


# --- views -----------------------------------------------------------------------------------
def _squeeze(x: Tensor, dim: Any = None) -> Tensor:
    return x.squeeze(dim)


def _select(x: Tensor, dim: int, index: int) -> Tensor:
    return x[(slice(None),) * (dim % x.ndim) + (index,)]


def _slice(x: Tensor, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1) -> Tensor:
    return x[(slice(None),) * (dim % x.ndim) + (slice(start, end, step),)]


def _split_with_sizes(x: Tensor, sizes: Sequence[int], dim: int = 0) -> list[Tensor]:
    parts, start = [], 0
    for size in sizes:
        parts.append(_slice(x, dim, start, start + size))
        start += size
    return parts


def _split(x: Tensor, size: int, dim: int = 0) -> list[Tensor]:
    total = x.shape[dim]
    return _split_with_sizes(x, [min(size, total - s) for s in range(0, total, size)], dim)


def _unbind(x: Tensor, dim: int = 0) -> list[Tensor]:
    return [_select(x, dim, i) for i in range(x.shape[dim])]


def _expand(x: Tensor, size: Sequence[int], *, implicit: bool = False) -> Tensor:
    return x.expand(size)


# --- matmul (extern calls) -------------------------------------------------------------------
def _linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    out = x.matmul(weight.t())
    return out if bias is None else out + bias


def _repeated_matrix(t: Tensor) -> Tensor | None:
    """The matrix that a (B, K, N) tensor repeats over its batch, if it is an ``expand`` of one."""
    node = t._node
    if node.op != "expand":
        return None
    source = t._tracer.graph.nodes[node.inputs[0]]
    if source.shape[0] != 1 or source.shape[1:] != node.shape[1:]:
        return None
    return Tensor(t._tracer, source.name).reshape(source.shape[1:])


def _bmm(a: Tensor, b: Tensor) -> Tensor:
    """``bmm``. When ``b`` repeats one matrix over the batch (``matmul`` of a non-contiguous 3-D
    input by a weight decomposes so), the batch is folded into rows, as torch's matmul does for
    contiguous inputs, so that the extern call does not materialize B copies of the weight."""
    shared = _repeated_matrix(b)
    if shared is None:
        return a.matmul(b)
    batch, rows, _ = a.shape
    return a.reshape(batch * rows, -1).matmul(shared).reshape(batch, rows, -1)


def _addmm(bias: Tensor, a: Tensor, b: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """``beta * bias + alpha * (a @ b)`` (addmm, baddbmm)."""
    product = a.matmul(b)
    product = product if alpha == 1 else product * alpha
    return product + (bias if beta == 1 else bias * beta)


# --- convolution (a reduction, see stax.frontend.ops.nn) -------------------------------------------------------
def _check_convolution(op: str, x: Tensor, weight: Tensor) -> None:
    if weight.ndim not in (3, 4, 5) or x.ndim not in (weight.ndim - 1, weight.ndim):
        raise UnsupportedError(f"aten.{op}: stax translates 1-D, 2-D and 3-D convolutions (a 3-D, 4-D or 5-D weight "
                               f"and an input of as many dims or one less), not a {x.ndim}-D input with a "
                               f"{weight.ndim}-D weight")


def _of_height_one(x: Tensor, weight: Tensor, stride: Sequence[int], padding: Sequence[int],
                   dilation: Sequence[int], output_padding: Sequence[int]) -> tuple:
    """A 1-D convolution's operands and parameters as a 2-D convolution's of height 1."""
    return (x.unsqueeze(-2), weight.unsqueeze(2), [1, *stride], [0, *padding], [1, *dilation],
            [0, *output_padding])


def _convolution(x: Tensor, weight: Tensor, bias: Tensor | None, stride: Sequence[int], padding: Sequence[int],
                 dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> Tensor:
    _check_convolution("convolution", x, weight)
    if weight.ndim == 3:
        x2, w2, stride2, padding2, dilation2, extra2 = _of_height_one(x, weight, stride, padding, dilation,
                                                                      output_padding)
        return _convolution(x2, w2, bias, stride2, padding2, dilation2, transposed, extra2, groups).squeeze(-2)
    ops = _CONVOLUTIONS[weight.ndim]
    if transposed:
        return ops.transposed(x, weight, bias, stride, padding, output_padding, groups, dilation)
    return ops.forward(x, weight, bias, stride, padding, dilation, groups)


def _convolution_backward(grad: Tensor, x: Tensor, weight: Tensor, bias_sizes: Any, stride: Sequence[int],
                          padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                          output_padding: Sequence[int], groups: int, output_mask: Sequence[bool]) -> list:
    """(input gradient, weight gradient, bias gradient), each None where ``output_mask`` says so.
    A transposed convolution's input gradient is the forward convolution of ``grad``, and its
    weight gradient the convolution's weight gradient with ``x`` and ``grad`` exchanged."""
    _check_convolution("convolution_backward", x, weight)
    if weight.ndim == 3:
        x2, w2, stride2, padding2, dilation2, extra2 = _of_height_one(x, weight, stride, padding, dilation,
                                                                      output_padding)
        gx, gw, gb = _convolution_backward(grad.unsqueeze(-2), x2, w2, bias_sizes, stride2, padding2, dilation2,
                                           transposed, extra2, groups, output_mask)
        return [None if gx is None else gx.squeeze(-2), None if gw is None else gw.squeeze(2), gb]
    forward, _, input_grad, weight_grad = _CONVOLUTIONS[weight.ndim]
    unbatched = x.ndim == weight.ndim - 1
    if unbatched:
        grad, x = grad.unsqueeze(0), x.unsqueeze(0)
    if transposed:
        grads = (lambda: forward(grad, weight, None, stride, padding, dilation, groups),
                 lambda: weight_grad(x, grad, weight.shape, stride, padding, dilation, groups))
    else:
        grads = (lambda: input_grad(grad, weight, x.shape, stride, padding, dilation, groups),
                 lambda: weight_grad(grad, x, weight.shape, stride, padding, dilation, groups))
    grads += (lambda: grad.sum((0, *range(2, grad.ndim))),)
    results = [make() if wanted else None for make, wanted in zip(grads, output_mask)]
    if unbatched and results[0] is not None:
        results[0] = results[0].squeeze(0)
    return results


class _Convolution(NamedTuple):
    forward: Callable[..., Tensor]
    transposed: Callable[..., Tensor]
    input_grad: Callable[..., Tensor]
    weight_grad: Callable[..., Tensor]


#: by the weight's rank: the convolution, the transposed one, and the convolution's two gradients
_CONVOLUTIONS = {4: _Convolution(nn.conv2d, nn.conv_transpose2d, nn.conv2d_input_grad, nn.conv2d_weight_grad),
                 5: _Convolution(conv3d.conv3d, conv3d.conv_transpose3d, conv3d.conv3d_input_grad,
                                 conv3d.conv3d_weight_grad)}


def _max_pool2d_with_indices(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (),
                             padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,),
                             ceil_mode: bool = False) -> list[Tensor]:
    """``max_pool2d_with_indices``: (values, int64 indices into each input plane), as torch."""
    return list(pooling.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True))


def _upsampling(upsample: Callable[..., Tensor], flags: int) -> Handler:
    """An upsampling's handler for both overloads: the default one (``flags`` flags, then
    ``scales_h`` and ``scales_w``) and ``.vec`` (the flags, then one list of scale factors or None)."""
    def handler(x: Tensor, output_size: Sequence[int] | None, *rest: Any) -> Tensor:
        given, tail = rest[:flags], rest[flags:]
        if len(tail) == 1 and (tail[0] is None or isinstance(tail[0], (list, tuple))):
            scales = tuple(tail[0]) if tail[0] else (None, None)
        else:
            scales = tuple(tail) + (None,) * (2 - len(tail))
        return upsample(x, output_size, *given, *scales)
    return handler


# --- indexing by tensors and functionalized writes (see stax.frontend.ops.gather) ---------------------------
def _copy(x: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    """The functional ``copy``: ``src`` with ``x``'s dtype and shape."""
    return src.to(x.dtype).expand(x.shape).clone()


def _scatter(x: Tensor, dim: int, index: Tensor, src: Any = None, *, value: Any = None, reduce: str | None = None
             ) -> Tensor:
    return gather.scatter(x, dim, index, value if src is None else src, reduce)


def _as_strided(x: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None, *,
                layout: strided_views.Layout) -> Tensor:
    """``as_strided`` of ``x``, laid out in its storage as ``layout`` (which the front end reads from
    the FX node's example value)."""
    return strided_views.as_strided("as_strided", x, layout, size, stride, storage_offset)


def _as_strided_scatter(x: Tensor, src: Tensor, size: Sequence[int], stride: Sequence[int],
                        storage_offset: int | None = None, *, layout: strided_views.Layout) -> Tensor:
    return strided_views.as_strided_scatter("as_strided_scatter", x, strided_views.written_layout(x.shape, layout),
                                            src, size, stride, storage_offset)


#: the ops that address their first argument's storage: the front end passes its ``layout``
STORAGE_OPS = frozenset({"as_strided", "as_strided_scatter"})


def _pad_modes(mode: str) -> dict[str, Handler]:
    """``reflection_pad{1,2,3}d`` or ``replication_pad{1,2,3}d`` and their backward (the front end
    keeps them whole: their decompositions index with a tensor per padded dim)."""
    name = {"reflect": "reflection", "replicate": "replication"}[mode]
    forward = lambda x, padding: nn.pad(x, padding, mode)  # noqa: E731
    backward = lambda grad, x, padding: nn.pad_backward(grad, x.shape, padding, mode)  # noqa: E731
    return {f"{name}_pad{k}d{suffix}": f for k in (1, 2, 3) for suffix, f in (("", forward), ("_backward", backward))}


def _one_index(op: str, x: Tensor, indices: Sequence[Tensor | None]) -> tuple[int, Tensor]:
    """The dim and the flattened index of ``x[..., i, ...]`` (negative positions wrapped, as torch
    indexing wraps them); one integer index tensor only."""
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(used) != 1 or used[0][1].dtype == "bool":
        raise UnsupportedError(f"aten.{op}: stax translates indexing by one integer index tensor (x[i], x[:, i]), "
                               f"not {len(used)} index tensors or a mask")
    d, index = used[0]
    flat = index.reshape(-1).long()
    return d, where(flat < 0, flat + x.shape[d], flat)


def _index(x: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
    """``x[i]`` (``aten.index.Tensor``): ``index_select`` along the index's dim."""
    d, flat = _one_index("index", x, indices)
    index = [i for i in indices if i is not None][0]
    return gather.index_select(x, d, flat).reshape(x.shape[:d] + index.shape + x.shape[d + 1:])


def _index_put(x: Tensor, indices: Sequence[Tensor | None], values: Tensor, accumulate: bool = False) -> Tensor:
    """``x[i] = values`` or, with ``accumulate``, ``x[i] += values`` (the backward of indexing and
    of an embedding): a scatter along the index's dim."""
    d, flat = _one_index("index_put", x, indices)
    index = [i for i in indices if i is not None][0]
    shape = x.shape[:d] + flat.shape + x.shape[d + 1:]
    if accumulate and d == 0:
        return gather.add_rows(x, flat, values.to(x.dtype).expand(index.shape + x.shape[1:]).reshape(shape))
    spread = flat.reshape((1,) * d + flat.shape + (1,) * (x.ndim - d - 1)).expand(shape)
    values = values.to(x.dtype).expand(x.shape[:d] + index.shape + x.shape[d + 1:]).reshape(shape)
    return gather.scatter_add(x, d, spread, values) if accumulate else gather.scatter(x, d, spread, values)


def _embedding(weight: Tensor, indices: Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False,
               sparse: bool = False) -> Tensor:
    """The rows ``indices`` of ``weight`` (``padding_idx`` only changes the gradient)."""
    return gather.index_select(weight, 0, indices.reshape(-1)).reshape(indices.shape + weight.shape[1:])


def _identity(x: Tensor, *_: Any, **__: Any) -> Tensor:
    return x


_UNARY = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "erf", "log1p", "expm1", "sin", "cos",
          "abs", "neg", "relu", "logical_not")
_BINARY = ("mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
           "remainder", "floor_divide", "logical_xor")

ATEN: dict[str, Handler] = {
    **{op: (lambda m: lambda x: getattr(x, m)())(op) for op in _UNARY},
    **{op: _binary(op) for op in _BINARY},
    "bitwise_not": lambda x: ~x, "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    "add": _with_alpha("add"), "sub": _with_alpha("sub"), "rsub": _rsub, "div": _div, "pow": _pow,
    "where": where, "clamp": lambda x, min=None, max=None: x.clamp(min, max),
    "clamp_min": lambda x, m: x.clamp(min=m), "clamp_max": lambda x, m: x.clamp(max=m),
    "_to_copy": _to_copy, "convert_element_type": lambda x, dtype: x.to(dtype_name(dtype)),
    "full_like": _full_like, "zeros_like": lambda x, **kw: _full_like(x, 0, **kw),
    "ones_like": lambda x, **kw: _full_like(x, 1, **kw), "empty_like": lambda x, **kw: _full_like(x, 0, **kw),
    "fill": lambda x, value: _full_like(x, value),
    "gelu": _gelu, "gelu_backward": _gelu_backward, "silu": _silu, "leaky_relu": _leaky_relu,
    "threshold_backward": _threshold_backward, "sigmoid_backward": _sigmoid_backward,
    "tanh_backward": _tanh_backward,
    "sum": _reduction("sum"), "mean": _reduction("mean"), "prod": _reduction("prod"),
    "amax": lambda x, dim=(), keepdim=False: x.amax(dim, keepdim),
    "amin": lambda x, dim=(), keepdim=False: x.amin(dim, keepdim),
    "max": _max_min("max"), "min": _max_min("min"),
    "_cdist_forward": lambda x1, x2, p, compute_mode=None: nn.cdist(x1, x2, p),
    "_cdist_backward": nn.cdist_backward,
    "sort": lambda x, dim=-1, descending=False, *, stable=None: list(sorting.sort(x, dim, descending)),
    "topk": lambda x, k, dim=-1, largest=True, sorted=True: list(sorting.topk(x, k, dim, largest, sorted)),
    "argmax": lambda x, dim=None, keepdim=False: x.argmax(dim, keepdim),
    "argmin": lambda x, dim=None, keepdim=False: x.argmin(dim, keepdim),
    "linalg_vector_norm": _vector_norm,
    "any": lambda x, dim=None, keepdim=False: x.any(dim, keepdim),
    "all": lambda x, dim=None, keepdim=False: x.all(dim, keepdim),
    "var": _var, "var_mean": _var_mean,
    "_softmax": _softmax, "_log_softmax": _log_softmax, "_softmax_backward_data": _softmax_backward,
    "_log_softmax_backward_data": _log_softmax_backward,
    "native_layer_norm": _layer_norm, "_native_batch_norm_legit_no_training": _batch_norm_inference,
    "native_group_norm": _group_norm, "sign": lambda x: x.sign(),
    "cumsum": lambda x, dim, *, dtype=None: x.cumsum(dim, dtype=None if dtype is None else dtype_name(dtype)),
    "logcumsumexp": lambda x, dim: x.logcumsumexp(dim),
    "view": lambda x, shape: x.reshape(shape), "_unsafe_view": lambda x, shape: x.reshape(shape),
    "reshape": lambda x, shape: x.reshape(shape),
    "permute": lambda x, dims: x.permute(dims), "t": lambda x: x.t(), "transpose": lambda x, a, b: x.transpose(a, b),
    "expand": _expand, "unsqueeze": lambda x, dim: x.unsqueeze(dim), "squeeze": _squeeze,
    "select": _select, "slice": _slice, "split": _split, "split_with_sizes": _split_with_sizes, "unbind": _unbind,
    "alias": _identity, "clone": lambda x, **_: x.clone(), "detach": _identity, "lift_fresh_copy": _identity,
    "contiguous": _identity,
    "mm": lambda a, b: a.matmul(b), "bmm": _bmm, "matmul": lambda a, b: a.matmul(b),
    "mv": lambda a, b: a.matmul(b), "dot": lambda a, b: a.matmul(b),
    "addmm": _addmm, "baddbmm": _addmm, "linear": _linear,
    "constant_pad_nd": lambda x, pad, value=0: nn.pad(x, pad, value=value), "cat": nn.cat, "flip": lambda x, dims: x.flip(dims),
    "convolution": _convolution, "convolution_backward": _convolution_backward,
    "max_pool2d": pooling.max_pool2d, "max_pool2d_with_indices": _max_pool2d_with_indices,
    "max_pool2d_with_indices_backward": pooling.max_pool2d_backward, "avg_pool2d": pooling.avg_pool2d,
    "avg_pool2d_backward": pooling.avg_pool2d_backward, "avg_pool3d": pooling.avg_pool3d,
    "avg_pool3d_backward": pooling.avg_pool3d_backward,
    "max_pool3d_with_indices": lambda *args: list(pooling.max_pool3d(*args, return_indices=True)),
    "max_pool3d_with_indices_backward": pooling.max_pool3d_backward,
    "_adaptive_avg_pool2d": resample.adaptive_avg_pool2d,
    "_adaptive_avg_pool2d_backward": resample.adaptive_avg_pool2d_backward,
    "adaptive_max_pool2d": lambda x, output_size: list(resample.adaptive_max_pool2d(x, output_size)),
    "adaptive_max_pool2d_backward": resample.adaptive_max_pool2d_backward,
    "im2col": pooling.unfold, "col2im": pooling.fold,
    "upsample_nearest2d": _upsampling(resample.upsample_nearest2d, 0),
    "upsample_nearest2d_backward": resample.upsample_nearest2d_backward,
    "upsample_bilinear2d": _upsampling(resample.upsample_bilinear2d, 1),
    "upsample_bilinear2d_backward": resample.upsample_bilinear2d_backward,
    **_pad_modes("reflect"), **_pad_modes("replicate"),
    "new_empty_strided": lambda x, size, stride, *, dtype=None, **_: full(
        x, 0, size, dtype_name(dtype) if dtype is not None else x.dtype),
    "as_strided": _as_strided, "as_strided_scatter": _as_strided_scatter,
    "copy": _copy, "gather": lambda x, dim, index, *, sparse_grad=False: gather.gather(x, dim, index),
    "scatter": _scatter, "scatter_add": gather.scatter_add,
    "scatter_reduce": gather.scatter_reduce, "index_select": gather.index_select,
    "slice_scatter": gather.slice_scatter, "diagonal_scatter": gather.diagonal_scatter,
    "diagonal": lambda x, offset=0, dim1=0, dim2=1: x.diagonal(offset, dim1, dim2),
    "index": _index, "index_put": _index_put, "embedding": _embedding,
}


def _refuse_generator(generator: Any) -> None:
    if generator is not None:
        raise UnsupportedError("a random op with a torch.Generator: stax draws from the program's seed input "
                               "(TorchProgram.arguments(seed=...)); call it without generator=")


def _bernoulli(seed: Tensor, stream: int, x: Tensor, p: float = 0.5, *, generator: Any = None) -> Tensor:
    """``aten.bernoulli.p`` (dropout's mask): ones with probability ``p`` in ``x``'s shape and dtype."""
    _refuse_generator(generator)
    return bernoulli(seed, x.shape, p, stream=stream).to(x.dtype)


def _like(draw: Handler) -> Handler:
    """``rand_like`` / ``randn_like``: ``x``'s shape, and its dtype unless given one."""
    def handler(seed: Tensor, stream: int, x: Tensor, *, dtype: Any = None, **_: Any) -> Tensor:
        return draw(seed, x.shape, x.dtype if dtype is None else dtype_name(dtype), stream=stream)
    return handler


def _sized(draw: Handler) -> Handler:
    """``rand`` / ``randn`` of a size (float32 unless given a dtype)."""
    def handler(seed: Tensor, stream: int, size: Sequence[int], *, dtype: Any = None, generator: Any = None,
                **_: Any) -> Tensor:
        _refuse_generator(generator)
        return draw(seed, tuple(size), "float32" if dtype is None else dtype_name(dtype), stream=stream)
    return handler


def _normal(seed: Tensor, stream: int, x: Tensor, mean: float = 0.0, std: float = 1.0, *,
            generator: Any = None) -> Tensor:
    """``normal_functional`` (``x.normal_(mean, std)``): normal draws in ``x``'s shape and dtype."""
    _refuse_generator(generator)
    return randn(seed, x.shape, x.dtype, stream=stream) * std + mean


def _uniform(seed: Tensor, stream: int, x: Tensor, low: float = 0.0, high: float = 1.0, *,
             generator: Any = None) -> Tensor:
    """``uniform`` (``x.uniform_(low, high)``): uniform draws in [low, high)."""
    _refuse_generator(generator)
    return rand(seed, x.shape, x.dtype, stream=stream) * (high - low) + low


def _exponential(seed: Tensor, stream: int, x: Tensor, lambd: float = 1.0, *, generator: Any = None) -> Tensor:
    """``exponential`` (``x.exponential_(lambd)``, Gumbel-softmax's noise): ``-log(1 - u) / lambd``."""
    _refuse_generator(generator)
    return -(-rand(seed, x.shape, x.dtype, stream=stream)).log1p() / lambd


def _integers(seed: Tensor, stream: int, bounds: Sequence[Any], size: Sequence[int], dtype: str) -> Tensor:
    """Uniform integers in [low, high) (``bounds``: high, or low and high): ``floor(u * (high -
    low)) + low``, u a float64 draw (a cast to int64 floors it, being non-negative)."""
    low, high = (0, int(bounds[0])) if len(bounds) == 1 else map(int, bounds)
    if high <= low:
        raise UnsupportedError(f"randint: the range [{low}, {high}) is empty; torch requires low < high")
    return ((rand(seed, tuple(size), "float64", stream=stream) * (high - low)).to("int64") + low).to(dtype)


def _randint(seed: Tensor, stream: int, *bounds_and_size: Any, dtype: Any = None, generator: Any = None,
             **_: Any) -> Tensor:
    """``randint`` (high, size) and ``randint.low`` (low, high, size): int64 unless given a dtype."""
    _refuse_generator(generator)
    *bounds, size = bounds_and_size
    return _integers(seed, stream, bounds, size, "int64" if dtype is None else dtype_name(dtype))


def _randint_like(seed: Tensor, stream: int, x: Tensor, *bounds: Any, dtype: Any = None, generator: Any = None,
                  **_: Any) -> Tensor:
    """``randint_like`` (x, high) and its ``low_dtype`` overload (x, low, high): ``x``'s shape and dtype."""
    _refuse_generator(generator)
    return _integers(seed, stream, bounds, x.shape, x.dtype if dtype is None else dtype_name(dtype))


#: the random ATen ops, by overload (``"bernoulli.p"``), as stax calls: each takes the program's
#: seed (a 0-d int64 tensor) and the stream the node draws before the node's own arguments
RANDOM: dict[str, Handler] = {
    "bernoulli.p": _bernoulli, "rand_like.default": _like(rand), "randn_like.default": _like(randn),
    "rand.default": _sized(rand), "randn.default": _sized(randn), "normal_functional.default": _normal,
    "uniform.default": _uniform, "exponential.default": _exponential, "randint.default": _randint,
    "randint.low": _randint, "randint_like.default": _randint_like, "randint_like.low_dtype": _randint_like,
}
