"""The five dtypes stax supports, torch's type promotion, and their C++ spellings."""
from __future__ import annotations

import numpy as np

from stax.errors import UnsupportedError
from stax.util.suggest import did_you_mean

SUPPORTED = ("float32", "float64", "int32", "int64", "bool")
CPP_TYPE = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t", "bool": "bool"}
ITEMSIZE = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1}
_CATEGORY = {"bool": 0, "int32": 1, "int64": 1, "float32": 2, "float64": 2}


def canonical(dtype) -> str:
    """Name of a supported dtype given as a string, numpy dtype or type; raises otherwise."""
    aliases = {"float": "float32", "double": "float64", "long": "int64", "int": "int32"}
    if isinstance(dtype, str) and dtype in aliases:
        return aliases[dtype]
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in SUPPORTED:
        hint = did_you_mean(dtype, [*SUPPORTED, *aliases]) if isinstance(dtype, str) else ""
        raise UnsupportedError(f"dtype {dtype!r} is not supported; {hint}use one of {', '.join(SUPPORTED)}")
    return name


def nbytes(shape, dtype: str) -> int:
    """Bytes of a contiguous buffer of ``shape`` and ``dtype``."""
    count = 1
    for size in shape:
        count *= size
    return count * ITEMSIZE[dtype]


def is_floating(dtype: str) -> bool:
    return _CATEGORY[dtype] == 2


def is_integer(dtype: str) -> bool:
    return _CATEGORY[dtype] == 1


def promote(a: str, b: str) -> str:
    """Result dtype of a binary op between two tensors (torch.result_type)."""
    if _CATEGORY[a] != _CATEGORY[b]:
        return a if _CATEGORY[a] > _CATEGORY[b] else b
    return a if ITEMSIZE[a] >= ITEMSIZE[b] else b


def scalar_dtype(value) -> str:
    """The category dtype of a Python scalar (bool, int or float)."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int64"
    if isinstance(value, (float, np.floating)):
        return "float64"
    raise UnsupportedError(f"scalar {value!r} of type {type(value).__name__} is not supported; use bool, int or float")


def promote_with_scalar(tensor_dtype: str, value) -> str:
    """torch's rule: a Python scalar only changes the result when it is of a higher category."""
    sd = scalar_dtype(value)
    if _CATEGORY[sd] > _CATEGORY[tensor_dtype]:
        return "float32" if sd == "float64" else "int64"
    return tensor_dtype


def _combine_categories(higher: str | None, lower: str | None) -> str | None:
    """torch's ``combine_categories``: a lower-priority operand only wins with a higher category."""
    if higher is None:
        return lower
    if lower is None or is_floating(higher):
        return higher
    if higher == "bool" or is_floating(lower):
        return promote(higher, lower)
    return higher


def result_type(*operands) -> str:
    """torch.result_type over tensors, given as ``(dtype, ndim)`` pairs, and Python scalars.

    torch ranks operands in three priority tiers: tensors with ``ndim > 0``, zero-dim tensors,
    and Python scalars (a float scalar counts as the default dtype float32, an int as int64). A
    lower tier only changes the result when it is of a higher category (bool < int < float), so
    ``int32[3] + int64[]`` is int32, ``float32[3] + float64[]`` is float32 and ``int32[3] + 2.5``
    is float32.
    """
    tiers: list[str | None] = [None, None, None]
    for op in operands:
        if isinstance(op, tuple):
            dtype, ndim = op
            tier = 0 if ndim > 0 else 1
        else:
            dtype = scalar_dtype(op)
            dtype = "float32" if dtype == "float64" else dtype
            tier = 2
        tiers[tier] = dtype if tiers[tier] is None else promote(tiers[tier], dtype)
    result = _combine_categories(tiers[0], _combine_categories(tiers[1], tiers[2]))
    if result is None:
        raise UnsupportedError("result_type needs at least one operand")
    return result
