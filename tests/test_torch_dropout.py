"""Dropout in training, imported from torch: ``aten.bernoulli.p`` becomes stax's random mask
(stax.random_masks), drawn from the program's seed input.  Two generators cannot agree, so the
programs are checked against torch's results under the same masks: torch runs the captured graph
with stax's masks in place of its own (``expected``), and, independently of that, a hand-written
torch step applies stax's mask where nn.Dropout would."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_matches_torch

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch: pip install 'stax[torch]'")

from stax.errors import StaxError, UnsupportedError  # noqa: E402
from stax.random_masks import bernoulli_mask  # noqa: E402
from stax.torch_frontend import import_function, import_module, import_training_step  # noqa: E402

nn = torch.nn


def _attention() -> nn.Module:
    attention = nn.MultiheadAttention(16, 2, dropout=0.2, batch_first=True)

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = attention

        def forward(self, x):
            return self.attention(x, x, x)[0]
    return SelfAttention()


#: name -> (module builder, input shape); each in training mode with dropout above 0
MODULES = {
    "linear_dropout": (lambda: nn.Sequential(nn.Linear(12, 20), nn.Dropout(0.3), nn.ReLU(), nn.Linear(20, 4),
                                             nn.Dropout(0.5)), (6, 12)),
    "attention_weights": (_attention, (2, 5, 16)),
    "transformer_encoder_layer": (lambda: nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), (2, 5, 16)),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_dropout_modules_match_torch_under_the_same_masks(name):
    build, shape = MODULES[name]
    torch.manual_seed(3)
    module, x = build().train(), torch.randn(*shape)
    for program in (import_module(module, x), import_training_step(module, lambda out: (out ** 2).mean(), [x])):
        assert program.seeded and program.input_names[-1] == "seed"
        assert_matches_torch(program, rtol=2e-5, atol=2e-6)


def test_the_mask_is_the_one_dropout_applies_with_its_gradient():
    torch.manual_seed(4)
    linear, x, t = nn.Linear(16, 24), torch.randn(8, 16), torch.randn(8, 24)
    module = nn.Sequential(linear, nn.Dropout(0.4)).train()
    program = import_training_step(module, lambda out, t: (out * t).sum(), [x], [t])
    seed = 1234
    got = program.compile()(*program.arguments(seed=seed))
    # by hand: nn.Dropout(0.4) keeps an element with probability 0.6 and scales it by 1 / 0.6
    keep = torch.from_numpy(bernoulli_mask(seed, 0, (8, 24), 0.6)).float()
    w, b = (p.detach().clone().requires_grad_() for p in linear.parameters())
    loss = ((x @ w.T + b) * (keep / 0.6) * t).sum()
    want = (loss, *torch.autograd.grad(loss, (w, b)))
    for have, ref in zip(got, want):
        np.testing.assert_allclose(have, ref.detach().numpy(), rtol=2e-5, atol=2e-5)


def test_each_call_draws_new_masks_with_torchs_rate_and_a_given_seed_repeats_them():
    torch.manual_seed(5)
    module, x = nn.Dropout(0.3).train(), torch.ones(256, 256)
    program = import_module(module, x)
    fn = program.compile()
    first, second = (fn(*program.module_arguments(module, x)) for _ in range(2))
    assert (first != second).any()
    bound = 5 * np.sqrt(0.3 * 0.7 / x.numel())
    for dropped in ((first == 0).mean(), (second == 0).mean(), (module(x) == 0).float().mean().item()):
        assert abs(dropped - 0.3) < bound
    np.testing.assert_array_equal(fn(*program.module_arguments(module, x, seed=9)),
                                  fn(*program.module_arguments(module, x, seed=9)))
    np.testing.assert_allclose(first[first != 0], 1 / 0.7, rtol=1e-6)


def test_other_random_ops_and_seeds_for_programs_without_masks_are_refused():
    x = torch.randn(4, 4)
    with pytest.raises(UnsupportedError, match="draws random numbers; the random ops stax translates are bernoulli.p"):
        import_function(lambda x: x + torch.rand_like(x), x)
    program = import_function(lambda x: x * 2, x)
    assert not program.seeded
    with pytest.raises(StaxError, match="takes no seed"):
        program.arguments(seed=1)
