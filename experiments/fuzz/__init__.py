"""The fuzzer of the compiler (random programs at every ISA level) and of the loaders, with shrinking."""
