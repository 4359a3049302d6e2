"""One machine's share between sweep cells: a cell that times kernels runs alone on its machine.

A reader/writer lock on a file in the machine's temporary folder, shared by every process of
every sweep on that machine (local workers, Dask workers): timing cells take it exclusively,
all other work takes it shared.  A turnstile taken briefly before either keeps a waiting timing
cell from being overtaken forever by cells that keep arriving.  The kernel frees the locks of a
process that dies, so a killed worker blocks nobody.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _path(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"stax-{name}-{os.getuid()}.lock"


@contextmanager
def machine_share(exclusive: bool) -> Iterator[None]:
    """Hold this machine's lock: alone if ``exclusive``, else beside other shared holders."""
    with open(_path("cells"), "a") as lock, open(_path("turnstile"), "a") as turnstile:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
