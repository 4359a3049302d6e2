"""Shared fixtures of the tests (helpers, imported by name, are in tests/helpers.py).

``check`` is ``run_check`` compiling for the test's ``isa`` when it takes one; ``isa`` runs a test
at every vector level this CPU runs.
"""
from __future__ import annotations

import functools

import pytest

from tests.helpers import RUNNABLE_ISAS, run_check


@pytest.fixture(params=RUNNABLE_ISAS)
def isa(request):
    """A vector level this CPU runs; ``check`` compiles for it."""
    return request.param


@pytest.fixture
def check(request):
    """``run_check``, compiling for the test's ``isa`` fixture when it takes one."""
    if "isa" in request.fixturenames:
        return functools.partial(run_check, isa=request.getfixturevalue("isa"))
    return run_check


@pytest.fixture
def cpu_without_avx512(monkeypatch):
    """This CPU as stax sees it, without its AVX-512 flags: the refusal of a level the CPU lacks
    is tested on every machine, not only on those that lack it."""
    from stax import target
    flags = target._cpu_flags()
    monkeypatch.setattr(target, "_cpu_flags", lambda: frozenset(f for f in flags if not f.startswith("avx512")))


@pytest.fixture
def no_straggler_rule():
    """The kernels' pool without its straggler rule (stax_parallel.cpp), on again after the test:
    every region with a team uses the pool, so a test that counts pooled regions does not depend
    on how loaded the machine is.  Yields the runtime's library (its test hooks)."""
    from stax.runtime import build as runtime
    hooks = runtime.load_runtime()
    hooks.stax_parallel_test_straggler_rule(0)
    yield hooks
    hooks.stax_parallel_test_straggler_rule(1)
