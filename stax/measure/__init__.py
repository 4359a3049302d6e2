"""Measurement: kernel timing, modeled memory traffic, and the spec's worked examples that stax demo runs."""
