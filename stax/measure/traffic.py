"""Traffic accounting: Definition 7.3's modeled bytes per kernel against the bytes the generated
kernels really load and store, counted by a single-threaded counting build (``stax_count.h``).

A kernel's counted traffic is the number of distinct bytes of each buffer it reads and writes
(repeated reads of the same bytes within a kernel hit the cache, as the model assumes).  The
model charges whole buffers, so the two agree whenever every element of a buffer is touched;
a strided slice that skips elements is counted below the model.  A load of bytes the kernel
itself stored earlier (a sequential block reading a value of an earlier point, Proposition
7.3 (1)) is not counted: it comes from cache, and the model charges the buffer's write only.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from stax.compiler import CompiledFunction, translation_unit
from stax.generation import generate_kernels
from stax.scheduler.problems import block_index
from stax.kernels.registry import EXTERN_CALLS, NUMPY_SCANS
from stax.runtime.build import build, load


@dataclass
class KernelTraffic:
    kernel: str
    modeled_read: int
    modeled_write: int
    counted_read: int
    counted_write: int


def modeled_kernel_traffic(compiled: CompiledFunction) -> dict[str, tuple[int, int]]:
    """Definition 7.3 split by kernel: (bytes read, bytes written)."""
    problem, blocks = compiled.fusion_problem, compiled.fusion.partition
    block_of = block_index(blocks)
    names = {i: k.name for k in compiled.block_kernels for i, b in enumerate(blocks) if tuple(k.nodes) == b}
    result = {k.name: [0, 0] for k in compiled.block_kernels}
    for buf in problem.buffers:
        home = block_of[buf.producer] if buf.producer else None
        readers = {block_of[u] for u in buf.users} - {home}
        for r in readers:
            result[names[r]][0] += buf.size
        if home is not None and (readers or buf.is_output):
            result[names[home]][1] += buf.size
    return {k: (r, w) for k, (r, w) in result.items()}


def count_traffic(compiled: CompiledFunction, *arrays: np.ndarray) -> list[KernelTraffic]:
    """Run the counting build of ``compiled``'s kernels on copies of ``arrays``."""
    names = [k.name for k in compiled.block_kernels]
    blocks = [tuple(k.nodes) for k in compiled.block_kernels]
    kernels = generate_kernels(compiled.scheduler, compiled.fusion_problem, tuple(blocks), tuple(names), names,
                               compiled.isa, threads=1, tuning=compiled.schedule.tuning, counting=True,
                               dependence=compiled.dependence)
    library = load(build(translation_unit(kernels, counting=True), compiled.isa))
    register = library.stax_count_register
    register.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    storage: dict[str, np.ndarray] = {i.name: np.array(a, copy=True) for i, a in
                                      zip(sorted(compiled.program.inputs, key=lambda i: i.position), arrays)}
    for buf in compiled.program.buffers:
        if buf.name not in storage and not getattr(buf, "aliases", None):
            storage[buf.name] = np.empty(buf.shape, dtype=buf.dtype)
    modeled = modeled_kernel_traffic(compiled)
    rows = []
    for kernel in kernels:
        params = [storage[p] for p in kernel.params]
        if kernel.extern:
            ext = kernel.extern
            operands = [storage[i].reshape(v) if v else storage[i] for i, v in
                        zip(ext["inputs"], ext.get("views") or [None] * len(ext["inputs"]))]
            if ext["op"] in EXTERN_CALLS:
                EXTERN_CALLS[ext["op"]](*operands, **ext.get("attrs", {}), out=storage[ext["output"]], threads=1,
                                        isa=compiled.isa)
            else:
                NUMPY_SCANS[ext["op"]](*operands, **ext.get("attrs", {}), out=storage[ext["output"]])
            read = sum(storage[i].nbytes for i in dict.fromkeys(ext["inputs"]))
            rows.append(KernelTraffic(kernel.name, *modeled[kernel.name], read, storage[ext["output"]].nbytes))
            continue
        maps = [(np.zeros(a.nbytes, np.uint8), np.zeros(a.nbytes, np.uint8)) for a in params]
        for slot, (array, (rmap, wmap)) in enumerate(zip(params, maps)):
            register(slot, array.ctypes.data, rmap.ctypes.data, wmap.ctypes.data)
        err = np.zeros(1, np.int64)
        fn = getattr(library, kernel.name)
        fn.argtypes = [ctypes.c_void_p] * (len(params) + 1)
        fn(*(a.ctypes.data for a in params), err.ctypes.data)
        rows.append(KernelTraffic(kernel.name, *modeled[kernel.name],
                                  int(sum(r.sum() for r, _ in maps)), int(sum(w.sum() for _, w in maps))))
    return rows
