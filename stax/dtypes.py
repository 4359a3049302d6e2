"""The five dtypes stax supports, torch's type promotion, and their C++ spellings."""
from __future__ import annotations

import numpy as np

from .errors import UnsupportedError

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
        raise UnsupportedError(f"dtype {dtype!r} is not supported; use one of {', '.join(SUPPORTED)}")
    return name


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
