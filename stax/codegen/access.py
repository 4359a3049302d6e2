"""The C++ of a block's loads and stores (spec sections 8.1-8.2): an element, a vector
(contiguous, strided, broadcast, guarded for padding or for a loop's last lanes), a
block-internal value read from a local, a per-point value, a per-thread row or a carried array;
the counting build's counted accesses (``stax_count.h``); streamed (non-temporal) stores."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from stax.ir.indexing import Index, contiguous_strides, lane_step, linear_index
from stax.ir.loops import Load
from stax.codegen.analysis import BlockAnalysis
from stax.codegen.exprs import BodyPrinter, Hoist, lane_type, literal
from stax.codegen.kernel_parts import Emission, LoadContext, Member, access_kind, guard_condition


class BlockAccess(BlockAnalysis):
    """A block's analysis, and the text of its accesses in the current generation (``emit``)."""

    emit: Emission  # the current generation's state (generate.region_body starts a new one)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.emit = Emission()

    def printer(self, vector: bool, vvar: str | None, ctx: LoadContext | list[LoadContext], lines: list[str],
                 ind: str, hoist: Hoist | None = None) -> BodyPrinter:
        """A printer of one lane, or of one lane per context of ``ctx`` (lane k a vector further
        along ``vvar`` than lane k - 1); ``hoist`` takes the loop's invariant values."""
        def lane_load(local: LoadContext, lane: int) -> Callable[[Load], str]:
            def load(ld: Load) -> str:
                if ld in self.emit.transposed_values:
                    return self.emit.transposed_values[ld]
                if ld.buffer in self.produced:
                    return self._internal_value(ld, vector, vvar, local, lane)
                return self.load_text(ld, vector, vvar)
            return load
        contexts = ctx if isinstance(ctx, list) else [ctx]
        return BodyPrinter(vector, [lane_load(c, lane) for lane, c in enumerate(contexts)], lines, ind, self.emit.state,
                           hoist=hoist)

    def _lane_shift(self, vvar: str | None, lane: int) -> dict[str, Index]:
        """The point of lane ``lane`` of an unrolled vector loop: ``vvar`` a vector per lane further."""
        return {vvar: Index.var(vvar) + lane * self.width} if lane else {}

    def _internal_value(self, ld: Load, vector: bool, vvar: str | None, ctx: LoadContext, lane: int = 0) -> str:
        """A block-internal buffer: a local of this loop body, a per-point value, or a row (at
        ``lane``'s point); or a load of its stored value when it is read back from memory."""
        name = ld.buffer
        if name in self.carried:
            kind = access_kind(ld.index, vvar, self.width) if vector else "scalar"
            if kind == "contiguous":
                return f"stax::vload({name}_carried.get() + {ld.index})"
            element = f"{name}_carried[{ld.index}]"
            return element if kind == "scalar" else f"stax::splat<{lane_type(ld.dtype)}>({element})"
        if name in self.memory_read:
            return self.load_text(ld, vector, vvar)
        if name in ctx.local:
            return ctx.local[name]
        if name in ctx.point:
            value = ctx.point[name]
            if vector and name not in ctx.vector_point:
                return f"stax::splat<{lane_type(ld.dtype)}>({value})"
            return value
        row_index = self._row_index(self._lane_shift(vvar, lane))
        if vector and self.emit.tail:
            return f"stax::vload_first({name}_row.get() + {row_index}, {self.emit.tail_lanes()}, {literal(0, ld.dtype, False)})"
        if vector:
            return f"stax::vload({name}_row.get() + {row_index})"
        return f"{name}_row[{row_index}]"

    def _row_index(self, shift: dict[str, Index] | None = None) -> Index:
        """The index of the current point in a row buffer (``shift``ed: another lane's point)."""
        index = linear_index([Index.var(v) for v in self.frame.inner_vars], contiguous_strides(self.frame.inner))
        return index.subs(shift, self.frame.var_ranges) if shift else index

    def load_text(self, ld: Load, vector: bool, vvar: str | None) -> str:
        tail = self.emit.tail
        if vector and tail and tail[0] == vvar and access_kind(ld.index, vvar, self.width) != "invariant":
            if not ld.guard:
                stride = self._vector_stride(ld, vvar)
                load = f"vload_first_strided<{stride}>" if stride > 1 else "vload_first"
                return (f"stax::{load}({self._pointer(ld.buffer)} + {ld.index}, {self.emit.tail_lanes()}, "
                        f"{literal(ld.other, ld.dtype, False)})")
            ld = replace(ld, guard=ld.guard + ((Index.var(vvar), tail[1]),))  # no lane past the loop's end
        if ld.guard:  # padding: memory is read only where the guard holds
            # tested lane by lane, or the same for every lane
            lanes = [(e, n) for e, n in ld.guard if vector and vvar in e.variables() and lane_step(e, vvar, self.width)]
            points = [(e, n) for e, n in ld.guard if (e, n) not in lanes]
            if lanes:
                tests = ", ".join(f"stax::LaneGuard{{{e}, {lane_step(e, vvar, self.width)}, {n}}}" for e, n in lanes)
                stride = self._vector_stride(ld, vvar)
                inner = (f"stax::vload_guarded{f'<{stride}>' if stride > 1 else ''}({self._pointer(ld.buffer)} + "
                         f"{ld.index}, {literal(ld.other, ld.dtype, False)}, {{{tests}}})")
            else:
                inner = self.load_text(replace(ld, guard=()), vector, vvar)
            if not points:
                return inner
            return f"({guard_condition(points, self.frame.var_ranges)} ? {inner} : {literal(ld.other, ld.dtype, vector)})"
        storage = self.storage.get(ld.buffer, ld.buffer)
        ptr, slot = self.pointer[storage], self.params.index(storage)
        element = f"stax::count_load({ptr}, {ld.index}, {slot})" if self.counting else f"{ptr}[{ld.index}]"
        if not vector:
            return element
        kind = access_kind(ld.index, vvar, self.width)
        if kind == "contiguous":
            return f"stax::count_vload({ptr} + {ld.index}, {slot})" if self.counting else f"stax::vload({ptr} + {ld.index})"
        if kind == "strided":
            return f"stax::vload_strided<{self._vector_stride(ld, vvar)}>({ptr} + {ld.index})"
        cast = "(int8_t)" if ld.dtype == "bool" else ""
        return f"stax::splat<{lane_type(ld.dtype)}>({cast}{element})"

    def store(self, m: Member, value: str, vector: bool, vvar: str | None, ind: str, lines: list[str],
               row_pass: bool = False) -> None:
        if m.buf.name in self.carried:
            target = f"{m.buf.name}_carried"
            lines.append(f"{ind}stax::vstore({target}.get() + {m.store}, {value});" if vector
                         else f"{ind}{target}[{m.store}] = {value};")
            return
        if m.internal:
            return
        storage = self.storage.get(m.buf.name, m.buf.name)
        ptr, slot = self.pointer[storage], self.params.index(storage)
        if self.counting:
            line = (f"stax::count_vstore({ptr} + {m.store}, {value}, {slot})" if vector
                    else f"stax::count_store({ptr}, {m.store}, {value}, {slot})")
        else:
            streams = (row_pass or self.emit.strip_rows) and storage in self.streamed
            write = "stax::vstore_stream" if streams else "stax::vstore"
            line = f"{write}({ptr} + {m.store}, {value})" if vector else f"{ptr}[{m.store}] = {value}"
            if vector and self.emit.tail:  # the lanes before the loop's end
                line = f"stax::vstore_first({ptr} + {m.store}, {value}, {self.emit.tail_lanes()})"
        lines.append(f"{ind}{line};")
