"""Random draws: the graph's ``bernoulli`` and ``uniform`` externs (spec 8.5's library calls), the
random bits of dropout and of noise (``rand``, ``randn``) in a training step.

A draw is a function of the program's ``seed`` input, the node's ``stream`` (its number among
the program's random nodes, so that two draws are independent) and each element's position in
the flattened output, as a counter-based generator is: nothing is carried from call to call, and
the element's value is the same whatever the threads, the ISA or the order of the work.  Every
element hashes its position with a key made from the seed and the stream::

    mix(x)  = lowbias32: x ^= x >> 16; x *= 0x21f0aaad; x ^= x >> 15; x *= 0x735a2d97; x ^= x >> 15
    key     = mix(lo(seed) ^ mix(hi(seed) ^ mix(stream + 0x9e3779b9)))
    bits(i) = mix(mix(lo(i) ^ key) + hi(i))                       (32-bit, wrapping)
    mask(i) = (bits(i) >> 8) < threshold,  threshold = round(p * 2**24)
    uniform(i) = (bits(i) >> 8) * 2**-24                          (in [0, 1), exact in float32)

so ``P(mask = 1)`` is ``p`` to 2**-25, exactly 0 at ``p = 0`` and exactly 1 at ``p = 1``.  The
numpy functions :func:`bernoulli_mask` and :func:`uniform_values` compute the same bits (the
reference evaluator's), so a compiled program's draws equal the reference's element for element.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from stax.environment import isa_from_env
from stax.errors import ShapeError
from stax.kernels.libraries import library
from stax.target import Isa

#: the bits of the uniform draw a mask compares with its threshold
RESOLUTION_BITS = 24
_GOLDEN = 0x9E3779B9
#: the output dtype of each entry point
_ENTRIES = {"stax_bernoulli": "bool", "stax_uniform_float32": "float32", "stax_uniform_float64": "float64"}



def threshold(p: float) -> int:
    """The count of the 2**24 uniform draws that give 1: ``round(p * 2**24)``."""
    if not 0.0 <= p <= 1.0:
        raise ShapeError(f"bernoulli: the probability must be in [0, 1], got {p}")
    return round(p * (1 << RESOLUTION_BITS))


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x21F0AAAD)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x735A2D97)
    return x ^ (x >> np.uint32(15))


def _high_bits(seed: int, stream: int, shape: tuple[int, ...]) -> np.ndarray:
    """The 24 high bits of every element's hash (the module docstring), uint32 of ``shape``."""
    s = int(seed) % (1 << 64)
    with np.errstate(over="ignore"):
        u32 = functools.partial(np.array, dtype=np.uint32)
        inner = _mix(u32((s >> 32) & 0xFFFFFFFF) ^ _mix(u32((stream + _GOLDEN) & 0xFFFFFFFF)))
        key = _mix(u32(s & 0xFFFFFFFF) ^ inner)
        position = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64)
        low, high = (position & np.uint64(0xFFFFFFFF)).astype(np.uint32), (position >> np.uint64(32)).astype(np.uint32)
        return (_mix(_mix(low ^ key) + high) >> np.uint32(8)).reshape(shape)


def bernoulli_mask(seed: int, stream: int, shape: tuple[int, ...], p: float) -> np.ndarray:
    """The mask of stream ``stream`` under ``seed``: a bool array of ``shape``, true with
    probability ``p`` (the module docstring's bits, in numpy)."""
    return _high_bits(seed, stream, shape) < threshold(p)


def uniform_values(seed: int, stream: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The uniform draws in [0, 1) of stream ``stream`` under ``seed``, of ``shape`` and ``dtype``."""
    return (_high_bits(seed, stream, shape) * 2.0 ** -RESOLUTION_BITS).astype(dtype)


@functools.cache
def _entry(isa: Isa, name: str) -> ctypes._CFuncPtr:
    entry = getattr(library("random_draws", isa), name)
    entry.restype = None
    entry.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    return entry


@dataclass(frozen=True)
class RandomDraw:
    """A ``bernoulli`` or ``uniform`` extern as a compiled call makes it (codegen/entry.py): ``n``
    elements of stream ``stream`` into an output of ``dtype``; a mask's elements are true when
    their draw is below ``threshold``; the entry point is the one built for ``isa``."""

    n: int
    threshold: int
    stream: int
    dtype: str
    threads: int
    isa: Isa

    @property
    def entry_name(self) -> str:
        return "stax_bernoulli" if self.dtype == "bool" else f"stax_uniform_{self.dtype}"

    def addresses(self) -> tuple[int, ...]:
        return (ctypes.cast(_entry(self.isa, self.entry_name), ctypes.c_void_p).value,)

    def arguments(self) -> tuple[int, ...]:
        return self.n, self.threshold, self.stream, self.threads

    def call_line(self, operands: list[str], out: str) -> str:
        """The compiled call's C++ call of the entry (``entry``) on the seed's address and ``out``."""
        (seed,) = operands
        return f"stax::random_draw(entry, (const int64_t*){seed}, {out}, {', '.join(map(str, self.arguments()))})"


def plan_random_draw(op: str, seed_shape: tuple[int, ...], out_shape: tuple[int, ...], dtype: str, threads: int,
                     isa: Isa, stream: int, p: float | None = None) -> RandomDraw:
    """The plan of a ``bernoulli`` (``p``, a bool output) or ``uniform`` (a float output) node."""
    if tuple(seed_shape) != ():
        raise ShapeError(f"{op}: the seed must be a 0-d int64 tensor, got shape {tuple(seed_shape)}")
    if (dtype == "bool") != (op == "bernoulli") or dtype not in _ENTRIES.values():
        raise ShapeError(f"{op}: a bernoulli mask is bool and a uniform draw float32 or float64, got {dtype}")
    return RandomDraw(int(np.prod(out_shape, dtype=np.int64)), threshold(p) if op == "bernoulli" else 0, stream, dtype,
                      threads, isa)


def _call(op: str, seed: np.ndarray, out: np.ndarray, threads: int, isa: Isa | None, **attrs) -> None:
    """Draw into ``out`` by the kernel built for ``isa`` (None: ``STAX_ISA``, else this CPU's widest level)."""
    if seed.dtype != np.int64 or not out.flags.c_contiguous:
        raise ShapeError(f"{op}: expected a 0-d int64 seed and a C-contiguous output, got {seed.dtype}")
    plan = plan_random_draw(op, seed.shape, out.shape, str(out.dtype), threads, isa or isa_from_env(), **attrs)
    seed = np.ascontiguousarray(seed)
    _entry(plan.isa, plan.entry_name)(seed.ctypes.data, out.ctypes.data, *plan.arguments())


def bernoulli(seed: np.ndarray, *, out: np.ndarray, threads: int, p: float, stream: int,
              isa: Isa | None = None) -> None:
    """``out`` (bool) = the mask of ``stream`` under ``seed`` (a 0-d int64 array): the graph's
    ``bernoulli``."""
    _call("bernoulli", seed, out, threads, isa, p=p, stream=stream)


def uniform(seed: np.ndarray, *, out: np.ndarray, threads: int, stream: int, isa: Isa | None = None) -> None:
    """``out`` (float32 or float64) = the uniform draws of ``stream`` under ``seed``: the graph's
    ``uniform``."""
    _call("uniform", seed, out, threads, isa, stream=stream)
