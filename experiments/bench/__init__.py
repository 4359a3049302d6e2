"""Benchmarks that print figures: bandwidth, contention, convolutions, GEMM layouts, the suite, tuning."""
