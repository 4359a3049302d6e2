"""The extern ops of the graph (``stax.ir.graph.EXTERN_OPS``) and the calls that run them (spec 8.5's
library calls): each takes its operands, then ``out=``, ``threads=`` and ``isa=`` (and the node's
attributes).
The hand-written kernels' externs also have the plan a compiled call makes of them, from their
operands' shapes, the output's dtype, the threads and the node's attributes.  The scans' numpy
fallback is here too (``NUMPY_SCANS``)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from stax.kernels.random_draws import bernoulli, plan_random_draw, uniform
from stax.kernels.direct_conv import direct_conv, direct_conv_weight_grad, plan_direct_conv, plan_direct_conv_weight_grad
from stax.kernels.matmul import matmul_sum, parallel_matmul
from stax.kernels.row_index import add_rows, plan_add_rows, plan_take_rows, take_rows


def logcumsumexp(x: np.ndarray, axis: int, out: np.ndarray) -> np.ndarray:
    """numpy's log-add-exp accumulated along ``axis``; equal infinities, which numpy subtracts
    before it returns them, raise no warning."""
    with np.errstate(invalid="ignore"):
        return np.logaddexp.accumulate(x, axis=axis, out=out)


#: the scans' numpy fallback (spec 7.7: ``CostModel(native_scans=False)``, or an empty scan), called
#: with the operand, ``axis=`` and ``out=``
NUMPY_SCANS = {"cumsum": np.cumsum, "cumprod": np.cumprod, "logcumsumexp": logcumsumexp}

EXTERN_CALLS = {"matmul": parallel_matmul, "matmul_sum": matmul_sum, "conv2d": direct_conv,
                "conv2d_weight": direct_conv_weight_grad, "take_rows": take_rows, "add_rows": add_rows,
                "bernoulli": bernoulli, "uniform": uniform}

#: the compiled call's plan of each hand-written kernel's extern (stax.kernels.direct_conv, stax.kernels.row_index,
#: stax.kernels.random_draws), from its operands' shapes, its output's shape and dtype, the threads, the ISA level
#: its kernel is built for and its attributes
KERNEL_PLANS: dict[str, Callable[..., Any]] = {
    "conv2d": lambda shapes, out, dtype, threads, isa, **attrs: plan_direct_conv(shapes[0], shapes[1], threads, isa,
                                                                                **attrs),
    "conv2d_weight": lambda shapes, out, dtype, threads, isa: plan_direct_conv_weight_grad(shapes[0], shapes[1],
                                                                                           threads, isa),
    "take_rows": lambda shapes, out, dtype, threads, isa: plan_take_rows(shapes[0], shapes[1], dtype, threads, isa),
    "add_rows": lambda shapes, out, dtype, threads, isa, rows: plan_add_rows(shapes[0], shapes[1], rows, dtype,
                                                                             threads, isa),
    "bernoulli": lambda shapes, out, dtype, threads, isa, p, stream: plan_random_draw("bernoulli", shapes[0], out,
                                                                                     dtype, threads, isa, stream, p),
    "uniform": lambda shapes, out, dtype, threads, isa, stream: plan_random_draw("uniform", shapes[0], out, dtype,
                                                                                threads, isa, stream),
}
