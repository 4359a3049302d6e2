"""The graph and the loop IR (Pointwise / Reduction / Scan / Extern nodes), affine index expressions and DAG utilities (the spec's sections 6.x and 7.1)."""
