"""Graph rewrites run before lowering: simplification, variance forms, sums of matmuls, convolution epilogues."""
