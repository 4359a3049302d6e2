"""Memory (seed 7.5): lifetimes, candidate orders, reuse and pool planning."""
