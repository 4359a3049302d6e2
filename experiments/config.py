"""Sweep configuration: a TOML file read with ``tomllib`` and checked field by field.

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
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stax.errors import StaxError
from stax.strategy import check_time_limit
from stax.suggest import did_you_mean

if TYPE_CHECKING:
    from stax.strategy import Registry

EXACT_ORDERS = ("cpsat", "dp")
MEASURES = ("traffic", "peak", "optimum", "pareto", "compile", "measured_peak", "kernel_time")
DEFAULT_MEASURES = tuple(m for m in MEASURES if m != "pareto")  # the front is costly: asked for by name


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


class _Fields:
    """Typed access to a TOML table; failures name the file and the field path."""

    def __init__(self, source: str, table: dict[str, Any], where: str, known: tuple[str, ...]):
        self.source, self.table, self.where = source, table, where
        unknown = sorted(set(table) - set(known))
        if unknown:
            self.fail(unknown[0], f"one of the known keys ({', '.join(known)})", "an unknown key",
                      did_you_mean(unknown[0], known))

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, expected: str, found: Any, hint: str = "") -> None:
        raise ConfigError(f"{self.source}: field {self.path(key)!r}: expected {expected}, found {found!r}"
                          + (f"; {hint.strip()}" if hint else ""))

    def get(self, key: str, kind: type | tuple[type, ...], expected: str, default: Any = ..., check=None,
            choices: tuple[str, ...] = ()) -> Any:
        """The value of ``key``, checked; a string (or a list's string) that is not one of ``choices``
        fails naming the closest."""
        if choices and kind is list:
            also = check
            check = lambda v: (also is None or also(v)) and all(x in choices for x in v)  # noqa: E731
        elif choices:
            check = lambda v: v in choices  # noqa: E731
        if key not in self.table:
            if default is ...:
                self.fail(key, expected, "nothing (the field is required)")
            return default
        value = self.table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wrong_type = not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        if wrong_type or (check is not None and not check(value)):
            wrong = next((x for x in value if x not in choices), None) if isinstance(value, list) else value
            self.fail(key, expected, value, did_you_mean(wrong, choices) if choices and isinstance(wrong, str) else "")
        return value


    def seconds(self, key: str, default: float) -> float:
        """A time limit: a number above 0, refused with the message of every time limit."""
        try:
            return check_time_limit(self.table.get(key, default), key)
        except StaxError as exc:
            raise ConfigError(f"{self.source}: field {self.path(key)!r}: {exc}") from None


def _strategy(source: str, where: str, value: Any, registry: Registry) -> StrategySpec:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: field {where!r}: expected a strategy name or a table "
                          f"{{name = ..., params = {{...}}}}, found {value!r}")
    fields = _Fields(source, value, where, ("name", "params"))
    known = registry.names()
    name = fields.get("name", str, f"a strategy name ({', '.join(known)})", choices=tuple(known))
    params = fields.get("params", dict, "a table of constructor parameters", default={})
    try:
        registry.check(name, params, option="params")
    except StaxError as exc:
        raise ConfigError(f"{source}: field {where!r}: {exc}") from None
    return StrategySpec(name, tuple(sorted(params.items())))


def _strategies(fields: _Fields, key: str, registry: Registry) -> tuple[StrategySpec, ...]:
    values = fields.get(key, list, "a non-empty list of strategies", check=bool)
    return tuple(_strategy(fields.source, f"{key}[{i}]", v, registry) for i, v in enumerate(values))


def _families(fields: _Fields) -> tuple[FamilySpec, ...]:
    from instances.store import FAMILIES
    if "families" not in fields.table and "files" in fields.table:
        return ()
    tables = fields.get("families", list, "a non-empty array of [[families]] tables (or a files list)", check=bool)
    result = []
    for i, table in enumerate(tables):
        if not isinstance(table, dict):
            fields.fail(f"families[{i}]", "a table with name and sizes", table)
        fam = _Fields(fields.source, table, f"families[{i}]", ("name", "sizes"))
        name = fam.get("name", str, f"an instance family ({', '.join(FAMILIES)})", choices=tuple(FAMILIES))
        sizes = fam.get("sizes", list, "a list of positive integers",
                        check=lambda s: s and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in s))
        result.append(FamilySpec(name, tuple(sizes)))
    return tuple(result)


def _files(fields: _Fields) -> tuple[str, ...]:
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
                raise ConfigError(f"{fields.source}: field {where!r} ({pattern!r}): {exc}; fix the file or "
                                  "drop it from the pattern") from exc
            found[name] = None
    return tuple(found)


def parse_config(data: dict[str, Any], source: str = "<config>") -> SweepConfig:
    """A checked :class:`SweepConfig` from a parsed TOML document."""
    from stax.scheduler.legality import DEPENDENCE_RULES
    from stax.strategy import fusion_strategies, order_strategies
    top = _Fields(source, data, "", ("name", "seed", "seeds", "cell_timeout", "measures", "fusion", "order",
                                     "dependence", "reference", "timing", "families", "files"))
    measures = top.get("measures", list, f"a list drawn from {list(MEASURES)}", default=list(DEFAULT_MEASURES),
                       choices=MEASURES)
    ref = _Fields(source, top.get("reference", dict, "a table", default={}), "reference",
                  ("time_limit", "workers", "order", "pareto_nodes"))
    timing = _Fields(source, top.get("timing", dict, "a table", default={}), "timing", ("repeat", "threads"))
    return SweepConfig(
        name=top.get("name", str, "a string", default=Path(source).stem),
        families=_families(top),
        files=_files(top),
        fusion=_strategies(top, "fusion", fusion_strategies),
        order=_strategies(top, "order", order_strategies),
        dependence=tuple(top.get("dependence", list, f"a non-empty list drawn from {list(DEPENDENCE_RULES)}",
                                 default=["parallel"], check=bool, choices=tuple(DEPENDENCE_RULES))),
        seed=top.get("seed", int, "an integer", default=0),
        seeds=top.get("seeds", int, "a positive integer", default=1, check=lambda s: s > 0),
        cell_timeout=top.seconds("cell_timeout", 120.0),
        measures=tuple(measures),
        reference=ReferenceSpec(ref.seconds("time_limit", 10.0),
                                ref.get("workers", int, "a positive integer", default=1, check=lambda w: w > 0),
                                ref.get("order", str, f"an exact order solver ({', '.join(EXACT_ORDERS)})",
                                        default="cpsat", choices=EXACT_ORDERS),
                                ref.get("pareto_nodes", int, "a positive integer", default=64, check=lambda n: n > 0)),
        timing=TimingSpec(timing.get("repeat", int, "a positive integer", default=5, check=lambda r: r > 0),
                          timing.get("threads", int, "a positive integer", default=1, check=lambda t: t > 0)),
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
