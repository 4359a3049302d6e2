"""The interleaved form of a pointwise block whose last loop variable ``v`` is read through
``v // s`` and ``v % s``: the input gradient of a stride-``s`` convolution, whose ``s`` phases
are placed into every ``s``-th element (``stax.frontend.ops.nn._input_grad_by_phases``).  Such an index is
not affine in ``v``, so neither the vector form (8.1) nor the tiles (8.2) apply, and the scalar
loop evaluates a division, a modulo and a branch per load and element.

Written ``v = s * q + r``, each phase ``r`` reads affinely in ``q`` and its guards on ``v % s``
are decided at generation time.  The form strip-mines ``q`` (8.1): per step it computes the
block's values of each phase as vectors along ``q`` (contiguous or strided reads), and stores
each output's ``s`` phase vectors interleaved in registers as ``s`` vectors of consecutive
elements (``stax::vstore_interleaved``).  The ``q`` past the last whole vector run as one guarded
vector (``BlockKernel.guarded_tail``) or, where that does not apply, as scalar points.
"""
from __future__ import annotations

from stax.ir.indexing import FloorDiv, Index, Mod
from stax.ir.loops import loads
from stax.codegen.kernel import BlockKernel
from stax.codegen.kernel_parts import LoadContext, Member, access_kind


class Interleaved:
    """The interleaved form of one block; reads the block's analysis and emits through its
    ``kernel`` builder."""

    def __init__(self, kernel: BlockKernel):
        self.kernel = kernel
        self._phases: list[list[Member]] | None = None

    def divisor(self) -> int | None:
        """``s`` when the form applies to the block: a pointwise block in any order of points,
        its last variable read through floor divisions and modulos by ``s`` only (2 to
        Tuning.max_vector_stride, dividing the variable's range), every output stored contiguously
        along it, and every phase's reads vectorizable along ``q``."""
        k, f = self.kernel, self.kernel.frame
        if k.counting or k.width == 1 or f.inner or not f.outer or k.sequential_reason or k.memory_read:
            return None
        v, n = f.outer_vars[-1], f.outer[-1]
        divisors = {atom.divisor if isinstance(atom, FloorDiv) else atom.modulus
                    for m in k.members for ld in loads(m.body) for e in (ld.index, *(g for g, _ in ld.guard))
                    for atom, _ in e.terms if isinstance(atom, (FloorDiv, Mod)) and v in atom.base.variables()}
        if len(divisors) != 1:
            return None
        s = divisors.pop()
        if not 2 <= s <= k.tuning.max_vector_stride or n % s:
            return None
        if any(access_kind(m.store, v) != "contiguous" for m in k.members if not m.internal):
            return None
        if not all(k.vectorizable(v, phase, with_store=False) for phase in self.phases(s)):
            return None
        return s

    def phases(self, s: int) -> list[list[Member]]:
        """The block's members at ``v = s * v + r`` for each phase ``r`` (``v`` now counts ``q``)."""
        if self._phases is None:
            f, v = self.kernel.frame, self.kernel.frame.outer_vars[-1]
            ranges = {**f.var_ranges, v: f.outer[-1] // s}
            self._phases = [self.kernel.member_copies({v: Index.var(v) * s + r}, f"_phase{r}", ranges)
                            for r in range(s)]
        return self._phases

    def body(self, depth: int) -> list[str]:
        """The loop nest over the outer variables, the last one counting ``q``: whole vectors of
        ``q``, then the rest as scalar points of each phase."""
        k, f = self.kernel, self.kernel.frame
        s = self.divisor()
        vars_, ranges = f.outer_vars, list(f.outer[:-1]) + [f.outer[-1] // s]
        n = ranges[-1]
        whole = n - n % k.width
        lines = []
        if whole > 0:
            lines += k.nest(vars_, ranges, depth, lambda ind: self._point(s, True, ind),
                            bounds={vars_[-1]: (0, whole, k.width)})
        if n > whole and k.guarded_tail(vars_[-1], n - whole, [m for phase in self.phases(s) for m in phase]):
            with k.emit.guarding_tail(vars_[-1], n):
                lines += k.nest(vars_, ranges, depth, lambda ind: self._point(s, True, ind),
                                bounds={vars_[-1]: (whole, n, k.width)})
        elif n > whole:
            lines += k.nest(vars_, ranges, depth, lambda ind: self._point(s, False, ind),
                            bounds={vars_[-1]: (whole, n, 1)})
        return lines

    def _point(self, s: int, vector: bool, ind: str) -> list[str]:
        """Every phase's members at one point of ``q`` (W of them when ``vector``), then their
        stores: interleaved vectors, or one element per phase."""
        k, v = self.kernel, self.kernel.frame.outer_vars[-1]
        lines: list[str] = []
        ctx = LoadContext()
        stored: dict[str, list[str]] = {}
        for phase in self.phases(s):
            printer = k.printer(vector, v if vector else None, ctx, lines, ind)
            for original, m in zip(k.members, phase):
                value = printer(m.body)
                ctx.local[m.buf.name] = ctx.point[m.buf.name] = value
                if vector:
                    ctx.vector_point.add(m.buf.name)
                    stored.setdefault(original.buf.name, []).append(value)
                else:
                    k.store(m, value, False, None, ind, lines)
        for m in k.members:
            if vector and not m.internal:
                ptr = k.pointer[k.storage.get(m.buf.name, m.buf.name)]
                first = m.store.subs({v: Index.var(v) * s}, k.frame.var_ranges)
                values = ", ".join(stored[m.buf.name])
                if k.emit.tail:  # the points before the loop's end
                    lines.append(f"{ind}stax::vstore_interleaved_first({ptr} + {first}, {k.emit.tail_lanes()}, {values});")
                else:
                    lines.append(f"{ind}stax::vstore_interleaved({ptr} + {first}, {values});")
        return lines
