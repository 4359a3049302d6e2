"""Build and load: gcc, the trusted kernel cache, and the caching allocator that compiled calls use (spec section 8)."""
