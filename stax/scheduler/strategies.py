"""Pluggable fusion and order strategies: their result types and the registries that find them.

A fusion strategy is an object with a ``name`` and ``solve(FusionProblem) -> FusionResult``; an
order strategy has ``solve(OrderProblem) -> OrderResult`` (the protocols ``FusionStrategy`` and
``OrderStrategy``).  A result's ``status`` is a ``Status`` and its ``info`` a ``FusionInfo`` or
``OrderInfo`` (a strategy may return strings and a dict: they are converted and checked).
Strategies are found by name in registries filled from Python entry points (groups ``stax.fusion`` and ``stax.order``), so a
package can add one without editing stax; ``import stax`` itself never imports OR-Tools.
A plain function ``problem -> partition`` (or ``-> order``) is accepted too.

Every answer goes through the problem's validator before it is used; ``run_fusion`` and
``run_order`` return it as a new value (the strategy's own result is not changed).
"""
from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, Sequence, TypeVar, runtime_checkable

from stax.errors import StaxError, StrategyNotFound
from stax.scheduler.problems import FusionProblem, OrderProblem, Partition
from stax.util.suggest import did_you_mean

if TYPE_CHECKING:
    from stax.scheduler.events import Event

class Status(StrEnum):
    """How an answer was obtained (its value is what saved schedules and sweep rows hold)."""

    HEURISTIC = "heuristic"  # a heuristic's answer, no claim about optimality
    OPTIMAL = "optimal"  # a proven optimum
    FEASIBLE = "feasible"  # a solver's best answer when time ran out, not proven optimal
    UNKNOWN = "unknown"  # no answer at all


STATUSES = tuple(status.value for status in Status)


@dataclass(frozen=True)
class _Info:
    """What a strategy reports beside its answer: typed fields, and ``stats``, the figures one
    strategy alone reports (a solver's seconds, a decomposition's region count), by name.
    ``as_dict``/``of`` give and read the flat form saved in a schedule."""

    strategy: str = ""  # the registry name it was run by (``run_fusion``/``run_order`` set it)
    note: str = ""  # why an exact solver's answer is not proven optimal
    stats: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The fields that are set, then ``stats``, as one flat dict."""
        typed = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "stats"}
        return {name: value for name, value in typed.items() if value not in ("", (), {})} | self.stats

    @classmethod
    def of(cls, data: dict[str, Any]):
        """The inverse of ``as_dict``: the typed fields by name, every other key into ``stats``."""
        typed = {f.name for f in fields(cls)} - {"stats"}
        return cls(**{k: v for k, v in data.items() if k in typed},
                   stats={k: v for k, v in data.items() if k not in typed})


@dataclass(frozen=True)
class FusionInfo(_Info):
    """A fusion strategy's report; ``events``: greedy's decisions (``stax.scheduler.events``)."""

    events: tuple[Event, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))


@dataclass(frozen=True)
class OrderInfo(_Info):
    """An order strategy's report; ``candidates``: the peak of each order ``best`` compared,
    ``chosen``: the one it took."""

    candidates: dict[str, int] = field(default_factory=dict)
    chosen: str = ""


def _typed(result: FusionResult | OrderResult, info_type: type[_Info]) -> None:
    """Make ``status`` a Status and ``info`` an ``info_type`` (a strategy may give strings and dicts)."""
    if not isinstance(result.status, Status):
        if result.status not in STATUSES:
            raise StaxError(f"a strategy returned status {result.status!r}; use one of {', '.join(STATUSES)} "
                            "(stax.scheduler.strategies.Status)")
        result.status = Status(result.status)
    if isinstance(result.info, dict):
        result.info = info_type.of(result.info)


@dataclass
class FusionResult:
    partition: Partition
    status: Status = Status.HEURISTIC
    cost: int | None = None
    bound: float | None = None
    seconds: float = 0.0
    info: FusionInfo = field(default_factory=FusionInfo)

    def __post_init__(self) -> None:
        _typed(self, FusionInfo)

    @property
    def gap(self) -> float | None:
        """Relative gap between the cost and the proven lower bound (0 when optimal)."""
        if self.cost is None or self.bound is None:
            return None
        return 0.0 if self.cost == 0 else (self.cost - self.bound) / self.cost


@dataclass
class OrderResult:
    order: tuple[str, ...]
    status: Status = Status.HEURISTIC
    peak: int | None = None
    bound: float | None = None
    seconds: float = 0.0
    info: OrderInfo = field(default_factory=OrderInfo)

    def __post_init__(self) -> None:
        _typed(self, OrderInfo)


@runtime_checkable
class FusionStrategy(Protocol):
    """A fusion strategy: maps a FusionProblem to a partition of its nodes (Definition 7.3)."""

    name: str

    def solve(self, problem: FusionProblem) -> FusionResult: ...


@runtime_checkable
class OrderStrategy(Protocol):
    """An order strategy: maps an OrderProblem to a topological order of its tasks (Definition 7.5)."""

    name: str

    def solve(self, problem: OrderProblem) -> OrderResult: ...


Strategy = TypeVar("Strategy", FusionStrategy, OrderStrategy)


class _FunctionStrategy:
    """Adapts a plain function to the strategy interface."""

    def __init__(self, fn: Callable, kind: str):
        self.fn, self.kind = fn, kind
        self.name = getattr(fn, "__name__", "function")

    def solve(self, problem):
        answer = self.fn(problem)
        if self.kind == "fusion":
            return answer if isinstance(answer, FusionResult) else FusionResult(tuple(tuple(b) for b in answer))
        return answer if isinstance(answer, OrderResult) else OrderResult(tuple(answer))


@functools.cache
def _group_entry_points(group: str) -> dict[str, Any]:
    """Entry points of a group, read once per process (scanning installed packages is slow)."""
    return {ep.name: ep for ep in entry_points(group=group)}


@functools.cache
def _own_entry_points() -> tuple[Any, ...]:
    """The entry points stax's own distribution declares: reading one package's metadata is
    quick, so the built-in strategies resolve without scanning every installed package."""
    try:
        return tuple(distribution("stax").entry_points)
    except PackageNotFoundError:
        return ()


class Registry(Generic[Strategy]):
    """Strategies of one kind, by name: built-ins plus the entry points of ``group``."""

    def __init__(self, group: str, kind: str):
        self.group, self.kind = group, kind
        self._local: dict[str, Callable[..., Any]] = {}

    def register(self, name: str, factory: Callable[..., Strategy]) -> None:
        """Add a strategy class (or factory) under ``name`` for this process."""
        self._local[name] = factory

    def _entry_points(self) -> dict[str, Any]:
        return _group_entry_points(self.group)

    def names(self) -> list[str]:
        return sorted(set(self._local) | set(self._entry_points()))

    def factory(self, name: str) -> Callable[..., Any]:
        if name in self._local:
            return self._local[name]
        eps = {ep.name: ep for ep in _own_entry_points() if ep.group == self.group}
        if name not in eps:
            eps = self._entry_points()
        if name not in eps:
            raise StrategyNotFound(
                f"no {self.kind} strategy named {name!r}; {did_you_mean(name, self.names())}"
                f"known: {', '.join(self.names()) or 'none'}. "
                f"Register one with stax.{self.kind}_strategies.register(name, cls) or an entry point in "
                f"group {self.group!r} (and `pip install -e .` after editing pyproject.toml)")
        try:
            return eps[name].load()
        except ImportError as exc:
            raise StrategyNotFound(f"{self.kind} strategy {name!r} is registered as {eps[name].value!r}, "
                                   f"but it cannot be imported ({exc}); install what it needs or fix the entry point") from exc

    def check(self, spec: Any, params: dict[str, Any], option: str = "") -> None:
        """Raise, naming what is wrong, unless ``resolve(spec, **params)`` can make a strategy;
        ``option`` is what the caller calls ``params`` (``fusion_params`` by default)."""
        option = option or f"{self.kind}_params"
        for key, value in params.items():
            if key.endswith("time_limit") and value is not None:
                check_time_limit(value, f"{option} {key}")
        if isinstance(spec, str):
            _check_params(self.factory(spec), params, f"{self.kind} strategy {spec!r}", option)
            return
        if not (hasattr(spec, "solve") or callable(spec)):
            raise StrategyNotFound(f"{self.kind} strategy must be a name, an object with solve(), or a function; "
                                   f"got {type(spec).__name__}")
        if params:
            raise StaxError(f"{option} {sorted(params)} configure a {self.kind} strategy given by name; "
                            f"a {type(spec).__name__} passed itself takes none (set them on it, or pass its name)")

    def resolve(self, spec: str | Strategy | Callable, **params: Any) -> Strategy:
        """A strategy object from a name (with ``params``), a strategy object, or a function."""
        self.check(spec, params)
        if isinstance(spec, str):
            return self.factory(spec)(**params)
        return spec if hasattr(spec, "solve") else _FunctionStrategy(spec, self.kind)


def check_time_limit(value: Any, where: str) -> float:
    """``value`` as seconds, or the one error every time limit (strategy parameter, sweep config) gives
    when it is not a number above 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise StaxError(f"{where}={value!r}: a time limit must be a number of seconds above 0 (for example 5)")
    return float(value)


def strategy_signature(factory: Callable[..., Any]) -> inspect.Signature | None:
    """The parameters ``factory`` takes, or None when there is no signature to read.  A class
    defining neither ``__init__`` nor ``__new__`` takes none: read so directly, as inspect would
    parse object's text signature, a large part of a warm compile in a new process."""
    if isinstance(factory, type) and factory.__init__ is object.__init__ and factory.__new__ is object.__new__:
        return inspect.Signature()
    try:
        return inspect.signature(factory)
    except (TypeError, ValueError):
        return None


def _check_params(factory: Callable[..., Any], params: dict[str, Any], what: str, option: str) -> None:
    """Raise, naming the parameters ``factory`` takes, when it cannot be called with ``params``."""
    signature = strategy_signature(factory)
    if signature is None:  # the call itself will tell
        return
    try:
        signature.bind(**params)
    except TypeError as exc:
        takes = [p.name for p in signature.parameters.values() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        unknown = [name for name in params if name not in takes]
        hint = did_you_mean(unknown[0], takes) if unknown else ""
        raise StaxError(f"{option} {sorted(params)} do not fit {what} ({exc}); {hint}it takes "
                        f"{', '.join(takes) or 'no parameters'}") from None


fusion_strategies: Registry[FusionStrategy] = Registry("stax.fusion", "fusion")
order_strategies: Registry[OrderStrategy] = Registry("stax.order", "order")


def _named(info: _Info, solver: Any, spec: Any) -> _Info:
    """``info`` naming the strategy that made it (a name the strategy gave itself stays)."""
    return info if info.strategy else replace(info, strategy=getattr(solver, "name", str(spec)))


def run_fusion(strategy: str | FusionStrategy | Callable, problem: FusionProblem, **params: Any) -> FusionResult:
    """Solve, validate and price a fusion problem with any strategy."""
    solver = fusion_strategies.resolve(strategy, **params)
    start = time.perf_counter()
    result = solver.solve(problem)
    if not isinstance(result, FusionResult):
        result = FusionResult(tuple(tuple(b) for b in result))
    partition = problem.validate(result.partition)
    return replace(result, partition=partition, cost=problem.cost(partition),
                   seconds=result.seconds or time.perf_counter() - start, info=_named(result.info, solver, strategy))


def run_order(strategy: str | OrderStrategy | Callable, problem: OrderProblem, **params: Any) -> OrderResult:
    """Solve, validate and price an order problem with any strategy."""
    solver = order_strategies.resolve(strategy, **params)
    start = time.perf_counter()
    result = solver.solve(problem)
    if not isinstance(result, OrderResult):
        result = OrderResult(tuple(result))
    order = problem.validate(result.order)
    return replace(result, order=order, peak=problem.peak(order), seconds=result.seconds or time.perf_counter() - start,
                   info=_named(result.info, solver, strategy))


def ordered_blocks(problem: FusionProblem, partition: Sequence[Sequence[str]]) -> Partition:
    """Blocks sorted by the position of their first node in ``problem.nodes`` (stable names)."""
    position = {n: i for i, n in enumerate(problem.nodes)}
    blocks = [tuple(sorted(b, key=position.__getitem__)) for b in partition]
    return tuple(sorted(blocks, key=lambda b: position[b[0]]))
