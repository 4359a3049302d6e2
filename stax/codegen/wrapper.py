"""The wrapper (spec 8.5): the Python function that checks the inputs, allocates buffers, calls
the kernels in order and frees each buffer right after its last use.

Its source is generated as readable text (listing 8.1) and executed once.  Each allocation
line calls the caching allocator's function for its shape and dtype (``empty_float32_64x128()``,
resolved when the wrapper is built, so a call looks nothing up) and adds its bytes to a local
count of the bytes held, which each release subtracts; the call's peak goes to
``MemoryTracker``, so the peak of a real run can be compared with Definition 7.5's estimate.
When the wrapper only allocates or reuses storage, calls kernels and makes products on a gemm,
the graph's module also has a compiled call doing the same steps in C++ (entry.py); that is
what a call runs, and it hands this function
every call whose inputs are not exactly of the compiled layout (the function is then compiled at
the first such call, not with the graph, which a warm compile would otherwise pay for).
"""
from __future__ import annotations

import inspect
import math
from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np

from stax.kernels.blas_threads import one_blas_thread
from stax.dtypes import nbytes
from stax.errors import CallError, KernelError
from stax.kernels.registry import EXTERN_CALLS, NUMPY_SCANS
from stax.runtime.allocator import CachingAllocator, allocator
from stax.memory.plan import MemoryPlan
from stax.codegen.kernel import Kernel
from stax.codegen.names import comment_labels
from stax.codegen.plans import CallPlan, WrapperPlan, check_plan_names
from stax.target import ISA_LEVELS


class MemoryTracker:
    """The peak of the bytes the wrapper held during its last call (a preallocated pool counts
    as held for the whole call).  The wrapper keeps the count in local variables, adding each
    allocation's bytes and subtracting each release's, and records the peak when it returns.
    The peak and the number of calls live in ``counts``, an int64 pair that the compiled call
    writes itself (stax_py.cpp's ``record_peak``, saving a Python call per call)."""

    def __init__(self, held: int = 0) -> None:
        self.held = held
        self.counts = np.array([held, 0], dtype=np.int64)  # the last call's peak, the calls
        self._pair = memoryview(self.counts)  # its items read and written as ints, twice as fast

    @property
    def peak(self) -> int:
        return self._pair[0]

    @property
    def calls(self) -> int:
        return self._pair[1]

    def record(self, peak: int) -> None:
        self._pair[0] = peak
        self._pair[1] += 1


def bind_arguments(args: Sequence[Any], named: dict[str, Any], parameters: Sequence[str]) -> tuple[Any, ...]:
    """The arrays in input order, passed by position, by name (the traced function's parameter
    names) or both; the wrapper's answer to a call it cannot unpack as it is."""
    unknown = [name for name in named if name not in parameters]
    if unknown:
        raise CallError(f"the compiled function has no input {unknown[0]!r}; it takes {', '.join(parameters)} "
                        "(the traced function's other parameters keep the values they had when it was traced: "
                        "compile again to change them)")
    signature = inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in parameters])
    try:
        bound = signature.bind(*args, **named)
    except TypeError as error:
        raise CallError(f"the compiled function takes {len(parameters)} arrays ({', '.join(parameters)}), "
                        f"by position or by name: {error}") from None
    return tuple(bound.arguments[p] for p in parameters)


def check_input(array: Any, name: str, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str,
                writable: bool) -> None:
    """``assert_size_stride`` of listing 8.1: the kernels index inputs with compile-time strides."""
    if not isinstance(array, np.ndarray):
        raise CallError(f"argument {name} must be a numpy array, got {type(array).__name__}")
    if array.dtype != np.dtype(dtype):
        raise CallError(f"argument {name} has dtype {array.dtype}, but the function was compiled for {dtype}; "
                        f"convert it with .astype({dtype!r}) or compile again for {array.dtype}")
    if array.shape != shape:
        raise CallError(f"argument {name} has shape {array.shape}, but the function was compiled for {shape}; "
                        "compile again for the new shape")
    elem_strides = tuple(s // array.itemsize for s in array.strides)
    if any(st != ex for st, ex, n in zip(elem_strides, strides, shape) if n > 1):
        raise CallError(f"argument {name} has strides {elem_strides} (in elements), but the kernels were generated "
                        f"for strides {strides}; pass np.ascontiguousarray({name}) or compile with a spec of these strides")
    if writable and not array.flags.writeable:
        raise CallError(f"argument {name} is updated in place but is read-only; pass a writable array")


def isa_name(level: str) -> str:
    """The wrapper's name for the ISA level ``level`` (``stax.target.ISA_LEVELS``), which its extern calls pass."""
    return f"isa_{level}"


def site_name(shape: tuple[int, ...], dtype: str) -> str:
    """The wrapper's name for the allocator's function handing out arrays of this kind."""
    return f"empty_{dtype}_{'x'.join(map(str, shape)) or 'scalar'}"


def _storage_lines(name: str, shape: tuple[int, ...], dtype: str, plan: MemoryPlan,
                   kernel: Kernel) -> tuple[list[str], str | None]:
    """The lines that give ``name`` its storage, and the name to delete after the call (when
    the storage's previous owner is still an argument of this call)."""
    where = plan.storage[name]
    if where.kind == "reuse":
        if where.source in kernel.params:
            return [f"{name} = {where.source}.reshape({shape})  # reuse"], where.source
        return [f"{name} = {where.source}.reshape({shape}); del {where.source}  # reuse"], None
    if where.kind == "inplace":
        return [f"{name} = {where.source}.reshape({shape})  # reuse in place"], where.source
    if where.kind == "pool":
        return [f"{name} = pool_view({where.offset}, {shape}, '{dtype}')"], None
    return [f"{name} = {site_name(shape, dtype)}()", f"live += {nbytes(shape, dtype)}",
            "if live > peak: peak = live"], None


def wrapper_source(plan: WrapperPlan, memory: MemoryPlan) -> str:
    """The wrapper's Python source (listing 8.1's shape), following the memory plan: called with
    the arrays, it returns the one output, or a tuple of several."""
    check_plan_names(plan)
    inputs = sorted(plan.inputs, key=lambda i: i.position)
    names = [i.name for i in inputs]
    lines = ["def call(*args, **named):",
             f"    if named or len(args) != {len(names)}: args = bind_arguments(args, named, {plan.parameters!r})"]
    if names:
        lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
    for inp, parameter in zip(inputs, plan.parameters, strict=True):
        byte_strides = tuple(s * np.dtype(inp.dtype).itemsize for s in inp.strides)
        writable = f" or not {inp.name}.flags.writeable" if inp.name in plan.mutated_inputs else ""
        lines.append(f"    if {inp.name}.__class__ is not ndarray or {inp.name}.shape != {inp.shape} or "
                     f"{inp.name}.strides != {byte_strides} or {inp.name}.dtype != {inp.dtype}{writable}:")
        lines.append(f"        assert_size_stride({inp.name}, {parameter!r}, {inp.shape}, {inp.strides}, "
                     f"'{inp.dtype}', {inp.name in plan.mutated_inputs})")
    lines.append(f"    live = peak = {memory.pool_size}  # bytes held")
    if any(kernel.extern for kernel in plan.steps):  # numpy's BLAS on one thread for the whole call, set once
        lines.append("    with one_blas_thread():")
        body_start = len(lines)
    else:
        body_start = None
    created: set[str] = set()
    for kernel, (first, last) in zip(plan.steps, plan.spans):
        deferred = []
        for p in kernel.params:
            if p in plan.buffer_meta and p not in created:
                storage, delete = _storage_lines(p, *plan.buffer_meta[p], memory, kernel)
                lines += ["    " + line for line in storage]
                deferred += [delete] if delete else []
                created.add(p)
        lines.append(f"    # {comment_labels(kernel.nodes)}")
        if kernel.extern:
            ext = kernel.extern
            attrs = "".join(f"{k}={v!r}, " for k, v in ext.get("attrs", {}).items())
            views = ext.get("views") or [None] * len(ext["inputs"])
            inputs = ", ".join(f"{i}.reshape({v!r})" if v else i for i, v in zip(ext["inputs"], views))
            if ext["op"] in EXTERN_CALLS:  # a library call on the program's threads and ISA level
                call = (f"{EXTERN_CALLS[ext['op']].__name__}({inputs}, {attrs}out={ext['output']}, "
                        f"threads={ext['threads']}, isa={isa_name(ext['isa'])})")
            else:
                call = f"{NUMPY_SCANS[ext['op']].__name__}({inputs}, {attrs}out={ext['output']})"
            lines.append(f"    {call}")
        else:
            call = f"{kernel.name}({', '.join(kernel.params)})"
            if kernel.uses_error_flag:
                lines.append(f"    if {call}: raise_kernel_error({kernel.name!r}, {kernel.nodes!r})")
            else:
                lines.append(f"    {call}")
        lines += [f"    del {name}" for name in deferred]
        for t in range(first, last + 1):
            lines += [f"    live -= {nbytes(*plan.buffer_meta[p])}; del {p}" for p in memory.releases.get(t, [])]
    lines.append("    memory.record(peak)")
    returned = ", ".join(plan.outputs)
    lines.append(f"    return {returned}" if len(plan.outputs) == 1 else f"    return ({returned})")
    if body_start is not None:
        lines[body_start:] = ["    " + line for line in lines[body_start:]]
    return "\n".join(lines) + "\n"


def raise_kernel_error(kernel: str, nodes: Sequence[str]) -> None:
    raise KernelError(f"integer division by zero in kernel {kernel} (scheduler nodes {', '.join(nodes)}), or an "
                      "index out of range there (gather, scatter and index_select check their indices so); torch "
                      "raises here too: make sure divisors of // and % are non-zero and indices in range")


def build_wrapper(plan: WrapperPlan, memory: MemoryPlan, module: ModuleType, call_plan: CallPlan | None = None,
                  allocator: CachingAllocator = allocator) -> tuple[str, Callable, MemoryTracker]:
    """Generate, execute and return the wrapper's source, its ``call`` function and its tracker.
    ``module`` is the graph's extension module (its kernels' entry points); when it has a
    compiled call (entry.py, doing what ``call_plan`` says), that is the function returned (held
    in ``one_blas_thread`` when its products call OpenBLAS), and the Python wrapper takes the
    calls it hands on.  ``allocator`` hands out its buffers."""
    source = wrapper_source(plan, memory)
    pool = np.empty(memory.pool_size, dtype=np.uint8)
    tracker = MemoryTracker(held=memory.pool_size)

    def pool_view(offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        count = math.prod(shape)
        return pool[offset:offset + count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)

    namespace: dict[str, Any] = {
        "np": np, "ndarray": np.ndarray, **{d: np.dtype(d) for d in ("float32", "float64", "int32", "int64", "bool")},
        "memory": tracker, "pool_view": pool_view,
        "bind_arguments": bind_arguments, "assert_size_stride": check_input, "raise_kernel_error": raise_kernel_error,
        "one_blas_thread": one_blas_thread, **{isa_name(name): isa for name, isa in ISA_LEVELS.items()},
        **{call.__name__: call for call in (*EXTERN_CALLS.values(), *NUMPY_SCANS.values())},
    }
    allocated = {meta for name, meta in plan.buffer_meta.items() if memory.storage[name].kind == "alloc"}
    namespace.update({site_name(*kind): allocator.site(*kind) for kind in allocated})
    namespace.update({k.name: getattr(module, k.name) for k in plan.steps if not k.extern})

    def python_call() -> Callable:
        if "call" not in namespace:
            exec(compile(source, "<stax wrapper>", "exec"), namespace)
        return namespace["call"]
    if call_plan is None:
        return source, python_call(), tracker

    def fallback(*arrays: Any, **named: Any) -> Any:
        """The calls the compiled call hands on; the Python wrapper is compiled at the first."""
        return python_call()(*arrays, **named)
    fallback.python_call = python_call  # type: ignore[attr-defined]
    dtypes = [np.dtype(i.dtype) for i in sorted(plan.inputs, key=lambda i: i.position)]
    state = (fallback, np.ndarray, tracker.counts, raise_kernel_error, *dtypes,
             *(allocator.compiled_site(namespace[site_name(*kind)], *kind) for kind in call_plan.kinds),
             *call_plan.addresses())
    compiled_call = module.graph_set_up(state)
    if not call_plan.limits_blas_threads:
        return source, compiled_call, tracker

    def call_on_one_blas_thread(*arrays: Any, **named: Any) -> Any:
        with one_blas_thread():
            return compiled_call(*arrays, **named)
    call_on_one_blas_thread.compiled_call = compiled_call  # type: ignore[attr-defined]
    return source, call_on_one_blas_thread, tracker
