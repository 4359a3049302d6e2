"""C++ code generation (spec section 8)."""
