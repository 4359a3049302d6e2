"""numpy's BLAS on one thread while a compiled program calls it (the extern kernels of 8.5).

A multi-threaded BLAS (OpenBLAS, MKL) leaves its helper threads spinning for a while after each
call, on the cores that the next generated kernel's OpenMP team needs, which then waits for
them (training steps with matmuls between kernels suffer most).  Within the call the thread
count is 1 (``stax.kernels.matmul`` runs a large matmul's gemm calls on the OpenMP team instead); the
caller's setting comes back when the last concurrent call ends.  OpenBLAS (pthreads build)
takes the setting only from the first thread that ever set it: a compiled program called from
another thread then runs with the BLAS's own thread count, correct but with the contention above.
"""
from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_active = 0
_saved: list[tuple[object, int]] = []


@functools.cache
def _blas_controllers() -> tuple:
    from threadpoolctl import ThreadpoolController
    return tuple(ThreadpoolController().select(user_api="blas").lib_controllers)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the body with every loaded BLAS library limited to one thread."""
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = [(c, c.get_num_threads()) for c in _blas_controllers()]
            for c, _ in _saved:
                c.set_num_threads(1)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                for c, threads in _saved:
                    c.set_num_threads(threads)
