"""Affine dependence analysis (spec 7.2 end, 7.7): what stax's conservative fusion rule gives up.

Pure Python (no OR-Tools); the scheduler and the experiments may call it.  One module per job:

- ``lattice``: integer solutions of linear equations (the exact GCD test), LLL-reduced;
- ``polyhedron``: polyhedra, Fourier-Motzkin elimination, rational bounds, exact integer points
  with the equalities solved first, all within a work budget;
- ``dependence``: domains, affine accesses, dependence problems split by level (Definition 7.6),
  the GCD / Banerjee / exact / enumeration tests;
- ``transforms``: Theorem 7.2, Definition 7.7, Theorem 7.3 and Irigoin-Triolet's condition;
- ``fusion``: Proposition 7.3 for a producer/consumer pair in a common loop frame.

The one-dimensional affine schedules of Proposition 7.5 (a linear program) live in
``solvers.theory.affine_schedule``.
"""
from stax.affine.dependence import (Access, DependenceProblem, DependenceResult, Domain, LevelResult, Outcome, banerjee_test,
                         dependence_pairs, enumeration_test, exact_test, gcd_test)
from stax.affine.fusion import FusionVerdict, pair_fusion
from stax.affine.lattice import integer_solutions, lll_reduce
from stax.affine.polyhedron import WORK_LIMIT, Budget, LatticeForm, Polyhedron, WorkLimitReached, eliminate
from stax.affine.transforms import (apply, carrying_level, determinant, fully_permutable, interchange, is_unimodular,
                         lex_sign, parallelepiped_tiling_legal, rectangular_tiling_legal, reversal, skew,
                         transformation_legal, transformation_preserves)

__all__ = [
    "WORK_LIMIT", "Access", "Budget", "DependenceProblem", "DependenceResult", "Domain", "FusionVerdict", "LatticeForm",
    "LevelResult", "Outcome", "Polyhedron", "WorkLimitReached", "apply", "banerjee_test", "carrying_level",
    "dependence_pairs", "determinant", "eliminate", "enumeration_test", "exact_test", "fully_permutable", "gcd_test",
    "integer_solutions", "interchange", "is_unimodular", "lex_sign", "lll_reduce", "pair_fusion",
    "parallelepiped_tiling_legal", "rectangular_tiling_legal", "reversal", "skew", "transformation_legal",
    "transformation_preserves",
]
