"""Sweep configuration: a TOML file read with ``tomllib`` and checked field by field (every key,
its type, default and an example: docs/config.md).

    name = "demo"              # the sweep's name (reports, progress bar)
    seed = 0                   # every instance seed derives from it
    seeds = 2                  # seeds per (family, size) of a seeded family
    cell_timeout = 60          # seconds; a cell's process is killed after it
    measures = ["traffic", "peak", "optimum", "compile", "measured_peak", "kernel_time"]
    fusion = ["none", "greedy", {name = "cpsat", params = {time_limit = 2}}]
    order = ["original", "best", "cpsat"]
    dependence = ["parallel", "sequential"]   # programs: the fusion legality rule (default parallel)

    [reference]                # the exact solver (CP-SAT) every row is compared with
    time_limit = 5.0
    workers = 1
    order = "cpsat"            # or "dp": the down-set DP first (CP-SAT finishing the segments it cannot)
    pareto_nodes = 64          # measure "pareto" (not a default): fronts of fusion problems up to this size

    [timing]                   # measured kernel time: median and spread of `repeat` batches
    repeat = 5
    threads = 1                # OpenMP threads of the generated kernels

    [[families]]               # instance families (see `stax instances list`)
    name = "layered"
    sizes = [10, 16]

    files = ["data/torch/*", "my/problem.json"]   # instance files (at least families or files)

``files`` names FusionProblem and OrderProblem JSON files: ``data/...`` patterns match the files
shipped in ``instances/data/`` by their ``stax instances list`` names, anything else is a path
or glob relative to the config file's folder.  Every matched file is read while the config is
checked, so a missing or malformed file fails before the sweep starts.

Every error names the file and the field, e.g. ``sweep.toml: field 'families[1].sizes':
expected a list of positive integers, found [0]``.
"""
from __future__ import annotations

import fnmatch
import glob
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stax.errors import StaxError
from stax.util.fields import Fields
from stax.scheduler.strategies import check_time_limit

if TYPE_CHECKING:
    from stax.scheduler.strategies import Registry

EXACT_ORDERS = ("cpsat", "dp")
#: a sweep's name names its results directory (results/NAME): one path component, never ``..``
SWEEP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
MEASURES = ("traffic", "peak", "optimum", "pareto", "compile", "measured_peak", "kernel_time")
DEFAULT_MEASURES = tuple(m for m in MEASURES if m != "pareto")  # the front is costly: asked for by name

#: the keys the reader accepts, by table: "" is the top level, "families[]" each [[families]]
#: table, "fusion[]"/"order[]" a strategy given as a table (docs/config.md documents each)
KEYS = {"": ("name", "seed", "seeds", "cell_timeout", "measures", "fusion", "order", "dependence", "reference",
             "timing", "families", "files"),
        "reference": ("time_limit", "workers", "order", "pareto_nodes"),
        "timing": ("repeat", "threads"),
        "families[]": ("name", "sizes"),
        "fusion[]": ("name", "params"),
        "order[]": ("name", "params")}


class ConfigError(StaxError):
    """A malformed sweep configuration."""


@dataclass(frozen=True)
class StrategySpec:
    """A strategy by registry name with its constructor parameters."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.params)})"

    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    def to_json(self) -> str:
        return json.dumps(self.kwargs(), sort_keys=True)


@dataclass(frozen=True)
class FamilySpec:
    name: str
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class ReferenceSpec:
    """The exact solver's limits (CP-SAT for both problems) and, for orders, which exact solver
    comes first: ``dp`` (dynamic programming over down-sets, CP-SAT finishing what it cannot) proves
    optima on training graphs that CP-SAT only bounds."""

    time_limit: float = 10.0
    workers: int = 1
    order: str = "cpsat"
    pareto_nodes: int = 64  # measure ``pareto``: the largest fusion problem (nodes) whose front is computed


@dataclass(frozen=True)
class TimingSpec:
    repeat: int = 5
    threads: int = 1


@dataclass(frozen=True)
class SweepConfig:
    name: str
    families: tuple[FamilySpec, ...]
    fusion: tuple[StrategySpec, ...]
    order: tuple[StrategySpec, ...]
    files: tuple[str, ...] = ()  # instance names (``data/STEM``) or absolute paths of JSON problem files
    dependence: tuple[str, ...] = ("parallel",)  # stax.compile's rules, one cell per program instance each
    seed: int = 0
    seeds: int = 1
    cell_timeout: float = 120.0
    measures: tuple[str, ...] = DEFAULT_MEASURES
    reference: ReferenceSpec = field(default_factory=ReferenceSpec)
    timing: TimingSpec = field(default_factory=TimingSpec)
    source: str = "<config>"


def _strategy(top: Fields, where: str, value: Any, registry: Registry) -> StrategySpec:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        top.fail(where, "a strategy name or a table {name = ..., params = {...}}", value)
    fields = top.sub(where, value, KEYS[f"{where.split('[')[0]}[]"])
    known = registry.names()
    name = fields.get("name", str, f"a strategy name ({', '.join(known)})", choices=tuple(known))
    params = fields.get("params", dict, "a table of constructor parameters", default={})
    fields.check("", lambda: registry.check(name, params, option="params"))
    return StrategySpec(name, tuple(sorted(params.items())))


def _strategies(fields: Fields, key: str, registry: Registry) -> tuple[StrategySpec, ...]:
    values = fields.get(key, list, "a non-empty list of strategies", check=bool)
    return tuple(_strategy(fields, f"{key}[{i}]", v, registry) for i, v in enumerate(values))


def _families(fields: Fields) -> tuple[FamilySpec, ...]:
    from instances.store import FAMILIES
    if "families" not in fields.table and "files" in fields.table:
        return ()
    tables = fields.get("families", list, "a non-empty array of [[families]] tables (or a files list)", check=bool)
    result = []
    for i, table in enumerate(tables):
        if not isinstance(table, dict):
            fields.fail(f"families[{i}]", "a table with name and sizes", table)
        fam = fields.sub(f"families[{i}]", table, KEYS["families[]"])
        name = fam.get("name", str, f"an instance family ({', '.join(FAMILIES)})", choices=tuple(FAMILIES))
        sizes = fam.get("sizes", list, "a list of positive integers",
                        check=lambda s: s and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in s))
        result.append(FamilySpec(name, tuple(sizes)))
    return tuple(result)


def _files(fields: Fields) -> tuple[str, ...]:
    """The instance files the ``files`` patterns match, each read and checked, in pattern order."""
    from instances.store import load, shipped
    patterns = fields.get("files", list, "a non-empty list of file names or patterns", default=[],
                          check=lambda f: f and all(isinstance(x, str) and x for x in f))
    base = Path(fields.source).parent
    found: dict[str, None] = {}
    for i, pattern in enumerate(patterns):
        where = f"files[{i}]"
        if pattern.startswith("data/"):
            names = fnmatch.filter(shipped(), pattern.removesuffix(".json"))
        else:  # an absolute pattern replaces the base
            names = sorted(str(Path(p).resolve()) for p in glob.glob(str(base / pattern)) if p.endswith(".json"))
        if not names:
            fields.fail(where, "a pattern matching at least one instance file: a shipped one as data/... "
                        "(see `stax instances list`) or .json paths relative to the config's folder "
                        f"{str(base.resolve())!r}", pattern)
        for name in names:
            try:
                load(name)
            except StaxError as exc:
                raise ConfigError(f"{fields.source}: field {fields.path(where)!r} ({pattern!r}): {exc}; fix the file "
                                  "or drop it from the pattern") from exc
            found[name] = None
    return tuple(found)


def _sweep_name(fields: Fields, default: str) -> str:
    """The sweep's name (default: the config file's stem): a directory name, no separator, no ``..``."""
    if "name" not in fields.table and not (SWEEP_NAME.fullmatch(default) and ".." not in default):
        fields.fail("name", "a name = \"...\" line (the file's own name is not a directory name stax uses)",
                    default)
    return fields.get("name", str, "a directory name: letters, digits, _ . - (no separator, no '..'), at most "
                      "100 characters", default, check=lambda v: SWEEP_NAME.fullmatch(v) and ".." not in v)


def _seconds(fields: Fields, key: str, default: float) -> float:
    """A time limit: a number above 0, refused with the message of every time limit."""
    return fields.read(key, lambda value: check_time_limit(value, key), default)


def parse_config(data: dict[str, Any], source: str = "<config>") -> SweepConfig:
    """A checked :class:`SweepConfig` from a parsed TOML document."""
    from stax.scheduler.legality import DEPENDENCE_RULES
    from stax.scheduler.strategies import fusion_strategies, order_strategies
    top = Fields(data, source, known=KEYS[""], error=ConfigError)
    measures = top.get("measures", list, f"a list drawn from {list(MEASURES)}", default=list(DEFAULT_MEASURES),
                       choices=MEASURES)
    ref = top.sub("reference", top.get("reference", dict, "a table", default={}), KEYS["reference"])
    timing = top.sub("timing", top.get("timing", dict, "a table", default={}), KEYS["timing"])
    return SweepConfig(
        name=_sweep_name(top, Path(source).stem),
        families=_families(top),
        files=_files(top),
        fusion=_strategies(top, "fusion", fusion_strategies),
        order=_strategies(top, "order", order_strategies),
        dependence=tuple(top.get("dependence", list, f"a non-empty list drawn from {list(DEPENDENCE_RULES)}",
                                 default=["parallel"], check=bool, choices=tuple(DEPENDENCE_RULES))),
        seed=top.get("seed", int, "an integer", default=0),
        seeds=top.positive("seeds", 1),
        cell_timeout=_seconds(top, "cell_timeout", 120.0),
        measures=tuple(measures),
        reference=ReferenceSpec(_seconds(ref, "time_limit", 10.0),
                                ref.positive("workers", 1),
                                ref.get("order", str, f"an exact order solver ({', '.join(EXACT_ORDERS)})",
                                        default="cpsat", choices=EXACT_ORDERS),
                                ref.positive("pareto_nodes", 64)),
        timing=TimingSpec(timing.positive("repeat", 5), timing.positive("threads", 1)),
        source=source,
    )


def load_config(path: str | Path) -> SweepConfig:
    """Read and check a sweep config file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the file ({exc.strerror})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return parse_config(data, str(path))
