"""numpy called on a traced tensor: numpy's operators with a numpy scalar on the left go to the
tensor's reflected operator; any other numpy function is refused in one line naming the tensor
method (or stax function) to use instead, e.g. ``np.exp(x)``: "use the tensor method: x.exp()".
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stax.errors import UnsupportedError
from stax.util.suggest import closest

#: ufuncs numpy calls for an operator whose left operand is a numpy value, and the right
#: operand's method that computes the same (``2 < x`` is ``x > 2``)
REFLECTED = {"add": "__radd__", "subtract": "__rsub__", "multiply": "__rmul__", "true_divide": "__rtruediv__",
             "divide": "__rtruediv__", "floor_divide": "__rfloordiv__", "remainder": "__rmod__",
             "power": "__rpow__", "matmul": "__rmatmul__", "bitwise_and": "__rand__", "bitwise_or": "__ror__",
             "bitwise_xor": "__rxor__",
             "less": "__gt__", "less_equal": "__ge__", "greater": "__lt__", "greater_equal": "__le__",
             "equal": "__eq__", "not_equal": "__ne__"}

#: numpy names whose tensor method is spelled otherwise
METHOD = {"absolute": "abs", "negative": "neg", "power": "pow", "true_divide": "div", "divide": "div",
          "subtract": "sub", "multiply": "mul", "equal": "eq", "not_equal": "ne", "less": "lt", "greater": "gt",
          "less_equal": "le", "greater_equal": "ge", "max": "amax", "min": "amin", "clip": "clamp"}

#: numpy functions whose stax counterpart is a function, not a method
FUNCTION = {"where": "stax.where(cond, a, b)", "concatenate": "stax.frontend.ops.nn.cat([a, b], dim)",
            "pad": "stax.frontend.ops.nn.pad(x, (low, high))"}


def reflected_operator(tensor_type: type, ufunc: Any, method: str, inputs: tuple, kwargs: dict) -> Any:
    """``__array_ufunc__`` of the traced tensor type."""
    name = ufunc.__name__
    if method == "__call__" and not kwargs and len(inputs) == 2 and name in REFLECTED \
            and not isinstance(inputs[0], tensor_type) and isinstance(inputs[1], tensor_type):
        left = inputs[0]  # numpy hands a scalar over as a 0-d array
        return getattr(inputs[1], REFLECTED[name])(left[()] if isinstance(left, np.ndarray) and not left.ndim else left)
    raise UnsupportedError(f"np.{name} on a traced tensor: {replacement(tensor_type, name, ufunc.nin)}")


def refuse_function(tensor_type: type, func: Any, kwargs: dict | None = None) -> Any:
    """``__array_function__`` of the traced tensor type: every numpy function is refused (with
    torch's spelling of numpy's ``axis=`` when it was given)."""
    name = func.__name__
    axis = "; numpy's axis= is the method's dim=" if kwargs and "axis" in kwargs else ""
    raise UnsupportedError(f"np.{name} on a traced tensor: {replacement(tensor_type, name, 1)}{axis}")


def replacement(tensor_type: type, name: str, arity: int) -> str:
    """What to write instead of numpy's ``name`` inside a traced function."""
    if name in FUNCTION:
        return f"use {FUNCTION[name]}"
    method = METHOD.get(name, name)
    if hasattr(tensor_type, method) and not method.startswith("_"):
        return f"use the tensor method: x.{method}({'y' if arity > 1 else ''})"
    methods = [n for n in dir(tensor_type) if not n.startswith("_")]
    near = closest(name, methods)
    return (f"stax has no {name}; " + (f"the closest tensor methods are {', '.join(near)}" if near else
                                       "write it with tensor methods (see the methods of stax.Tensor)"))
