"""Named instances: the program suite, the abstract generators, and shipped JSON files.

An instance name is ``FAMILY/SIZE/SEED`` for a seeded family (``layered/16/3``,
``random_shifted/4096/1``), ``PROGRAM/SIZE`` for a suite or shifted-read program
(``softmax/64``, ``stencil_3pt/4096``, built from the program with seed 0 inputs),
``data/STEM`` for a file shipped in ``instances/data/`` (``STEM.json`` or ``STEM.json.gz``), or
a path to a JSON problem file (``.json``, or gzip-compressed ``.json.gz``).  :func:`load` returns an :class:`Instance` holding the FusionProblem (or, for order-only
families, the OrderProblem) and, for programs, the Program itself so it can be compiled.

    >>> load("layered/12/0").fusion.nodes[:3]
    ('n0', 'n1', 'n2')
"""
from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from stax.errors import InstanceFormatError, StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem, kernel_order_problem
from stax.util.suggest import did_you_mean

from instances import dags, graphs, training
from instances.programs import PROGRAMS, Program
from instances.random_programs import random_program
from instances.shifted_programs import SHIFTED_PROGRAMS, random_shifted

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Instance:
    """One instance: a FusionProblem (``fusion``) or an order-only problem (``order``), and the
    program it comes from, if any (``program`` traced on ``program.inputs(size, seed)``)."""

    name: str
    family: str
    size: int
    seed: int
    fusion: FusionProblem | None = None
    order: OrderProblem | None = None
    program: Program | None = None

    @property
    def kind(self) -> str:
        """'program', 'fusion' (an abstract FusionProblem) or 'order' (an OrderProblem only)."""
        return "program" if self.program else "fusion" if self.fusion else "order"

    def order_problem(self, partition: Sequence[Sequence[str]] | None = None) -> OrderProblem:
        """The order-only problem, or the kernels' OrderProblem of ``partition`` (default: every
        node its own kernel).  For programs the compiler also drops buffers that alias another
        (views, in-place outputs); sweeps use the compiled one."""
        if self.order is not None:
            return self.order
        return kernel_order_problem(self.fusion, partition or [(n,) for n in self.fusion.nodes])

    def content_hash(self) -> str:
        """A hash of what defines the instance: its problem, and its program's identity."""
        problem = (self.fusion or self.order).to_dict() | {"name": ""}
        ident = {"problem": problem, "program": self.program and [self.program.name, self.size, self.seed]}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Family:
    """A generator of instances from a size and a seed; ``seeded=False`` ignores the seed."""

    name: str
    kind: str
    description: str
    build: Callable[[int, int], dict[str, Any]]
    seeded: bool = True


def program_fusion_problem(program: Program, size: int, seed: int = 0, name: str = "") -> FusionProblem:
    """The FusionProblem ``stax.compile`` solves for ``program`` with its default options (rule
    ``DEFAULT_FUSION_RULE``), without building C++; its content keys a sweep's program cells."""
    from stax.compiler import Options, fusion_problem_of
    from stax.frontend.tracing import trace
    graph = trace(program.fn, *program.inputs(size, seed))
    return fusion_problem_of(graph, Options(cost_model=program.cost_model), name=name)


def _program_family(program: Program) -> Family:
    def build(size: int, seed: int) -> dict[str, Any]:
        return {"program": program, "fusion": program_fusion_problem(program, size, seed, f"{program.name}/{size}")}
    return Family(program.name, "program", program.description, build, seeded=False)


def _random_programs(size: int, seed: int) -> dict[str, Any]:
    program = random_program(seed, steps=size)
    return {"program": program, "fusion": program_fusion_problem(program, size, seed, f"random_program/{size}/{seed}")}


def _random_shifted(size: int, seed: int) -> dict[str, Any]:
    program = random_shifted(seed)
    return {"program": program, "fusion": program_fusion_problem(program, size, seed, f"random_shifted/{size}/{seed}")}


def _dag_family(name: str, maker: Callable, shape: str) -> Family:
    def build(size: int, seed: int) -> dict[str, Any]:
        return {"fusion": dags.fusion_problem(maker(size, seed), seed, name=f"{name}/{size}/{seed}")}
    return Family(name, "fusion", f"a random {shape} DAG of SIZE nodes, 10% of node pairs forbidden", build)


def _multiway_cut_family(graph_family: str) -> Family:
    from solvers.theory.reductions import fusion_from_multiway_cut

    def build(size: int, seed: int) -> dict[str, Any]:
        h = graphs.FAMILIES[graph_family](size, seed)
        name = f"mwc_{graph_family}/{size}/{seed}"
        return {"fusion": fusion_from_multiway_cut(h, graphs.choose_terminals(h, seed), name).problem}
    return Family(f"mwc_{graph_family}", "fusion",
                  f"Theorem 7.1: the FusionProblem of a 3-terminal multiway cut on a {graph_family} graph", build)


def _vertex_separation_family(graph_family: str) -> Family:
    from solvers.theory.reductions import order_from_vertex_separation

    def build(size: int, seed: int) -> dict[str, Any]:
        h = graphs.FAMILIES[graph_family](size, seed)
        return {"order": order_from_vertex_separation(h, f"vsep_{graph_family}/{size}/{seed}").problem}
    return Family(f"vsep_{graph_family}", "order",
                  f"Proposition 7.4: the OrderProblem of vertex separation on a {graph_family} graph", build)


def _families() -> dict[str, Family]:
    found = [_program_family(p) for p in (*PROGRAMS.values(), *SHIFTED_PROGRAMS.values())]
    found.append(Family("random_program", "program", "a random valid program with SIZE steps (seeded)",
                        _random_programs))
    found.append(Family("random_shifted", "program", "a random chain of shifted views of SIZE elements (seeded)",
                        _random_shifted))
    found += [_dag_family("layered", dags.layered_dag, "layered"),
              _dag_family("series_parallel", dags.series_parallel_dag, "series-parallel")]
    found.append(Family("training", "order", "a synthetic training step of about SIZE tasks: forward chain, saved "
                        "activations, backward chain, dangling weight gradients (one kernel per node)",
                        lambda size, seed: {"order": training.training_order(size, seed)}))
    found.append(Family("training_fusion", "fusion", "the FusionProblem of training/SIZE/SEED (extern matmuls fuse "
                        "with nothing)", lambda size, seed: {"fusion": training.training_fusion(size, seed)}))
    found += [_multiway_cut_family(g) for g in graphs.FAMILIES]
    found += [_vertex_separation_family(g) for g in graphs.FAMILIES]
    return {f.name: f for f in found}


FAMILIES: dict[str, Family] = _families()


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise StaxError(f"no instance family named {name!r}; {did_you_mean(name, FAMILIES)}"
                        f"known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def instance(family: str, size: int, seed: int = 0) -> Instance:
    """Instance ``seed`` of ``family`` at ``size`` (the seed is ignored by unseeded families)."""
    fam = get_family(family)
    seed = seed if fam.seeded else 0
    name = f"{family}/{size}/{seed}" if fam.seeded else f"{family}/{size}"
    return Instance(name, family, size, seed, **fam.build(size, seed))


def read_problem_json(path: str | Path) -> dict[str, Any]:
    """The JSON object of a problem file, gzip-compressed when its name ends in ``.gz``."""
    from stax.scheduler.problems import read_json
    if not str(path).endswith(".gz"):
        return read_json(path)
    try:
        data = json.loads(gzip.decompress(Path(path).read_bytes()))
    except (OSError, EOFError, ValueError) as exc:
        raise InstanceFormatError(f"{path}: not a gzip-compressed JSON file ({exc})") from exc
    if not isinstance(data, dict):
        raise InstanceFormatError(f"{path}: expected a JSON object at the top level, found {type(data).__name__}")
    return data


def load_file(path: str | Path, name: str | None = None) -> Instance:
    """An instance from a FusionProblem or OrderProblem JSON file (the format field tells which;
    ``.json.gz``: gzip-compressed)."""
    from stax.scheduler.problems import FUSION_FORMAT, ORDER_FORMAT
    data = read_problem_json(path)
    name = name or str(path)
    if data.get("format") == ORDER_FORMAT:
        problem = OrderProblem.from_dict(data, str(path))
        return Instance(name, "file", len(problem.tasks), 0, order=problem)
    if data.get("format") != FUSION_FORMAT:
        raise InstanceFormatError(f"{path}: field 'format': expected {FUSION_FORMAT!r} or {ORDER_FORMAT!r}, "
                                  f"found {data.get('format')!r}")
    problem = FusionProblem.from_dict(data, str(path))
    return Instance(name, "file", len(problem.nodes), 0, fusion=problem)


def load(name: str) -> Instance:
    """The instance called ``name`` (see the module docstring for the forms)."""
    if name.startswith("data/"):
        path = DATA_DIR / f"{name[5:]}.json"
        if not path.exists():
            path = path.with_name(path.name + ".gz")
        if not path.exists():
            raise StaxError(f"no shipped instance {name!r}; {did_you_mean(name, shipped())}"
                            f"shipped: {', '.join(shipped()) or 'none'}")
        return load_file(path, name)
    if name.endswith((".json", ".json.gz")):
        return load_file(name)
    parts = name.split("/")
    try:
        family, numbers = parts[0], [int(p) for p in parts[1:]]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2) or len(numbers) != len(parts) - 1:
        raise StaxError(f"instance name {name!r}: expected FAMILY/SIZE/SEED, PROGRAM/SIZE, data/STEM or FILE.json")
    return instance(family, *numbers)


def shipped() -> list[str]:
    """Names of the files in ``instances/data/`` and its folders (``data/torch/mlp_train.fusion``,
    ``data/models/gpt2-12-train.fusion`` for ``gpt2-12-train.fusion.json.gz``)."""
    files = sorted([*DATA_DIR.rglob("*.json"), *DATA_DIR.rglob("*.json.gz")])
    return [f"data/{p.relative_to(DATA_DIR).as_posix().removesuffix('.gz').removesuffix('.json')}" for p in files]


def catalogue() -> list[dict[str, str]]:
    """One row per family and shipped file: name pattern, kind, description."""
    rows = [{"name": f"{f.name}/SIZE/SEED" if f.seeded else f"{f.name}/SIZE", "kind": f.kind,
             "description": f.description} for f in FAMILIES.values()]
    for name in shipped():
        inst = load(name)
        rows.append({"name": name, "kind": inst.kind, "description": (inst.fusion or inst.order).name})
    return rows


def describe(inst: Instance) -> str:
    """A short human summary of an instance."""
    lines = [f"{inst.name}: {inst.kind} instance (family {inst.family}, size {inst.size}, seed {inst.seed}), "
             f"hash {inst.content_hash()}"]
    if inst.program:
        lines.append(f"program: {inst.program.description}")
    if inst.fusion:
        p = inst.fusion
        lines.append(f"FusionProblem: {len(p.nodes)} nodes, {len(p.buffers)} buffers, {p.dag().number_of_edges()} "
                     f"edges, {len(p.forbidden)} forbidden pairs; unfused traffic {p.unfused_cost()} bytes")
    order = inst.order_problem()
    lines.append(f"OrderProblem{' (one kernel per node)' if inst.fusion else ''}: {len(order.tasks)} tasks, "
                 f"{len(order.buffers)} buffers; peak in the original order {order.peak(order.tasks)} bytes")
    return "\n".join(lines)
