"""Imported once by the cell processes' fork server (``experiments.sweep.isolate``): loads what every
cell needs (the measuring code, the compiler, every registered strategy and its solver
libraries), so that each cell's process starts with them already imported."""
from stax import compiler  # noqa: F401
from stax.errors import StrategyNotFound
from stax.scheduler.strategies import fusion_strategies, order_strategies

from experiments.sweep import measure  # noqa: F401

for _registry in (fusion_strategies, order_strategies):
    for _name in _registry.names():
        try:
            _registry.factory(_name)
        except StrategyNotFound:  # a broken plug-in fails in its own cells, with its message
            pass
