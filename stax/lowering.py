"""Lowering: traced graph -> loop IR (spec 6.x, designed the way TorchInductor does it).

Every graph node becomes a lazy ``TensorValue`` whose ``load(index)`` builds the body expression
for one element.  Elementwise ops and views compose their loaders (inlining, spec 6.3), so a
chain of elementwise ops costs no memory traffic.  A node is *materialized* into a
``ComputedBuffer`` when the CPU cost model says so (``CostModel``):

1. reductions, scans and extern calls always (their outputs are buffers); a scan over a dim of
   size 1 is its (cast) input, inlined; ``CostModel(native_scans=False)`` and scans of empty
   tensors become an extern call of numpy's ``cumsum``/``cumprod``/``logaddexp.accumulate`` (the
   fallback of spec 7.7);
2. graph outputs, in-place update targets and extern operands;
3. an elementwise node whose inlined expression holds an expensive op (exp, log, tanh, ...)
   and that has two or more users: recomputing it per user costs more than a round trip
   through memory on the CPU (spec example 7.2); ``CostModel(materialize_shared_expensive=False)``
   inlines it instead;
4. an elementwise node whose inlined expression grows beyond ``max_inline_ops``.

After lowering, each buffer's loops are simplified: adjacent loop variables that every access
addresses contiguously are merged (example 7.2: ``exp`` over 64x128 runs as one loop of 8192).

In-place updates of graph inputs (functionalized by the front end) become a buffer that writes
the input's storage (``aliases``); every buffer that reads the input's old value is ordered before
it by a WeakDep (spec 7.1, renaming as in SSA).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from math import prod
from typing import Callable, Sequence

from stax.ir import graph as g
from stax.errors import UnsupportedError
from stax.ir.indexing import Index, contiguous_strides, floordiv, lane_step, linear_index, mod
from stax.ir.loops import (EXPENSIVE_OPS, ComputedBuffer, Const, Expr, ExternBuffer, InputBuffer, Load, LoweredProgram,
                           Op, ProducedBuffer, loads, reduction_identity, walk)
from stax.passes.conv_epilogues import fold_conv_epilogues
from stax.passes.matmul_sums import fold_matmul_sums
from stax.passes.simplify import simplify
from stax.passes.variance import one_pass_variances
from stax.target import VECTOR_LOOP_MIN

Loader = Callable[[Sequence[Index]], Expr]


@dataclass(frozen=True)
class CostModel:
    """The CPU's materialization rules (spec 6.6, rule 1 is example 7.2's)."""

    materialize_shared_expensive: bool = True
    max_inline_ops: int = 96
    #: a value of at least min_replicated_size elements whose inlining would evaluate more than
    #: max_recomputed_ops extra ops per element (its ops times the times a broadcast or a
    #: convolution window repeats it, minus one) is materialized; smaller values (a row's
    #: statistics) stay inlined, where the C++ compiler hoists them out of the inner loop
    max_recomputed_ops: int = 32
    min_replicated_size: int = 1 << 14
    native_scans: bool = True  # False: scans call numpy (the extern fallback)
    #: a two-pass variance whose second pass re-reads more than this (half of L2) becomes one
    #: m2 reduction (``stax.passes.variance``); None keeps every two-pass variance as written
    cached_pass_bytes: int | None = 256 << 10


@dataclass
class TensorValue:
    shape: tuple[int, ...]
    dtype: str
    load: Loader
    buffer: str | None = None  # set when the value is a contiguous materialized buffer


def input_buffer_name(index: int) -> str:
    """The buffer of the graph's input ``index``: ``arg0``, ``arg1``, ... (as the front end names them)."""
    return f"arg{int(index)}"


class Lowering:
    def __init__(self, graph: g.Graph, cost_model: CostModel = CostModel()):
        self.graph, self.cost_model = graph, cost_model
        self.values: dict[str, TensorValue] = {}
        self.buffers: list[ProducedBuffer] = []
        self.inputs: list[InputBuffer] = []
        self.var_ranges: dict[str, int] = {}
        self._memo: dict[tuple, Expr] = {}
        self.users = graph.users()

    # --- materialization decisions --------------------------------------------------------
    def _effective_users(self, name: str) -> set[str]:
        """Non-view nodes that read ``name``, looking through chains of views."""
        out: set[str] = set()
        for user in self.users[name]:
            if self.graph.nodes[user].op in g.VIEW_OPS:
                out |= self._effective_users(user)
            else:
                out.add(user)
        return out

    def _must_materialize(self) -> set[str]:
        nodes = self.graph.nodes
        must = set(self.graph.outputs) | set(self.graph.mutations.values())
        for node in nodes.values():
            if node.op in g.REDUCTION_OPS or node.op in g.EXTERN_OPS:
                must.add(node.name)
                if node.op in g.EXTERN_OPS:
                    must.update(node.inputs)
                    must.update(filter(None, map(self._shared_reshape_source, node.inputs)))
                if node.op in g.PRODUCT_OPS:
                    must.update(self._transposed_sources(node))
        return must

    def _shared_reshape_source(self, name: str) -> str | None:
        """The view that a matmul operand (or its transpose) reshapes, when another node reads
        the reshapes too (a weight gradient's operand and the bias gradient's sum over its rows):
        stored at its own shape before that reader is lowered, so that the reader loads the
        stored copy instead of computing the view's source again through the view's index (a
        transposed read), and BLAS reads the reshape in place.  None for any other operand."""
        node = self.graph.nodes[name]
        chain = [node.inputs[0] if g.is_transpose(node) else name]
        if self.graph.nodes[chain[0]].op != "reshape":
            return None
        while self.graph.nodes[chain[-1]].op == "reshape":
            chain.append(self.graph.nodes[chain[-1]].inputs[0])
        source = self.graph.nodes[chain[-1]]
        shared = any(len(self.users[n]) > 1 for n in chain[:-1])
        return source.name if shared and source.op in g.VIEW_OPS else None

    def _transposed_sources(self, node: g.Node) -> list[str]:
        """The computed values a matmul reads transposed (``mm(a, f(x).t())``): stored in their own
        layout, which BLAS reads with a transpose flag, so that the loops computing them match
        their producers' (a transposed store fuses with them only as a scalar or tiled loop)."""
        sources = []
        for name in node.inputs:
            view = self.graph.nodes[name]
            if g.is_transpose(view) and self._only_matmuls_read(name) and \
                    self.graph.nodes[view.inputs[0]].op in g.ELEMENTWISE_OPS:
                sources.append(view.inputs[0])
        return sources

    def _replication(self, name: str) -> float:
        """How many times the elementwise users of ``name`` (looking through views and padding)
        evaluate each of its elements when it is inlined: a broadcast or an unfold window
        repeats elements (a convolution's input is read once per output channel and tap)."""
        size = max(1, prod(self.graph.nodes[name].shape))
        factor = 1.0
        for user in self.users[name]:
            node = self.graph.nodes[user]
            if node.op in g.VIEW_OPS or node.op == "pad":
                factor = max(factor, self._replication(user) * prod(node.shape) / size)
            elif node.op in g.ELEMENTWISE_OPS:
                factor = max(factor, prod(node.shape) / size)
        return factor

    def _reads_interior_padding(self, node: g.Node, value: TensorValue) -> bool:
        """Whether the value reads a dilated source (``pad`` with interior zeros: a guard with a
        floor division or modulo), which keeps every loop that inlines it out of vector form."""
        expr, _ = self._probe(value)
        return any(isinstance(e, Load) and any(not isinstance(atom, str) for guard, _ in e.guard for atom, _ in guard.terms)
                   for e in walk(expr))

    def _reads_crossed_layouts(self, value: TensorValue) -> bool:
        """Whether the value reads one source along its last dim and another across it (a
        residual sum of a row-major tensor and a transposed one: an MLP-Mixer's token mixing
        added back), over a last dim that holds a vector: every loop that inlines it walks one
        of the two with a stride, and runs scalar."""
        if not value.shape or value.shape[-1] < VECTOR_LOOP_MIN:
            return False
        expr, idx = self._probe(value)
        last = str(idx[-1])
        steps = {lane_step(e.index, last, VECTOR_LOOP_MIN) for e in walk(expr)
                 if isinstance(e, Load) and e.dtype != "bool" and last in e.index.variables()}
        return 1 in steps and bool(steps - {0, 1})

    def _should_materialize(self, node: g.Node, value: TensorValue) -> bool:
        if node.op not in g.ELEMENTWISE_OPS or value.buffer is not None:
            return False
        probe = value.load([Index.constant(0)] * len(node.shape))
        ops = [e for e in walk(probe) if isinstance(e, Op)]
        if len(ops) > self.cost_model.max_inline_ops:
            return True
        if prod(node.shape) >= self.cost_model.min_replicated_size and \
                len(ops) * (self._replication(node.name) - 1) > self.cost_model.max_recomputed_ops:
            return True
        shared = len(self._effective_users(node.name)) >= 2
        if shared and (self._reads_interior_padding(node, value) or self._reads_crossed_layouts(value)):
            return True  # computed once, its users vectorize
        expensive = any(e.name in EXPENSIVE_OPS for e in ops)
        return self.cost_model.materialize_shared_expensive and expensive and shared

    # --- main loop ------------------------------------------------------------------------
    def run(self) -> LoweredProgram:
        must = self._must_materialize()
        for node in self.graph.nodes.values():
            value = self._lower(node)
            if node.op not in ("input", "constant") and (node.name in must or self._should_materialize(node, value)):
                if node.op not in g.REDUCTION_OPS and node.op not in g.EXTERN_OPS and node.op not in g.SCAN_OPS \
                        and not self._matmul_reads_in_place(node, value):
                    value = self._materialize(node.name, value)
            self.values[node.name] = value
        outputs = []
        for name in self.graph.outputs:
            value = self.values[name]
            if value.buffer is None or self._is_input(value.buffer) or self._is_alias(value.buffer):
                value = self._materialize(name, value, force_copy=True)
            outputs.append(value.buffer)
        mutations = {self.values[inp].buffer: self._write_back(self.values[inp].buffer, self.values[val])
                     for inp, val in self.graph.mutations.items()}
        for buf in self.buffers:
            if isinstance(buf, ComputedBuffer) and not buf.scan:  # a scan keeps one loop per dim
                simplify_loops(buf)
        return LoweredProgram(self.inputs, self.buffers, outputs, mutations)

    def _is_input(self, name: str) -> bool:
        return any(i.name == name for i in self.inputs)

    def _is_alias(self, name: str) -> bool:
        return any(isinstance(b, ComputedBuffer) and b.name == name and b.aliases for b in self.buffers)

    def _new_name(self) -> str:
        return f"buf{len(self.buffers)}"

    def _probe(self, value: TensorValue) -> tuple[Expr, list[Index]]:
        """``value``'s expression at a symbolic point ``p0, p1, ...`` of its shape, and the point."""
        ranges = {f"p{i}": n for i, n in enumerate(value.shape)}
        idx = [Index.var(v) for v in ranges]
        return self._with_vars(ranges, lambda: value.load(idx)), idx

    def _with_vars(self, ranges: dict[str, int], fn: Callable[[], Expr]) -> Expr:
        previous, self.var_ranges = self.var_ranges, ranges
        try:
            return fn()
        finally:
            self.var_ranges = previous

    def _materialize(self, origin: str, value: TensorValue, force_copy: bool = False) -> TensorValue:
        if value.buffer is not None and not force_copy:
            return value
        name = self._new_name()
        xs = [Index.var(f"x{i}") for i in range(len(value.shape))]
        ranges = {f"x{i}": s for i, s in enumerate(value.shape)}
        body = self._with_vars(ranges, lambda: value.load(xs))
        self.buffers.append(ComputedBuffer(name, value.shape, value.dtype, value.shape, body,
                                           store_index=linear_index(xs, contiguous_strides(value.shape)), origin=origin))
        return self._buffer_value(name, value.shape, value.dtype)

    def _buffer_value(self, name: str, shape: tuple[int, ...], dtype: str,
                      strides: tuple[int, ...] | None = None) -> TensorValue:
        strides = strides if strides is not None else contiguous_strides(shape)
        return TensorValue(shape, dtype, lambda idx: Load(name, linear_index(idx, strides), dtype),
                           buffer=name)

    def _write_back(self, input_name: str, value: TensorValue) -> str:
        """The buffer that writes an input's final value into its storage (in-place update)."""
        inp = next(i for i in self.inputs if i.name == input_name)
        xs = [Index.var(f"x{i}") for i in range(len(inp.shape))]
        ranges = {f"x{i}": s for i, s in enumerate(inp.shape)}
        store = linear_index(xs, inp.strides)
        body = self._with_vars(ranges, lambda: value.load(xs))
        if any(ld.buffer == input_name and ld.index != store for ld in loads(body)):
            value = self._materialize(input_name, value, force_copy=True)  # reads would race the writes
            body = self._with_vars(ranges, lambda: value.load(xs))
        name = self._new_name()
        self.buffers.append(ComputedBuffer(name, inp.shape, inp.dtype, inp.shape, body, store_index=store,
                                           aliases=input_name, origin=f"{input_name} (in-place)"))
        return name

    # --- one graph node -------------------------------------------------------------------
    def _lower(self, node: g.Node) -> TensorValue:
        op = node.op
        ins = [self.values[i] for i in node.inputs]
        if op == "input":  # named by its position, never by the graph (generated code pastes buffer names)
            strides = tuple(node.attr("strides") or contiguous_strides(node.shape))
            name = input_buffer_name(node.attr("index"))
            self.inputs.append(InputBuffer(name, node.shape, node.dtype, strides, node.attr("index")))
            return self._buffer_value(name, node.shape, node.dtype, strides)
        if op == "constant":
            const = Const(node.attr("value"), node.dtype)
            return TensorValue(node.shape, node.dtype, lambda idx: const)
        if op in g.ELEMENTWISE_OPS:
            attrs = tuple((k, v) for k, v in node.attrs)
            return TensorValue(node.shape, node.dtype, self._memoized(
                node.name, lambda idx: Op(op, tuple(v.load(idx) for v in ins), node.dtype, attrs)))
        if op == "reshape" and ins[0].buffer is not None and self._contiguous_input(ins[0]):
            return self._reshaped_buffer(node, ins[0])
        if op in g.VIEW_OPS:
            return TensorValue(node.shape, node.dtype, self._memoized(node.name, self._view_loader(node, ins[0])))
        if op == "pad":
            return self._pad(node, ins[0])
        if op in g.REDUCTION_OPS:
            return self._reduction(node, ins[0])
        if op in g.SCAN_OPS:
            return self._scan(node, ins[0])
        if op in g.EXTERN_OPS:
            # a product reads a (transposed) view of a contiguous buffer, and a reshape of one, in
            # place; a convolution reads its operands as stored, so only a reshape
            stored = [self._in_place_storage(v) or self._reshape_storage(name) for name, v in zip(node.inputs, ins)]
            stored = [t if t and (not t[1] or op in g.PRODUCT_OPS) else None for t in stored]
            # an input of other strides (flipped, sliced, transposed) is copied: an extern reads rows in place
            operands = [t[0] if t else self._materialize(name, v, force_copy=v.buffer is not None)
                        if v.buffer is None or not self._contiguous_input(v) else v for name, v, t in zip(node.inputs, ins, stored)]
            name = self._new_name()
            views = tuple(v.shape if v.shape != self._stored_shape(v.buffer) else None for v in operands)
            attrs = dict(node.attrs)  # a convolution's epilogue (stax.passes.conv_epilogues)
            if any(t and t[1] for t in stored):
                attrs["transposed"] = tuple(bool(t and t[1]) for t in stored)
            self.buffers.append(ExternBuffer(name, node.shape, node.dtype, op, tuple(v.buffer for v in operands),
                                             origin=node.name, attrs=attrs, views=views if any(views) else ()))
            return self._buffer_value(name, node.shape, node.dtype)
        raise UnsupportedError(f"the lowering has no rule for op {op!r} (node {node.name}); "
                               "this is a stax bug if the front end produced it")

    def _reshaped_buffer(self, node: g.Node, src: TensorValue) -> TensorValue:
        """A reshape of a contiguous buffer: the same storage, read in the new shape with affine
        indices (no floor division and modulo to simplify in the readers' loops)."""
        strides, buffer = contiguous_strides(node.shape), src.buffer
        return TensorValue(node.shape, node.dtype, lambda idx: Load(buffer, linear_index(idx, strides), node.dtype))

    def _memoized(self, name: str, loader: Loader) -> Loader:
        """Share the expression of a node loaded twice at the same index (the body stays a DAG)."""
        def load(idx):
            key = (name, tuple(idx), tuple(sorted(self.var_ranges.items())))
            if key not in self._memo:
                self._memo[key] = loader(idx)
            return self._memo[key]
        return load

    def _matmul_reads_in_place(self, node: g.Node, value: TensorValue) -> bool:
        """A view read only by matmuls (directly or through other views), which take its storage
        as it is, with a transpose flag, or as a reshaped array; but a transpose that two or more
        products take as their right operand is stored once (``_shared_right_transpose``)."""
        return node.op in g.VIEW_OPS and self._only_matmuls_read(node.name) and (
            self._in_place_storage(value) is not None or node.op == "reshape" or g.is_transpose(node)) and \
            not self._shared_right_transpose(node)

    def _shared_right_transpose(self, node: g.Node) -> bool:
        """``w.t()`` as the right operand of two or more products (a recurrent weight, once a step):
        BLAS multiplies a few rows by a right operand stored transposed well below its rate with
        the operand stored as it is read (``experiments.bench.gemm_layouts``), so the transpose is
        stored once for all of them."""
        if not g.is_transpose(node):
            return False
        readers = [self.graph.nodes[u] for u in self.users[node.name]]
        return sum(r.op in g.EXTERN_OPS and node.name in r.inputs[1::2] for r in readers) >= 2

    def _reshaped_storage(self, name: str) -> TensorValue | None:
        """A reshape read by matmuls only, as its source's contiguous buffer read in the reshape's
        shape: the source is materialized at its own shape (once, for every reader), so its loops
        keep their affine indices (a convolution's columns: windows of the input)."""
        node = self.graph.nodes[name]
        if node.op != "reshape" or not self._only_matmuls_read(name):
            return None
        source = node.inputs[0]
        while self.graph.nodes[source].op == "reshape" and self.values[source].buffer is None:
            source = self.graph.nodes[source].inputs[0]
        src = self.values[source]
        if src.buffer is None:
            src = self.values[source] = self._materialize(source, src)
        elif not self._contiguous_input(src) or self._is_alias(src.buffer):
            return None
        return self._buffer_value(src.buffer, node.shape, node.dtype)

    def _reshape_storage(self, name: str) -> tuple[TensorValue, bool] | None:
        """A matmul operand that is a reshape, or a transpose of one, read in place (see
        ``_reshaped_storage``), and whether it is transposed."""
        node = self.graph.nodes[name]
        transposed = g.is_transpose(node)
        value = self._reshaped_storage(node.inputs[0] if transposed else name)
        return None if value is None else (value, transposed)

    def _stored_shape(self, buffer: str) -> tuple[int, ...]:
        return next(b.shape for b in (*self.inputs, *self.buffers) if b.name == buffer)

    def _only_matmuls_read(self, name: str) -> bool:
        """Every use of ``name`` is a matmul operand, directly or through views (``w.t().t()``)."""
        users = self.users[name]
        return bool(users) and name not in self.graph.outputs and name not in self.graph.mutations.values() and \
            all(self.graph.nodes[u].op in g.EXTERN_OPS or self.graph.nodes[u].op in g.VIEW_OPS and self._only_matmuls_read(u)
                for u in users)

    def _in_place_storage(self, value: TensorValue) -> tuple[TensorValue, bool] | None:
        """The contiguous buffer that a view ``value`` reads element for element (in any shape of
        as many elements: a reshape), or whose last two dims it transposes (a matmul operand
        ``w.t()``, or the transpose of a reshape), and whether it transposes; BLAS reads it in
        place. None for any other view."""
        if value.buffer is not None or len(value.shape) < 2:
            return None
        probe, idx = self._probe(value)
        if not isinstance(probe, Load) or probe.guard:
            return None
        source = next((b for b in self.buffers if b.name == probe.buffer), None) or \
            next((i for i in self.inputs if i.name == probe.buffer), None)
        for transposed in (True, False):
            shape = value.shape[:-2] + (value.shape[-1], value.shape[-2]) if transposed else value.shape
            order = idx[:-2] + [idx[-1], idx[-2]] if transposed else idx
            if source is not None and prod(source.shape) == prod(shape) and not getattr(source, "aliases", None) and \
                    not (isinstance(source, InputBuffer) and source.strides != contiguous_strides(source.shape)) and \
                    probe.index == linear_index(order, contiguous_strides(shape)):
                return self._buffer_value(probe.buffer, shape, value.dtype), transposed
        return None

    def _contiguous_input(self, value: TensorValue) -> bool:
        inp = next((i for i in self.inputs if i.name == value.buffer), None)
        return inp is None or inp.strides == contiguous_strides(inp.shape)

    def _view_loader(self, node: g.Node, src: TensorValue) -> Loader:
        if node.op == "permute":
            dims = node.attr("dims")
            def load(idx):
                out = [None] * len(dims)
                for i, d in enumerate(dims):
                    out[d] = idx[i]
                return src.load(out)
            return load
        if node.op == "expand":
            return lambda idx: src.load([Index.constant(0) if s == 1 and n != 1 else i
                                         for i, s, n in zip(idx, src.shape, node.shape)])
        if node.op == "slice":
            dim, start, step = node.attr("dim"), node.attr("start"), node.attr("step")
            return lambda idx: src.load([i * step + start if k == dim else i for k, i in enumerate(idx)])
        if node.op == "unfold":
            dim, step = node.attr("dim"), node.attr("step")
            return lambda idx: src.load([idx[k] * step + idx[-1] if k == dim else i for k, i in enumerate(idx[:-1])])
        if node.op == "flip":
            dims = node.attr("dims")
            return lambda idx: src.load([i * -1 + (n - 1) if k in dims else i
                                         for k, (i, n) in enumerate(zip(idx, src.shape))])
        if node.op == "reshape":
            if 0 in src.shape:  # no element is ever loaded; any index will do (and // or % by 0 is avoided)
                return lambda idx: src.load([Index.constant(0)] * len(src.shape))
            new_strides, old_strides = contiguous_strides(node.shape), contiguous_strides(src.shape)
            def load(idx):
                flat = linear_index(idx, new_strides)
                return src.load([mod(floordiv(flat, st, self.var_ranges), size, self.var_ranges)
                                 for st, size in zip(old_strides, src.shape)])
            return load
        raise AssertionError(node.op)

    def _pad(self, node: g.Node, src: TensorValue) -> TensorValue:
        """A guarded load of the source (graph ``pad``): inlined into every user like a view.  A
        source that is not one load (an inlined expression, or a load padded with another value)
        is materialized first, so that the guard keeps every read inside the buffer."""
        value = node.attr("value")
        probe, _ = self._probe(src)
        if not isinstance(probe, Load) or (probe.guard and repr(probe.other) != repr(value)):  # -0.0 is not 0.0
            src = self.values[node.inputs[0]] = self._materialize(node.inputs[0], src)
        dims = list(zip(node.attr("low"), node.attr("interior"), src.shape))

        def load(idx: Sequence[Index]) -> Expr:
            inner, guard = [], []
            for i, (low, interior, size) in zip(idx, dims):
                at, every = i + -low, interior + 1  # the position in the source's dilated extent
                inner.append(floordiv(at, every, self.var_ranges))
                guard.append((at, (size - 1) * every + 1 if size else 0))
                if every > 1:
                    guard.append((mod(at, every, self.var_ranges), 1))
            return guarded(src.load(inner), guard, value, self.var_ranges)
        return TensorValue(node.shape, node.dtype, self._memoized(node.name, load))

    def _reduction(self, node: g.Node, src: TensorValue) -> TensorValue:
        dims = tuple(node.attr("dims"))
        kept = [d for d in range(len(src.shape)) if d not in dims]
        ranges = tuple(src.shape[d] for d in kept)
        reduction_ranges = tuple(src.shape[d] for d in dims)
        if prod(reduction_ranges) <= 1:
            return self._trivial_reduction(node, src, prod(reduction_ranges))
        idx: list[Index] = [Index.constant(0)] * len(src.shape)
        for i, d in enumerate(kept):
            idx[d] = Index.var(f"x{i}")
        for i, d in enumerate(dims):
            idx[d] = Index.var(f"r{i}")
        var_ranges = {f"x{i}": s for i, s in enumerate(ranges)} | {f"r{i}": s for i, s in enumerate(reduction_ranges)}
        body = self._with_vars(var_ranges, lambda: src.load(idx))
        if body.dtype != node.dtype:
            body = Op("cast", (body,), node.dtype, (("dtype", node.dtype),))
        name = self._new_name()
        xs = [Index.var(f"x{i}") for i in range(len(ranges))]
        self.buffers.append(ComputedBuffer(name, node.shape, node.dtype, ranges, body, reduction_ranges,
                                           node.op, store_index=linear_index(xs, contiguous_strides(ranges)),
                                           origin=node.name))
        return self._buffer_value(name, node.shape, node.dtype)

    def _scan(self, node: g.Node, src: TensorValue) -> TensorValue:
        """A scan buffer (spec 7.7): loops ``x*`` over the other dims, ``r0`` along the carried dim."""
        dim, shape = node.attr("dim"), node.shape
        if shape[dim] == 1:  # nothing is carried: the value itself, inlined like a pointwise node
            return src
        if not self.cost_model.native_scans or 0 in shape:
            operand = self._materialize(node.inputs[0], src) if src.buffer is None or not self._contiguous_input(src) \
                else src
            name = self._new_name()
            self.buffers.append(ExternBuffer(name, shape, node.dtype, node.op, (operand.buffer,), origin=node.name,
                                             attrs={"axis": dim}))
            return self._buffer_value(name, shape, node.dtype)
        others = [d for d in range(len(shape)) if d != dim]
        idx: list[Index] = [Index.constant(0)] * len(shape)
        for i, d in enumerate(others):
            idx[d] = Index.var(f"x{i}")
        idx[dim] = Index.var("r0")
        var_ranges = {f"x{i}": shape[d] for i, d in enumerate(others)} | {"r0": shape[dim]}
        body = self._with_vars(var_ranges, lambda: src.load(idx))
        name = self._new_name()
        self.buffers.append(ComputedBuffer(name, shape, node.dtype, tuple(shape[d] for d in others), body,
                                           (shape[dim],), store_index=linear_index(idx, contiguous_strides(shape)),
                                           origin=node.name, scan=g.SCAN_COMBINE[node.op], scan_dim=dim))
        return self._buffer_value(name, shape, node.dtype)

    def _trivial_reduction(self, node: g.Node, src: TensorValue, count: int) -> TensorValue:
        """A reduction over one element is that element, over none the op's identity (as
        TorchInductor lowers them): a pointwise value that is inlined into its users."""
        dims, keepdim = node.attr("dims"), node.attr("keepdim")
        if count == 0:
            const = Const(reduction_identity(node.op, node.dtype), node.dtype)
            return TensorValue(node.shape, node.dtype, lambda idx: const)

        def load(idx):
            kept = iter(idx if not keepdim else [i for d, i in enumerate(idx) if d not in dims])
            body = src.load([Index.constant(0) if d in dims else next(kept) for d in range(len(src.shape))])
            body = body if body.dtype == node.dtype else Op("cast", (body,), node.dtype, (("dtype", node.dtype),))
            if node.op != "m2":
                return body
            # one element deviates from its mean by x - x: 0, or NaN for an infinity or a NaN
            deviation = Op("sub", (body, body), node.dtype)
            return Op("mul", (deviation, deviation), node.dtype)
        return TensorValue(node.shape, node.dtype, self._memoized(node.name, load))


def guarded(load: Load, guard: Sequence[tuple[Index, int]], other, ranges: dict[str, int]) -> Expr:
    """``load`` read only where every ``(e, n)`` of ``guard`` has ``0 <= e < n``, else ``other``.
    Conditions the variables' ranges prove are dropped; one they refute makes the value ``other``."""
    kept = []
    for e, n in guard:
        lo, hi = e.bounds(ranges)
        if hi < 0 or lo >= n:
            return Const(other, load.dtype)
        if lo < 0 or hi >= n:
            kept.append((e, n))
    return replace(load, guard=load.guard + tuple(kept), other=other) if kept else load


def lower(graph: g.Graph, cost_model: CostModel = CostModel()) -> LoweredProgram:
    """Lower a traced graph to loop IR (see the module docstring for the rules), its constant
    powers first simplified (``stax.passes.simplify``), its sums of matmuls made one accumulating call
    (``stax.passes.matmul_sums``), its blocked convolutions' per-channel epilogues folded into them
    (``stax.passes.conv_epilogues``) and two-pass variances that would re-read memory made one pass
    (``stax.passes.variance``)."""
    graph = fold_conv_epilogues(fold_matmul_sums(simplify(graph)))
    if cost_model.cached_pass_bytes is not None:
        graph = one_pass_variances(graph, cost_model.cached_pass_bytes)
    return Lowering(graph, cost_model).run()


def _rewrite(expr: Expr, rewrite: Callable[[Index], Index], buffers: dict[str, str], memo: dict) -> Expr:
    """``rewrite_indices``'s walk; ``memo`` holds the rewritten expressions by identity and the
    rewritten indices by value (the loads of a body mostly share a few indices)."""
    if id(expr) in memo:
        return memo[id(expr)]
    if isinstance(expr, Load):
        def index(old: Index) -> Index:
            if old not in memo:
                memo[old] = rewrite(old)
            return memo[old]
        guard = tuple((index(e), n) for e, n in expr.guard)
        out: Expr = Load(buffers.get(expr.buffer, expr.buffer), index(expr.index), expr.dtype, guard, expr.other)
    elif isinstance(expr, Op):
        out = Op(expr.name, tuple(_rewrite(a, rewrite, buffers, memo) for a in expr.args), expr.dtype, expr.attrs)
    else:
        out = expr
    memo[id(expr)] = out
    return out


def rewrite_indices(expr: Expr, rewrite: Callable[[Index], Index], buffers: dict[str, str] | None = None) -> Expr:
    """``expr`` with every load index (and guard) rewritten by ``rewrite``, and the loaded
    buffers' names by ``buffers``."""
    return _rewrite(expr, rewrite, buffers or {}, {})


def substitute(expr: Expr, mapping: dict[str, Index], ranges: dict[str, int],
               buffers: dict[str, str] | None = None) -> Expr:
    """Rewrite every load index of ``expr`` by substituting loop variables (and the loaded
    buffers' names by ``buffers``)."""
    return rewrite_indices(expr, lambda index: index.subs(mapping, ranges), buffers)


def _mergeable(indices: list[Index], outer: str, inner: str, inner_range: int) -> bool:
    return all(ix.is_affine_in(outer) and ix.is_affine_in(inner) and ix.coeff(outer) == ix.coeff(inner) * inner_range
               for ix in indices)


def _merge_group(names: list[str], sizes: list[int], indices: list[Index]) -> list[list[int]]:
    """Groups of adjacent positions (into ``names``) that can run as one loop."""
    groups: list[list[int]] = []
    for pos in range(len(names)):
        if sizes[pos] == 1:
            continue
        if groups and _mergeable(indices, names[groups[-1][-1]], names[pos], sizes[pos]):
            groups[-1].append(pos)
        else:
            groups.append([pos])
    return groups


def simplify_loops(buf: ComputedBuffer) -> None:
    """Merge adjacent loop variables that all accesses address contiguously; drop size-1 loops;
    a nest with an empty range becomes one empty loop (TorchInductor's loop simplification; gives
    example 7.2's ``((8192,), ())`` group)."""
    indices = [ix for ld in buf.reads() for ix in (ld.index, *(e for e, _ in ld.guard))] + [buf.store_index]
    linear: dict[str, str | None] = {}  # old variable -> the new one its term moves to (None: it drops)
    merges: list[tuple[str, list[tuple[str, int]]]] = []  # new variable, the old ones (and sizes) it runs
    new_ranges: dict[str, int] = {}
    result = {}
    for prefix, old_names, sizes in (("x", buf.pointwise_vars, list(buf.ranges)),
                                     ("r", buf.reduction_vars, list(buf.reduction_ranges))):
        linear.update(dict.fromkeys(old_names))  # size 1, empty nest, or outer in a group: the term drops
        if 0 in sizes:  # an empty nest: one loop of no iterations, whose body never runs
            new_ranges[f"{prefix}0"] = 0
            result[prefix] = (0,)
            continue
        groups = _merge_group(old_names, sizes, indices)
        for gi, group in enumerate(groups):
            name = f"{prefix}{gi}"
            new_ranges[name] = prod(sizes[pos] for pos in group)
            linear[old_names[group[-1]]] = name  # a mergeable group's coefficient is its innermost's
            merges.append((name, [(old_names[pos], sizes[pos]) for pos in group]))
        result[prefix] = tuple(new_ranges[f"{prefix}{gi}"] for gi in range(len(groups)))

    @functools.cache
    def mapping() -> dict[str, Index]:
        """Every old variable's value in the new loops (0 where it drops)."""
        values = dict.fromkeys(linear, Index.constant(0))
        for name, olds in merges:
            ranges, inner = {name: new_ranges[name]}, 1
            for old, size in reversed(olds):
                values[old] = mod(floordiv(Index.var(name), inner, ranges), size, ranges) if len(olds) > 1 \
                    else Index.var(name)
                inner *= size
        return values

    def merged(index: Index) -> Index:
        """``index.subs(mapping(), new_ranges)``, its variable terms moved directly (``_mergeable``
        holds for every index of ``buf``: a group's outer terms sum to its innermost's; a floor
        division or modulo holds no variable of a merged group, only renamed or dropped ones)."""
        coeffs: dict[str, int] = {}
        atoms = Index.constant(0)
        for atom, c in index.terms:
            if not isinstance(atom, str):
                atoms = atoms + Index(((atom, c),)).subs(mapping(), new_ranges)
                continue
            new = linear.get(atom, atom)
            if new is not None:
                coeffs[new] = coeffs.get(new, 0) + c
        return Index.build(coeffs, index.const) + atoms
    buf.body = rewrite_indices(buf.body, merged)
    buf.store_index = merged(buf.store_index)
    buf.ranges, buf.reduction_ranges = result["x"], result["r"]


__all__ = ["CostModel", "lower", "rewrite_indices", "simplify_loops", "substitute"]
