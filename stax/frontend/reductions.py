"""Tensor's reductions and scans (``sum``, ``amax``, ``mean``, ``var``, ``softmax``, ``cumsum``,
``argmax``, ``max(dim)``...) with torch's dtype rules, and the functions of the same family
(``var_mean``, ``std_mean``, ``vector_norm``).  A reduction is one node over sorted dims; the
composites (softmax, logsumexp, argmax) are reductions that fuse (spec 6.3, 7.7)."""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Self

import numpy as np

from stax import dtypes
from stax.errors import ShapeError, UnsupportedError
from stax.frontend.elementwise import is_scalar, where
from stax.frontend.shapes import dims_arg, wrap_dim
from stax.frontend.tracer import TensorBase


class ValuesIndices(NamedTuple):
    """What ``x.max(dim)`` and ``x.min(dim)`` return, as torch's ``torch.return_types.max``."""

    values: TensorBase
    indices: TensorBase


def vector_norm(x: TensorBase, ord: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    """torch.linalg.vector_norm of a float tensor over ``dim`` (all dims when None): ``ord`` 2
    (``sqrt(sum(x * x))``), 1, inf (``amax(|x|)``), -inf, 0 (the count of non-zeros) or any
    other number ``p`` (``sum(|x| ** p) ** (1 / p)``); ``dtype=`` casts first."""
    if not isinstance(x, TensorBase):
        raise UnsupportedError(f"vector_norm: expected a traced tensor, got {type(x).__name__}")
    src = x._cast(dtypes.canonical(dtype)) if dtype is not None else x
    if not dtypes.is_floating(src.dtype):
        raise UnsupportedError(f"vector_norm: expected a float tensor, got {src.dtype} (as torch; use x.float())")
    if not is_scalar(ord) or isinstance(ord, (bool, np.bool_)):
        raise UnsupportedError(f"vector_norm: ord must be a number, got {ord!r}")
    dims = dims_arg(dim, src.ndim, "vector_norm")
    if ord == 2:
        return (src * src).sum(dims, keepdim).sqrt()
    if ord == 0:
        return (src != 0).sum(dims, keepdim)._cast(src.dtype)
    if math.isinf(ord):
        if any(src.shape[d] == 0 for d in dims):
            raise ShapeError(f"vector_norm: ord={ord} over a dimension of size 0 has no value (shape {src.shape})")
        return src.abs().amax(dims, keepdim) if ord > 0 else src.abs().amin(dims, keepdim)
    if ord == 1:
        return src.abs().sum(dims, keepdim)
    return (src.abs() ** ord).sum(dims, keepdim) ** (1.0 / ord)


def var_mean(x: TensorBase, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
             correction: float | None = None) -> tuple[Any, Any]:
    """torch.var_mean: ``(x.var(...), x.mean(dim, keepdim))``; the two reductions fuse into one pass."""
    return x.var(dim, unbiased, keepdim, correction=correction), x.mean(dim, keepdim)


def std_mean(x: TensorBase, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
             correction: float | None = None) -> tuple[Any, Any]:
    """torch.std_mean: ``(x.std(...), x.mean(dim, keepdim))``."""
    return x.std(dim, unbiased, keepdim, correction=correction), x.mean(dim, keepdim)


class ReductionMixin(TensorBase):
    """Reductions, scans and the composites built on them."""

    def _reduce(self, op: str, dim: Any, keepdim: bool, dtype: Any) -> Self:
        """Reduction node over sorted non-negative dims; sum/prod of int/bool accumulate in int64
        and ``dtype=`` casts first, as torch."""
        dims = dims_arg(dim, self.ndim, op)
        src = self
        if dtype is not None:
            src = self._cast(dtypes.canonical(dtype))
        elif op in ("sum", "prod") and not dtypes.is_floating(self.dtype):
            src = self._cast("int64")
        if not dims:  # a 0-d tensor: the element itself, which deviates from its mean by nothing
            return self._same(src._name) if op != "m2" else src * 0
        if op in ("amax", "amin") and src.dtype != "bool" and any(self.shape[d] == 0 for d in dims):
            raise ShapeError(f"{op}: cannot reduce over a dimension of size 0 (shape {self.shape}, dims {dims})")
        shape = tuple(1 if d in dims else s for d, s in enumerate(self.shape) if keepdim or d not in dims)
        return self._tracer.emit(op, (src,), shape, src.dtype, dims=dims, keepdim=bool(keepdim))

    def sum(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Self:
        """torch.Tensor.sum over ``dim`` (int, tuple or None for all) with ``keepdim``."""
        return self._reduce("sum", dim, keepdim, dtype)

    def prod(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Self:
        """torch.Tensor.prod over ``dim`` (int, tuple or None for all) with ``keepdim``."""
        return self._reduce("prod", dim, keepdim, dtype)

    def amax(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Self:
        """torch.Tensor.amax over ``dim`` (int, tuple or None for all) with ``keepdim``."""
        return self._reduce("amax", dim, keepdim, dtype)

    def amin(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Self:
        """torch.Tensor.amin over ``dim`` (int, tuple or None for all) with ``keepdim``."""
        return self._reduce("amin", dim, keepdim, dtype)

    def m2(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Self:
        """The sum of squared deviations from the mean over ``dim`` (Welford's m2, one pass)."""
        return self._reduce("m2", dim, keepdim, dtype)

    def any(self, dim: Any = None, keepdim: bool = False) -> Self:
        return self._cast("bool").amax(dim, keepdim)

    def all(self, dim: Any = None, keepdim: bool = False) -> Self:
        return self._cast("bool").amin(dim, keepdim)

    def mean(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Self:
        """``sum / count``; like torch, integer inputs need an explicit floating ``dtype``."""
        src = self._cast(dtypes.canonical(dtype)) if dtype is not None else self
        if not dtypes.is_floating(src.dtype):
            raise UnsupportedError(f"mean(): could not infer output dtype. Input dtype must be a floating point "
                                   f"dtype, got {src.dtype} (use x.float().mean() or mean(dtype='float32'))")
        count = math.prod(src.shape[d] for d in dims_arg(dim, src.ndim, "mean"))
        return src.sum(dim, keepdim) / count

    def var(self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: float | None = None) -> Self:
        """torch.Tensor.var: ``m2 / (count - correction)``, the correction 1 unless ``unbiased=False``
        (0) or given; the m2 reduction computes the squared deviations in one pass (Welford)."""
        if not dtypes.is_floating(self.dtype):
            raise UnsupportedError(f"var(): the input must be float32 or float64, got {self.dtype} (use x.float().var())")
        if unbiased is not None and correction is not None:
            raise UnsupportedError("var(): give either unbiased= or correction=, not both")
        dims = dims_arg(dim, self.ndim, "var")
        count = math.prod(self.shape[d] for d in dims)
        correction = (1 if unbiased is None or unbiased else 0) if correction is None else correction
        return self._reduce("m2", dim, keepdim, None) / max(count - correction, 0)  # over no element: 0 / 0

    def std(self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: float | None = None) -> Self:
        """torch.Tensor.std: the square root of ``var`` with the same arguments."""
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    def norm(self, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Self:
        """torch.Tensor.norm for vector norms: ``p`` 2 (or ``"fro"``), 1, inf, -inf, 0 or any
        number, over ``dim`` (all dims when None)."""
        if p == "fro":
            p = 2
        if isinstance(p, str):
            raise UnsupportedError(f"norm: p={p!r} is not supported; use a number, inf or 'fro' (vector norms only)")
        return vector_norm(self, p, dim, keepdim, dtype=dtype)

    def softmax(self, dim: int, dtype: Any = None) -> Self:
        """``exp(x - amax) / sum``: the numerically stable form torch computes (``dtype=`` casts first)."""
        shifted = self._softmax_input(dim, "softmax", dtype)
        e = shifted.exp()
        return e / e.sum(dim, keepdim=True)

    def log_softmax(self, dim: int, dtype: Any = None) -> Self:
        shifted = self._softmax_input(dim, "log_softmax", dtype)
        return shifted - shifted.exp().sum(dim, keepdim=True).log()

    def _softmax_input(self, dim: int, op: str, dtype: Any) -> Self:
        src = self._cast(dtypes.canonical(dtype)) if dtype is not None else self
        if not dtypes.is_floating(src.dtype):
            raise UnsupportedError(f"{op} on {src.dtype} tensors is not supported (torch rejects it too); cast with .float()")
        return src - src.amax(dim, keepdim=True)

    def logsumexp(self, dim: Any, keepdim: bool = False) -> Self:
        """torch.logsumexp: ``log(sum(exp(x - m))) + m`` with ``m`` the maximum, or 0 where that is
        infinite (as torch, so rows of -inf give -inf and a +inf gives inf); integer inputs
        compute in float32; over no element it is -inf."""
        src = self if dtypes.is_floating(self.dtype) else self._cast("float32")
        dims = dims_arg(dim, src.ndim, "logsumexp")
        if any(src.shape[d] == 0 for d in dims):
            shape = tuple(1 if d in dims else s for d, s in enumerate(src.shape) if keepdim or d not in dims)
            return self._tracer.constant(-math.inf, src.dtype, shape)
        peak = src.amax(dims, keepdim=True)
        shift = where(peak.abs() == math.inf, 0.0, peak)
        total = (src - shift).exp().sum(dims, keepdim=keepdim).log()
        return total + shift.reshape(total.shape)

    # -- scans (spec 7.7) ----------------------------------------------------------------------
    def _scan(self, op: str, dim: Any, dtype: Any) -> Self:
        """Scan node along one dim; int/bool inputs accumulate in int64 and ``dtype=`` casts first,
        as torch's ``cumsum``/``cumprod``."""
        d = wrap_dim(dim, self.ndim, op)
        if dtype is not None:
            src = self._cast(dtypes.canonical(dtype))
        else:
            src = self if dtypes.is_floating(self.dtype) else self._cast("int64")
        if self.ndim == 0:  # one element: the running value is the element
            return self._same(src._name)
        return self._tracer.emit(op, (src,), self.shape, src.dtype, dim=d)

    def cumsum(self, dim: int, *, dtype: Any = None) -> Self:
        """torch.Tensor.cumsum: running sum along ``dim``."""
        return self._scan("cumsum", dim, dtype)

    def cumprod(self, dim: int, *, dtype: Any = None) -> Self:
        """torch.Tensor.cumprod: running product along ``dim``."""
        return self._scan("cumprod", dim, dtype)

    def logcumsumexp(self, dim: int) -> Self:
        """torch.Tensor.logcumsumexp: ``log(cumsum(exp(x)))`` along ``dim``, each step a
        log-add-exp (exact where the running value and the next differ by much)."""
        if not dtypes.is_floating(self.dtype):
            raise UnsupportedError(f"logcumsumexp of a {self.dtype} tensor: torch computes it for floating tensors only; "
                                   "cast first, e.g. x.float().logcumsumexp(dim)")
        return self._scan("logcumsumexp", dim, None)

    # -- extremes and their positions --------------------------------------------------------
    def max(self, dim: Any = None, keepdim: bool = False) -> Self | ValuesIndices:
        """``x.max()`` (all elements), ``x.max(other)`` (elementwise) or ``x.max(dim, keepdim)``:
        the values and the indices of the first maximum (of the first NaN, as torch)."""
        return self._max_min(dim, keepdim, "amax", "maximum")

    def min(self, dim: Any = None, keepdim: bool = False) -> Self | ValuesIndices:
        return self._max_min(dim, keepdim, "amin", "minimum")

    def _max_min(self, dim: Any, keepdim: bool, reduction: str, binary: str) -> Self | ValuesIndices:
        if dim is None:
            return getattr(self, reduction)()
        if isinstance(dim, TensorBase):
            return getattr(self, binary)(dim)
        d = wrap_dim(dim, self.ndim, reduction[1:])
        return ValuesIndices(getattr(self, reduction)(d, keepdim), self._arg_extreme(reduction, d, keepdim))

    def argmax(self, dim: Any = None, keepdim: bool = False) -> Self:
        """The int64 index of the first maximum along ``dim`` (of the flattened tensor when None;
        of the first NaN where there is one, as torch; bool tensors are refused, as torch)."""
        return self._refuse_bool("argmax")._arg_extreme("amax", dim, keepdim)

    def argmin(self, dim: Any = None, keepdim: bool = False) -> Self:
        return self._refuse_bool("argmin")._arg_extreme("amin", dim, keepdim)

    def _refuse_bool(self, op: str) -> Self:
        if self.dtype == "bool":
            raise UnsupportedError(f"{op}() does not support bool input (as torch); cast with .int() first")
        return self

    def _arg_extreme(self, reduction: str, dim: Any, keepdim: bool) -> Self:
        """Two reductions that fuse like softmax's: the extreme along ``dim``, then the least
        position holding it (or NaN, which the extreme then is); positions are a running count
        along the dim, a buffer of its length."""
        name = f"arg{reduction[1:]}"
        if dim is None:
            flat = self.reshape(-1)._arg_extreme(reduction, 0, False)
            return flat.reshape((1,) * self.ndim) if keepdim else flat
        src = self if self.ndim else self.reshape(1)
        d = wrap_dim(dim, src.ndim, name)
        n = src.shape[d]
        if n == 0:
            raise ShapeError(f"{name}: cannot reduce over dimension {dim} of size 0 (shape {self.shape})")
        extreme = getattr(src, reduction)(d, keepdim=True)
        hit = (src == extreme) | (src != src) if dtypes.is_floating(src.dtype) else src == extreme
        positions = self._tracer.constant(1, "int64", (n,)).cumsum(0) - 1
        positions = positions.reshape(tuple(n if k == d else 1 for k in range(src.ndim)))
        index = where(hit, positions, n).amin(d, keepdim=keepdim)
        return index if self.ndim else index.reshape(())
