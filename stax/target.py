"""The target: the vector levels stax generates code for (spec section 8.1: AVX-512, AVX2, none),
the probe of this CPU's level, and the loop length every level vectorizes.

The level is resolved once, at the edge (``Options.isa``, ``stax.trace``'s ``isa``, the CLI,
``stax.environment.isa_from_env``), and passed down to the generated kernels, the extern kernels
(their builds and entry points) and tracing (``conv_forms``' choice of form); nothing below the
options asks the CPU for its level.  ``runs_here`` says whether this CPU can run code built
for a level (a build for a level the CPU lacks can be read, not run).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from stax.errors import StaxError
from stax.util.suggest import did_you_mean


@dataclass(frozen=True)
class Isa:
    name: str
    width: int  # lanes of a float32 vector
    flags: tuple[str, ...]


ISA_LEVELS = {
    "avx512": Isa("avx512", 16, ("-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma",
                                 "-mprefer-vector-width=512")),
    "avx2": Isa("avx2", 8, ("-mavx2", "-mfma")),
    "none": Isa("none", 1, ()),
}

#: an innermost loop this long holds a vector at every ISA level (16 float32 lanes at AVX-512)
VECTOR_LOOP_MIN = 16


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The first CPU's flags, reading no further (the kernel writes the file as it is read, every
    CPU's part at a cost)."""
    try:
        with open("/proc/cpuinfo", buffering=4096) as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


#: the CPU flags each level's code needs to run (any level builds on any x86-64 CPU)
LEVEL_FLAGS = {"avx512": frozenset({"avx512f", "avx512dq", "avx512bw", "avx512vl"}),
               "avx2": frozenset({"avx2", "fma"}), "none": frozenset()}


def runs_here(isa: Isa) -> bool:
    """Whether this CPU runs code built for ``isa`` (a level stax does not know: assumed so)."""
    return LEVEL_FLAGS.get(isa.name, frozenset()) <= _cpu_flags()


def native_isa() -> Isa:
    """The widest level this CPU supports (asked at the edge only: see the module docstring)."""
    return _widest_level(_cpu_flags())


@functools.cache
def _widest_level(flags: frozenset[str]) -> Isa:
    """The widest level CPU ``flags`` run."""
    return next(isa for isa in ISA_LEVELS.values() if LEVEL_FLAGS.get(isa.name, frozenset()) <= flags)


def isa_level(name: str, setting: str) -> Isa:
    """The level called ``name``; ``setting`` (``isa``, ``STAX_ISA``) is where it was given."""
    if name not in ISA_LEVELS:
        raise StaxError(f"{setting}={name!r} is not a level; {did_you_mean(name, ISA_LEVELS)}"
                        f"use one of {', '.join(ISA_LEVELS)}")
    return ISA_LEVELS[name]
