"""The spec's theorems checked numerically: the NP-hardness reductions, vertex separation, affine schedules."""
