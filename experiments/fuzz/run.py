"""Differential fuzzing of the whole compiler against the numpy reference.

    python -m experiments.fuzz --programs 10000 --seed 0 --out results/fuzz

For each random program (:mod:`experiments.fuzz_programs`) the fuzzer runs the solver
cross-checks (:func:`~experiments.fuzz.check.cross_check`) and compiles and runs a few
combinations of options chosen by the seed: the fusion and order strategies rotate so every
strategy is exercised evenly, the exact ones (CP-SAT, multiway cut, down-set DP) only on small
programs with short time limits; rule (the default twice as often as each other rule), reuse,
in-place reuse, pool planning, kernel grouping, threads and ISA level (each vector level this CPU
runs twice as often as ``none``) are drawn at random, so a seed draws other levels on a CPU with
other levels.
Every failure is shrunk and written to ``OUT/regressions/<name>.json`` in the format
``tests/experiments/fuzz/test_regressions.py`` replays (copy a file to ``tests/regressions/`` once it passes).
The last line is the summary: ``fuzz: programs=N combinations=M failures=F ...``.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from experiments.fuzz.check import FUSIONS, ORDERS, SMALL, Combo, cross_check, run_case
from instances.random_programs import FuzzProgram, generate
from stax.target import ISA_LEVELS, runs_here
from stax.scheduler.legality import DEFAULT_FUSION_RULE, FUSION_RULES
from experiments.fuzz.shrink import shrink

EXACT_FUSIONS, EXACT_ORDERS = {"cpsat", "mwc"}, {"cpsat", "dp"}
LEVELS = (*(name for name, isa in ISA_LEVELS.items() if name != "none" and runs_here(isa) for _ in range(2)), "none")


def combos_for(index: int, seed: int, count: int, nodes: int) -> list[Combo]:
    """``count`` combinations for the ``index``-th program: strategies in rotation (exact ones
    replaced by greedy/best above ``SMALL`` nodes), the other knobs drawn from ``seed``."""
    rng = random.Random(seed)
    result = []
    for j in range(count):
        k = index * count + j
        fusion, order = FUSIONS[k % len(FUSIONS)], ORDERS[(k // len(FUSIONS) + k) % len(ORDERS)]
        if nodes > SMALL:
            fusion = "greedy" if fusion in EXACT_FUSIONS else fusion
            order = "best" if order in EXACT_ORDERS else order
        result.append(Combo(fusion, order, rule=rng.choice((DEFAULT_FUSION_RULE, *FUSION_RULES)), reuse=rng.random() < 0.7,
                            inplace=rng.random() < 0.7, memory_plan=rng.choice(("wrapper", "wrapper", "pool")),
                            group_kernels=rng.random() < 0.6, threads=rng.choice((1, 2)),
                            isa=rng.choice(LEVELS), eager_chunks=rng.random() < 0.5))
    return result


@dataclass
class Tally:
    programs: int = 0
    combinations: int = 0
    failures: int = 0
    cross_failures: int = 0
    saved: list[str] = field(default_factory=list)

    def line(self, seconds: float) -> str:
        return (f"fuzz: programs={self.programs} combinations={self.combinations} failures={self.failures} "
                f"cross_check_failures={self.cross_failures} seconds={seconds:.0f}")


def save_regression(out: Path, name: str, program: FuzzProgram, combo: Combo | None, data_seed: int,
                    problems: list[str]) -> Path:
    """A regression file: the shrunk program, its options (None: a solver cross-check) and the failure."""
    path = out / "regressions" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"program": program.to_dict(), "combo": combo.to_dict() if combo else None,
                              "data_seed": data_seed, "failure": problems, "listing": str(program)}
    path.write_text("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in record.items()) + "\n}\n")
    return path


def _fails_like(kind: str, check: Callable[[FuzzProgram, Combo], list[str]]) -> Callable[[FuzzProgram, Combo], bool]:
    """A shrinking predicate: the candidate fails with a problem of the same kind."""
    def fails(program: FuzzProgram, combo: Combo) -> bool:
        try:
            return any(p.split(":")[0] == kind for p in check(program, combo))
        except Exception:
            return False
    return fails


def fuzz_one(index: int, seed: int, combos: int, out: Path | None, tally: Tally, log: Callable[[str], None]) -> None:
    """Cross-check and compile one program; shrink and save what fails."""
    program_seed = seed * 1_000_003 + index
    program = generate(program_seed)
    tally.programs += 1
    problems, nodes = cross_check(program)
    if problems:
        tally.cross_failures += 1
        log(f"cross-check failure, program seed {program_seed}: {problems}")
        if out:
            small, _ = shrink(program, Combo(), _fails_like(problems[0].split(":")[0], lambda p, c: cross_check(p)[0]),
                              budget=60)
            save_regression(out, f"cross_{program_seed}", small, None, 0, cross_check(small)[0])
    for j, combo in enumerate(combos_for(index, program_seed, combos, nodes)):
        tally.combinations += 1
        problems = run_case(program, combo, program_seed)
        if not problems:
            continue
        tally.failures += 1
        log(f"failure, program seed {program_seed}, {combo}: {problems}")
        if out:
            fails = _fails_like(problems[0].split(":")[0], lambda p, c: run_case(p, c, program_seed))
            small, simple = shrink(program, combo, fails)
            path = save_regression(out, f"case_{program_seed}_{j}", small, simple, program_seed,
                                   run_case(small, simple, program_seed))
            tally.saved.append(str(path))
            log(f"  shrunk to {len(small.steps)} steps -> {path}\n{small}")


def main(argv: list[str] | None = None) -> Tally:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="index of the first program (to continue a run)")
    parser.add_argument("--combos", type=int, default=3, help="compiled combinations per program")
    parser.add_argument("--out", type=Path, default=None, help="where shrunk failures go (none: not shrunk)")
    parser.add_argument("--progress", type=int, default=50, help="print a progress line every N programs")
    args = parser.parse_args(argv)
    tally, start = Tally(), time.perf_counter()
    for index in range(args.start, args.start + args.programs):
        try:
            fuzz_one(index, args.seed, args.combos, args.out, tally, lambda s: print(s, flush=True))
        except Exception as exc:  # a fuzzer bug must not end a long run
            tally.failures += 1
            print(f"fuzzer error at program {index}: {type(exc).__name__}: {exc}", flush=True)
        if args.progress and (index + 1) % args.progress == 0:
            print("progress " + tally.line(time.perf_counter() - start), flush=True)
    print(tally.line(time.perf_counter() - start), flush=True)
    return tally


if __name__ == "__main__":
    main()
