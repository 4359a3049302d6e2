"""Tensor's matrix product (``matmul``, ``@``, ``mm``, ``bmm``) with torch's rules for 1-D and
batched operands: floats are a ``matmul`` node (a BLAS call, spec 8.5), integers a sum of
products that fuses like a convolution."""
from __future__ import annotations

import math
from typing import Any, Self

from stax import dtypes
from stax.errors import ShapeError, UnsupportedError
from stax.frontend.elementwise import check_operand, tracer_of
from stax.frontend.shapes import broadcast_shapes
from stax.frontend.tracer import TensorBase, expand_to


class MatmulMixin(TensorBase):
    """torch.matmul and its aliases."""

    def matmul(self, other: TensorBase) -> Self:
        """torch.matmul on operands of the same dtype: 1-D operands get a dim added and removed.
        Floats call BLAS: a batch times a matrix folds the batch into rows (one 2-D ``matmul``);
        a matrix times a batch is a ``matmul`` of the 2-D matrix and the flattened 3-D batch;
        other batch dims broadcast and are flattened into one batched 3-D ``matmul`` node.
        Integers are a sum of products over ``k`` in their own dtype (wrapping, as torch), a
        reduction fused like a convolution."""
        if not isinstance(other, TensorBase):
            raise UnsupportedError(f"matmul: the other operand must be a traced tensor, got {type(other).__name__}")
        tracer = tracer_of((self, other), "matmul")
        if self.dtype != other.dtype or self.dtype == "bool":
            raise UnsupportedError(f"matmul: operands must have the same float or integer dtype, got {self.dtype} "
                                   f"and {other.dtype} (cast with .float(), .double(), .int() or .long())")
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeError(f"matmul: both operands need at least one dimension, got shapes {self.shape} and {other.shape}")
        a = self._reshaped((1,) + self.shape) if self.ndim == 1 else self
        b = other._reshaped(other.shape + (1,)) if other.ndim == 1 else other
        (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
        if k != k2:
            raise ShapeError(f"matmul: shapes {self.shape} and {other.shape} cannot be multiplied ({k} != {k2})")
        batch = broadcast_shapes("matmul", [a.shape[:-2], b.shape[:-2]])
        if dtypes.is_integer(self.dtype):
            out = (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2, dtype=self.dtype)
            return out._reshaped(batch + ((m,) if self.ndim > 1 else ()) + ((n,) if other.ndim > 1 else ()))
        if batch and b.ndim == 2:  # (..., m, k) @ (k, n): fold the batch into rows, the weight is read once
            rows = math.prod(batch) * m
            out = tracer.emit("matmul", (a._reshaped((rows, k)), b), (rows, n), self.dtype)
            return out._reshaped(batch + (m,) + ((n,) if other.ndim > 1 else ()))
        if batch and a.ndim == 2:  # (m, k) @ (..., k, n): the matrix is read in place by every batch's gemm
            flat = math.prod(batch)
            out = tracer.emit("matmul", (a, expand_to(b, batch + (k, n))._reshaped((flat, k, n))), (flat, m, n),
                              self.dtype)
            return out._reshaped(batch + (m,) + ((n,) if other.ndim > 1 else ()))
        if batch:
            flat = math.prod(batch)
            a = expand_to(a, batch + (m, k))._reshaped((flat, m, k))
            b = expand_to(b, batch + (k, n))._reshaped((flat, k, n))
        out = tracer.emit("matmul", (a, b), a.shape[:-1] + (n,), self.dtype)
        shape = batch + ((m,) if self.ndim > 1 else ()) + ((n,) if other.ndim > 1 else ())
        return out._reshaped(shape)

    __matmul__ = matmul
    mm = matmul
    bmm = matmul

    def __rmatmul__(self, other: Any) -> Self:
        check_operand(other, "matmul")
        raise UnsupportedError(f"matmul: the other operand must be a traced tensor, got {type(other).__name__}")
