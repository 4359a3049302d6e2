"""Stax: a TorchInductor-like tensor compiler whose fusion and ordering strategies can be
swapped, solved exactly and timed (spec sections 7 and 8)."""

from stax.errors import (BuildError, CallError, InstanceFormatError, InvalidScheduleError, KernelError,
                     ShapeError, StaxError, StrategyNotFound, UnsupportedError)
from stax.errors import CacheError
from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem, OrderProblem
from stax.scheduler.strategies import FusionResult, OrderResult, fusion_strategies, order_strategies, run_fusion, run_order
from stax.frontend.elementwise import where
from stax.frontend.ops.random import bernoulli, rand, randn
from stax.frontend.reductions import std_mean, var_mean, vector_norm
from stax.frontend.tensor import Tensor
from stax.frontend.tracing import TensorSpec, trace
from stax.lowering import CostModel
from stax.codegen.tuning import Tuning
from stax.compiler import CompiledFunction, Options, build, compile, compile_graph, schedule, schedule_graph
from stax.decisions import Schedule
from stax.util.version import installed_version as _installed_version


def __getattr__(name: str):
    """``stax.__version__``: the installed distribution's, as `stax --version` prints it; read on
    first use, as reading package metadata slows the start of a new process."""
    if name != "__version__":
        raise AttributeError(f"module 'stax' has no attribute {name!r}")
    return _installed_version()
