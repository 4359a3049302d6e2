"""The scheduler (spec section 7): scheduler nodes, legality, fusion and order strategies."""
