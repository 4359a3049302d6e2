"""Exact and reference order solvers for peak memory (Definition 7.5): CP-SAT, the downset dynamic program, windows, decomposition, cut bounds."""
