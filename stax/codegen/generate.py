"""The whole kernel (spec sections 8.3-8.5): the form of each block, chosen from its access
pattern, and one C++ function for one block or for consecutive blocks sharing a parallel region.

Kernel forms (8.3):

- ``vector``: strip-mined by W along the innermost frame variable (8.1), the points past the
  last whole vector run as one guarded vector (masked loads and stores; a reduction adds its
  identity in the lanes past the end) or, where that cannot be, as scalar points; reductions keep
  W accumulators combined at the end (Proposition 8.1 (2));
- ``outer-vector``: reductions whose rows are strided (column sums) vectorize across W
  neighbouring outputs instead;
- ``split-reduction``: such a reduction over many rows with few outputs: each thread reduces a
  chunk of whole rows, read in memory order, into partial results of its own, and a loop over
  the outputs combines them and runs the block's epilogue (TorchInductor's split reductions);
  ``chunked-reduction``: a reduction of fewer rows than threads, its rows cut into chunks;
- ``tiled-vector``: pointwise blocks with transposed reads run in W x W tiles whose transposed
  rows are loaded as W vectors and transposed in registers (8.2); scalar nests past the last tile;
- ``tiled``: the same blocks in B x B scalar tiles when that does not apply (bool reads);
- ``interleaved``: pointwise blocks that read their last variable ``v`` as ``v // s`` and
  ``v % s`` (a strided convolution's input gradient) run each phase ``v % s`` as vectors and
  interleave them in registers;
- ``blocked-scan``: a 1-D scan through associativity (reduce-then-scan, 7.7);
- ``scalar``: everything else (and the ``none`` ISA level).

Sequential blocks (Proposition 7.3 (1)) take no tiled or outer-vector form, which reorder
points.  The builder (``kernel.py``) emits the vector, outer-vector and scalar loops; the other
forms are in ``forms/``, built on it; the thresholds that choose among them are in ``tuning.py``.
"""
from __future__ import annotations

from math import prod

from stax.dtypes import CPP_TYPE
from stax.codegen.forms.interleave import Interleaved
from stax.codegen.forms.scans import BlockedScan
from stax.codegen.forms.split_reduction import ChunkedReduction, SplitReduction
from stax.codegen.forms.tiles import Tiles
from stax.codegen.kernel import BlockKernel, Kernel, without_final_barrier
from stax.codegen.kernel_parts import SCRATCH_SHORT, Emission, access_kind, fail_soft, local_array, on_the_heap
from stax.codegen.names import source_name
from stax.codegen.tuning import parallel_depth
from stax.target import Isa


def choose_form(k: BlockKernel) -> tuple[str, str | None]:
    """The kernel form of block ``k`` and its vector variable (spec 8.3)."""
    f = k.frame
    if k.width == 1 or not f.outer and not f.inner or k.scans or any(f.guard(m.buf) for m in k.members):
        return "scalar", None
    in_order = k.sequential_reason is None  # tiles and outer vectors reorder the points
    if not f.inner:
        last = f.outer_vars[-1]
        if k.vectorizable(last, k.members, with_store=True):
            return "vector", last
        if Interleaved(k).divisor() is not None:
            return "interleaved", last
        if in_order and len(f.outer) >= 2 and all(m.store.is_affine_in(last) for m in k.members):
            return ("tiled-vector", last) if Tiles(k).transposed_loads() is not None else ("tiled", None)
        return "scalar", None
    inner_last = f.inner_vars[-1]
    looped = [m for m in k.members if m.inner]
    pointwise_rows = [m for m in looped if not m.buf.reduction]
    inner_vector = k.vectorizable(inner_last, looped, with_store=False) and \
        all(m.internal or access_kind(m.store, inner_last, k.width) == "contiguous" for m in pointwise_rows)
    if inner_vector and f.inner[-1] >= k.width:
        return "vector", inner_last
    # rows shorter than a vector (a convolution's kernel width): across neighbouring outputs,
    # at least a vector of them or a guarded one
    whole = f.outer and f.outer[-1] >= k.width
    if in_order and (whole or f.outer and k.guarded_tail(f.outer_vars[-1], f.outer[-1])) and \
            not pointwise_rows and k.vectorizable(f.outer_vars[-1], k.members, with_store=True):
        return ("split-reduction" if whole and SplitReduction(k).applies() else "outer-vector"), f.outer_vars[-1]
    return ("vector", inner_last) if inner_vector else ("scalar", None)


def region_body(k: BlockKernel) -> tuple[int, list[str], list[str]]:
    """Algorithm 8.1's parallel depth, and the statements of block ``k`` inside a parallel region:
    its per-thread scratch (rows, carried values, strip buffers), then the loop nests with their
    ``omp for``, in a new ``Emission``: the form, whether its streamed stores need a fence and the
    partial results its outer points combine are decided first."""
    scan, chunked, split, tiles = BlockedScan(k), ChunkedReduction(k), SplitReduction(k), Tiles(k)
    form, vvar = ("blocked-scan", None) if scan.applies() else choose_form(k)
    base_form, form = form, "chunked-reduction" if chunked.applies(form) else form
    f = k.frame
    fenced = bool(k.streamed) and ((form == "vector" and bool(f.inner)) or (form == "tiled-vector" and tiles.in_strips()))
    k.emit = Emission(form, fenced, {"split-reduction": split, "chunked-reduction": chunked}.get(form))
    depth = 0 if k.sequential_reason else parallel_depth(f.outer, k.threads, prod(f.outer) * prod(f.inner))
    stack = k.tuning.stack_array_max_bytes
    scratch = [local_array(dtype, f"{name}_row", prod(f.inner), stack) for name, dtype in k.scratch_rows.items()]
    scratch += [local_array(m.buf.dtype, f"{m.buf.name}_carried", prod(m.buf.shape), stack)
                for m in k.members if m.buf.name in k.carried]
    if form == "tiled-vector" and tiles.in_strips():
        scratch += tiles.strip_scratch()
    if form == "blocked-scan":
        return 1, scratch, scan.body()
    if form == "split-reduction":
        return 1, scratch, split.body(vvar)
    if form == "chunked-reduction":
        return 1, scratch, chunked.body(base_form, vvar)
    body: list[str] = []
    if form == "tiled":
        body += tiles.tiled(depth)
    elif form == "tiled-vector":
        body += tiles.tiled_vector(depth)
    elif form == "interleaved":
        body += Interleaved(k).body(depth)
    else:
        body += k.outer_loops(form, vvar, depth)
    if fenced:  # non-temporal stores are visible to other threads after a fence
        body += ["stax::store_fence();"] + (["#pragma omp barrier"] if depth > 0 else [])
    return depth, scratch, body


def shared_lines(k: BlockKernel) -> list[str]:
    """Declarations of block ``k``'s current generation at function scope, shared by the threads
    (the blocked scan's chunk totals, the split reductions' partial results)."""
    if k.emit.partials is not None:
        return k.emit.partials.shared_lines()
    return BlockedScan(k).shared_lines() if k.emit.form == "blocked-scan" else []


def generate(k: BlockKernel) -> Kernel:
    """The C++ function of one block, its outer loops first put in the order a W x W tile can
    take (``Tiles.loop_order``)."""
    order = Tiles(k).loop_order()
    if order is not None:
        k.reorder_outer(order)
    return merge_kernels(k.name, [k])


def merge_kernels(name: str, blocks: list[BlockKernel]) -> Kernel:
    """One C++ function for consecutive blocks, sharing one OpenMP parallel region (spec 8.5:
    adjacent loops of a wrapper in one function save the region's fixed cost).  Each block's
    ``omp for`` ends with a barrier, so a block sees the results of the blocks before it; a
    block too small to run in parallel (depth 0) runs under ``omp single``."""
    params = list(dict.fromkeys(p for b in blocks for p in b.params))
    written = set().union(*(b.written for b in blocks))
    dtypes = {p: b.dtypes[p] for b in blocks for p in b.params}
    pointer, counts = {}, {"in": 0, "out": 0}
    for p in params:
        kind = "out" if p in written else "in"
        pointer[p] = f"{kind}_ptr{counts[kind]}"
        counts[kind] += 1
    for b in blocks:
        b.pointer = pointer
    generated = [region_body(b) for b in blocks]
    shared = [line for b in blocks for line in shared_lines(b)]
    heap = on_the_heap(shared + [line for _, scratch, _ in generated for line in scratch])
    bodies = [(depth, fail_soft(scratch, body) if heap else scratch + body) for depth, scratch, body in generated]
    parallel = any(depth > 0 for depth, _ in bodies)
    param_types = [f"{'' if p in written else 'const '}{CPP_TYPE[dtypes[p]]}*" for p in params]
    args = ", ".join(f"{t} {pointer[p]}" for t, p in zip(param_types, params))
    lines = [c for b in blocks for c in b.comment()]
    lines.append("// " + ", ".join(f"{pointer[p]}={source_name(p)}" for p in params))
    lines.append(f'extern "C" void {source_name(name)}({args}{", " if args else ""}int64_t* err) {{')
    inner: list[str] = []
    for depth, body in bodies:
        if len(bodies) == 1:
            inner += body
        else:  # a scope per block: blocks reuse temporary names
            inner += (["#pragma omp single"] if parallel and depth == 0 else []) + ["{", *("    " + line for line in body), "}"]
    if parallel:  # below Tuning.parallel_min_work the worksharing constructs run orphaned, on the calling thread
        work = sum(b.work() for b in blocks)
        if work >= blocks[0].tuning.parallel_min_work:
            region = f"#pragma omp parallel num_threads({blocks[0].threads})"
            inner = without_final_barrier(inner)
        else:
            region = f"// work {work} < PARALLEL_MIN_WORK: no parallel region (one thread)"
        inner = [region, "{", *("    " + line for line in inner), "}"]
    inner = ([f"int64_t {SCRATCH_SHORT} = 0;  // bytes a scratch allocation could not get"] if heap else []) + shared + inner
    lines += ["    " + line for line in inner]
    if heap:  # the call raises MemoryError
        lines.append(f"    if ({SCRATCH_SHORT} != 0) *err = -{SCRATCH_SHORT};")
    lines.append("}")
    reads_at: dict[str, set[tuple[str, str]]] = {}
    writes_at: dict[str, str] = {}
    for b in blocks:
        r, w = b.accesses()
        for key, value in r.items():
            reads_at.setdefault(key, set()).update(value)
        writes_at.update(w)
    return Kernel(name, [m.name for b in blocks for m in b.members], [m.buf.name for b in blocks for m in b.members],
                  params, "\n".join(lines), "+".join(b.emit.form for b in blocks),
                  any(b.emit.state.uses_error_flag for b in blocks), None, param_types, reads_at, writes_at,
                  generators=list(blocks), depths=tuple(depth for depth, _ in bodies))


def generate_extern(name: str, node_name: str, buf, storage: dict[str, str], threads: int, isa: Isa) -> Kernel:
    """An extern call has no C++ source; the wrapper calls the library directly (a matmul on
    ``threads`` OpenMP threads, ``stax.kernels.matmul``), built for ``isa`` (its name)."""
    return Kernel(name, [node_name], [buf.name], [storage.get(i, i) for i in buf.inputs] + [buf.name], "", "extern",
                  extern={"op": buf.op, "inputs": list(buf.inputs), "views": list(buf.views), "output": buf.name,
                          "attrs": dict(buf.attrs),
                          "threads": threads, "isa": isa.name})
