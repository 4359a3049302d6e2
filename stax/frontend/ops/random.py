"""Random tensors drawn from a seed input of the program (``stax.kernels.random_draws``):
``bernoulli`` masks, ``rand`` and ``randn``.  Each call draws its own stream (unless given one),
so two draws of one seed are independent; the same seed gives the same values on every call,
thread count and ISA."""
from __future__ import annotations

import math
from typing import Any, Sequence

from stax import dtypes
from stax.errors import UnsupportedError
from stax.frontend.shapes import as_int
from stax.frontend.tensor import Tensor
from stax.ir.graph import RANDOM_OPS


def _random(op: str, seed: Tensor, shape: Sequence[int], dtype: str, stream: int | None, **attrs: Any) -> Tensor:
    """A ``RANDOM_OPS`` node drawn from ``seed`` as stream ``stream`` (default: the next unused)."""
    if not isinstance(seed, Tensor) or seed.dtype != "int64" or seed.shape != ():
        raise UnsupportedError(f"{op}: the seed must be a traced 0-d int64 tensor (an input of the program, "
                               f"e.g. np.array(0)), got {seed!r}")
    shape = tuple(as_int(s, f"{op}'s shape") for s in shape)
    nodes = seed._tracer.graph.nodes.values()
    if stream is None:
        stream = 1 + max((node.attr("stream") for node in nodes if node.op in RANDOM_OPS), default=-1)
    return seed._tracer.emit(op, (seed,), shape, dtype, stream=as_int(stream, f"{op}'s stream"), **attrs)


def bernoulli(seed: Tensor, shape: Sequence[int], p: float, *, stream: int | None = None) -> Tensor:
    """A bool tensor of ``shape``, each element true with probability ``p``: a random mask drawn
    from ``seed``, a 0-d int64 input of the program (``stax.kernels.random_draws``).  Each call in a program
    draws its own stream (unless given one), so two masks of one seed are independent; the same
    seed gives the same masks on every call, thread count and ISA."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise UnsupportedError(f"bernoulli: the probability must be a Python number in [0, 1], got {p!r}")
    return _random("bernoulli", seed, shape, "bool", stream, p=float(p))


def rand(seed: Tensor, shape: Sequence[int], dtype: str = "float32", *, stream: int | None = None) -> Tensor:
    """torch.rand from ``seed`` (as :func:`bernoulli`): uniform in [0, 1), multiples of 2**-24."""
    dtype = dtypes.canonical(dtype)
    if not dtypes.is_floating(dtype):
        raise UnsupportedError(f"rand: expected a floating-point dtype, got {dtype}")
    return _random("uniform", seed, shape, dtype, stream)


def randn(seed: Tensor, shape: Sequence[int], dtype: str = "float32", *, stream: int | None = None) -> Tensor:
    """torch.randn from ``seed`` (as :func:`bernoulli`): standard normal by the Box-Muller
    transform of two uniforms of one stream (``sqrt(-2 log(1 - u)) cos(2 pi v)``, within 5.8
    standard deviations)."""
    shape = tuple(shape)
    u = rand(seed, (2, *shape), dtype, stream=stream)
    first, second = u[0], u[1]
    return (-2.0 * (-first).log1p()).sqrt() * (second * (2 * math.pi)).cos()
