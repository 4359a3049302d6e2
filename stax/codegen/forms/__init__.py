"""Kernel forms that build on the block kernel: 2-D tiles, scans, split reductions, interleaved loops (spec section 8.2)."""
