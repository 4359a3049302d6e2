"""Elementwise ops with torch's broadcasting and type promotion (spec 4.x): every operand is cast
to the op's compute dtype (``torch.result_type``, :func:`stax.dtypes.result_type`) and expanded
to the broadcast shape, so later passes never re-derive torch's rules; a Python scalar becomes a
``constant`` node rounded to the compute dtype, as torch casts a wrapped scalar.  Also
``torch.where`` and ``pow``, whose rules are their own."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from stax import dtypes
from stax.errors import StaxError, UnsupportedError
from stax.frontend.shapes import broadcast_shapes
from stax.frontend.tracer import Scalar, TensorBase, Tracer, expand_to

_SCALAR_TYPES = (bool, int, float, np.bool_, np.integer, np.floating)


def is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALAR_TYPES)


def check_operand(value: Any, op: str) -> None:
    """Refuse an operand that is neither a traced tensor nor a Python (or numpy) scalar."""
    if isinstance(value, TensorBase) or is_scalar(value):
        return
    if isinstance(value, np.ndarray):
        raise UnsupportedError(f"{op}: numpy arrays inside a traced function are not supported; "
                               "pass the array as an input of trace()/compile()")
    raise UnsupportedError(f"{op}: operand {value!r} of type {type(value).__name__} is not supported; "
                           "use a traced Tensor or a Python bool/int/float")


def tracer_of(operands: Sequence[Any], op: str) -> Tracer:
    """The one trace the tensors among ``operands`` belong to."""
    tracers = {id(o._tracer): o._tracer for o in operands if isinstance(o, TensorBase)}
    if len(tracers) != 1:
        raise StaxError(f"{op}: tensors from different traces cannot be combined")
    return next(iter(tracers.values()))


def type_operand(value: TensorBase | Scalar) -> tuple[str, int] | Scalar:
    """What :func:`stax.dtypes.result_type` takes for an operand: a tensor's (dtype, ndim), a scalar itself."""
    return (value.dtype, value.ndim) if isinstance(value, TensorBase) else value


def lift(tracer: Tracer, value: TensorBase | Scalar, dtype: str, shape: tuple[int, ...]) -> Any:
    """An operand cast to ``dtype`` and broadcast to ``shape``."""
    if isinstance(value, TensorBase):
        return expand_to(value._cast(dtype), shape)
    return tracer.constant(value, dtype, shape)


_BOOL_HINT = "cast with .int() first, or use ~ / logical_not() to invert a mask"


def _rule_same(op: str, common: str) -> tuple[str, str]:
    return common, common


def _rule_no_bool(op: str, common: str) -> tuple[str, str]:
    if common == "bool":
        raise UnsupportedError(f"{op} on bool tensors is not supported (torch rejects it too); {_BOOL_HINT}")
    return common, common


def _rule_float(op: str, common: str) -> tuple[str, str]:
    """Floating ops on integer/bool operands compute in the default dtype float32, as torch."""
    dtype = common if dtypes.is_floating(common) else "float32"
    return dtype, dtype


def _rule_compare(op: str, common: str) -> tuple[str, str]:
    return common, "bool"


def _rule_logical(op: str, common: str) -> tuple[str, str]:
    return "bool", "bool"


def _rule_integral(op: str, common: str) -> tuple[str, str]:
    if dtypes.is_floating(common):
        raise UnsupportedError(f"{op} on {common} operands is not supported (torch rejects it too); bitwise ops "
                               "take integer or bool tensors")
    return common, common


#: dtype rule -> (op, common dtype) -> (compute dtype, result dtype)
_RULES: dict[str, Callable[[str, str], tuple[str, str]]] = {
    "same": _rule_same, "no_bool": _rule_no_bool, "float": _rule_float, "compare": _rule_compare,
    "logical": _rule_logical, "integral": _rule_integral,
}


def elementwise(name: str, op: str, operands: Sequence[TensorBase | Scalar], rule: str) -> Any:
    """Record elementwise ``op`` with torch's broadcasting and type promotion; ``name`` is the
    user-facing method for error messages, ``rule`` picks the compute and result dtypes."""
    for o in operands:
        check_operand(o, name)
    tracer = tracer_of(operands, name)
    shape = broadcast_shapes(name, [o.shape for o in operands if isinstance(o, TensorBase)])
    compute, out = _RULES[rule](name, dtypes.result_type(*map(type_operand, operands)))
    return tracer.emit(op, [lift(tracer, o, compute, shape) for o in operands], shape, out)


def bitwise(name: str, kind: str, operands: Sequence[TensorBase | Scalar]) -> Any:
    """``&``, ``|``, ``^``, ``~`` (``kind`` and, or, xor, not): the logical op on bool operands,
    the bitwise op on integers, refused on floats (as torch)."""
    for o in operands:
        check_operand(o, name)
    common = dtypes.result_type(*map(type_operand, operands))
    return elementwise(name, f"{'logical' if common == 'bool' else 'bitwise'}_{kind}", operands, "integral")


def power(base: TensorBase | Scalar, exponent: TensorBase | Scalar) -> Any:
    """``base ** exponent`` with torch's rules: an integer result to a negative tensor exponent is
    0 except for bases 1 and -1, a negative Python int exponent of an integer tensor raises, and
    two bool operands are refused."""
    for o in (base, exponent):
        check_operand(o, "pow")
    common = dtypes.result_type(type_operand(base), type_operand(exponent))
    if common == "bool":
        raise UnsupportedError("pow of two bool operands is not supported (torch rejects it too); cast with .int() first")
    if dtypes.is_integer(common) and is_scalar(exponent) and exponent < 0:
        raise UnsupportedError(f"pow: integers to negative integer powers are not allowed (got {base!r} ** {exponent!r}, "
                               "as in torch); cast to float first")
    return elementwise("pow", "pow", (base, exponent), "same")


def where(cond: TensorBase, a: TensorBase | Scalar, b: TensorBase | Scalar) -> Any:
    """``torch.where(cond, a, b)``: ``cond`` must be a bool tensor; ``a`` and ``b`` are promoted
    with ``torch.result_type`` (two Python floats give float32) and all three broadcast."""
    if not isinstance(cond, TensorBase):
        raise UnsupportedError(f"where: the condition must be a traced bool tensor, got {type(cond).__name__}")
    if cond.dtype != "bool":
        raise UnsupportedError(f"where: the condition must be a bool tensor, got {cond.dtype} (compare it, e.g. x > 0)")
    for o in (a, b):
        check_operand(o, "where")
    tracer = tracer_of((cond, a, b), "where")
    shape = broadcast_shapes("where", [o.shape for o in (cond, a, b) if isinstance(o, TensorBase)])
    dtype = dtypes.result_type(type_operand(a), type_operand(b))
    args = [expand_to(cond, shape), lift(tracer, a, dtype, shape), lift(tracer, b, dtype, shape)]
    return tracer.emit("where", args, shape, dtype)


def can_cast(src: str, dst: str) -> bool:
    """torch.can_cast: in-place results may not go down a category (float -> int, int -> bool)."""
    def category(d: str) -> int:
        return 0 if d == "bool" else 1 if dtypes.is_integer(d) else 2
    return category(src) <= category(dst)
