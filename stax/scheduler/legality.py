"""Which pairs of scheduler nodes may share a kernel (``can_fuse``'s legality, never a heuristic).

- Definition 7.2, iteration-space compatibility, in three variants: ``"gpu"`` compares element
  counts only; ``"cpu"``, the spec's, keeps full ranges and requires the loops to nest
  (outer-loop fusion, examples 7.1 and 7.2); ``"cpu-split"``, the default
  (``DEFAULT_FUSION_RULE``), also lets a pointwise node's loop be split where a reduction's
  outer loops end (TorchInductor's CPU backend re-splits such loops): example 7.2's flat ``exp``
  over (8192,) then joins the row reductions over (64 | 128), one pass over the input where the
  spec's rule materializes ``exp`` (``experiments/bench/suite.py`` times both).
- Propositions 7.2/7.3: a consumer may join its producer only when, in the common loop frame,
  every read of the producer's buffer uses exactly the producer's write index (distance 0: the
  kernels are parallel over the outer loop).  The same rule guards a reader of an input's old
  value against the in-place update of that input.
- Extern calls never fuse.
- Two nodes running a reduction's inner loops (two reductions, or a reduction and a pointwise
  node over its rows) that read one buffer in crossed orders (a row and a column walk of one
  tensor) over an innermost loop of at least ``VECTOR_LOOP_MIN`` do not fuse: no kernel form of
  8.3 vectorizes both, and their block would run scalar (the code generator's limit, which
  TorchInductor's CPU scheduling keeps the same way).
- A pointwise node that reads some buffers along that innermost loop and others across it does
  not fuse with a reduction either: alone it runs in register tiles (8.2), which a reduction's
  loop nest does not have (``needs_tiles``).
- A node that reads a buffer through a guarded load (padding) does not fuse with its producer:
  the guard reaches points of the padded frame where the producer computes nothing.
- Scans (spec 7.7) share a kernel only with pointwise nodes and scans of their shape (and the
  same carried dim), at distance 0 in the shape frame: never across the carried dim.

``dependence`` selects Proposition 7.3's case:

- ``"parallel"`` (the spec's rule, (2)): distance exactly 0, the fused kernel's outer loops run
  in parallel;
- ``"sequential"`` ((1)): a consumer may read what its producer wrote at any earlier point of
  the fused loop nest (every distance ``<= 0``, decided exactly by ``stax.affine.pair_fusion``
  on the frame's loops); the code generator then keeps the block's loops sequential.  Two
  pointwise nodes of equal rank whose shapes differ but nest (a shifted slice ``x[1:]`` of a
  materialized ``x``) are compatible under this rule: Definition 7.2 is read in the shape frame,
  the smaller member aligned to the end of the larger (``frame``); pointwise nodes of equal
  element count must then have equal shapes (up to size-1 dims), so that every block of the
  rule has one shape frame.  In-place updates keep the distance-0 rule (their dependence is
  an anti-dependence, whose legal sign is the opposite).

Every rejection is a reason string ``"<name>: <detail>"`` (TorchInductor's WhyNoFuse), which the
fusion log and the experiments read.
"""
from __future__ import annotations

from math import prod

from stax.affine import Access, Domain, pair_fusion
from stax.ir.loops import ComputedBuffer
from stax.scheduler.dependencies import SchedulerNode
from stax.scheduler.frame import Frame, boundaries, make_frame, refinement, shape_frame, shape_groups
from stax.target import VECTOR_LOOP_MIN

DEPENDENCE_RULES = ("parallel", "sequential")
FUSION_RULES = ("cpu", "cpu-split", "gpu")
DEFAULT_FUSION_RULE = "cpu-split"  # what stax.compile, Scheduler.fusion_problem and the instance store use


def _counts(buf: ComputedBuffer) -> tuple[int, int]:
    return prod(buf.ranges), prod(buf.reduction_ranges) if buf.reduction else 1


def _shaped(buf: ComputedBuffer) -> bool:
    """A pointwise node a shape frame can place (contiguous over its own non-empty shape)."""
    return buf.kind == "pointwise" and not buf.aliases and 0 not in buf.shape and shape_groups(buf) is not None


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s for s in shape if s != 1)


def _nested(a: ComputedBuffer, b: ComputedBuffer) -> bool:
    """Equal rank and one shape inside the other (the sequential rule's embedding)."""
    return len(a.shape) == len(b.shape) and (all(x <= y for x, y in zip(a.shape, b.shape))
                                             or all(x >= y for x, y in zip(a.shape, b.shape)))


def _scan_compatible(a: ComputedBuffer, b: ComputedBuffer) -> str | None:
    other = b if a.scan else a
    scan = a if a.scan else b
    if other.kind not in ("pointwise", "scan") or other.shape != scan.shape or \
            (other.scan and other.scan_dim != scan.scan_dim) or (not other.scan and not _shaped(other)):
        return (f"scan_group: a scan fuses only with pointwise nodes and scans of its shape {scan.shape} "
                f"along the non-carried dims (spec 7.7), not {other.kind} {other.shape}")
    return None


def compatible(a: ComputedBuffer, b: ComputedBuffer, rule: str, dependence: str = "parallel") -> str | None:
    """Definition 7.2; returns the reason they are not compatible, or None."""
    if a.scan or b.scan:
        return _scan_compatible(a, b)
    if dependence == "sequential" and a.kind == b.kind == "pointwise" and _squeezed(a.shape) != _squeezed(b.shape):
        if _shaped(a) and _shaped(b) and _nested(a, b) and prod(a.ranges) != prod(b.ranges):
            return None
        return (f"shapes_differ: {a.shape} vs {b.shape} neither nest nor match (the sequential rule "
                "compares pointwise nodes by shape, Definition 7.2 in the shape frame)")
    (na, ra), (nb, rb) = _counts(a), _counts(b)
    if a.reduction and b.reduction:
        ok = na == nb and ra == rb
    elif not a.reduction and not b.reduction:
        ok = na == nb
    else:
        pw, red = (a, b) if b.reduction else (b, a)
        n, r = _counts(red)
        ok = prod(pw.ranges) in (n, n * r)
    if not ok:
        return f"incompatible_groups: {(a.ranges, a.reduction_ranges)} vs {(b.ranges, b.reduction_ranges)} (Definition 7.2)"
    if rule == "gpu":
        return None
    if not _loops_nest(a, b, split=rule == "cpu-split"):
        return (f"outer_loops_differ: {(a.ranges, a.reduction_ranges)} vs {(b.ranges, b.reduction_ranges)} "
                "have no common loop nest (outer-loop fusion depth 0)")
    return None


def _loops_nest(a: ComputedBuffer, b: ComputedBuffer, split: bool) -> bool:
    """CPU rule: the two loop nests have a common refinement, outer and inner separately; with
    ``split``, a pointwise loop may be split at the reduction's outer element count."""
    reds = [x for x in (a, b) if x.reduction]
    if not reds:
        return refinement([a.ranges, b.ranges]) is not None
    n = prod(reds[0].ranges)
    for x in (a, b):
        if x.reduction or prod(x.ranges) == n or n in boundaries(x.ranges) or n == 1:
            continue
        total = prod(x.ranges)
        if not (split and total % n == 0 and refinement([x.ranges, (n, total // n)]) is not None):
            return False
    frame_outer = [x.ranges for x in (a, b) if x.reduction or prod(x.ranges) == n]
    return refinement(frame_outer) is not None and refinement([x.reduction_ranges for x in reds]) is not None


def _indices_in_frame(frame: Frame, writer: ComputedBuffer, reader: ComputedBuffer, buffer: str):
    ranges = frame.var_ranges
    write = writer.store_index.subs(frame.mapping(writer), ranges)
    reader_map = frame.mapping(reader)
    return write, [ld.index.subs(reader_map, ranges) for ld in reader.reads() if ld.buffer == buffer]


def _inner_frame(a: ComputedBuffer, b: ComputedBuffer) -> Frame | None:
    """The pair's common loop nest when both run its inner loops and the innermost one is long
    enough to be the vector loop (shorter ones, a convolution's taps, vectorize across
    neighbouring outputs instead), else None."""
    frame = make_frame([a, b])
    if not frame.inner or frame.inner[-1] < VECTOR_LOOP_MIN or not (frame.uses_inner(a) and frame.uses_inner(b)):
        return None
    return frame


def _read_kinds(frame: Frame, node: ComputedBuffer, name: str | None = None) -> set[str]:
    """How ``node`` reads ``name`` (every buffer when None) along the frame's innermost loop."""
    last, ranges, mapping = frame.inner_vars[-1], frame.var_ranges, frame.mapping(node)
    indices = [ld.index.subs(mapping, ranges) for ld in node.reads() if name in (None, ld.buffer)]
    return {"invariant" if last not in i.variables() else
            "contiguous" if i.is_affine_in(last) and i.coeff(last) == 1 else "strided" for i in indices}


def _read_orders_differ(a: ComputedBuffer, b: ComputedBuffer) -> str | None:
    """A buffer two nodes running the common loop nest's inner loops both read, one contiguously
    along the innermost loop and the other with a stride along it: a row reduction and a column
    reduction of one tensor (a layer norm's backward and its weight gradient), or a column
    reduction and a pointwise node whose rows the inner loop walks (the same weight gradient and
    the input gradient of a transposed layout).  No vector loop serves both, so their block
    would run scalar (spec 8.3's forms; TorchInductor's CPU scheduling keeps such nodes apart
    too).  The buffer's name, or None."""
    if not (a.reduction or b.reduction) or (frame := _inner_frame(a, b)) is None:
        return None
    for name in sorted({ld.buffer for ld in a.reads()} & {ld.buffer for ld in b.reads()}):
        first, second = _read_kinds(frame, a, name), _read_kinds(frame, b, name)
        if "contiguous" in first and "strided" in second or "strided" in first and "contiguous" in second:
            return name
    return None


def _needs_tiles(a: ComputedBuffer, b: ComputedBuffer) -> bool:
    """A (reduction, pointwise) pair whose pointwise node, in their common loop nest, reads some
    buffers along the innermost loop and others across it (a residual sum of a tensor and a
    transposed one): alone it runs in register tiles (8.2), which a reduction's loop nest does
    not have, so their block would run scalar."""
    if bool(a.reduction) == bool(b.reduction) or (frame := _inner_frame(a, b)) is None:
        return False
    return {"contiguous", "strided"} <= _read_kinds(frame, b if a.reduction else a)


def _same_index_in_frame(writer: ComputedBuffer, reader: ComputedBuffer, buffer: str) -> bool:
    write, reads = _indices_in_frame(make_frame([writer, reader]), writer, reader, buffer)
    return all(r == write for r in reads)


def _loops(frame: Frame, node: ComputedBuffer) -> tuple[list[str], Domain]:
    """The frame loops ``node`` runs, and its domain in them (a shape frame's offset is a lower bound)."""
    names = frame.outer_vars + (frame.inner_vars if frame.uses_inner(node) else [])
    ranges = frame.var_ranges
    lower = {v: o for v, o in zip(frame.dims, frame.offsets.get(node.name, ())) if v}
    rows = []
    for k, v in enumerate(names):
        unit = tuple(int(c == k) for c in range(len(names)))
        rows += [unit + (-lower.get(v, 0),), tuple(-u for u in unit) + (ranges[v] - 1,)]
    return names, Domain(len(names), tuple(rows))


def sequentially_legal(frame: Frame, writer: ComputedBuffer, reader: ComputedBuffer, buffer: str) -> bool:
    """Proposition 7.3 (1) in ``frame``: no read of ``buffer`` precedes its write.  The common
    loops are the outer ones, and the inner ones too when both run them (they may share one pass)."""
    write, reads = _indices_in_frame(frame, writer, reader, buffer)
    if all(r == write for r in reads):
        return True
    (w_loops, w_domain), (r_loops, r_domain) = _loops(frame, writer), _loops(frame, reader)
    common = len(frame.outer) + (len(frame.inner) if frame.uses_inner(writer) and frame.uses_inner(reader) else 0)
    try:
        write_access = Access.from_indices([write], w_loops)
        read_accesses = [Access.from_indices([r], r_loops) for r in reads]
    except ValueError:  # floor division or modulo in an index: not affine in the frame's loops
        return False
    return all(pair_fusion(write_access, w_domain, r, r_domain, common).sequential for r in read_accesses)


def _sequential_dependence_ok(writer: ComputedBuffer, reader: ComputedBuffer, buffer: str) -> bool:
    """The sequential rule in every frame the pair may run in: its own; for a pointwise pair of
    element counts ``n`` and ``n * r``, the frame of a reduction block that may join them (outer
    ``n``, inner ``r``: the smaller member runs after the other's whole row); for a pair of one
    shape, the frame of a scan along any of its dims (which reorders the loops)."""
    if not sequentially_legal(make_frame([writer, reader]), writer, reader, buffer):
        return False
    frames = []
    n, m = sorted((prod(writer.ranges), prod(reader.ranges)))
    if writer.kind == reader.kind == "pointwise" and n != m and n and m % n == 0:
        frames.append(Frame((n,), (m // n,)))
    if writer.shape == reader.shape and _shaped(writer) and _shaped(reader):  # a scan's block may join them
        frames += [shape_frame([writer, reader], d) for d, size in enumerate(writer.shape) if size > 1]
    return all(sequentially_legal(f, writer, reader, buffer) for f in frames)


def why_no_fuse(a: SchedulerNode, b: SchedulerNode, rule: str = DEFAULT_FUSION_RULE,
                dependence: str = "parallel") -> str | None:
    """The reason ``a`` and ``b`` may not share a kernel, or None when they may."""
    if a.kind == "extern" or b.kind == "extern":
        return "extern: extern calls read and write whole buffers (StarDep) and run alone"
    reason = compatible(a.buffer, b.buffer, rule, dependence)
    if reason:
        return reason
    if rule != "gpu" and (crossed := _read_orders_differ(a.buffer, b.buffer)):
        return (f"read_orders_differ: {a.name} and {b.name} read {crossed} along different innermost loops "
                "(a row and a column walk of one tensor: no vector loop serves both)")
    if rule != "gpu" and _needs_tiles(a.buffer, b.buffer):
        tiled = b.name if a.buffer.reduction else a.name
        return (f"needs_tiles: {tiled} reads along and across the innermost loop of {a.name} and {b.name}'s loop "
                "nest (register tiles vectorize it alone; a reduction's loop nest has none)")
    for writer, reader in ((a, b), (b, a)):
        target = writer.buffer.aliases or writer.buffer_name
        if any(ld.buffer == target and ld.guard for ld in reader.buffer.reads()):
            return (f"guarded_read: {reader.name} reads {target} through a guard (padding), at points "
                    f"{writer.name} does not compute")
        if target in reader.read_names:
            sequential = dependence == "sequential" and not writer.buffer.aliases and "scan" not in (a.kind, b.kind)
            if not (_sequential_dependence_ok(writer.buffer, reader.buffer, target) if sequential
                    else _same_index_in_frame(writer.buffer, reader.buffer, target)):
                what = "in-place update" if writer.buffer.aliases else "dependence"
                if sequential:
                    return (f"dependence_distance: {reader.name} reads {target} before {writer.name} writes it "
                            "(a distance > 0: illegal even sequentially, Proposition 7.3 (1))")
                return (f"dependence_distance: {reader.name} reads {target} at an index other than {writer.name}'s "
                        f"write index ({what} distance not zero, Proposition 7.3)")
    return None
