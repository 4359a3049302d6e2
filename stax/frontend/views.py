"""Tensor's shape and view methods (``reshape``, ``permute``, ``expand``, ``unfold``, ``flip``,
basic indexing ``x[1:, None]``...) with torch's argument rules.  The graph has value semantics,
so a view is a node like any other; the proxy only remembers the tensor it aliases, which the
in-place checks of functionalization read (spec 7.1)."""
from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from stax.errors import ShapeError, UnsupportedError
from stax.frontend.shapes import DiagonalFrame, as_int, dims_arg, shape_args, wrap_dim
from stax.frontend.tracer import TensorBase, expand_to


class ViewMixin(TensorBase):
    """Reshapes, permutations, broadcasts, windows and slices."""

    def reshape(self, *shape: Any) -> Self:
        """``reshape``/``view`` with one inferred ``-1``; the graph has value semantics, so ``view`` on
        a non-contiguous tensor is accepted."""
        sizes = shape_args(shape, "reshape")
        known = math.prod(s for s in sizes if s != -1)
        if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
            raise ShapeError(f"reshape: invalid shape {sizes} (at most one -1, other sizes non-negative)")
        if -1 in sizes:
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape: shape {sizes} is invalid for input of size {self.numel()} (shape {self.shape})")
            sizes = tuple(self.numel() // known if s == -1 else s for s in sizes)
        elif known != self.numel():
            raise ShapeError(f"reshape: shape {sizes} is invalid for input of size {self.numel()} (shape {self.shape})")
        return self._view(self._reshaped(sizes))

    def view(self, *shape: Any) -> Self:
        if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int, np.integer)):
            raise UnsupportedError(f"view({shape[0]!r}): reinterpreting the dtype is not supported; use to(dtype)")
        return self.reshape(*shape)

    def reshape_as(self, other: TensorBase) -> Self:
        return self.reshape(other.shape)

    view_as = reshape_as

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        if self.ndim == 0:
            return self.reshape(1)
        start, end = wrap_dim(start_dim, self.ndim, "flatten"), wrap_dim(end_dim, self.ndim, "flatten")
        if start > end:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:start] + (math.prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

    def permute(self, *dims: Any) -> Self:
        order = tuple(wrap_dim(d, self.ndim, "permute") for d in shape_args(dims, "permute"))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute: dims {dims} are not a permutation of the {self.ndim} dims of shape {self.shape}")
        if order == tuple(range(self.ndim)):
            return self._view(self)
        shape = tuple(self.shape[d] for d in order)
        return self._view(self._tracer.emit("permute", (self,), shape, self.dtype, dims=order))

    def transpose(self, dim0: int, dim1: int) -> Self:
        order = list(range(self.ndim))
        a, b = wrap_dim(dim0, self.ndim, "transpose"), wrap_dim(dim1, self.ndim, "transpose")
        if self.ndim:
            order[a], order[b] = order[b], order[a]
        return self.permute(order)

    swapaxes = transpose

    def t(self) -> Self:
        """torch.t: transposes a 2-D tensor, returns 0-d and 1-d tensors as they are."""
        if self.ndim > 2:
            raise ShapeError(f"t() expects a tensor with <= 2 dimensions, got shape {self.shape}; use transpose(d0, d1)")
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def T(self) -> Self:
        return self.permute(tuple(reversed(range(self.ndim))))

    def unsqueeze(self, dim: int) -> Self:
        d = wrap_dim(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def squeeze(self, dim: Any = None) -> Self:
        """Drops size-1 dims (all, or those in ``dim``); a named dim of another size is kept, as torch."""
        if isinstance(dim, (tuple, list)) and not dim:  # torch: an empty tuple names no dim
            return self._view(self)
        dims = set(range(self.ndim)) if dim is None else set(dims_arg(dim, self.ndim, "squeeze"))
        return self.reshape(tuple(s for d, s in enumerate(self.shape) if not (d in dims and s == 1)))

    def expand(self, *sizes: Any) -> Self:
        """torch.expand: ``-1`` keeps a size, new dims may be added on the left, size-1 dims broadcast."""
        sizes = shape_args(sizes, "expand")
        lead = len(sizes) - self.ndim
        if lead < 0:
            raise ShapeError(f"expand: the number of sizes {sizes} must be >= the number of dims of shape {self.shape}")
        target = []
        for i, size in enumerate(sizes):
            current = self.shape[i - lead] if i >= lead else None
            if size == -1 and current is None:
                raise ShapeError(f"expand: size -1 is not allowed in a new leading dimension ({sizes})")
            if size == -1 or size == current:
                target.append(current)
            elif current in (None, 1) and size >= 0:
                target.append(size)
            else:
                raise ShapeError(f"expand: the size of dimension {i} ({current}) must match {size} or be 1 "
                                 f"(shape {self.shape}, sizes {sizes})")
        return self._view(expand_to(self, target))

    def expand_as(self, other: TensorBase) -> Self:
        return self.expand(other.shape)

    def unfold(self, dimension: int, size: int, step: int) -> Self:
        """torch.Tensor.unfold: the windows of ``size`` elements every ``step`` along ``dimension``,
        as a new last dim (a view; a convolution reads its input through it)."""
        if self.ndim == 0:  # torch: the windows of a one-element 1-d tensor, as one dim of ``size``
            return self.reshape(1).unfold(dimension, size, step).reshape(size)
        dim = wrap_dim(dimension, self.ndim, "unfold")
        size, step = as_int(size, "unfold: size"), as_int(step, "unfold: step")
        if step <= 0 or not 0 <= size <= self.shape[dim]:
            raise ShapeError(f"unfold: size {size} and step {step} do not fit dimension {dimension} of shape "
                             f"{self.shape} (expected 0 <= size <= {self.shape[dim]} and step > 0)")
        shape = self.shape[:dim] + ((self.shape[dim] - size) // step + 1,) + self.shape[dim + 1:] + (size,)
        return self._view(self._tracer.emit("unfold", (self,), shape, self.dtype, dim=dim, size=size, step=step))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """torch.diagonal: the elements ``[i, i + offset]`` of dims ``dim1`` and ``dim2``, as the last
        dim; every ``columns + 1``-th element of the two dims read as one (no gather)."""
        frame = DiagonalFrame.of(self.shape, offset, dim1, dim2, "diagonal")
        block = self.permute(frame.order)[..., frame.row:, frame.column:]
        flat = block.reshape(block.shape[:-2] + (frame.rows * frame.columns,))
        return flat[..., :frame.length * (frame.columns + 1):frame.columns + 1]

    def flip(self, *dims: Any, **keyword: Any) -> Self:
        """torch.flip: the elements in reverse order along ``dims`` (positional or ``dims=``; a new
        tensor, as in torch; lowered as a reversed index, no copy)."""
        if keyword:
            if dims or set(keyword) != {"dims"}:
                raise UnsupportedError(f"flip: give the dims positionally or as dims=..., e.g. flip(0, 1) or "
                                       f"flip(dims=(0, 1)); got {dims} and keywords {sorted(keyword)}")
            dims = (keyword["dims"],)
        dims = shape_args(dims, "flip")
        order = tuple(d for d in dims_arg(dims, self.ndim, "flip") if self.shape[d] > 1) if dims else ()
        if not order:
            return self.clone()
        return self._tracer.emit("flip", (self,), self.shape, self.dtype, dims=order)

    def __getitem__(self, index: Any) -> Self:
        """Basic indexing: ints, slices with positive steps, None and Ellipsis (a view, as torch)."""
        items = list(index) if isinstance(index, tuple) else [index]
        for item in items:
            if not (item is None or item is Ellipsis or isinstance(item, slice)
                    or (isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)))):
                raise UnsupportedError(f"indexing with {type(item).__name__} is not supported; stax supports ints, "
                                       "slices with positive steps, None and ...")
        consuming = sum(1 for i in items if i is not None and i is not Ellipsis)
        if consuming > self.ndim:
            raise ShapeError(f"too many indices for a tensor of dimension {self.ndim} (index {index!r})")
        if items.count(Ellipsis) > 1:
            raise ShapeError("an index can only have a single ellipsis ('...')")
        if Ellipsis in items:
            at = items.index(Ellipsis)
            items[at:at + 1] = [slice(None)] * (self.ndim - consuming)
        else:
            items += [slice(None)] * (self.ndim - consuming)
        result, shape, dim = self, [], 0
        for item in items:
            if item is None:
                shape.append(1)
                continue
            size = self.shape[dim]
            if isinstance(item, slice):
                if item.step is not None and as_int(item.step, "slice step") <= 0:
                    raise UnsupportedError(f"slice step must be positive, got {item.step}")
                start, stop, step = item.indices(size)
                length = len(range(start, stop, step))
                shape.append(length)
            else:
                if not -size <= item < size:
                    raise ShapeError(f"index {item} is out of bounds for dimension {dim} with size {size}")
                start, step, length = int(item) % size, 1, 1
            if length != size:
                sliced = result.shape[:dim] + (length,) + result.shape[dim + 1:]
                stop = start + (length - 1) * step + 1 if length else start
                result = self._tracer.emit("slice", (result,), sliced, self.dtype, dim=dim,
                                           start=start, stop=stop, step=step)
            dim += 1
        return self._view(result._reshaped(tuple(shape)))
