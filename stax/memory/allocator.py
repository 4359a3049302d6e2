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

_IDLE_REFCOUNT = 3  # the pool's list, the loop variable, getrefcount's argument
ALIGNMENT = 64  # a cache line: vector and non-temporal stores of aligned rows need no fallback


@dataclass
class AllocatorStats:
    hits: int = 0
    misses: int = 0
    bytes_held: int = 0


class CachingAllocator:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.pools: dict[int, list[np.ndarray]] = {}
        self.stats = AllocatorStats()

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        if not self.enabled or nbytes == 0:
            return np.empty(shape, dtype=dt)
        pool = self.pools.setdefault(nbytes, [])
        for storage in pool:
            if sys.getrefcount(storage) == _IDLE_REFCOUNT:
                self.stats.hits += 1
                return _aligned_array(shape, dt, storage)
        storage = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        pool.append(storage)
        self.stats.misses += 1
        self.stats.bytes_held += nbytes
        return _aligned_array(shape, dt, storage)

    def empty_cache(self) -> None:
        """Forget every idle storage (arrays still in use keep theirs alive)."""
        for nbytes, pool in self.pools.items():
            busy = [s for s in pool if sys.getrefcount(s) > _IDLE_REFCOUNT]
            self.stats.bytes_held -= nbytes * (len(pool) - len(busy))
            pool[:] = busy


def _aligned_array(shape: tuple[int, ...], dtype: np.dtype, storage: np.ndarray) -> np.ndarray:
    """An array over ``storage`` (``ALIGNMENT`` bytes longer than it needs) starting at a multiple
    of ``ALIGNMENT``.  Its base is ``storage`` itself, whose reference count tells when it is idle."""
    return np.ndarray(shape, dtype, storage, offset=-storage.ctypes.data % ALIGNMENT)


allocator = CachingAllocator(enabled=os.environ.get("STAX_CACHING_ALLOCATOR", "1") != "0")
