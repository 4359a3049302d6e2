"""The strategies a name can select, as `stax strategies` lists them: kind, name, parameters with
their defaults, and the first line of the strategy's own docstring."""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from stax.errors import StrategyNotFound
from stax.scheduler.strategies import Registry, fusion_strategies, order_strategies, strategy_signature


@dataclass(frozen=True)
class StrategyEntry:
    kind: str  # fusion or order
    name: str
    parameters: str  # "time_limit=10.0, workers=2", or "" when it takes none
    doc: str  # the first line of the docstring, or why the strategy cannot be loaded


def entries(registries: tuple[Registry, ...] = (fusion_strategies, order_strategies)) -> list[StrategyEntry]:
    """One entry per registered strategy, fusion first, by name."""
    found = []
    for registry in registries:
        for name in registry.names():
            try:
                factory = registry.factory(name)
            except StrategyNotFound as exc:
                found.append(StrategyEntry(registry.kind, name, "", f"(unavailable: {exc})"))
                continue
            signature = strategy_signature(factory)
            params = ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}"
                               for p in (signature.parameters.values() if signature else ()))
            doc = (inspect.getdoc(factory) or "").strip().splitlines()
            found.append(StrategyEntry(registry.kind, name, params, doc[0] if doc else ""))
    return found
