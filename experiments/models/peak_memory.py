"""Peak memory of one call, measured the same way for every runtime: how far the process's
resident set grows during the call (Linux's ``VmHWM``, reset through ``/proc/self/clear_refs``
just before, less ``VmRSS`` then), in a child process whose malloc maps every block of
``MMAP_THRESHOLD`` bytes or more on its own (``MALLOC_MMAP_THRESHOLD_``), so that a freed buffer
leaves the resident set at once and the memory one runtime freed is not counted for the next.
The figure is the call's first one after compilation: buffers a runtime allocates on its first
call and keeps (a pool) are counted.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from typing import Any, Callable, Sequence

from stax.errors import StaxError

#: blocks of this many bytes or more are mapped on their own in the measuring child
MMAP_THRESHOLD = 1 << 12


def _status_bytes(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise StaxError(f"/proc/self/status has no {field}: peak memory is measured on Linux only")


def call_peak(call: Callable[[], Any]) -> int:
    """Bytes by which the resident set grows during ``call()`` (its result kept until measured)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the current resident set
    base = _status_bytes("VmRSS")
    result = call()
    grown = _status_bytes("VmHWM") - base
    del result
    return grown


def in_child(module: str, arguments: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run ``python -m module *arguments`` with malloc set up for measuring (see the module
    docstring) and return the JSON object it prints last."""
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", module, *arguments], capture_output=True, text=True,
                          env=environment, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise StaxError(f"the peak-memory child {module} {' '.join(arguments)} failed: {tail}")
    return json.loads(lines[-1])
