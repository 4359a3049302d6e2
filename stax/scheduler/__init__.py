"""The scheduler (seed section 7): scheduler nodes, legality, fusion and order strategies."""
