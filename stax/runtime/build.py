"""Build and load generated C++ (spec section 8): gcc and an on-disk cache.

A library is built for the ISA level it is given (``stax.target``: resolved by the caller, never
probed here).  Libraries are cached by a hash of the source, the headers, the flags, the Python and the compiler, in the
kernel cache (``stax.runtime.kernel_cache``: private, and each library checked against the SHA-256
recorded when it was built before it is loaded).  A build compiles the source it is given, in a
private temporary directory, and renames the library into place, so concurrent processes
compiling the same source never load a half-written library.
The helpers of the graphs' compiled calls (``stax_py.cpp``) and the kernels' OpenMP runtime
(``stax_parallel.cpp``) are built the same way, once, and loaded with global symbols before the
first kernel library.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from stax.errors import BuildError
from stax.runtime.kernel_cache import (atomic_write, cache_root, checked_for_loading, locked, mismatch, private_directory,
                           read_private_file, record_build, remove_stale_temporaries, temporary_directory,
                           warn_rebuild)
from stax.target import ISA_LEVELS, Isa

#: the runtime's headers, which generated and extern kernels include, and its own C++ sources
HEADER_DIR = Path(__file__).parent / "include"
SOURCE_DIR = Path(__file__).parent / "csrc"


@functools.cache
def _compiler_version() -> str:
    """The compiler's identity in cache keys: its file, size and modification time, which an
    upgrade changes (as ccache checks it), without starting ``g++ --version`` in every process."""
    compiler = shutil.which("g++")
    if compiler is None:
        raise BuildError("no g++ on PATH: stax compiles its kernels with g++ (with OpenMP); install it "
                         "(Debian: apt-get install g++)")
    path = os.path.realpath(compiler)
    info = os.stat(path)
    return f"{path} {info.st_size} {info.st_mtime_ns}"


@functools.cache
def _python_include() -> str:
    return sysconfig.get_paths()["include"]


def compile_flags(isa: Isa) -> list[str]:
    """Flags of the kernels and their precompiled header (which must match exactly), but for the
    Python headers' directory (``_gcc_flags``).  ``-fno-tree-loop-if-convert``: gcc 12.2 at -O3
    with AVX2 or AVX-512 turns a scalar loop's guarded loads (``c ? p[i] : -0.0f``, a ``cat``'s
    padding) into masked loads whose mask it folds to all false, so they read zeros
    (tests/regressions/cat_of_a_row_min_guarded_load.json); the kernels' own vector loops guard
    their loads with ``stax::vload_guarded``, so the flag costs them nothing."""
    return ["-O3", "-std=c++17", "-fPIC", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
            "-fno-tree-loop-if-convert", "-Wno-psabi", f"-DSTAX_W={isa.width}", *isa.flags]


#: the OpenMP entry points GCC lowers the kernels' constructs to, which the kernels take from
#: stax_parallel.cpp's pool instead of libgomp (whose regions cost more; experiments.bench.regions)
PARALLEL_ENTRY_POINTS = ("GOMP_parallel", "GOMP_parallel_loop_nonmonotonic_dynamic", "GOMP_parallel_loop_dynamic",
                         "GOMP_barrier", "GOMP_single_start", "GOMP_loop_nonmonotonic_dynamic_start",
                         "GOMP_loop_nonmonotonic_dynamic_next", "GOMP_loop_dynamic_start", "GOMP_loop_dynamic_next",
                         "GOMP_loop_end", "GOMP_loop_end_nowait", "omp_get_thread_num", "omp_get_num_threads")
LINK_FLAGS = [*(f"-Wl,--wrap={name}" for name in PARALLEL_ENTRY_POINTS), "-Wl,--as-needed", "-lmvec", "-lm"]


def _gcc_flags(isa: Isa) -> list[str]:
    return [*compile_flags(isa), f"-I{_python_include()}"]


def _toolchain_key(isa: Isa) -> str:
    """What a build depends on besides its source: the runtime headers (read once per process: they
    do not change under a running compiler), the flags, the Python whose headers it includes (its
    version and installation, so a cache hit need not ask sysconfig for their directory) and the
    compiler."""
    return "\0".join([_headers_text(), " ".join(compile_flags(isa) + LINK_FLAGS), sys.version, sys.base_prefix,
                      _compiler_version()])


@functools.cache
def package_headers() -> dict[str, bytes]:
    """The installed package's runtime headers, by name (read once per process)."""
    return {p.name: p.read_bytes() for p in sorted(HEADER_DIR.glob("*.h"))}


def _headers_text() -> str:
    return "".join(text.decode() for text in package_headers().values())


def precompiled_headers(isa: Isa, header: str) -> Path:
    """A directory holding the runtime headers and the precompiled ``header`` for these flags
    (a build then skips parsing the headers); each ``.gch`` is built once, atomically.  The
    headers there are checked against the package's and the ``.gch`` against its record: one that
    differs is rewritten, with a CacheWarning."""
    key = hashlib.sha256(_toolchain_key(isa).encode()).hexdigest()[:16]
    directory = private_directory(private_directory(cache_root() / "pch") / key)
    gch, failed = directory / f"{header}.gch", directory / f"{header}.failed"
    if not _header_copies_match(directory):
        gch.unlink(missing_ok=True)  # it may hold what the changed headers said
    if failed.exists() or mismatch(gch) is None:
        return directory
    with locked(directory / f"{header}.lock"):  # gcc's .gch differs from build to build
        reason = mismatch(gch)
        if failed.exists() or reason is None:
            return directory  # built while this process waited
        if reason != "missing":
            warn_rebuild(gch, reason)
        remove_stale_temporaries(directory)
        building = temporary_directory(directory)
        try:
            output = building / f"{header}.gch.tmp"
            result = subprocess.run(["g++", *_gcc_flags(isa), "-x", "c++-header", str(directory / header), "-o",
                                     str(output)], capture_output=True, text=True)
            if result.returncode == 0:
                record_build(output, gch)
            else:  # without a .gch, g++ reads the header itself (a failed g++ may have removed its output)
                atomic_write(failed, result.stderr[-2000:].encode())
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return directory


def _header_copies_match(directory: Path) -> bool:
    """Write the package's headers into ``directory`` (all of them: a header includes its
    siblings) where missing or different; whether every copy found was the package's."""
    matched = True
    for name, text in package_headers().items():
        copy = directory / name
        found = read_private_file(copy, "the cached header")
        if found != text:
            if found is not None:
                warn_rebuild(copy, "differs from the installed package's header")
                matched = False
            atomic_write(copy, text)
    return matched


def build(source: str, isa: Isa) -> Path:
    """Compile ``source`` to a shared library (cached) and return its path.  Only ``source`` is
    compiled, never a file found in the cache; a cached library that does not match its record is
    rebuilt (with a CacheWarning)."""
    key = hashlib.sha256("\0".join([source, _toolchain_key(isa)]).encode()).hexdigest()[:24]
    directory = private_directory(cache_root() / key[:2])
    library = directory / f"{key}.so"
    reason = mismatch(library)
    if reason is None:
        return library
    if reason != "missing":
        warn_rebuild(library, reason)
    remove_stale_temporaries(directory)
    building = temporary_directory(directory)
    try:
        (building / f"{key}.cpp").write_text(source)
        first = re.match(r'#include "(\w+\.h)"', source)  # a runtime header the unit starts with
        include = precompiled_headers(isa, first.group(1)) if first else HEADER_DIR
        # in the private directory, whose only file is the source: its quoted includes find
        # the runtime headers, never a file beside a source in the cache
        result = subprocess.run(["g++", *_gcc_flags(isa), "-shared", f"-frandom-seed={key}", "-iquote", str(include),
                                 f"{key}.cpp", "-o", f"{key}.so.tmp", *LINK_FLAGS], capture_output=True, text=True,
                                cwd=building)
        if result.returncode != 0:
            kept = directory / f"{key}.failed.cpp"  # for the reader; never compiled
            atomic_write(kept, source.encode())
            raise BuildError(f"g++ failed to compile the generated kernels (source: {kept}):\n{result.stderr[-4000:]}")
        record_build(building / f"{key}.so.tmp", library)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return library


def load(library: Path) -> ctypes.CDLL:
    """Load a built library, after the runtime it binds to."""
    load_runtime()
    return ctypes.CDLL(str(checked_for_loading(library)))


def check_scratch(status: int) -> None:
    """Raise MemoryError when an extern kernel's entry point returned minus the bytes of heap
    scratch it could not allocate (stax_vec.h's scratch_result); 0 is success."""
    if status < 0:
        raise MemoryError(f"an extern kernel could not allocate {-status} bytes ({-(status // (1 << 20))} MiB) of "
                          "scratch memory; free memory, raise the process's memory limit (ulimit -v), or use smaller "
                          "inputs")


MODULE_NAME = "stax_kernels"
RUNTIME_SOURCES = ("stax_py.cpp", "stax_parallel.cpp")


@functools.cache
def load_runtime() -> ctypes.CDLL:
    """Build (cached like any library) and load, once per process and with global symbols, what
    every kernel library binds to: the helpers of the graphs' compiled calls (stax_py.cpp) and the
    kernels' OpenMP runtime (stax_parallel.cpp).  They hold no vector code and are built for the
    ``none`` level, so one copy serves kernels of every level (an AVX-512 build of them would be
    what every later library binds to, even on a CPU without AVX-512)."""
    source = "\n".join((SOURCE_DIR / name).read_text() for name in RUNTIME_SOURCES)
    return ctypes.CDLL(str(checked_for_loading(build(source, ISA_LEVELS["none"]))), mode=os.RTLD_GLOBAL)


def parallel_stats() -> dict[str, int]:
    """The kernels' thread pool so far in this process: regions run on the pool, regions run by
    their calling thread alone (one thread asked for, the pool taken, or the region nested), pool
    threads, waits that ended asleep (the rest spun until their wait ended), chunks taken back
    (run by a region's caller beyond its even share, because a pool thread was late) and late
    joins (a pool thread that came to a region after its caller had finished it, and returned),
    chunks shared (run by pool threads), stragglers (regions whose caller waited on its pool
    threads longer than it worked, on chunks that ran over four times slower than its own: one lost
    its core), solo regions (run by their caller alone for a while after a straggler, the straggler
    rule; not counted as alone) and lent waits (the caller, about to sleep, moved the pool threads
    it waited for to its own core)."""
    names = ("pooled", "alone", "threads", "sleeps", "taken_back", "late", "shared", "stragglers", "solo", "lent")
    counts = (ctypes.c_int64 * len(names))()
    load_runtime().stax_parallel_stats(counts)
    return dict(zip(names, counts))


def load_module(library: Path):
    """Import a built library that defines the extension module ``stax_kernels`` (see stax_py.h),
    after the runtime it binds to."""
    load_runtime()
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(checked_for_loading(library)))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, str(library), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
