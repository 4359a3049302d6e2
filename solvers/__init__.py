"""Exact and reference solvers for stax's FusionProblem and OrderProblem (OR-Tools CP-SAT, networkx)."""
