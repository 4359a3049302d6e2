"""Scheduler nodes (spec 7.1, 7.6 steps 1-3) and the FusionProblem they define.

One ``SchedulerNode`` per materialized buffer, named ``op{i}`` in program order, with its reads
and writes, met dependencies (graph inputs) and unmet ones (buffers other nodes produce, and
WeakDeps to in-place updates), and its iteration group ``(ranges, reduction_ranges)``.  Nodes
whose results nobody uses are removed.  ``Scheduler.fusion_problem`` exports the seam: the DAG,
buffer sizes, and every pair that may not share a kernel with the reason (``legality.why_no_fuse``).
"""
from __future__ import annotations

from stax.scheduler.dependencies import SchedulerNode, WeakDep, read_writes
from stax.dtypes import nbytes
from stax.ir.loops import ComputedBuffer, LoweredProgram
from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem
from stax.scheduler.legality import DEFAULT_FUSION_RULE, why_no_fuse


class Scheduler:
    """Builds scheduler nodes from a lowered program and exports its FusionProblem."""

    def __init__(self, program: LoweredProgram):
        self.program = program
        self.input_names = {i.name for i in program.inputs}
        live = _live_buffers(program)
        self.nodes: list[SchedulerNode] = []
        for buf in program.buffers:
            if buf.name not in live:
                continue
            reads, writes = read_writes(buf)
            node = SchedulerNode(f"op{len(self.nodes)}", buf, reads, writes)
            for dep in reads:
                (node.met_dependencies if dep.name in self.input_names else node.unmet_dependencies).append(dep)
            self.nodes.append(node)
        self.by_name = {n.name: n for n in self.nodes}
        self.producer = {n.buffer_name: n.name for n in self.nodes}
        self.weak_edges = self._weak_edges()

    def _weak_edges(self) -> list[tuple[str, str]]:
        """WeakDep: every reader of an input's old value runs before the in-place update of it."""
        edges = []
        for node in self.nodes:
            target = getattr(node.buffer, "aliases", None)
            if not target:
                continue
            for other in self.nodes:
                if other is not node and any(d.name == target for d in other.reads):
                    edges.append((other.name, node.name))
                    node.unmet_dependencies.append(WeakDep(other.buffer_name))
        return edges

    def users_of(self, buffer: str) -> list[str]:
        return [n.name for n in self.nodes if buffer in n.read_names]

    def buffer_bytes(self, name: str) -> int:
        if name in self.input_names:
            inp = next(i for i in self.program.inputs if i.name == name)
            shape, dtype = inp.shape, inp.dtype
        else:
            buf = self.by_name[self.producer[name]].buffer
            shape, dtype = buf.shape, buf.dtype
        return nbytes(shape, dtype)

    def fusion_problem(self, rule: str = DEFAULT_FUSION_RULE, name: str = "",
                       dependence: str = "parallel") -> FusionProblem:
        """The seam (Definition 7.3): nodes, buffers with sizes, forbidden pairs with reasons, under
        Definition 7.2's ``rule`` and Proposition 7.3's ``dependence`` case (``legality``)."""
        outputs = set(self.program.outputs) | set(self.program.mutations.values())
        buffers = [Buffer(i.name, self.buffer_bytes(i.name), None, tuple(self.users_of(i.name)))
                   for i in self.program.inputs]
        for node in self.nodes:
            buffers.append(Buffer(node.buffer_name, self.buffer_bytes(node.buffer_name), node.name,
                                         tuple(self.users_of(node.buffer_name)), node.buffer_name in outputs))
        forbidden = []
        for i, a in enumerate(self.nodes):
            for b in self.nodes[i + 1:]:
                reason = why_no_fuse(a, b, rule, dependence)
                if reason:
                    forbidden.append(ForbiddenPair(a.name, b.name, reason))
        info = {n.name: {"kind": n.kind, "group": [list(n.group[0]), list(n.group[1])], "buffer": n.buffer_name}
                for n in self.nodes}
        return FusionProblem(nodes=tuple(n.name for n in self.nodes), buffers=tuple(buffers),
                             forbidden=tuple(forbidden), extra_edges=tuple(self.weak_edges),
                             node_info=info, name=name)

    def describe(self) -> str:
        return "\n\n".join(n.describe() for n in self.nodes)


def _live_buffers(program: LoweredProgram) -> set[str]:
    """Spec 7.6 step 2: drop buffers nobody reads that are neither outputs nor in-place updates."""
    live = set(program.outputs) | set(program.mutations.values())
    for buf in reversed(program.buffers):
        if buf.name in live:
            if isinstance(buf, ComputedBuffer):
                live |= {ld.buffer for ld in buf.reads()}
            else:
                live |= set(buf.inputs)
    return live


__all__ = ["Scheduler"]
