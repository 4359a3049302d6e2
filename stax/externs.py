"""The extern ops of the graph (``stax.graph.EXTERN_OPS``) and the calls that run them (seed 8.5's
library calls): each takes its operands, then ``out=`` and ``threads=`` (and the node's attributes)."""
from __future__ import annotations

from .direct_conv import direct_conv, direct_conv_weight_grad
from .matmul import matmul_sum, parallel_matmul

EXTERN_CALLS = {"matmul": parallel_matmul, "matmul_sum": matmul_sum, "conv2d": direct_conv,
                "conv2d_weight": direct_conv_weight_grad}
