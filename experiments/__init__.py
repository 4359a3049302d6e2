"""Sweeps, plots, reports and benchmarks."""
