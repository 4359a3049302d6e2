"""From a traced graph to the C++ of each block: the passes that ``stax.schedule`` runs around the
strategies and that a loaded schedule is checked by (``stax.decisions``).

- ``fusion_stage``: lowering, scheduler nodes and the FusionProblem (Definition 7.3);
- ``kernel_name``: the C++ name of a block's kernel, and of adjacent kernels merged into one call
  (``merged_kernel_name``, spec 8.5);
- ``allocated_order_problem``: the kernels' OrderProblem over the buffers the wrapper allocates
  (Definition 7.5);
- ``generate_kernels``: the C++ of each block, or its extern call (spec 8.1-8.4);
- ``inplace_check``: Proposition 7.2's test of whether a buffer may take its source's storage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from stax.codegen.index_range import check_index_range
from stax.codegen.generate import generate, generate_extern
from stax.codegen.kernel import BlockKernel, Kernel
from stax.codegen.tuning import Tuning
from stax.ir.graph import Graph
from stax.ir.loops import ComputedBuffer, LoweredProgram
from stax.lowering import CostModel, lower
from stax.runtime.build import Isa
from stax.scheduler.nodes import Scheduler
from stax.scheduler.problems import FusionProblem, OrderProblem, Partition, kernel_order_problem


@dataclass
class Products:
    """What a schedule's passes computed on the way: the loop IR, the scheduler nodes, the block kernels."""

    program: LoweredProgram
    scheduler: Scheduler
    block_kernels: list[Kernel]


def fusion_stage(graph: Graph, cost_model: CostModel, rule: str, dependence: str,
                 name: str = "") -> tuple[LoweredProgram, Scheduler, FusionProblem]:
    """The passes up to the FusionProblem seam under Definition 7.2's ``rule`` and Proposition
    7.3's ``dependence`` case."""
    program = lower(graph, cost_model)
    scheduler = Scheduler(program)
    return program, scheduler, scheduler.fusion_problem(rule, dependence=dependence, name=name)


def kernel_name(block: tuple[str, ...]) -> str:
    """The C++ function of one block (``cpp_fused_op0_op1``)."""
    return "cpp_fused_" + "_".join(block) if len(block) <= 4 else f"cpp_fused_{block[0]}_to_{block[-1]}_{len(block)}"


def kernel_names(blocks: Partition) -> list[str]:
    return [kernel_name(b) for b in blocks]


def merged_kernel_name(kernels: list[Kernel]) -> str:
    """The C++ function of adjacent kernels called as one (spec 8.5)."""
    parts = [k.name.removeprefix("cpp_fused_") for k in kernels]
    return "cpp_fused_" + ("__".join(parts) if len(parts) <= 3 else f"{parts[0]}__to__{parts[-1]}")


def aliased_buffers(scheduler: Scheduler) -> set[str]:
    """Buffers stored in another's storage (an input updated in place): the wrapper allocates none."""
    return {n.buffer_name for n in scheduler.nodes if isinstance(n.buffer, ComputedBuffer) and n.buffer.aliases}


def allocated_order_problem(problem: FusionProblem, blocks: Partition, names: list[str],
                            aliased: set[str]) -> OrderProblem:
    """The kernels' OrderProblem, counting only buffers the wrapper allocates (Definition 7.5)."""
    full = kernel_order_problem(problem, blocks, names)
    return OrderProblem(full.tasks, tuple(b for b in full.buffers if b.name not in aliased), full.extra_edges, full.name)


def buffer_meta(program: LoweredProgram, order_problem: OrderProblem) -> dict[str, tuple[tuple[int, ...], str]]:
    """Shape and dtype of every buffer the wrapper allocates."""
    allocated = {ob.name for ob in order_problem.buffers}
    return {b.name: (tuple(b.shape), b.dtype) for b in program.buffers if b.name in allocated}


def generate_kernels(scheduler: Scheduler, problem: FusionProblem, blocks: Partition, order: tuple[str, ...],
                     names: list[str], isa: Isa, threads: int, tuning: Tuning, counting: bool = False,
                     dependence: str = "parallel", labels: dict[str, str] | None = None) -> list[Kernel]:
    """C++ kernels (or extern calls) for the blocks, in execution order; under the ``sequential``
    rule a block reading its own buffers at earlier points keeps its loops sequential.  ``labels``
    (``stax.scheduler.labels``) name each node's op in the kernels' comments."""
    check_index_range(scheduler.program)
    block_of_name = dict(zip(names, blocks))
    users = {b.name: set(b.users) for b in problem.buffers}
    outputs = {b.name for b in problem.buffers if b.is_output}
    storage = {n.buffer.name: n.buffer.aliases for n in scheduler.nodes
               if isinstance(n.buffer, ComputedBuffer) and n.buffer.aliases}
    kernels = []
    for name in order:
        block = block_of_name[name]
        members = [scheduler.by_name[n] for n in block]
        if members[0].kind == "extern":
            kernels.append(generate_extern(name, block[0], members[0].buffer, storage, threads, isa))
            continue
        internal = {m.buffer_name for m in members
                    if m.buffer_name not in outputs and users[m.buffer_name] and users[m.buffer_name] <= set(block)}
        kernels.append(generate(BlockKernel(name, [(m.name, m.buffer) for m in members], internal, storage,
                                            isa.width, threads, counting, dependence == "sequential", tuning=tuning,
                                            labels=labels)))
    return kernels


def inplace_check(kernels: list[Kernel]) -> Callable[[str, str], bool]:
    """Whether the kernel producing a buffer reads a source only at the index it writes
    (Proposition 7.2: the buffer may take the source's storage)."""
    producer = {name: k for k in kernels for name in k.params if name in k.writes_at}

    def inplace_ok(buffer: str, source: str) -> bool:
        kernel = producer.get(buffer)
        return kernel is not None and not kernel.extern and kernel.reads_only_at_write_index(buffer, source)
    return inplace_ok
