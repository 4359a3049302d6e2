"""Fixtures of the docs' tests."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def strategies_registered_for_one_test(monkeypatch):
    """A page's examples register strategies (the README's ``unfused``) for their own test only, so
    that later tests (``stax strategies`` in tests/experiments/test_command_line.py) see the shipped
    ones; the registries' private ``_local`` tables are restored after the test."""
    from stax.scheduler.strategies import fusion_strategies, order_strategies
    for registry in (fusion_strategies, order_strategies):
        monkeypatch.setattr(registry, "_local", dict(registry._local))
