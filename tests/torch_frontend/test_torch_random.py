"""Random numbers in training, imported from torch: dropout's ``aten.bernoulli.p`` becomes stax's
random mask, and ``rand``, ``randn`` (a VAE's reparameterization), ``normal_``, ``uniform_`` and
``exponential_`` (Gumbel-softmax's noise) and ``randint`` stax's draws (stax.kernels.random_draws), from the program's seed
input.  Two generators cannot agree, so the programs are checked against torch's results under
the same draws: torch runs the captured graph with stax's draws in place of its own
(``expected``), and, independently of that, hand-written torch steps apply stax's mask where
nn.Dropout would and stax's noise where a VAE would."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import assert_matches_torch

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch: pip install 'stax[torch]'")

import stax  # noqa: E402
from stax.errors import StaxError, UnsupportedError  # noqa: E402
from stax.kernels.random_draws import bernoulli_mask  # noqa: E402
from stax.reference import evaluate  # noqa: E402
from stax.torch.capture import import_function, import_module, import_training_step  # noqa: E402

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
        import_function(lambda x: x + torch.poisson(x.abs()), x)
    program = import_function(lambda x: x * 2, x)
    assert not program.seeded
    with pytest.raises(StaxError, match="takes no seed"):
        program.arguments(seed=1)


class VAE(nn.Module):
    """A variational autoencoder's step: the encoder's mean and log-variance, a sample by the
    reparameterization trick (``torch.randn_like``), the decoder, and the KL term."""

    def __init__(self) -> None:
        super().__init__()
        self.encode, self.decode = nn.Linear(12, 2 * 3), nn.Linear(3, 12)

    def forward(self, x):
        mean, log_var = self.encode(x).chunk(2, -1)
        z = mean + (0.5 * log_var).exp() * torch.randn_like(mean)
        kl = -0.5 * (1 + log_var - mean ** 2 - log_var.exp()).sum(-1, keepdim=True)
        return torch.cat([self.decode(z), kl], -1)


#: name -> (function of x, input shape): every translated random op but dropout's
NOISE = {
    "rand_and_randn": (lambda x: x * torch.rand_like(x) + torch.randn(x.shape[-1]) + torch.randn_like(x).exp(), (5, 7)),
    "normal_uniform_exponential": (lambda x: x + torch.empty_like(x).normal_(1.0, 2.0) *
                                   torch.empty_like(x).uniform_(-1, 3) - torch.empty_like(x).exponential_(0.5),
                                   (5, 7)),
    "gumbel_softmax": (lambda x: torch.nn.functional.gumbel_softmax(x, tau=0.5), (5, 7)),
    "randint": (lambda x: x + torch.randint(-3, 4, x.shape) * torch.randint_like(x, 2, 9) + torch.randint(5, (7,)),
                (5, 7)),
}


@pytest.mark.parametrize("name", sorted(NOISE))
def test_noise_matches_torch_under_the_same_draws(name):
    f, shape = NOISE[name]
    torch.manual_seed(7)
    program = import_function(f, torch.randn(*shape))
    assert program.seeded
    assert_matches_torch(program, rtol=2e-5, atol=2e-5)


def test_a_vae_step_with_stax_noise_is_the_one_torch_computes_by_hand():
    torch.manual_seed(8)
    vae, x = VAE(), torch.randn(16, 12)
    program = import_training_step(vae, lambda out: (out ** 2).mean(), [x])
    assert_matches_torch(program, rtol=2e-5, atol=2e-6)
    got = program.compile()(*program.arguments(seed=99))
    # by hand: randn_like's normal draws are stax.randn of the first random stream
    noise = evaluate(stax.trace(lambda s: stax.randn(s, (16, 3), stream=0), np.array(99)), np.array(99))[0]
    params = [p.detach().clone().requires_grad_() for p in vae.parameters()]
    w1, b1, w2, b2 = params
    mean, log_var = (x @ w1.T + b1).chunk(2, -1)
    z = mean + (0.5 * log_var).exp() * torch.from_numpy(noise)
    kl = -0.5 * (1 + log_var - mean ** 2 - log_var.exp()).sum(-1, keepdim=True)
    loss = (torch.cat([z @ w2.T + b2, kl], -1) ** 2).mean()
    for have, want in zip(got, (loss, *torch.autograd.grad(loss, params))):
        np.testing.assert_allclose(have, want.detach().numpy(), rtol=2e-5, atol=2e-6)


def test_the_draws_have_torchs_distributions():
    torch.manual_seed(9)
    x = torch.zeros(200_000)
    program = import_function(lambda x: (x + torch.rand_like(x), x + torch.randn_like(x),
                                         x + torch.empty_like(x).exponential_(2.0)), x)
    uniform, normal, exponential = program.compile()(*program.arguments(seed=5))
    n = x.numel()
    assert 0 <= uniform.min() and uniform.max() < 1
    assert abs(uniform.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n) and abs(uniform.var() - 1 / 12) < 0.002
    assert abs(normal.mean()) < 5 / np.sqrt(n) and abs(normal.var() - 1) < 0.02
    assert abs(np.mean(normal ** 3)) < 0.05 and abs(np.mean(normal ** 4) - 3) < 0.1  # skew 0, kurtosis 3
    assert abs(exponential.mean() - 0.5) < 5 * 0.5 / np.sqrt(n) and exponential.min() >= 0


def test_randint_draws_every_integer_of_its_range_alike():
    """randint's three overloads: int64 (randint) or the tensor's dtype (randint_like), every value
    in [low, high), each as often as the others within five standard deviations."""
    x = torch.zeros(140_000)
    program = import_function(lambda x: (torch.randint(-3, 4, x.shape), torch.randint(7, x.shape),
                                         torch.randint_like(x, 2, 9)), x)
    shifted, plain, like = program.compile()(*program.arguments(seed=3))
    assert shifted.dtype == plain.dtype == np.int64 and like.dtype == np.float32
    n, share = x.numel(), 1 / 7
    for values, low in ((shifted, -3), (plain, 0), (like.astype(np.int64), 2)):
        counts = np.bincount(values - low, minlength=7)
        assert len(counts) == 7 and values.min() == low
        assert np.all(np.abs(counts - n * share) < 5 * np.sqrt(n * share * (1 - share))), counts
