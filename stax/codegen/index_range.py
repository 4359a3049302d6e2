"""The kernels index with 64-bit signed integers (``int64_t``: loop variables, linear indices,
strides, spec 8.2's address arithmetic), so every buffer's element count, every input's reach
through its strides and every kernel's iteration count must stay below 2^63; ``check_index_range``
refuses a program that does not, before any C++ is made, rather than let its indices wrap."""
from __future__ import annotations

from math import prod

from stax.errors import UnsupportedError
from stax.ir.loops import ComputedBuffer, LoweredProgram

INDEX_LIMIT = 2 ** 63  # int64_t holds 0 .. 2^63 - 1


def check_index_range(program: LoweredProgram) -> None:
    """Raise UnsupportedError naming the first buffer whose elements, reach or loop points do not fit."""
    for buf in program.inputs:
        reach = sum((n - 1) * abs(s) for n, s in zip(buf.shape, buf.strides)) + 1 if prod(buf.shape) else 0
        _fits(f"input {buf.position} ({buf.name})", buf.shape, prod(buf.shape), "elements")
        _fits(f"input {buf.position} ({buf.name})", buf.shape, reach, "elements of storage its strides reach")
    for buf in program.buffers:
        _fits(f"buffer {buf.name}", buf.shape, prod(buf.shape), "elements")
        if isinstance(buf, ComputedBuffer):
            _fits(f"buffer {buf.name}", buf.shape, prod(buf.ranges) * prod(buf.reduction_ranges), "loop points")


def _fits(what: str, shape: tuple[int, ...], count: int, of: str) -> None:
    if count >= INDEX_LIMIT:
        raise UnsupportedError(f"{what} of shape {tuple(shape)} has {count} {of}, past the 2^63 - 1 that the "
                               "kernels' 64-bit index arithmetic reaches; split the computation into smaller tensors")
