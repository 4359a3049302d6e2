"""One fuzz case: compile a program with one combination of options, run it, compare with the
numpy reference; and the solver cross-checks on a program's fusion and order problems.

Both return a list of problems (empty when all is well), so the fuzzer, its shrinker and the
regression tests share one notion of failure.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

import stax
from solvers.brute_force import min_fusion_cost, min_peak
from stax.compiler import Options, fusion_problem_of
from stax.generation import kernel_name
from stax.errors import KernelError, StaxError
from stax.ir.graph import Graph
from stax.scheduler.problems import kernel_order_problem
from stax.reference import evaluate
from stax.target import ISA_LEVELS
from stax.scheduler.legality import DEFAULT_FUSION_RULE
from stax.scheduler.strategies import ordered_blocks, run_fusion, run_order

from instances.random_programs import FuzzProgram

FUSIONS = ("none", "greedy", "random", "cpsat", "mwc")
ORDERS = ("original", "lpmf", "bfs", "dfs", "best", "cpsat", "dp")
EXACT_LIMIT = 2.0  # seconds per CP-SAT / multiway-cut solve
SMALL = 12  # nodes (tasks) up to which the exact strategies run
TINY_FUSION, TINY_ORDER = 7, 8  # brute force sizes
RTOL, ATOL = 2e-4, 2e-5
#: an element off by more than RTOL still matches when it is no farther from the float64
#: reference than the farthest of up to ROUNDING_RUNS references perturbed as rounding in any
#: order could perturb them (stax.reference's rounding): its output depends on rounding that much.
#: A tie (a max pooling's two equal values summed in different orders) flips in half the runs, so
#: the runs go on until every element is matched or all have run
ROUNDING_RUNS = 12
EAGER_CHUNKED_POINTS = 64


@dataclass(frozen=True)
class Combo:
    """One combination of compile options."""

    fusion: str = "greedy"
    order: str = "best"
    rule: str = DEFAULT_FUSION_RULE
    reuse: bool = True
    inplace: bool = True
    memory_plan: str = "wrapper"
    group_kernels: bool = True
    threads: int = 1
    isa: str = "avx2"
    #: the chunked-reduction form from EAGER_CHUNKED_POINTS points (its default threshold is above
    #: most fuzz programs' sizes)
    eager_chunks: bool = False

    def options(self, seed: int = 0) -> stax.Options:
        fusion_params = {"cpsat": {"time_limit": EXACT_LIMIT, "workers": 1}, "mwc": {"time_limit": EXACT_LIMIT},
                         "random": {"seed": seed}}.get(self.fusion, {})
        order_params = {"cpsat": {"time_limit": EXACT_LIMIT, "workers": 1}}.get(self.order, {})
        return stax.Options(fusion=self.fusion, order=self.order, rule=self.rule, reuse=self.reuse,
                            inplace=self.inplace, memory_plan=self.memory_plan, group_kernels=self.group_kernels,
                            threads=self.threads, isa=ISA_LEVELS[self.isa], fusion_params=fusion_params,
                            order_params=order_params,
                            tuning=stax.Tuning(chunked_min_points=EAGER_CHUNKED_POINTS) if self.eager_chunks else stax.Tuning())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Combo:
        return cls(**data)

    def simpler(self) -> list[Combo]:
        """Combinations one knob closer to the defaults (for shrinking)."""
        default = Combo()
        return [replace(self, **{k: v}) for k, v in asdict(default).items() if getattr(self, k) != v]


def run_case(program: FuzzProgram, combo: Combo, data_seed: int) -> list[str]:
    """Compile and run ``program`` with ``combo``; the ways its results differ from the reference."""
    graph = program.trace(data_seed)
    try:
        compiled = stax.compile_graph(graph, combo.options(data_seed))
    except Exception as exc:  # any compile failure of a valid program is a bug
        return [f"compile: {type(exc).__name__}: {exc}"[:2000]]
    ours, exact, wide = (program.arrays(data_seed) for _ in range(3))
    try:
        want = evaluate(graph, *wide, upcast=True)
        want32 = evaluate(graph, *exact)
    except KernelError:
        want = want32 = None
        exact, wide = program.arrays(data_seed), program.arrays(data_seed)  # the failed run may have mutated them
    try:
        got = compiled(*ours)
    except KernelError as exc:
        return [] if want is None else [f"run: KernelError {exc}, the reference raises none"]
    except Exception as exc:
        return [f"run: {type(exc).__name__}: {exc}"[:2000]]
    if want is None:
        # Eager numpy computes every element; the kernels compute only the elements the outputs
        # need (a sliced-away or dead division never runs, as in TorchInductor). Then the outputs
        # must equal a reference where a zero divisor gives a sentinel the kernels never produce.
        want = evaluate(graph, *wide, upcast=True, zero_division="sentinel")
        want32 = evaluate(graph, *exact, zero_division="sentinel")
    got = got if isinstance(got, tuple) else (got,)
    results = [(f"output {i}", g, w, w32) for i, (g, w, w32) in enumerate(zip(got, want, want32))]
    results += [(f"input {i} after the call", a, w, w32) for i, (a, w, w32) in enumerate(zip(ours, wide, exact))]
    if not any(compare(*result) for result in results):
        return []
    spreads = [np.zeros(np.shape(w)) for _, _, w, _ in results]
    for run in range(ROUNDING_RUNS):
        widen_by_rounding(program, graph, data_seed, [w for _, _, w, _ in results], spreads, run)
        problems = [p for result, spread in zip(results, spreads) if (p := compare(*result, spread=spread))]
        if not problems:
            return []
    return problems


def rounding_spreads(program: FuzzProgram, graph: Graph, data_seed: int, wanted: list[np.ndarray],
                     runs: int = ROUNDING_RUNS) -> list[np.ndarray]:
    """For the outputs and then the inputs after the call: how far ``runs`` references perturbed as
    rounding could perturb them land from ``wanted``, element by element."""
    spreads = [np.zeros(np.shape(w)) for w in wanted]
    for run in range(runs):
        widen_by_rounding(program, graph, data_seed, wanted, spreads, run)
    return spreads


def widen_by_rounding(program: FuzzProgram, graph: Graph, data_seed: int, wanted: list[np.ndarray],
                      spreads: list[np.ndarray], run: int) -> None:
    """Widen ``spreads`` (for the outputs, then the inputs after the call) to how far the reference
    perturbed as rounding could perturb it (run ``run``) lands from ``wanted``, element by element
    (integer and bool outputs included: those computed from floats move where a comparison flips)."""
    arrays = program.arrays(data_seed)
    outputs = evaluate(graph, *arrays, upcast=True, zero_division="sentinel", rounding=np.random.default_rng(run))
    for spread, want, value in zip(spreads, wanted, [*outputs, *arrays]):
        np.fmax(spread, _distance(value, want), out=spread)


def compare(what: str, got: Any, want: np.ndarray, want32: np.ndarray, spread: np.ndarray | None = None) -> str | None:
    """None when ``got`` matches either reference (float64 or float32 arithmetic), element by
    element, or is as near the float64 one as rounding can move it (``spread``, from
    ``rounding_spreads``), else why not."""
    if not isinstance(got, np.ndarray):
        return f"{what}: a {type(got).__name__}, not an array"
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{what}: {got.dtype}{list(got.shape)}, reference {want.dtype}{list(want.shape)}"
    if close(got, want) or close(got, want32):
        return None
    # element by element, either reference: an index computed from a float32 sigmoid of 1.0 that
    # float64 puts at 0.99999994 is float32's to take, whatever the other elements match
    bad = ~_close_mask(got, want) & ~_close_mask(got, want32)
    if not bad.any():
        return None
    if spread is not None:  # integer and bool outputs too: a comparison of floats can flip with rounding
        with np.errstate(invalid="ignore"):
            bad &= ~(_distance(got, want) <= spread)
        if not bad.any():
            return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{what}: {int(bad.sum())} of {got.size} elements differ, e.g. at {index}: {got[index]!r} vs {want[index]!r}"


def _distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Element by element, how far ``got`` is from ``want`` (any dtype, as float64)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(got.astype(np.float64) - want.astype(np.float64))


def _close_mask(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    if got.dtype.kind != "f":
        return got == want
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    return np.isclose(got, want, rtol=RTOL, atol=ATOL * scale, equal_nan=True)


def close(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(_close_mask(got, want).all())


def cross_check(program: FuzzProgram, rule: str = DEFAULT_FUSION_RULE) -> tuple[list[str], int]:
    """Solver cross-checks (exact <= heuristic, brute force = exact, every answer validates) on the
    program's fusion problem and on the kernel order problem of its greedy partition; returns the
    problems found and the number of fusion nodes."""
    try:
        problem = fusion_problem_of(program.trace(), Options(rule=rule))
    except Exception as exc:  # a valid program that does not lower is a bug
        return [f"lower: {type(exc).__name__}: {exc}"[:2000]], 0
    small = len(problem.nodes) <= SMALL
    problems: list[str] = []

    def solve(run, strategy, p, **params):
        try:
            return run(strategy, p, **params)
        except StaxError as exc:
            problems.append(f"{run.__name__}({strategy}): {type(exc).__name__}: {exc}")
            return None
    exact_params = {"time_limit": EXACT_LIMIT, "workers": 1}
    fusions = {name: solve(run_fusion, name, problem, **params) for name, params in
               [("none", {}), ("greedy", {}), ("random", {"seed": 1})]
               + ([("cpsat", exact_params), ("mwc", {"time_limit": EXACT_LIMIT})] if small else [])}
    exact = fusions.get("cpsat")
    if exact and exact.status == "optimal":
        problems += [f"fusion: cpsat cost {exact.cost} > {name} cost {r.cost}"
                     for name, r in fusions.items() if r and r.cost < exact.cost]
        if len(problem.nodes) <= TINY_FUSION and (brute := min_fusion_cost(problem)[0]) != exact.cost:
            problems.append(f"fusion: brute force cost {brute} != cpsat cost {exact.cost}")
    if fusions["greedy"] is None:
        return problems, len(problem.nodes)
    blocks = ordered_blocks(problem, fusions["greedy"].partition)
    orders_problem = kernel_order_problem(problem, blocks, [kernel_name(b) for b in blocks])
    tasks = len(orders_problem.tasks)
    orders = {name: solve(run_order, name, orders_problem, **params) for name, params in
              [(n, {}) for n in ("original", "lpmf", "bfs", "dfs", "best")]
              + ([("cpsat", exact_params), ("dp", {})] if tasks <= SMALL else [])}
    optimal = {name: r.peak for name, r in orders.items() if r and r.status == "optimal"}
    for name, peak in optimal.items():
        problems += [f"order: {name} peak {peak} > {other} peak {r.peak}"
                     for other, r in orders.items() if r and r.peak < peak]
    if tasks <= TINY_ORDER and optimal:
        brute = min_peak(orders_problem)[0]
        problems += [f"order: brute force peak {brute} != {name} peak {peak}"
                     for name, peak in optimal.items() if peak != brute]
    return problems, len(problem.nodes)
