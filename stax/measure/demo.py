"""The spec's worked examples, used by ``stax demo``."""
from __future__ import annotations

from typing import Callable

import numpy as np

from stax.measure.timing import time_call


def example_7_1(x):
    """Example 7.1: divide each row by its sum."""
    return x / x.sum(-1, keepdim=True)


def example_7_2(x):
    """Example 7.2: two reductions of one shared exp."""
    e = x.exp()
    return e.sum(-1), e.amax(-1)


def _numpy_7_1(x):
    return x / x.sum(-1, keepdims=True)


def _numpy_7_2(x):
    e = np.exp(x)
    return e.sum(-1), e.max(-1)


def run_demo(echo: Callable[[str], None]) -> None:
    from stax.compiler import compile as stax_compile
    from stax.scheduler.fusion_log import fusion_log

    x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    for title, fn, reference in (("Example 7.1", example_7_1, _numpy_7_1), ("Example 7.2", example_7_2, _numpy_7_2)):
        # the spec's rule, so that example 7.2 shows the spec's two kernels (the default rule,
        # "cpu-split", runs it as one)
        compiled = stax_compile(fn, x, rule="cpu")
        echo(f"==== {title}: {fn.__doc__}")
        echo("---- scheduler nodes before fusion")
        echo(compiled.scheduler.describe())
        echo("---- fusion log")
        echo(fusion_log(compiled.fusion_problem, compiled.fusion, verbose=True))
        echo("---- generated code")
        echo(compiled.source)
        got = compiled(x)
        got = got if isinstance(got, tuple) else (got,)
        want = reference(x)
        want = want if isinstance(want, tuple) else (want,)
        err = max(float(np.max(np.abs(g - w) / (np.abs(w) + 1e-6))) for g, w in zip(got, want))
        t_stax = time_call(lambda: compiled(x))
        t_numpy = time_call(lambda: reference(x))
        echo(f"---- result: max relative difference from numpy {err:.2e}; "
             f"stax {t_stax * 1e6:.1f} us per call, numpy {t_numpy * 1e6:.1f} us per call\n")
