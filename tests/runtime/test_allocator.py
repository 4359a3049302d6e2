"""The caching allocator hands a storage out again only when no array refers to it."""
import warnings

import numpy as np

from stax.runtime.allocator import CachingAllocator


def test_storage_is_reused_only_when_free():
    allocator = CachingAllocator()
    a = allocator.empty((4, 4), "float32")
    b = allocator.empty((4, 4), "float32")  # a is alive: a second storage
    assert allocator.stats.misses == 2 and allocator.stats.hits == 0
    a[:] = 1
    view = a[1:]
    del a
    c = allocator.empty((16,), "float32")  # a's storage is still referenced by `view`
    assert allocator.stats.misses == 3
    assert not np.shares_memory(c, view) and not np.shares_memory(c, b)
    del view
    d = allocator.empty((2, 8), "float32")  # now free again
    assert allocator.stats.hits == 1 and d.shape == (2, 8)
    assert allocator.stats.bytes_held == 3 * 64


def test_disabled_and_empty_cache():
    allocator = CachingAllocator(enabled=False)
    allocator.empty((8,), "float64")
    assert allocator.stats.misses == 0 and not any(allocator.pools.values())  # no storage kept
    allocator = CachingAllocator()
    kept = allocator.empty((8,), "float64")
    allocator.empty((8,), "float64")
    allocator.empty_cache()
    assert allocator.stats.bytes_held == 64 and kept.nbytes == 64


def test_storages_start_on_a_cache_line():
    """Aligned rows let the kernels' non-temporal stores take their fast path; the array still
    keeps its storage busy (a reshaped view too)."""
    allocator = CachingAllocator()
    arrays = [allocator.empty((n, 3), dtype) for n in (1, 5, 1000) for dtype in ("float32", "float64", "bool")]
    assert all(a.ctypes.data % 64 == 0 for a in arrays)
    flat = arrays[0].reshape(-1)
    del arrays
    again = allocator.empty((1, 3), "float32")
    assert not np.shares_memory(again, flat)


def test_a_free_storage_hands_out_its_array_again_unless_changed():
    """A hit of the same shape and dtype returns the array last made on the storage (making one
    costs a microsecond); one its user reshaped in place, made read-only or gave other strides is
    made anew."""
    allocator = CachingAllocator()
    first = allocator.empty((4, 4), "float32")
    first_id = id(first)
    del first
    again = allocator.empty((4, 4), "float32")
    assert id(again) == first_id and allocator.stats.hits == 1
    again.shape = (16,)
    del again
    reshaped = allocator.empty((4, 4), "float32")
    assert reshaped.shape == (4, 4) and reshaped.flags.writeable
    reshaped.flags.writeable = False
    del reshaped
    writable = allocator.empty((4, 4), "float32")
    assert writable.flags.writeable and writable.shape == (4, 4)
    with warnings.catch_warnings():  # numpy 2.4 deprecates setting strides, but allows it
        warnings.simplefilter("ignore", DeprecationWarning)
        writable.strides = (4, 16)  # the transposed layout, in place
    del writable
    writable = allocator.empty((4, 4), "float32")
    assert writable.strides == (16, 4) and writable.flags.writeable
    other = allocator.empty((2, 8), "int32")  # the same bytes, another kind: writable is busy
    assert not np.shares_memory(other, writable) and allocator.stats.misses == 2


def test_a_site_hands_out_its_kind_and_honours_enabled():
    """The wrapper's per-line function: the same storage once the caller dropped the array, a
    new one while the caller holds it, plain numpy memory while the allocator is off."""
    allocator = CachingAllocator()
    take = allocator.site((3, 5), "int64")
    first = take()
    assert first.shape == (3, 5) and first.dtype == np.int64 and first.ctypes.data % 64 == 0
    held = take()
    assert not np.shares_memory(first, held) and allocator.stats.misses == 2
    address = first.ctypes.data
    del first
    assert take().ctypes.data == address and allocator.stats.hits == 1
    allocator.enabled = False
    off = take()
    assert allocator.stats.misses == 2 and allocator.stats.hits == 1 and off.shape == (3, 5)
