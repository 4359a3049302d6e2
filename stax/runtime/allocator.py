"""A caching allocator for the wrapper's buffers, so repeated calls do not page-fault.

Storages are kept in pools by byte size.  A storage is handed out again only when no array
still refers to it: an output returned to the caller goes back to the pool when the caller
drops it, never while it is in use.  ``allocator`` is the one every compiled function shares;
a function compiled with ``caching_allocator=False`` takes ``NO_CACHING``'s plain arrays instead.
``empty_cache()`` gives the held memory back.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from stax.dtypes import nbytes as buffer_bytes

ALIGNMENT = 64  # a cache line: vector and non-temporal stores of aligned rows need no fallback


@dataclass
class AllocatorStats:
    hits: int = 0
    misses: int = 0
    bytes_held: int = 0


class _Storage:
    """Pooled memory (``ALIGNMENT`` spare bytes; its first aligned byte at ``offset``) and the
    array last handed out on it, which a hit of the same shape and dtype hands out again (making
    an array on a buffer would be a large part of a hit)."""
    __slots__ = ("memory", "offset", "view")

    def __init__(self, shape: tuple[int, ...], dt: np.dtype, nbytes: int):
        self.memory = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        self.offset = -self.memory.ctypes.data % ALIGNMENT
        self.view = np.ndarray(shape, dt, self.memory, self.offset)

    def idle(self) -> bool:
        """No array but the kept view refers to the memory, and nothing refers to that view:
        references from this object, from ``view`` and from getrefcount's argument (the view's
        base is one more on the memory); an array derived from the view has the memory as its base."""
        view = self.view
        return sys.getrefcount(self.memory) == 3 and sys.getrefcount(view) == 3

    def take(self, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray | None:
        """An array of ``shape`` and ``dt`` on the memory if it is idle, else None: the kept view
        again, unless it is of another kind or its user changed it (reshaped in place, made
        read-only, set its strides).  The wrapper's hit path: idle()'s test is repeated here to
        save a call."""
        view = self.view
        if sys.getrefcount(self.memory) != 3 or sys.getrefcount(view) != 3:
            return None
        flags = view.flags  # with the shape, C-contiguous means C strides (a user may set strides)
        if view.shape != shape or view.dtype is not dt or not (flags.writeable and flags.c_contiguous):
            view = self.view = np.ndarray(shape, dt, self.memory, self.offset)
        return view


class CachingAllocator:
    """Pools of storages by byte size.  ``site(shape, dtype)`` resolves one kind's pool once and
    returns the function that hands out its arrays (the wrapper makes one per allocation line,
    so a call looks nothing up).  A lock makes finding a free storage and handing it out one
    step for threads calling compiled functions."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._lock = threading.Lock()
        self.pools: dict[int, list[_Storage]] = {}
        self._sites: dict[tuple[tuple[int, ...], str], Callable[[], np.ndarray]] = {}
        self.stats = AllocatorStats()

    def site(self, shape: tuple[int, ...], dtype: str) -> Callable[[], np.ndarray]:
        """The function returning an uninitialized array of ``shape`` and ``dtype`` from the pool."""
        dt = np.dtype(dtype)
        nbytes = buffer_bytes(shape, dtype)
        pool = self.pools.setdefault(nbytes, [])
        acquire, release, stats = self._lock.acquire, self._lock.release, self.stats

        def take() -> np.ndarray:
            if not self.enabled or nbytes == 0:
                return np.empty(shape, dtype=dt)
            acquire()  # cheaper than a with statement, on a path of a few hundred nanoseconds
            try:
                for storage in pool:
                    array = storage.take(shape, dt)
                    if array is not None:
                        stats.hits += 1
                        return array
                storage = _Storage(shape, dt, nbytes)
                pool.append(storage)
                stats.misses += 1
                stats.bytes_held += nbytes
                return storage.view
            finally:
                release()
        return take

    def compiled_site(self, take: Callable[[], np.ndarray], shape: tuple[int, ...], dtype: str) -> tuple:
        """What a compiled call (stax_py.h's ``take_pooled``) needs to hand out this kind's arrays
        itself on a hit: ``take``, this kind's ``site`` (which it calls for anything but a hit),
        the kind's pool, this allocator (for ``enabled``), its statistics, its lock's acquire and
        release, and the dtype."""
        return (take, self.pools.setdefault(buffer_bytes(shape, dtype), []), self, self.stats,
                self._lock.acquire, self._lock.release, np.dtype(dtype))

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """An uninitialized array of ``shape`` and ``dtype`` (``site``'s, for one-off callers)."""
        take = self._sites.get((shape, dtype))
        if take is None:
            take = self._sites[(shape, dtype)] = self.site(shape, dtype)
        return take()

    def empty_cache(self) -> None:
        """Forget every idle storage (arrays still in use keep theirs alive)."""
        with self._lock:
            for nbytes, pool in self.pools.items():
                busy = [s for s in pool if not s.idle()]
                self.stats.bytes_held -= nbytes * (len(pool) - len(busy))
                pool[:] = busy


allocator = CachingAllocator()
NO_CACHING = CachingAllocator(enabled=False)
