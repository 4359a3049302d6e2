"""The CBLAS ``gemm`` that the extern matmuls call (spec 8.5's library calls; ``stax.kernels.matmul``).

Two providers: numpy's own OpenBLAS, found through threadpoolctl, and Intel's MKL when the
optional ``mkl`` package is installed (``pip install 'stax[mkl]'``), loaded with its sequential
threading layer so that each thread of the kernels' OpenMP team runs its share of a product
alone.  ``STAX_BLAS`` chooses: ``auto`` (the default: MKL when installed, else OpenBLAS),
``mkl`` or ``openblas``.
"""
from __future__ import annotations

import ctypes
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

from stax.environment import blas_from_env
from stax.errors import StaxError

MKL_THREADING_SEQUENTIAL = 1  # MKL_Set_Threading_Layer's code for the sequential layer
MKL_INTERFACE_LP64 = 0        # 32-bit integers


@dataclass(frozen=True)
class Gemm:
    """A CBLAS ``?gemm``: which library, its address, and the width of its integer arguments."""
    provider: str
    address: int
    integer_width: str  # "i32" or "i64"


def _mkl_runtime_paths() -> list[Path]:
    """Where the ``mkl`` wheel puts its runtime library (``<prefix>/lib``)."""
    folders = {Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"}
    return sorted(p for folder in folders if folder.is_dir() for p in folder.glob("libmkl_rt.so*"))


@functools.cache
def _mkl() -> ctypes.CDLL | None:
    """MKL's runtime with its sequential layer and 32-bit integers, or None when it is not
    installed or was already set up otherwise in this process (then its gemm would start threads
    of its own)."""
    for path in _mkl_runtime_paths():
        try:
            library = ctypes.CDLL(str(path))
        except OSError:
            continue
        # the C entry points (the lower-case names are the Fortran ones, which take pointers)
        library.MKL_Set_Threading_Layer.restype = library.MKL_Set_Interface_Layer.restype = ctypes.c_int
        if library.MKL_Set_Threading_Layer(ctypes.c_int(MKL_THREADING_SEQUENTIAL)) != MKL_THREADING_SEQUENTIAL:
            return None
        if library.MKL_Set_Interface_Layer(ctypes.c_int(MKL_INTERFACE_LP64)) != MKL_INTERFACE_LP64:
            return None
        return library
    return None


def mkl_gemm(letter: str) -> Gemm | None:
    """MKL's ``cblas_?gemm`` (sequential, 32-bit integers), or None when MKL cannot be used."""
    library = _mkl()
    if library is None:
        return None
    return Gemm("mkl", ctypes.cast(getattr(library, f"cblas_{letter}gemm"), ctypes.c_void_p).value, "i32")


def openblas_gemm(letter: str) -> Gemm | None:
    """numpy's OpenBLAS ``cblas_?gemm`` as threadpoolctl finds it, or None."""
    from threadpoolctl import ThreadpoolController
    for lib in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        prefix, suffix = getattr(lib, "_symbol_prefix", ""), getattr(lib, "_symbol_suffix", "")
        try:
            config = lib.dynlib[f"{prefix}openblas_get_config{suffix}"]
            gemm = lib.dynlib[f"{prefix}cblas_{letter}gemm{suffix}"]
        except AttributeError:  # a build without these symbols
            continue
        config.restype = ctypes.c_char_p
        width = "i64" if b"USE64BITINT" in config() else "i32"
        return Gemm("openblas", ctypes.cast(gemm, ctypes.c_void_p).value, width)
    return None


@functools.cache
def gemm(dtype: str) -> Gemm | None:
    """The ``gemm`` for ``dtype`` (float32 or float64) from the provider ``STAX_BLAS`` asks for,
    or None when no CBLAS gemm can be found (the matmuls then call ``np.matmul``)."""
    letter = {"float32": "s", "float64": "d"}[dtype]
    wanted = blas_from_env()
    if wanted in ("auto", "mkl"):
        found = mkl_gemm(letter)
        if found is not None:
            return found
        if wanted == "mkl":
            raise StaxError("STAX_BLAS=mkl, but MKL's runtime (libmkl_rt) is not installed in this environment: "
                            "pip install 'stax[mkl]', or unset STAX_BLAS to use numpy's OpenBLAS")
    return openblas_gemm(letter)
