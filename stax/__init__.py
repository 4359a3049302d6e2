"""Stax: a TorchInductor-like tensor compiler whose fusion and ordering strategies can be
swapped, solved exactly and timed (seed sections 7 and 8)."""
from .errors import (BuildError, CallError, InstanceFormatError, InvalidScheduleError, KernelError,
                     ShapeError, StaxError, StrategyNotFound, UnsupportedError)
from .problems import Buffer, ForbiddenPair, FusionProblem, OrderProblem
from .strategy import FusionResult, OrderResult, fusion_strategies, order_strategies, run_fusion, run_order
from .frontend import Tensor, TensorSpec, trace, where
from .lowering import CostModel
from .compiler import CompiledFunction, Options, compile, compile_graph
