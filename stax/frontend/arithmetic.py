"""Tensor's named elementwise methods (``x.exp()``, ``x.mul(y)``, ``x.clamp(0, 1)``, casts),
following ``torch.Tensor``'s names and semantics; each records one node through
:func:`~stax.frontend.elementwise.elementwise` (spec 4.x), so the mixin never imports ``Tensor``."""
from __future__ import annotations

from typing import Any, Self

from stax import dtypes
from stax.errors import UnsupportedError
from stax.frontend.elementwise import bitwise, check_operand, elementwise, lift, power, tracer_of, type_operand, where
from stax.frontend.shapes import broadcast_shapes
from stax.frontend.tracer import Scalar, TensorBase, expand_to


def _scaled(other: TensorBase | Scalar, alpha: Scalar) -> TensorBase | Scalar:
    """``other * alpha`` for torch's ``add(other, alpha=...)``."""
    check_operand(other, "add")
    return other if alpha == 1 else other * alpha


class ArithmeticMixin(TensorBase):
    """The elementwise methods of ``torch.Tensor`` with their own names (the operators are
    :class:`~stax.frontend.operators.OperatorMixin`'s)."""

    def to(self, dtype: Any, *, copy: bool = False) -> Self:
        """``x.to(dtype)`` or ``x.to(other)``; returns ``self`` when nothing changes, as torch."""
        target = dtype.dtype if isinstance(dtype, TensorBase) else dtypes.canonical(dtype)
        result = self._cast(target)
        return self._same(result._name) if copy and result is self else result

    def type_as(self, other: TensorBase) -> Self:
        return self.to(other)

    def pow(self, exponent: TensorBase | Scalar) -> Self:
        return power(self, exponent)

    def square(self) -> Self:
        """torch.square is ``pow(x, 2)`` (so a bool tensor gives int64)."""
        return power(self, 2)

    def clamp(self, min: TensorBase | Scalar | None = None, max: TensorBase | Scalar | None = None) -> Self:
        """``torch.clamp``: ``minimum(maximum(x, min), max)`` in ``result_type(x, min, max)``, so
        NaN propagates and ``min > max`` gives ``max``, as torch."""
        bounds = [b for b in (min, max) if b is not None]
        if not bounds:
            raise UnsupportedError("clamp: at least one of min and max must not be None")
        for b in bounds:
            check_operand(b, "clamp")
        result = self._cast(dtypes.result_type(*map(type_operand, (self, *bounds))))
        if min is not None:
            result = elementwise("clamp", "maximum", (result, min), "same")
        if max is not None:
            result = elementwise("clamp", "minimum", (result, max), "same")
        return result

    clip = clamp

    def clamp_min(self, min: TensorBase | Scalar) -> Self:
        return self.clamp(min=min)

    def clamp_max(self, max: TensorBase | Scalar) -> Self:
        return self.clamp(max=max)

    def sign(self) -> Self:
        """1, 0 or -1 (0 at NaN, as torch's on the CPU); a bool is its own sign."""
        return self if self.dtype == "bool" else (self > 0).to(self.dtype) - (self < 0).to(self.dtype)

    def where(self, condition: TensorBase, other: TensorBase | Scalar) -> Self:
        """``x.where(cond, y)`` is ``torch.where(cond, x, y)``."""
        return where(condition, self, other)

    def masked_fill(self, mask: TensorBase, value: TensorBase | Scalar) -> Self:
        """``value`` where ``mask``; the result keeps ``self``'s shape and dtype, as torch."""
        if not isinstance(mask, TensorBase) or mask.dtype != "bool":
            raise UnsupportedError("masked_fill: the mask must be a bool tensor")
        check_operand(value, "masked_fill")
        if isinstance(value, TensorBase) and value.ndim != 0:
            raise UnsupportedError(f"masked_fill: value must be a scalar or a 0-d tensor, got shape {value.shape}")
        tracer = tracer_of((self, mask, value), "masked_fill")
        shape = broadcast_shapes("masked_fill", [self.shape, mask.shape])  # may be wider than self, as torch
        args = [expand_to(mask, shape), lift(tracer, value, self.dtype, shape), expand_to(self, shape)]
        return tracer.emit("where", args, shape, self.dtype)

    def add(self, other: TensorBase | Scalar, *, alpha: Scalar = 1) -> Self:
        return elementwise("add", "add", (self, _scaled(other, alpha)), "same")

    def sub(self, other: TensorBase | Scalar, *, alpha: Scalar = 1) -> Self:
        return elementwise("sub", "sub", (self, _scaled(other, alpha)), "no_bool")

    def div(self, other: TensorBase | Scalar, *, rounding_mode: str | None = None) -> Self:
        """True division; ``rounding_mode="floor"`` is ``//``, ``"trunc"`` rounds the quotient
        toward zero (both keep integer dtypes, as torch)."""
        if rounding_mode == "floor":
            return self.floor_divide(other)
        if rounding_mode == "trunc":
            return elementwise("div", "truncdiv", (self, other), "no_bool")
        if rounding_mode is not None:
            raise UnsupportedError(f"div: rounding_mode={rounding_mode!r} is not supported; use None, 'trunc' or 'floor'")
        return elementwise("div", "div", (self, other), "float")

    # -- unary: torch.Tensor's methods of the same names ---------------------------------------
    def exp(self) -> Self:
        """torch.Tensor.exp (elementwise ``exp``)."""
        return elementwise("exp", "exp", (self,), "float")

    def log(self) -> Self:
        """torch.Tensor.log (elementwise ``log``)."""
        return elementwise("log", "log", (self,), "float")

    def sqrt(self) -> Self:
        """torch.Tensor.sqrt (elementwise ``sqrt``)."""
        return elementwise("sqrt", "sqrt", (self,), "float")

    def rsqrt(self) -> Self:
        """torch.Tensor.rsqrt (elementwise ``rsqrt``)."""
        return elementwise("rsqrt", "rsqrt", (self,), "float")

    def reciprocal(self) -> Self:
        """torch.Tensor.reciprocal (elementwise ``reciprocal``)."""
        return elementwise("reciprocal", "reciprocal", (self,), "float")

    def sigmoid(self) -> Self:
        """torch.Tensor.sigmoid (elementwise ``sigmoid``)."""
        return elementwise("sigmoid", "sigmoid", (self,), "float")

    def tanh(self) -> Self:
        """torch.Tensor.tanh (elementwise ``tanh``)."""
        return elementwise("tanh", "tanh", (self,), "float")

    def erf(self) -> Self:
        """torch.Tensor.erf (elementwise ``erf``)."""
        return elementwise("erf", "erf", (self,), "float")

    def log1p(self) -> Self:
        """torch.Tensor.log1p (elementwise ``log1p``)."""
        return elementwise("log1p", "log1p", (self,), "float")

    def expm1(self) -> Self:
        """torch.Tensor.expm1 (elementwise ``expm1``)."""
        return elementwise("expm1", "expm1", (self,), "float")

    def sin(self) -> Self:
        """torch.Tensor.sin (elementwise ``sin``)."""
        return elementwise("sin", "sin", (self,), "float")

    def cos(self) -> Self:
        """torch.Tensor.cos (elementwise ``cos``)."""
        return elementwise("cos", "cos", (self,), "float")

    def abs(self) -> Self:
        """torch.Tensor.abs (elementwise ``abs``)."""
        return elementwise("abs", "abs", (self,), "no_bool")

    def neg(self) -> Self:
        """torch.Tensor.neg (elementwise ``neg``)."""
        return elementwise("neg", "neg", (self,), "no_bool")

    def negative(self) -> Self:
        """torch.Tensor.negative (elementwise ``neg``)."""
        return elementwise("negative", "neg", (self,), "no_bool")

    def relu(self) -> Self:
        """torch.Tensor.relu (elementwise ``relu``)."""
        return elementwise("relu", "relu", (self,), "no_bool")

    def logical_not(self) -> Self:
        """torch.Tensor.logical_not (elementwise ``logical_not``)."""
        return elementwise("logical_not", "logical_not", (self,), "logical")

    # -- binary ---------------------------------------------------------------------------------
    def subtract(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.subtract (elementwise ``sub``)."""
        return elementwise("subtract", "sub", (self, other), "no_bool")

    def mul(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.mul (elementwise ``mul``)."""
        return elementwise("mul", "mul", (self, other), "same")

    def multiply(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.multiply (elementwise ``mul``)."""
        return elementwise("multiply", "mul", (self, other), "same")

    def divide(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.divide (elementwise ``div``)."""
        return elementwise("divide", "div", (self, other), "float")

    def true_divide(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.true_divide (elementwise ``div``)."""
        return elementwise("true_divide", "div", (self, other), "float")

    def floor_divide(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.floor_divide (elementwise ``floordiv``)."""
        return elementwise("floor_divide", "floordiv", (self, other), "no_bool")

    def remainder(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.remainder (elementwise ``mod``)."""
        return elementwise("remainder", "mod", (self, other), "no_bool")

    def maximum(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.maximum (elementwise ``maximum``)."""
        return elementwise("maximum", "maximum", (self, other), "same")

    def minimum(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.minimum (elementwise ``minimum``)."""
        return elementwise("minimum", "minimum", (self, other), "same")

    def eq(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.eq (elementwise ``eq``)."""
        return elementwise("eq", "eq", (self, other), "compare")

    def ne(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.ne (elementwise ``ne``)."""
        return elementwise("ne", "ne", (self, other), "compare")

    def lt(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.lt (elementwise ``lt``)."""
        return elementwise("lt", "lt", (self, other), "compare")

    def le(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.le (elementwise ``le``)."""
        return elementwise("le", "le", (self, other), "compare")

    def gt(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.gt (elementwise ``gt``)."""
        return elementwise("gt", "gt", (self, other), "compare")

    def ge(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.ge (elementwise ``ge``)."""
        return elementwise("ge", "ge", (self, other), "compare")

    def logical_and(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.logical_and (elementwise ``logical_and``)."""
        return elementwise("logical_and", "logical_and", (self, other), "logical")

    def logical_or(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.logical_or (elementwise ``logical_or``)."""
        return elementwise("logical_or", "logical_or", (self, other), "logical")

    def logical_xor(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.logical_xor (elementwise ``logical_xor``)."""
        return elementwise("logical_xor", "logical_xor", (self, other), "logical")

    # -- bitwise: logical on bool tensors, bitwise on integers -----------------------------------
    def bitwise_and(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.bitwise_and: logical on bool tensors, bitwise on integers."""
        return bitwise("bitwise_and", "and", (self, other))

    def bitwise_or(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.bitwise_or: logical on bool tensors, bitwise on integers."""
        return bitwise("bitwise_or", "or", (self, other))

    def bitwise_xor(self, other: TensorBase | Scalar) -> Self:
        """torch.Tensor.bitwise_xor: logical on bool tensors, bitwise on integers."""
        return bitwise("bitwise_xor", "xor", (self, other))

    def bitwise_not(self) -> Self:
        """torch.Tensor.bitwise_not: logical on bool tensors, bitwise on integers."""
        return bitwise("bitwise_not", "not", (self,))

    # -- casts (last in the body: their names are builtins') -----------------------------------
    def float(self) -> Self:
        """Cast to float32 (returns ``self`` if it already is, as torch)."""
        return self._cast("float32")

    def double(self) -> Self:
        """Cast to float64 (returns ``self`` if it already is, as torch)."""
        return self._cast("float64")

    def int(self) -> Self:
        """Cast to int32 (returns ``self`` if it already is, as torch)."""
        return self._cast("int32")

    def long(self) -> Self:
        """Cast to int64 (returns ``self`` if it already is, as torch)."""
        return self._cast("int64")

    def bool(self) -> Self:
        """Cast to bool (returns ``self`` if it already is, as torch)."""
        return self._cast("bool")
