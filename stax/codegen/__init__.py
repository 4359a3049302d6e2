"""C++ code generation (seed section 8)."""
