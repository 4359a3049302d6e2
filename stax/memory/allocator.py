"""A caching allocator for the wrapper's buffers, so repeated calls do not page-fault.

Storages are kept in pools by byte size.  A storage is handed out again only when no array
still refers to it: an output returned to the caller goes back to the pool when the caller
drops it, never while it is in use.  ``enabled = False`` (or ``STAX_CACHING_ALLOCATOR=0``)
turns it off; ``empty_cache()`` gives the held memory back.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np

_IDLE_REFCOUNT = 3  # the pool entry, the loop variable, getrefcount's argument
_DTYPES = {name: np.dtype(name) for name in ("float32", "float64", "int32", "int64", "bool")}  # np.dtype(str) is slow
ALIGNMENT = 64  # a cache line: vector and non-temporal stores of aligned rows need no fallback


@dataclass
class AllocatorStats:
    hits: int = 0
    misses: int = 0
    bytes_held: int = 0


class CachingAllocator:
    """Pools of storages by byte size; an entry is ``(storage, offset)``: ``ALIGNMENT`` spare
    bytes, and the offset of the first aligned byte (computed once: it costs microseconds)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.pools: dict[int, list[tuple[np.ndarray, int]]] = {}
        self.stats = AllocatorStats()

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        dt = _DTYPES.get(dtype) or np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        if not self.enabled or nbytes == 0:
            return np.empty(shape, dtype=dt)
        pool = self.pools.setdefault(nbytes, [])
        for storage, offset in pool:  # an array made here has ``storage`` as its base
            if sys.getrefcount(storage) == _IDLE_REFCOUNT:
                self.stats.hits += 1
                return np.ndarray(shape, dt, storage, offset)
        storage = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        offset = -storage.ctypes.data % ALIGNMENT
        pool.append((storage, offset))
        self.stats.misses += 1
        self.stats.bytes_held += nbytes
        return np.ndarray(shape, dt, storage, offset)

    def empty_cache(self) -> None:
        """Forget every idle storage (arrays still in use keep theirs alive)."""
        for nbytes, pool in self.pools.items():
            busy = [(s, offset) for s, offset in pool if sys.getrefcount(s) > _IDLE_REFCOUNT]
            self.stats.bytes_held -= nbytes * (len(pool) - len(busy))
            pool[:] = busy


allocator = CachingAllocator(enabled=os.environ.get("STAX_CACHING_ALLOCATOR", "1") != "0")
