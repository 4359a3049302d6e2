"""The plans code generation works from (spec section 8.5): what the wrapper does step by step
(``WrapperPlan``) and what the graph's compiled call does beyond calling kernels (``CallPlan``,
its extern steps' ``Term``s and the layout of its ``STATE``); ``wrapper.py`` writes the Python
wrapper from the first and ``entry.py`` the compiled call from both."""
from __future__ import annotations

from dataclasses import dataclass, field

from stax.codegen.kernel import Kernel
from stax.codegen.names import check_kernel_names, source_name
from stax.ir.loops import InputBuffer
from stax.kernels import blas
from stax.kernels.direct_conv import DirectConv
from stax.kernels.matmul import Product, Route
from stax.kernels.random_draws import RandomDraw
from stax.kernels.row_index import RowIndex

# the compiled call's state tuple: these, then each input's dtype, then one allocator site per kind
# (CachingAllocator.compiled_site), then the entry points of its products (CallPlan.addresses)
STATE = ("fallback", "ndarray", "counts", "kernel_error")
Kind = tuple[tuple[int, ...], str]  # an allocation's shape and dtype


@dataclass
class WrapperPlan:
    """What the wrapper does, step by step, in the chosen kernel order."""

    inputs: list[InputBuffer]
    steps: list[Kernel]
    spans: list[tuple[int, int]]  # the order's steps (first, last) each kernel call runs
    buffer_meta: dict[str, tuple[tuple[int, ...], str]]  # allocated buffer -> (shape, dtype)
    outputs: list[str]
    parameters: tuple[str, ...]  # each input's name in the traced function (passed by name, named in errors)
    mutated_inputs: set[str] = field(default_factory=set)


def check_plan_names(plan: WrapperPlan) -> None:
    """Every name the wrapper's source and the compiled call paste, checked (codegen.names):
    inputs, outputs, allocated buffers and the kernels' names, parameters and extern arguments."""
    check_kernel_names(plan.steps)
    for name in (*(i.name for i in plan.inputs), *plan.outputs, *plan.buffer_meta, *plan.mutated_inputs):
        source_name(name)
    for kernel in plan.steps:
        if kernel.extern:
            for name in (*kernel.extern["inputs"], kernel.extern["output"], *kernel.extern.get("attrs", {})):
                source_name(name)


@dataclass(frozen=True)
class Term:
    """One call of an extern step: its plan (a product's, a blocked convolution's or weight
    gradient's, a row lookup's or its gradient's, a random draw's) and the names of its operands
    (a product's two; a convolution's input and weight, then the scale and shift of its epilogue,
    those it has) and output."""

    product: Product | DirectConv | RowIndex | RandomDraw
    operands: tuple[str, ...]
    out: str


@dataclass(frozen=True)
class CallPlan:
    """What a graph's compiled call does beyond calling kernels: the allocator kinds it takes, in
    the order of its state's sites, and each extern step's products (by step), whose entry
    points follow the sites in its state."""

    kinds: list[Kind]
    terms: dict[int, list[Term]]

    def addresses(self) -> list[int]:
        return [address for step in sorted(self.terms) for term in self.terms[step]
                for address in term.product.addresses()]

    @property
    def limits_blas_threads(self) -> bool:
        """Whether a call must hold numpy's OpenBLAS at one thread (stax.kernels.blas_threads): a team
        gemm calls OpenBLAS, which would start threads of its own on the team's cores."""
        return any(isinstance(t.product, Product) and t.product.route is Route.TEAM and
                   blas.gemm(t.product.dtype).provider == "openblas" for terms in self.terms.values() for t in terms)
