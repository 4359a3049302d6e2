"""Memory (spec 7.5, 7.6 step 6): reuse, in-place reuse and pool planning for a kernel order, and its report."""
