"""The proxy tensor of tracing: :class:`Tensor` follows ``torch.Tensor``'s method names and
semantics and records each op as a node of a :class:`~stax.ir.graph.Graph` (spec 4.x, 6.3).

It is built from mixins, one concern each, that never import it (the way tinygrad builds its
``Tensor``): they build nodes through the primitives of :mod:`stax.frontend.tracer` and
:mod:`stax.frontend.elementwise`, so the modules below can be imported by this one and not the
reverse.  :func:`stax.frontend.tracing.trace` runs a function on them.
"""
from __future__ import annotations

from typing import Any, NoReturn

from stax.errors import UnsupportedError
from stax.frontend import numpy_calls
from stax.frontend.arithmetic import ArithmeticMixin
from stax.frontend.composites import CompositeMixin
from stax.frontend.inplace import InplaceMixin
from stax.frontend.linalg import MatmulMixin
from stax.frontend.operators import OperatorMixin
from stax.frontend.reductions import ReductionMixin
from stax.frontend.views import ViewMixin


def _needs_value(name: str) -> NoReturn:
    raise UnsupportedError(f"Tensor.{name} needs the tensor's value, which is unknown while tracing "
                           "(data-dependent control flow is not supported); use where() instead of if/else")


class Tensor(CompositeMixin, InplaceMixin, MatmulMixin, ViewMixin, ReductionMixin, OperatorMixin, ArithmeticMixin):
    """A traced tensor. Methods and operators follow ``torch.Tensor``; ``dtype`` is a string."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):  # a numpy scalar on the left, or np.exp(x)
        return numpy_calls.reflected_operator(Tensor, ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):  # np.sum(x), np.where(...): refused with a hint
        return numpy_calls.refuse_function(Tensor, func, kwargs)

    # -- what needs the value, unknown while tracing ----------------------------------------------
    def __bool__(self, *args: Any) -> NoReturn:
        _needs_value("__bool__")

    def __int__(self, *args: Any) -> NoReturn:
        _needs_value("__int__")

    def __float__(self, *args: Any) -> NoReturn:
        _needs_value("__float__")

    def __index__(self, *args: Any) -> NoReturn:
        _needs_value("__index__")

    def item(self, *args: Any) -> NoReturn:
        _needs_value("item")

    def tolist(self, *args: Any) -> NoReturn:
        _needs_value("tolist")

    def numpy(self, *args: Any) -> NoReturn:
        _needs_value("numpy")
