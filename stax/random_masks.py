"""Random masks: the graph's ``bernoulli`` extern (seed 8.5's library calls), the random bits of
dropout in a training step.

A mask is a function of the program's ``seed`` input, the node's ``stream`` (its number among
the program's random nodes, so that two dropouts draw apart) and each element's position in the
flattened output, as a counter-based generator is: nothing is carried from call to call, and
the element's value is the same whatever the threads, the ISA or the order of the work.  Every
element hashes its position with a key made from the seed and the stream::

    mix(x)  = lowbias32: x ^= x >> 16; x *= 0x21f0aaad; x ^= x >> 15; x *= 0x735a2d97; x ^= x >> 15
    key     = mix(lo(seed) ^ mix(hi(seed) ^ mix(stream + 0x9e3779b9)))
    bits(i) = mix(mix(lo(i) ^ key) + hi(i))                       (32-bit, wrapping)
    mask(i) = (bits(i) >> 8) < threshold,  threshold = round(p * 2**24)

so ``P(mask = 1)`` is ``p`` to 2**-25, exactly 0 at ``p = 0`` and exactly 1 at ``p = 1``.  The
numpy function :func:`bernoulli_mask` computes the same bits (the reference evaluator's), so a
compiled program's masks equal the reference's element for element.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from .errors import ShapeError
from .runtime import Isa, build, load, native_isa

#: the bits of the uniform draw a mask compares with its threshold
RESOLUTION_BITS = 24
_GOLDEN = 0x9E3779B9

_SOURCE = r"""
#include <algorithm>
#include <cstdint>

static inline uint32_t mix(uint32_t x) {
  x ^= x >> 16; x *= 0x21f0aaadu; x ^= x >> 15; x *= 0x735a2d97u; x ^= x >> 15;
  return x;
}

// out[i] = whether element i of stream `stream` under `*seed` falls below `threshold` (stax.random_masks)
extern "C" void stax_bernoulli(const int64_t* seed, int8_t* out, int64_t n, int64_t threshold, int64_t stream,
                               int threads) {
  const uint64_t s = static_cast<uint64_t>(*seed);
  const uint32_t key = mix(static_cast<uint32_t>(s) ^
                           mix(static_cast<uint32_t>(s >> 32) ^ mix(static_cast<uint32_t>(stream) + 0x9e3779b9u)));
  const uint32_t below = static_cast<uint32_t>(threshold);
  // a few tasks a thread, so that the caller takes over those of a thread whose core is busy
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(n / 16384, 4 * threads));
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t task = 0; task < tasks; ++task)
    // in runs that keep hi(i): 32-bit lanes throughout
    for (int64_t i = n * task / tasks, end = n * (task + 1) / tasks, stop; i < end; i = stop) {
      stop = std::min<int64_t>({end, (i | int64_t(0xffffffff)) + 1, i + (int64_t(1) << 31)});
      const uint32_t low = static_cast<uint32_t>(i), high = static_cast<uint32_t>(i >> 32);
      const uint32_t count = static_cast<uint32_t>(stop - i);
      int8_t* run = out + i;
      for (uint32_t k = 0; k < count; ++k)
        run[k] = static_cast<int8_t>((mix(mix((low + k) ^ key) + high) >> 8) < below);
    }
}
"""


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


def bernoulli_mask(seed: int, stream: int, shape: tuple[int, ...], p: float) -> np.ndarray:
    """The mask of stream ``stream`` under ``seed``: a bool array of ``shape``, true with
    probability ``p`` (the module docstring's bits, in numpy)."""
    s = int(seed) % (1 << 64)
    with np.errstate(over="ignore"):
        u32 = functools.partial(np.array, dtype=np.uint32)
        inner = _mix(u32((s >> 32) & 0xFFFFFFFF) ^ _mix(u32((stream + _GOLDEN) & 0xFFFFFFFF)))
        key = _mix(u32(s & 0xFFFFFFFF) ^ inner)
        position = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64)
        low, high = (position & np.uint64(0xFFFFFFFF)).astype(np.uint32), (position >> np.uint64(32)).astype(np.uint32)
        bits = _mix(_mix(low ^ key) + high)
    return ((bits >> np.uint32(8)) < threshold(p)).reshape(shape)


@functools.cache
def _entry(isa: Isa) -> ctypes._CFuncPtr:
    entry = load(build(_SOURCE, isa)).stax_bernoulli
    entry.restype = None
    entry.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    return entry


@dataclass(frozen=True)
class Bernoulli:
    """A ``bernoulli`` extern as a compiled call makes it (codegen/entry.py): ``n`` elements of
    stream ``stream``, each true when its draw is below ``threshold``."""

    n: int
    threshold: int
    stream: int
    threads: int

    def addresses(self) -> tuple[int, ...]:
        return (ctypes.cast(_entry(native_isa()), ctypes.c_void_p).value,)

    def arguments(self) -> tuple[int, ...]:
        return self.n, self.threshold, self.stream, self.threads

    def call_line(self, operands: list[str], out: str) -> str:
        """The compiled call's C++ call of the entry (``entry``) on the seed's address and ``out``."""
        (seed,) = operands
        return f"stax::bernoulli(entry, (const int64_t*){seed}, (int8_t*){out}, {', '.join(map(str, self.arguments()))})"


def plan_bernoulli(seed_shape: tuple[int, ...], out_shape: tuple[int, ...], threads: int, p: float,
                   stream: int) -> Bernoulli:
    if tuple(seed_shape) != ():
        raise ShapeError(f"bernoulli: the seed must be a 0-d int64 tensor, got shape {tuple(seed_shape)}")
    return Bernoulli(int(np.prod(out_shape, dtype=np.int64)), threshold(p), stream, threads)


def bernoulli(seed: np.ndarray, *, out: np.ndarray, threads: int, p: float, stream: int,
              isa: Isa | None = None) -> None:
    """``out`` (bool) = the mask of ``stream`` under ``seed`` (a 0-d int64 array): the graph's
    ``bernoulli``."""
    if seed.dtype != np.int64 or out.dtype != np.bool_ or not out.flags.c_contiguous:
        raise ShapeError(f"bernoulli: expected a 0-d int64 seed and a C-contiguous bool output, got {seed.dtype} "
                         f"and {out.dtype}")
    plan = plan_bernoulli(seed.shape, out.shape, threads, p, stream)
    seed = np.ascontiguousarray(seed)
    _entry(isa or native_isa())(seed.ctypes.data, out.ctypes.data, *plan.arguments())
