"""Studies: scripts that measure the solvers and the compiler and print what they found."""
