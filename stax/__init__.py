"""Stax: a TorchInductor-like tensor compiler whose fusion and ordering strategies can be
swapped, solved exactly and timed (seed sections 7 and 8)."""
from importlib.metadata import PackageNotFoundError as _NotInstalled, version as _version

try:
    __version__ = _version("stax")  # the installed distribution's, as `stax --version` prints it
except _NotInstalled:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
from .errors import (BuildError, CallError, InstanceFormatError, InvalidScheduleError, KernelError,
                     ShapeError, StaxError, StrategyNotFound, UnsupportedError)
from .problems import Buffer, ForbiddenPair, FusionProblem, OrderProblem
from .strategy import FusionResult, OrderResult, fusion_strategies, order_strategies, run_fusion, run_order
from .frontend import Tensor, TensorSpec, trace, where
from .lowering import CostModel
from .compiler import CompiledFunction, Options, compile, compile_graph
