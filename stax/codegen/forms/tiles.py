"""The tiled forms (8.2) of pointwise blocks with transposed reads: W x W register tiles whose
transposed rows are loaded as W vectors and transposed in registers (``tiled-vector``), or B x B
scalar tiles where that does not apply (``tiled``).  Over large inputs the register tiles run
in strips (Tuning.strip_rows): the strip's transposed reads first, into a per-thread buffer, then the
block's loop streams over whole rows."""
from __future__ import annotations

from math import prod

from stax.dtypes import ITEMSIZE
from stax.ir.indexing import lane_step
from stax.ir.loops import Load
from stax.codegen.exprs import lane_type
from stax.codegen.kernel import BlockKernel
from stax.codegen.kernel_parts import SCRATCH_SHORT, access_kind, with_line_head


class Tiles:
    """The tiled forms of one block: B x B scalar tiles (``tiled``) and W x W register tiles,
    in blocks or in strips (``tiled_vector``).  It reads the block's analysis and emits through
    its ``kernel`` builder."""

    def __init__(self, kernel: BlockKernel):
        self.kernel = kernel

    def tiled(self, depth: int) -> list[str]:
        """2-D tiling of the two innermost outer loops (8.2)."""
        f = self.kernel.frame
        vars_, ranges = f.outer_vars, list(f.outer)
        u, v = vars_[-2], vars_[-1]
        tiles = [f"{u}_tile", f"{v}_tile"]
        outer_vars = vars_[:-2] + tiles
        tile = self.kernel.tuning.tile
        tile_ranges = ranges[:-2] + [-(-ranges[-2] // tile), -(-ranges[-1] // tile)]

        def body(ind: str) -> list[str]:
            lines = [ind + f"for (int64_t {u} = {u}_tile * {tile}; {u} < std::min<int64_t>({u}_tile * {tile} + {tile}, {ranges[-2]}); {u} += 1)",
                     ind + "{",
                     ind + f"    for (int64_t {v} = {v}_tile * {tile}; {v} < std::min<int64_t>({v}_tile * {tile} + {tile}, {ranges[-1]}); {v} += 1)",
                     ind + "    {"]
            lines += self.kernel.point("scalar", None, ind + "        ", outer_vector=False)
            lines += [ind + "    }", ind + "}"]
            return lines
        return self.kernel.nest(outer_vars, tile_ranges, depth, body)

    def transposed_loads(self, u: str | None = None) -> list[Load] | None:
        """The loads a W x W tile transposes in registers (strided along the last outer variable
        ``v``, contiguous along ``u``, by default the one before it), or None when the block
        cannot run in such tiles."""
        k, f = self.kernel, self.kernel.frame
        u, v, w = u or f.outer_vars[-2], f.outer_vars[-1], k.width
        if min(f.var_ranges[u], f.outer[-1]) < w or \
                any(access_kind(m.store, v, w) != "contiguous" for m in k.members if not m.internal):
            return None
        transposed = []
        for m in k.members:
            for ld in k.memory_loads(m):
                if any(lane_step(e, x, w) != 0 for e, _ in ld.guard for x in {u, v} & e.variables()):
                    return None  # padding that differs between lanes: scalar tiles test it per point
                if access_kind(ld.index, v, w) != "strided":
                    continue
                if access_kind(ld.index, u, w) != "contiguous" or ld.dtype == "bool":
                    return None
                transposed.append(ld)
        return list(dict.fromkeys(transposed))

    def loop_order(self) -> list[str] | None:
        """The outer variables in an order whose last two a W x W tile can take, when the
        transposed reads are contiguous along an outer variable other than the one before the last
        (a permutation that moves a dim shorter than a vector: a QKV gradient's ``(L, B, 3, E)``
        read from ``(3, L, B, E)``): that variable moved before the last one (a pointwise
        block's points run in any order).  None when the order as it is serves, or none does."""
        k, f = self.kernel, self.kernel.frame
        if f.inner or f.dims or len(f.outer) < 3 or k.width == 1 or k.counting or k.sequential_reason or \
                k.vectorizable(f.outer_vars[-1], k.members, with_store=True) or self.transposed_loads() is not None:
            return None
        for u in reversed(f.outer_vars[:-2]):
            if self.transposed_loads(u) is not None:
                return [x for x in f.outer_vars[:-1] if x != u] + [u, f.outer_vars[-1]]
        return None

    def tiled_vector(self, depth: int) -> list[str]:
        """W x W tiles of the two innermost outer loops (8.2) whose transposed reads are W vector
        loads along the first of them, transposed in registers: every access is a vector access.
        The tiles run in Tuning.vector_tile_block blocks; the rows and columns past the last whole tile
        run in scalar nests."""
        f, w = self.kernel.frame, self.kernel.width
        vars_, ranges = f.outer_vars, list(f.outer)
        u, v = vars_[-2], vars_[-1]
        whole_v = ranges[-1] - ranges[-1] % w
        per_block = self.kernel.tuning.vector_tile_block // w
        # the tiles along u start where the transposed rows start a cache line, after a scalar head:
        # their bounds are then C++ expressions of the head, else numbers
        line = self.kernel.line_start(u, ranges[-2], self.transposed_loads())
        if line:
            first_u, tiles_u = f"{u}_head", f"({ranges[-2]} - {u}_head) / {w}"
            end_u, blocks_u = f"{first_u} + {tiles_u} * {w}", f"({tiles_u} + {per_block - 1}) / {per_block}"
            tile_u = f"{first_u} + {u}_tile * {w}"
        else:
            first_u, tiles_u = 0, ranges[-2] // w
            end_u, blocks_u = tiles_u * w, -(-tiles_u // per_block)
            tile_u = f"{u}_tile * {w}"

        def tile(ind: str) -> list[str]:
            lines, values = [], {}
            for ld in self.transposed_loads():
                name, loaded = self._register_tile(ld, tile_u, ind)
                values[ld] = f"{name}[lane]"
                lines += loaded
            lines += [f"{ind}for (int64_t lane = 0; lane < {w}; lane += 1)", ind + "{",
                      f"{ind}    const int64_t {u} = {tile_u} + lane, {v} = {v}_tile * {w};"]
            with self.kernel.emit.reading(values):
                lines += self.kernel.point("vector", v, ind + "    ", outer_vector=True)
            return lines + [ind + "}"]

        def block(ind: str) -> list[str]:
            lines = []
            for var, tiles in ((u, tiles_u), (v, whole_v // w)):
                lines += [ind + f"for (int64_t {var}_tile = {var}_block * {per_block}; {var}_tile < std::min<int64_t>("
                                f"{var}_block * {per_block} + {per_block}, {tiles}); {var}_tile += 1)", ind + "{"]
                ind += "    "
            lines += tile(ind)
            return lines + [ind[:-4] + "}", ind[:-8] + "}"]

        def scalar(ind: str) -> list[str]:
            return self.kernel.point("scalar", None, ind, outer_vector=False)
        if self.in_strips():
            lines = self._strips(depth, tiles_u, tile_u, whole_v)
        else:
            blocks = vars_[:-2] + [f"{u}_block", f"{v}_block"]
            lines = self.kernel.nest(blocks, ranges[:-2] + [blocks_u, -(-whole_v // self.kernel.tuning.vector_tile_block)], depth, block)
        if whole_v < ranges[-1]:
            lines += self.kernel.nest(vars_, ranges, depth, scalar, bounds={u: (first_u, end_u, 1), v: (whole_v, ranges[-1], 1)})
        if line:
            lines += self.kernel.nest(vars_, ranges, depth, scalar, bounds={u: (0, first_u, 1)})
        if line or end_u < ranges[-2]:
            lines += self.kernel.nest(vars_, ranges, depth, scalar, bounds={u: (end_u, ranges[-2], 1)})
        return with_line_head(u, line, lines)

    def _register_tile(self, ld: Load, tile_u: str, ind: str) -> tuple[str, list[str]]:
        """The W vectors of transposed read ``ld`` at the tile (``tile_u``, ``v_tile``), loaded
        along u and transposed in registers: their array's name, and the statements."""
        f, w = self.kernel.frame, self.kernel.width
        u, v = f.outer_vars[-2], f.outer_vars[-1]
        name = self.kernel.emit.state.fresh("tmp_rows")
        return name, [f"{ind}stax::vec<{lane_type(ld.dtype)}> {name}[{w}];",
                      f"{ind}for (int64_t lane = 0; lane < {w}; lane += 1)", ind + "{",
                      f"{ind}    const int64_t {u} = {tile_u}, {v} = {v}_tile * {w} + lane;",
                      f"{ind}    {name}[lane] = {self.kernel.load_text(ld, True, u)};", ind + "}",
                      f"{ind}stax::transpose({name});"]

    def in_strips(self) -> bool:
        """Whether the register tiles run in strips: a transposed input of at least
        Tuning.stream_min_bytes (below it, the blocks' reads are cached and strips gain nothing), at
        least Tuning.strips_per_thread strips a thread, and strip buffers of at most Tuning.strip_buffer_bytes
        (rows so long that they would not stay in the caches keep the blocks)."""
        outer = self.kernel.frame.outer
        loads = self.transposed_loads()
        strips = prod(outer[:-2]) * (outer[-2] // self.kernel.tuning.strip_rows)
        buffer = sum(self.kernel.tuning.strip_rows * outer[-1] * ITEMSIZE[ld.dtype] for ld in loads)
        knobs = self.kernel.tuning
        return (any(prod(outer[-2:]) * ITEMSIZE[ld.dtype] >= knobs.stream_min_bytes for ld in loads)
                and strips >= knobs.strips_per_thread * self.kernel.threads and buffer <= knobs.strip_buffer_bytes)

    def _strip_layout(self) -> tuple[dict[Load, int], dict[Load, int], int]:
        """Each transposed read's row stride in the strip buffer (elements), its offset there and
        the buffer's size (bytes, whole cache lines a read)."""
        whole_v = self.kernel.frame.outer[-1] - self.kernel.frame.outer[-1] % self.kernel.width
        line = self.kernel.tuning.cache_line
        strides = {ld: whole_v + line // ITEMSIZE[ld.dtype] for ld in self.transposed_loads()}
        offsets, total = {}, 0
        for ld, stride in strides.items():
            offsets[ld] = total
            total += -(-self.kernel.tuning.strip_rows * stride * ITEMSIZE[ld.dtype] // line) * line
        return strides, offsets, total

    def strip_scratch(self) -> list[str]:
        """The strips' per-thread buffer (``stax::thread_scratch``), declared with the block's other
        scratch, null when it cannot be had (``kernel_parts.fail_soft``)."""
        return [f"char* const strip_scratch = stax::thread_scratch({self._strip_layout()[2]}, &{SCRATCH_SHORT});"]

    def _strips(self, depth: int, tiles_u: int | str, tile_u: str, whole_v: int) -> list[str]:
        """The register tiles in strips of ``Tuning.strip_rows`` rows along u: each transposed read's strip
        transposed, tile by tile, into a per-thread buffer (``stax::thread_scratch``, kept from
        call to call), whose rows are a cache line longer than the strip's width (the rows of a
        power-of-two width would share cache sets, as the transposed reads' do); then the rows
        of the strip computed as vector loops over v, reading the buffer, their large outputs
        written with non-temporal stores (see ``Tuning.stream_min_bytes``).  The strided reads go
        together and every other access streams whole rows (experiments.bench.tuning and
        bench_transposed time strips against blocks)."""
        f, w = self.kernel.frame, self.kernel.width
        vars_, ranges = f.outer_vars, list(f.outer)
        u, v = vars_[-2], vars_[-1]
        per_strip = self.kernel.tuning.strip_rows // w
        strips_u = (f"(({tiles_u}) + {per_strip - 1}) / {per_strip}" if isinstance(tiles_u, str)
                    else -(-tiles_u // per_strip))
        first_tile = f"{u}_strip * {per_strip}"
        last_tile = f"std::min<int64_t>({first_tile} + {per_strip}, {tiles_u})"
        loads = self.transposed_loads()
        strides, offsets, _ = self._strip_layout()
        buffers = {ld: self.kernel.emit.state.fresh("strip") for ld in loads}
        declared = [f"{lane_type(ld.dtype)}* const {buffers[ld]} = reinterpret_cast<{lane_type(ld.dtype)}*>"
                    f"(strip_scratch + {offsets[ld]});" for ld in loads]

        def row_in_strip(ld: Load, lane: str) -> str:
            return f"(({u}_tile - {first_tile}) * {w} + {lane}) * {strides[ld]}"

        def strip(ind: str) -> list[str]:
            lines = [f"{ind}// the strip's transposed reads, tile by tile",
                     f"{ind}for (int64_t {v}_tile = 0; {v}_tile < {whole_v // w}; {v}_tile += 1)", ind + "{",
                     f"{ind}    for (int64_t {u}_tile = {first_tile}; {u}_tile < {last_tile}; {u}_tile += 1)", ind + "    {"]
            inner = ind + "        "
            for ld in loads:
                rows, loaded = self._register_tile(ld, tile_u, inner)
                target = f"{buffers[ld]} + {row_in_strip(ld, 'lane')} + {v}_tile * {w}"
                lines += loaded + [f"{inner}for (int64_t lane = 0; lane < {w}; lane += 1)",
                                   f"{inner}    stax::vstore({target}, {rows}[lane]);"]
            lines += [ind + "    }", ind + "}",
                      f"{ind}// its rows, streamed",
                      f"{ind}for (int64_t {u}_tile = {first_tile}; {u}_tile < {last_tile}; {u}_tile += 1)", ind + "{",
                      f"{ind}    for (int64_t lane = 0; lane < {w}; lane += 1)", ind + "    {",
                      f"{ind}        for (int64_t {v}_tile = 0; {v}_tile < {whole_v // w}; {v}_tile += 1)", ind + "        {",
                      f"{ind}            const int64_t {u} = {tile_u} + lane, {v} = {v}_tile * {w};"]
            strip_values = {ld: f"stax::vload({buffers[ld]} + {row_in_strip(ld, 'lane')} + {v})" for ld in loads}
            with self.kernel.emit.reading(strip_values, strip_rows=True):
                lines += self.kernel.point("vector", v, ind + "            ", outer_vector=True)
            return lines + [ind + "        }", ind + "    }", ind + "}"]
        strip_vars = vars_[:-2] + [f"{u}_strip"]
        return declared + self.kernel.nest(strip_vars, ranges[:-2] + [strips_u], min(depth, len(strip_vars)), strip)
