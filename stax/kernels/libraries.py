"""The extern kernels' C++ (``stax/kernels/csrc/<name>.cpp``, shipped as package data): each file
built for the ISA level it is asked for (``stax.runtime.build``: cached by its text, the headers,
the flags and the compiler) and loaded, once per process and level.

A file is plain C++ that includes the runtime's headers (``stax/runtime/include``); the level's
vector width reaches it as ``-DSTAX_W`` with the level's flags, as in a generated kernel."""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from stax.runtime.build import build, load
from stax.target import Isa

SOURCE_DIR = Path(__file__).parent / "csrc"


@functools.cache
def source(name: str) -> str:
    """The text of ``csrc/<name>.cpp`` (read once per process)."""
    return (SOURCE_DIR / f"{name}.cpp").read_text()


@functools.cache
def library(name: str, isa: Isa) -> ctypes.CDLL:
    """``csrc/<name>.cpp`` built for ``isa`` and loaded."""
    return load(build(source(name), isa))
