"""Exact and reference fusion solvers: CP-SAT partitioning, the region decomposition, the multiway-cut reductions, repair and bounds."""
