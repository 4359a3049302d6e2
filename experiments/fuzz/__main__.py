"""``python -m experiments.fuzz``: the compiler's fuzzer (experiments.fuzz.run)."""
from experiments.fuzz.run import main

main()
