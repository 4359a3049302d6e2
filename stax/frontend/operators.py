"""Tensor's Python operators (``x + 1``, ``2 * x``, ``x < y``, ``m & k``, ``-x``, ``abs(x)``) with
torch's broadcasting and type promotion (spec 4.x); the reflected form takes a scalar on the
left.  The in-place ones (``x += y``) are :class:`~stax.frontend.inplace.InplaceMixin`'s."""
from __future__ import annotations

from typing import Self

from stax.frontend.elementwise import bitwise, elementwise, power
from stax.frontend.tracer import Scalar, TensorBase


class OperatorMixin(TensorBase):
    """The arithmetic, comparison and bitwise operators; comparisons return tensors, as in torch."""

    __hash__ = object.__hash__  # defining __eq__ would otherwise make tensors unhashable

    def __add__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("+", "add", (self, other), "same")

    def __radd__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("+", "add", (other, self), "same")

    def __sub__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("-", "sub", (self, other), "no_bool")

    def __rsub__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("-", "sub", (other, self), "no_bool")

    def __mul__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("*", "mul", (self, other), "same")

    def __rmul__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("*", "mul", (other, self), "same")

    def __truediv__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("/", "div", (self, other), "float")

    def __rtruediv__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("/", "div", (other, self), "float")

    def __floordiv__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("//", "floordiv", (self, other), "no_bool")

    def __rfloordiv__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("//", "floordiv", (other, self), "no_bool")

    def __mod__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("%", "mod", (self, other), "no_bool")

    def __rmod__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("%", "mod", (other, self), "no_bool")

    # -- comparisons: bool tensors ----------------------------------------------------------------
    def __lt__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("lt", "lt", (self, other), "compare")

    def __le__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("le", "le", (self, other), "compare")

    def __gt__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("gt", "gt", (self, other), "compare")

    def __ge__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("ge", "ge", (self, other), "compare")

    def __eq__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("eq", "eq", (self, other), "compare")

    def __ne__(self, other: TensorBase | Scalar) -> Self:
        return elementwise("ne", "ne", (self, other), "compare")

    # -- bitwise: logical on bool tensors, bitwise on integers -----------------------------------
    def __and__(self, other: TensorBase | Scalar) -> Self:
        return bitwise("&", "and", (self, other))

    def __rand__(self, other: TensorBase | Scalar) -> Self:
        return bitwise("&", "and", (other, self))

    def __or__(self, other: TensorBase | Scalar) -> Self:
        return bitwise("|", "or", (self, other))

    def __ror__(self, other: TensorBase | Scalar) -> Self:
        return bitwise("|", "or", (other, self))

    def __xor__(self, other: TensorBase | Scalar) -> Self:
        return bitwise("^", "xor", (self, other))

    def __rxor__(self, other: TensorBase | Scalar) -> Self:
        return bitwise("^", "xor", (other, self))

    def __invert__(self) -> Self:
        return bitwise("~", "not", (self,))

    # -- unary and power ---------------------------------------------------------------------
    def __neg__(self) -> Self:
        return elementwise("negation (-x)", "neg", (self,), "no_bool")

    def __abs__(self) -> Self:
        return elementwise("abs", "abs", (self,), "no_bool")

    def __pow__(self, exponent: TensorBase | Scalar) -> Self:
        return power(self, exponent)

    def __rpow__(self, base: Scalar) -> Self:
        return power(base, self)
