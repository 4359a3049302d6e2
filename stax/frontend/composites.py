"""Tensor's methods whose op lives in :mod:`stax.frontend.ops`: indexing by tensors
(:mod:`~stax.frontend.ops.gather`: ``gather``, ``index_select``, the scatters) and sorting by
counting (:mod:`~stax.frontend.ops.sorting`: ``sort``, ``argsort``, ``topk``), with
``torch.Tensor``'s signatures.  Those ops build on the tracer's primitives, never on ``Tensor``,
so the Tensor module imports them and not the reverse."""
from __future__ import annotations

from typing import Any, Self

from stax.frontend.ops import gather as gather_ops
from stax.frontend.ops import sorting as sorting_ops
from stax.frontend.reductions import ValuesIndices
from stax.frontend.tracer import TensorBase


class CompositeMixin(TensorBase):
    """Indexing by tensors and sorting."""

    def gather(self, dim: int, index: TensorBase) -> Self:
        """torch.Tensor.gather (:func:`stax.frontend.ops.gather.gather`)."""
        return gather_ops.gather(self, dim, index)

    def index_select(self, dim: int, index: TensorBase) -> Self:
        """torch.Tensor.index_select (:func:`stax.frontend.ops.gather.index_select`)."""
        return gather_ops.index_select(self, dim, index)

    def scatter(self, dim: int, index: TensorBase, src: TensorBase | None = None, *, value: Any = None,
                reduce: str | None = None) -> Self:
        """torch.Tensor.scatter (out of place) of a tensor ``src`` or a scalar ``value``."""
        return gather_ops.scatter(self, dim, index, value if src is None else src, reduce)

    def scatter_reduce(self, dim: int, index: TensorBase, src: TensorBase, reduce: str, *,
                       include_self: bool = True) -> Self:
        """torch.Tensor.scatter_reduce (out of place)."""
        return gather_ops.scatter_reduce(self, dim, index, src, reduce, include_self=include_self)

    def scatter_add(self, dim: int, index: TensorBase, src: TensorBase) -> Self:
        """torch.Tensor.scatter_add (out of place)."""
        return gather_ops.scatter_add(self, dim, index, src)

    def slice_scatter(self, src: TensorBase, dim: int = 0, start: int | None = None, end: int | None = None,
                      step: int = 1) -> Self:
        """torch.Tensor.slice_scatter: ``self`` with ``self[..., start:end:step, ...]`` replaced by ``src``."""
        return gather_ops.slice_scatter(self, src, dim, start, end, step)

    def diagonal_scatter(self, src: TensorBase, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """torch.Tensor.diagonal_scatter: ``self`` with ``self.diagonal(offset, dim1, dim2)`` replaced by ``src``."""
        return gather_ops.diagonal_scatter(self, src, offset, dim1, dim2)

    def sort(self, dim: Any = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
        """torch.Tensor.sort (:func:`stax.frontend.ops.sorting.sort`)."""
        return sorting_ops.sort(self, dim, descending, stable)

    def argsort(self, dim: Any = -1, descending: bool = False, stable: bool = False) -> Self:
        """torch.Tensor.argsort: the positions of :meth:`sort`."""
        return sorting_ops.argsort(self, dim, descending, stable)

    def topk(self, k: int, dim: Any = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:
        """torch.Tensor.topk (:func:`stax.frontend.ops.sorting.topk`)."""
        return sorting_ops.topk(self, k, dim, largest, sorted)
