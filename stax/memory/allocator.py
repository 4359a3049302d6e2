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
import threading
from dataclasses import dataclass

import numpy as np

ALIGNMENT = 64  # a cache line: vector and non-temporal stores of aligned rows need no fallback


@dataclass
class AllocatorStats:
    hits: int = 0
    misses: int = 0
    bytes_held: int = 0


class _Storage:
    """Pooled memory (``ALIGNMENT`` spare bytes; ``offset``, computed once, of its first aligned
    byte) and the array last handed out on it, which a hit of the same shape and dtype hands out
    again (making an array on a buffer costs a third of a microsecond)."""
    __slots__ = ("memory", "offset", "view")

    def __init__(self, nbytes: int):
        self.memory = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        self.offset = -self.memory.ctypes.data % ALIGNMENT
        self.view: np.ndarray | None = None

    def idle(self) -> bool:
        """No array but the kept view refers to the memory, and nothing refers to that view:
        references from this object and from getrefcount's argument (the view's base is one
        more on the memory); an array derived from the view has the memory as its base."""
        view = self.view
        if view is None:
            return sys.getrefcount(self.memory) == 2
        return sys.getrefcount(self.memory) == 3 and sys.getrefcount(view) == 3

    def array(self, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        view = self.view
        if view is None or view.shape != shape or view.dtype is not dt or not view.flags.writeable:
            view = self.view = np.ndarray(shape, dt, self.memory, self.offset)  # another kind, or changed by its user
        return view


class CachingAllocator:
    """Pools of storages by byte size; ``kinds`` keeps, per (shape, dtype) asked for, its dtype
    object, byte size and pool (the wrapper asks for the same few every call).  A lock makes
    finding a free storage and handing it out one step for threads calling compiled functions."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._lock = threading.Lock()
        self.pools: dict[int, list[_Storage]] = {}
        self.kinds: dict[tuple[tuple[int, ...], str], tuple[np.dtype, int, list[_Storage]]] = {}
        self.stats = AllocatorStats()

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        if not self.enabled:
            return np.empty(shape, dtype=dtype)
        kind = self.kinds.get((shape, dtype))
        if kind is None:
            dt = np.dtype(dtype)
            nbytes = math.prod(shape) * dt.itemsize
            kind = self.kinds[(shape, dtype)] = (dt, nbytes, self.pools.setdefault(nbytes, []))
        dt, nbytes, pool = kind
        if nbytes == 0:
            return np.empty(shape, dtype=dt)
        with self._lock:
            for storage in pool:
                if storage.idle():
                    self.stats.hits += 1
                    return storage.array(shape, dt)
            storage = _Storage(nbytes)
            pool.append(storage)
            self.stats.misses += 1
            self.stats.bytes_held += nbytes
            return storage.array(shape, dt)

    def empty_cache(self) -> None:
        """Forget every idle storage (arrays still in use keep theirs alive)."""
        with self._lock:
            for nbytes, pool in self.pools.items():
                busy = [s for s in pool if not s.idle()]
                self.stats.bytes_held -= nbytes * (len(pool) - len(busy))
                pool[:] = busy


allocator = CachingAllocator(enabled=os.environ.get("STAX_CACHING_ALLOCATOR", "1") != "0")
