"""The environment variables that choose code-generation defaults, read in one place: at the edge,
where ``Options``, ``stax.trace`` and an extern kernel called directly fill in what a caller left
unset, never during code generation (``resolve_isa``: the target, resolved once).

``STAX_ISA`` (a vector level), ``STAX_THREADS`` (kernel threads), ``STAX_CACHING_ALLOCATOR``
(``0``: off) and ``STAX_BLAS`` (whose gemm the extern matmuls call, ``stax.kernels.blas``).
``STAX_CACHE_DIR`` names the kernel cache (``kernel_cache.cache_root``).
"""
from __future__ import annotations

import os

from stax.errors import StaxError
from stax.target import ISA_LEVELS, Isa, isa_level, native_isa


def isa_from_env() -> Isa:
    """The level ``STAX_ISA`` names, else the widest this CPU supports."""
    forced = os.environ.get("STAX_ISA")
    return isa_level(forced, "STAX_ISA") if forced else native_isa()


def resolve_isa(isa: Isa | str | None, setting: str = "isa") -> Isa:
    """The target as a caller gave it (a level or its name; ``setting`` names where), else
    ``isa_from_env``'s: resolved once, here at the edge (``Options``, ``stax.trace``)."""
    if isa is None:
        return isa_from_env()
    if isinstance(isa, str):
        return isa_level(isa, setting)
    if not isinstance(isa, Isa):
        raise StaxError(f"{setting} must be a level's name ({', '.join(ISA_LEVELS)}), a stax.target.Isa or None; "
                        f"got {type(isa).__name__}")
    return isa


def threads_from_env() -> int:
    """``STAX_THREADS``, else every core."""
    text = os.environ.get("STAX_THREADS")
    if text is None:
        return os.cpu_count() or 1
    threads = int(text) if text.strip().isdigit() else 0
    if threads < 1:
        raise StaxError(f"STAX_THREADS={text!r} is not a number of threads; set it to a whole number of at least 1 "
                        f"(this machine has {os.cpu_count()} cores) or unset it")
    return threads


def caching_allocator_from_env() -> bool:
    """Whether the wrapper's buffers come from the caching allocator: on unless ``STAX_CACHING_ALLOCATOR=0``."""
    return os.environ.get("STAX_CACHING_ALLOCATOR", "1") != "0"


BLAS_PROVIDERS = ("auto", "mkl", "openblas")


def blas_from_env() -> str:
    """``STAX_BLAS``: ``auto`` (the default: MKL where installed, else numpy's OpenBLAS), ``mkl`` or ``openblas``."""
    name = os.environ.get("STAX_BLAS", "auto").strip().lower()
    if name not in BLAS_PROVIDERS:
        raise StaxError(f"STAX_BLAS={name!r} is not a BLAS stax can call; use one of {', '.join(BLAS_PROVIDERS)}")
    return name
