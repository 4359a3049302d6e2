"""Tensor's in-place methods (``x.add_(y)``, ``x += y``, ``copy_``, ``fill_``) under
functionalization (spec 7.1, renaming): an in-place op rebinds the proxy to a new node, and the
trace's end maps each mutated input to the node holding its final value.  In-place on a view, or
on a tensor whose views are alive, raises (the views would not see the update)."""
from __future__ import annotations

from typing import Any, Self

from stax.errors import ShapeError, UnsupportedError
from stax.frontend.elementwise import can_cast, check_operand, tracer_of
from stax.frontend.shapes import broadcast_shapes
from stax.frontend.tracer import Scalar, TensorBase, expand_to


class InplaceMixin(TensorBase):
    """torch's in-place methods and augmented assignments, each the out-of-place method's value
    assigned to the proxy."""

    def _assign(self, value: TensorBase, op: str, *, any_cast: bool = False) -> Self:
        """Rebind this proxy to ``value`` broadcast to its shape and cast to its dtype (torch's
        in-place rules: the shape cannot change, the result may not go down a dtype category
        except for ``copy_``)."""
        if self._base is not None:
            where_from = f"input {self._base._input}" if self._base._input else "a tensor"
            raise UnsupportedError(f"{op}: in-place update of a view of {where_from} is not supported; compute the "
                                   "full new value out of place and copy_() it into the tensor itself")
        if self._has_views:
            raise UnsupportedError(f"{op}: in-place update of a tensor that has views is not supported (the views "
                                   "would not see the update); update it before taking views, or clone() it")
        if broadcast_shapes(op, [self.shape, value.shape]) != self.shape:
            raise ShapeError(f"{op}: the result of shape {value.shape} does not broadcast to the tensor's shape {self.shape}")
        if not (any_cast or can_cast(value.dtype, self.dtype)):
            raise UnsupportedError(f"{op}: result type {value.dtype} can't be cast to the desired output type "
                                   f"{self.dtype} (as in torch); use an out-of-place op or cast explicitly")
        self._name = expand_to(value._cast(self.dtype), self.shape)._name
        return self

    def copy_(self, src: TensorBase) -> Self:
        if not isinstance(src, TensorBase):
            raise UnsupportedError(f"copy_: src must be a traced tensor, got {type(src).__name__} (use fill_ for scalars)")
        tracer_of((self, src), "copy_")
        return self._assign(src, "copy_", any_cast=True)

    def fill_(self, value: TensorBase | Scalar) -> Self:
        check_operand(value, "fill_")
        if isinstance(value, TensorBase):
            if value.ndim != 0:
                raise UnsupportedError(f"fill_: value must be a scalar or a 0-d tensor, got shape {value.shape}")
            return self._assign(value, "fill_", any_cast=True)
        return self._assign(self._tracer.constant(value, self.dtype, ()), "fill_", any_cast=True)

    def zero_(self) -> Self:
        return self.fill_(0)

    # -- torch's in-place methods ---------------------------------------------------------------
    def add_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`add` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.add(*args, **kwargs), "add_")

    def sub_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`sub` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.sub(*args, **kwargs), "sub_")

    def mul_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`mul` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.mul(*args, **kwargs), "mul_")

    def div_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`div` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.div(*args, **kwargs), "div_")

    def pow_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`pow` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.pow(*args, **kwargs), "pow_")

    def clamp_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`clamp` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.clamp(*args, **kwargs), "clamp_")

    def masked_fill_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`masked_fill` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.masked_fill(*args, **kwargs), "masked_fill_")

    def floor_divide_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`floor_divide` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.floor_divide(*args, **kwargs), "floor_divide_")

    def remainder_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`remainder` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.remainder(*args, **kwargs), "remainder_")

    def maximum_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`maximum` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.maximum(*args, **kwargs), "maximum_")

    def minimum_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`minimum` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.minimum(*args, **kwargs), "minimum_")

    def exp_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`exp` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.exp(*args, **kwargs), "exp_")

    def log_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`log` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.log(*args, **kwargs), "log_")

    def sqrt_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`sqrt` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.sqrt(*args, **kwargs), "sqrt_")

    def rsqrt_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`rsqrt` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.rsqrt(*args, **kwargs), "rsqrt_")

    def reciprocal_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`reciprocal` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.reciprocal(*args, **kwargs), "reciprocal_")

    def sigmoid_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`sigmoid` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.sigmoid(*args, **kwargs), "sigmoid_")

    def tanh_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`tanh` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.tanh(*args, **kwargs), "tanh_")

    def erf_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`erf` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.erf(*args, **kwargs), "erf_")

    def log1p_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`log1p` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.log1p(*args, **kwargs), "log1p_")

    def expm1_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`expm1` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.expm1(*args, **kwargs), "expm1_")

    def sin_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`sin` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.sin(*args, **kwargs), "sin_")

    def cos_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`cos` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.cos(*args, **kwargs), "cos_")

    def abs_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`abs` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.abs(*args, **kwargs), "abs_")

    def neg_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`neg` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.neg(*args, **kwargs), "neg_")

    def relu_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`relu` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.relu(*args, **kwargs), "relu_")

    def bitwise_and_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`bitwise_and` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.bitwise_and(*args, **kwargs), "bitwise_and_")

    def bitwise_or_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`bitwise_or` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.bitwise_or(*args, **kwargs), "bitwise_or_")

    def bitwise_xor_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`bitwise_xor` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.bitwise_xor(*args, **kwargs), "bitwise_xor_")

    def bitwise_not_(self, *args: Any, **kwargs: Any) -> Self:
        """In-place :meth:`bitwise_not` (functionalized: the proxy is rebound to the new value)."""
        return self._assign(self.bitwise_not(*args, **kwargs), "bitwise_not_")

    # -- augmented assignment (x += y) ----------------------------------------------------------
    def __iadd__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.add(*args, **kwargs), "add_")

    def __isub__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.sub(*args, **kwargs), "sub_")

    def __imul__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.mul(*args, **kwargs), "mul_")

    def __itruediv__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.div(*args, **kwargs), "div_")

    def __ifloordiv__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.floor_divide(*args, **kwargs), "floor_divide_")

    def __imod__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.remainder(*args, **kwargs), "remainder_")

    def __ipow__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.pow(*args, **kwargs), "pow_")

    def __iand__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.bitwise_and(*args, **kwargs), "bitwise_and_")

    def __ior__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.bitwise_or(*args, **kwargs), "bitwise_or_")

    def __ixor__(self, *args: Any, **kwargs: Any) -> Self:
        return self._assign(self.bitwise_xor(*args, **kwargs), "bitwise_xor_")
