"""Proposition 7.3 for a producer/consumer pair aligned on common outer loops, decided exactly.

The producer writes ``B[w(p)]`` at iteration ``p``, the consumer reads ``B[r(j)]`` at iteration
``j``; fused, each common outer iteration runs the producer's part, then the consumer's.
Distances follow Proposition 7.3: ``delta = p - j`` on the common loops (the opposite sign of
Definition 7.6's ``j - i``, as the spec notes at the end of 7.7).

- ``sequential``: no read precedes its write in the fused order, ``delta <= 0`` (7.3 (1));
- ``outer_parallel``: sequential, and the outermost common loop carries nothing (``delta_1 = 0``):
  the fused kernel may run its outer loop in parallel, the inner loops in order;
- ``parallel``: every read is produced in the same outer iteration, ``delta = 0`` (7.3 (2)),
  the only case stax's rule (identical normalized indices) can accept.

``under(theta)`` re-asks both questions after the unimodular ``theta`` is applied to the common
loops of both nests (Theorem 7.2): fused sequentially legal when every ``theta delta <= 0``,
and with a parallel outer loop when moreover every ``(theta delta)_1 = 0``.

    >>> from .dependence import Access, Domain
    >>> n = Domain.box((16,))
    >>> v = pair_fusion(Access.of([[1]], [0]), n, Access.of([[1]], [-1]), n)     # reads B[j-1]
    >>> v.deltas, v.sequential, v.outer_parallel, v.parallel
    (((-1,),), True, False, False)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from stax.affine.dependence import Access, DependenceProblem, Domain, Outcome, exact_test
from stax.affine.transforms import Matrix, apply, lex_sign


@dataclass(frozen=True)
class FusionVerdict:
    """Proposition 7.3's answers; ``deltas`` lists ``p - j`` per level (None if one is not uniform);
    ``outcome`` is ``Outcome.WORK_LIMIT`` when an exact test ran out of work (the answers are then
    conservative: a level it could not decide counts as dependent, its distance as unknown)."""

    sequential: bool
    outer_parallel: bool
    parallel: bool
    deltas: tuple[tuple[int, ...], ...] | None
    outcome: Outcome = Outcome.COMPLETE

    def under(self, theta: Matrix) -> tuple[bool, bool]:
        """``(sequential, outer loop parallel)`` after ``theta`` on the common loops; uniform deltas only."""
        if self.deltas is None:
            raise ValueError("the dependence is not uniform: use transformation_preserves on its polyhedra")
        images = [apply(theta, d) for d in self.deltas]
        sequential = all(lex_sign(t) <= 0 for t in images)
        return sequential, sequential and all(t[0] == 0 for t in images)


def pair_fusion(write: Access, write_domain: Domain, read: Access, read_domain: Domain,
                common: int | None = None) -> FusionVerdict:
    """Proposition 7.3 for the producer ``write`` over ``write_domain`` and the consumer's
    ``read`` over ``read_domain``, sharing ``common`` outer loops (exact integer tests)."""
    earlier = exact_test(DependenceProblem(write, write_domain, read, read_domain, common, loop_independent=True))
    later = exact_test(DependenceProblem(read, read_domain, write, write_domain, common))
    depth = DependenceProblem(write, write_domain, read, read_domain, common).depth
    found: list[Sequence[int] | None] = []
    for r in earlier.levels:
        if r.possible:
            found.append(None if r.distance is None else tuple(-x for x in r.distance))
    found += [r.distance for r in later.levels if r.possible]
    deltas = None if any(d is None for d in found) else tuple(sorted(set(map(tuple, found))))
    sequential = not later.possible
    carried = [r.level for r in earlier.levels if r.possible and r.level <= depth]
    outcome = Outcome.COMPLETE if earlier.complete and later.complete else Outcome.WORK_LIMIT
    return FusionVerdict(sequential=sequential, outer_parallel=sequential and 1 not in carried,
                         parallel=sequential and not carried, deltas=deltas, outcome=outcome)
