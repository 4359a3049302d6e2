"""The model zoo (experiments.models.zoo): every module's forward pass and training step compiles
and agrees with eager torch, batch norms' running statistics included (the whole zoo is slow;
a GRU and a ResNet block, one of each kind, run by default)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the model zoo needs torch: pip install 'stax[torch]'")

from experiments.models.compare_inductor import _largest_error  # noqa: E402
from experiments.models.zoo import ZOO  # noqa: E402

QUICK = ("gru_cell", "resnet_block")


def agrees(name: str) -> None:
    model = ZOO[name](True)
    for program in (model.forward(), model.training()):
        arguments = program.arguments()
        error = _largest_error(program, program.compile()(*arguments), arguments)
        scale = max(float(np.abs(e).max(initial=1.0)) for e in program.expected)
        assert error <= 1e-4 * scale, f"{program.name}: error {error}"


@pytest.mark.parametrize("name", QUICK)
def test_zoo_module_agrees_with_torch(name):
    agrees(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ZOO if n not in QUICK])
def test_every_zoo_module_agrees_with_torch(name):
    agrees(name)
