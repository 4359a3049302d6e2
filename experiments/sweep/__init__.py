"""Sweeps: configs, cells, measurement, running (locally or on a cluster), provenance and results."""
