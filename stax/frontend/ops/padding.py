"""The graph's ``pad`` node (a guarded load: the pad value where an index leaves the input, with
interior padding for strided placement; see :mod:`stax.ir.graph`), and ``torch.cat`` built on it.
Below :class:`~stax.frontend.tensor.Tensor`: the indexing and sorting ops its methods call place
values with it."""
from __future__ import annotations

from typing import Any, Sequence

from stax import dtypes
from stax.errors import ShapeError
from stax.frontend.shapes import wrap_dim
from stax.frontend.tracer import TensorBase, constant_value


def pad_graph(x: TensorBase, low: Sequence[int], high: Sequence[int], interior: Sequence[int], value: Any) -> Any:
    """The graph's ``pad`` node of ``x``: ``low`` and ``high`` elements before and after each dim
    (negative ones crop), ``interior`` between its elements, all ``value``; a no-op returns ``x``."""
    if not any(low) and not any(high) and not any(interior):
        return x
    shape = tuple(lo + hi + ((n - 1) * (k + 1) + 1 if n else 0) for lo, hi, k, n in zip(low, high, interior, x.shape))
    if any(s < 0 for s in shape):
        raise ShapeError(f"pad: padding {list(zip(low, high))} of shape {x.shape} gives a negative size {shape}")
    return x._tracer.emit("pad", (x,), shape, x.dtype, low=tuple(low), high=tuple(high), interior=tuple(interior),
                          value=constant_value(value, x.dtype))


def cat(tensors: Sequence[TensorBase], dim: int = 0) -> Any:
    """torch.cat: each tensor padded to the result's extent along ``dim`` with the additive identity
    (``-0.0``, which leaves every float, ``-0.0`` included, unchanged; 0; False), then summed, so
    every element is one input's value exactly; 1-D empty tensors are skipped, as in torch."""
    items = [t for t in tensors if t.shape != (0,)] or list(tensors)
    if not items:
        raise ShapeError("cat: expected a non-empty list of tensors")
    ndim = items[0].ndim
    if ndim == 0:
        raise ShapeError("cat: zero-dimensional tensors cannot be concatenated (reshape them to 1-d)")
    d = wrap_dim(dim, ndim, "cat")
    for t in items:
        if t.ndim != ndim or t.shape[:d] + t.shape[d + 1:] != items[0].shape[:d] + items[0].shape[d + 1:]:
            raise ShapeError(f"cat: shapes {[x.shape for x in items]} must match except in dimension {dim}")
    dtype = dtypes.result_type(*((t.dtype, t.ndim) for t in items))
    total, start, result = sum(t.shape[d] for t in items), 0, None
    for t in items:
        low, high = [0] * ndim, [0] * ndim
        low[d], high[d] = start, total - start - t.shape[d]
        part = pad_graph(t.to(dtype), low, high, [0] * ndim, -0.0)
        result = part if result is None else result + part
        start += t.shape[d]
    return result if len(items) > 1 else result.clone()
