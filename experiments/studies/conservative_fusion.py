"""The space stax's conservative fusion rule gives up (spec 7.2 end, 7.7): a printed table.

Each case is a producer ``B[i] = exp(X[i])`` and a consumer that reads ``B`` at shifted affine
indices, both over the same box (so Definition 7.2 holds and only the dependence decides).
Columns:

- ``stax``: stax's own verdict, ``why_no_fuse`` on the two real scheduler nodes (identical
  normalized indices, Proposition 7.2);
- ``deltas``: ``p - j`` on the common loops (Proposition 7.3's sign), from ``stax.affine``'s
  exact test; reads outside the producer's box are halo reads that depend on nothing;
- ``par``: Proposition 7.3 (2), every delta zero (what a fully parallel kernel needs);
- ``seq``: Proposition 7.3 (1), every delta ``<= 0`` (sequential fused loops);
- ``outer``: sequential and the outer loop carries nothing (stax's OpenMP-over-outer kernels\n  stay parallel);
- ``theta``: the first unimodular matrix with entries in {-1, 0, 1} applied to both nests
  (Theorem 7.2) that makes the fusion sequentially legal, preferring one that keeps the outer
  loop parallel; with its (seq, outer) verdict.

Usage: ``python -m experiments.studies.conservative_fusion`` (a second or two).
"""
from __future__ import annotations

from itertools import product
from typing import Sequence

from stax.affine import Access, Domain, FusionVerdict, is_unimodular, pair_fusion
from stax.ir.indexing import Index, contiguous_strides, linear_index
from stax.ir.loops import ComputedBuffer, InputBuffer, Load, LoweredProgram, Op
from stax.scheduler.legality import why_no_fuse
from stax.scheduler.nodes import Scheduler

N = 16
Subscript = tuple[Sequence[int], int]        # (coefficients over the loops, offset)

# name -> consumer reads of B, each a list of subscripts (one per array dimension)
CASES: dict[str, list[list[Subscript]]] = {
    "same index B[i]": [[((1,), 0)]],
    "B[i-1] (x[1:]+x[:-1])": [[((1,), -1)]],
    "B[i+1]": [[((1,), 1)]],
    "3-point B[i-1]+B[i]+B[i+1]": [[((1,), -1)], [((1,), 0)], [((1,), 1)]],
    "reversed B[n-1-i]": [[((-1,), N - 1)]],
    "row shift B[i][j-1]": [[((1, 0), 0), ((0, 1), -1)]],
    "row shift B[i][j+1]": [[((1, 0), 0), ((0, 1), 1)]],
    "upwind B[i-1][j]+B[i][j-1]": [[((1, 0), -1), ((0, 1), 0)], [((1, 0), 0), ((0, 1), -1)]],
    "spec example B[i-1][j+1]": [[((1, 0), -1), ((0, 1), 1)]],
    "its mirror B[i+1][j-1]": [[((1, 0), 1), ((0, 1), -1)]],
    "5-point stencil": [[((1, 0), a), ((0, 1), b)] for a, b in ((-1, 0), (1, 0), (0, -1), (0, 1), (0, 0))],
    "transpose B[j][i]": [[((0, 1), 0), ((1, 0), 0)]],
}


def _index(sub: Sequence[Subscript], loop_vars: Sequence[str]) -> list[Index]:
    return [Index.build(dict(zip(loop_vars, coeffs)), off) for coeffs, off in sub]


def stax_verdict(reads: list[list[Subscript]], dims: int) -> str:
    """Build the two buffers as stax's loop IR and ask stax's own legality."""
    shape = (N,) * dims
    loop_vars = [f"x{k}" for k in range(dims)]
    strides = contiguous_strides(shape)
    own = linear_index([Index.var(v) for v in loop_vars], strides)
    producer = ComputedBuffer("buf0", shape, "float32", shape, Op("exp", (Load("arg0", own, "float32"),), "float32"),
                              store_index=own)
    loads = [Load("buf0", linear_index(_index(sub, loop_vars), strides), "float32") for sub in reads]
    body = loads[0]
    for ld in loads[1:]:
        body = Op("add", (body, ld), "float32")
    consumer = ComputedBuffer("buf1", shape, "float32", shape, body, store_index=own)
    program = LoweredProgram([InputBuffer("arg0", shape, "float32", strides, 0)], [producer, consumer], ["buf1"], {})
    scheduler = Scheduler(program)
    reason = why_no_fuse(scheduler.nodes[0], scheduler.nodes[1])
    return "fuse" if reason is None else reason.split(":")[0]


def affine_verdicts(reads: list[list[Subscript]], dims: int) -> list[FusionVerdict]:
    box = Domain.box((N,) * dims)
    write = Access.of([[int(r == c) for c in range(dims)] for r in range(dims)], [0] * dims)
    return [pair_fusion(write, box, Access.of([c for c, _ in sub], [o for _, o in sub]), box) for sub in reads]


def combined(verdicts: list[FusionVerdict]) -> FusionVerdict:
    """All reads of one consumer at once: legal iff legal for each read."""
    deltas = None if any(v.deltas is None for v in verdicts) else tuple(sorted({d for v in verdicts for d in v.deltas}))
    return FusionVerdict(all(v.sequential for v in verdicts), all(v.outer_parallel for v in verdicts),
                         all(v.parallel for v in verdicts), deltas)


def small_unimodular(dims: int) -> list[list[list[int]]]:
    """Unimodular matrices with entries in {-1, 0, 1}, identity first."""
    identity = [[int(r == c) for c in range(dims)] for r in range(dims)]
    out = [identity]
    for entries in product((-1, 0, 1), repeat=dims * dims):
        theta = [list(entries[r * dims:(r + 1) * dims]) for r in range(dims)]
        if theta != identity and is_unimodular(theta):
            out.append(theta)
    return out


def best_theta(verdict: FusionVerdict, dims: int) -> str:
    if verdict.deltas is None:
        return "non-uniform"
    legal = [(verdict.under(t), t) for t in small_unimodular(dims) if verdict.under(t)[0]]
    if not legal:
        return "none"
    # prefer a parallel outer loop, then the simplest matrix (fewest nonzero, then negative entries)
    (_, outer), theta = min(legal, key=lambda item: (not item[0][1], sum(x != 0 for r in item[1] for x in r),
                                                      sum(x < 0 for r in item[1] for x in r)))
    return f"{theta} {'outer-par' if outer else 'seq'}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "-"


def main() -> None:
    header = f"{'consumer of B = exp(X)':<28} {'stax':<20} {'deltas (p - j)':<34} {'par':<4} {'seq':<4} {'outer':<6} theta"
    print(header)
    print("-" * len(header))
    counts = {"stax": 0, "par": 0, "seq": 0, "outer": 0, "theta": 0}
    for name, reads in CASES.items():
        dims = len(reads[0])
        stax = stax_verdict(reads, dims)
        verdict = combined(affine_verdicts(reads, dims))
        outer = verdict.outer_parallel
        theta = best_theta(verdict, dims)
        deltas = "non-uniform" if verdict.deltas is None else " ".join(
            "(" + ",".join(map(str, d)) + ")" for d in verdict.deltas)
        print(f"{name:<28} {stax:<20} {deltas:<34} {_yes(verdict.parallel):<4} {_yes(verdict.sequential):<4} "
              f"{_yes(outer):<6} {theta}")
        counts["stax"] += stax == "fuse"
        counts["par"] += verdict.parallel
        counts["seq"] += verdict.sequential
        counts["outer"] += outer
        counts["theta"] += theta not in ("none", "non-uniform")
    print(f"\nof {len(CASES)} pairs: stax fuses {counts['stax']}, Proposition 7.3 (2) allows {counts['par']}, "
          f"(1) allows {counts['seq']} ({counts['outer']} with a parallel outer loop), "
          f"a unimodular theta then (1) allows {counts['theta']};\n"
          "shifting the consumer by the largest delta (loop alignment, not unimodular) makes every uniform case "
          "sequentially legal")


if __name__ == "__main__":
    main()
