"""Modules and losses a practitioner reaches for next, imported from torch: their forward and
their training step (loss and every parameter's gradient) against eager torch.  Each needed a
translation the front end lacked: nn.LSTM (oneDNN's fused layer, traced as its decomposition),
GroupNorm (``native_group_norm``), InstanceNorm2d (``repeat``), ELU and SELU, Hardtanh and
ReLU6, Conv1d (a 2-D convolution of height 1), Conv3d (a 2-D convolution of the planes the depth
taps read, stacked along the channels), MaxPool3d, AvgPool3d and LocalResponseNorm (a 2-D
pooling of each plane, then of the depth), ``cumsum`` and ``logcumsumexp``, the L1 losses' ``sign`` and KL divergence's ``isnan``."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import assert_matches_torch

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch: pip install 'stax[torch]'")
import torch.nn.functional as F  # noqa: E402

from stax.torch.capture import import_function, import_module, import_training_step  # noqa: E402

nn = torch.nn


class Scaled(nn.Module):
    """``f(x * w)`` with a learnable scalar ``w``: a training step of a function without parameters."""

    def __init__(self, f, *modules) -> None:
        super().__init__()
        self.f, self.w, self.modules_ = f, nn.Parameter(torch.tensor(1.5)), nn.ModuleList(modules)

    def forward(self, x):
        return self.f(x * self.w)


def _lstm() -> nn.Module:
    lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
    return Scaled(lambda x: lstm(x)[0], lstm)


def _conv1d(**kwargs) -> nn.Module:
    return nn.Conv1d(4, 6, 3, **kwargs)


#: name -> (module builder, input shape)
MODULES = {
    "lstm_two_layers": (_lstm, (3, 3, 8)),
    "group_norm": (lambda: nn.GroupNorm(2, 6), (2, 6, 5, 5)),
    "instance_norm": (lambda: nn.InstanceNorm2d(4, affine=True), (2, 4, 5, 5)),
    "elu": (lambda: Scaled(nn.ELU(0.7)), (4, 9)),
    "selu": (lambda: Scaled(nn.SELU()), (4, 9)),
    "hardtanh": (lambda: Scaled(nn.Hardtanh(-0.5, 0.8)), (4, 9)),
    "relu6": (lambda: Scaled(lambda x: F.relu6(x * 4)), (4, 9)),
    "conv1d": (lambda: _conv1d(padding=1), (2, 4, 11)),
    "conv1d_strided_dilated": (lambda: _conv1d(stride=2, dilation=2), (2, 4, 13)),
    "conv1d_grouped": (lambda: nn.Conv1d(4, 6, 3, groups=2), (2, 4, 9)),
    "conv1d_unbatched": (lambda: _conv1d(), (4, 9)),
    "conv_transpose1d": (lambda: nn.ConvTranspose1d(4, 3, 3, stride=2), (2, 4, 7)),
    "conv3d": (lambda: nn.Conv3d(4, 6, 3, padding=1), (2, 4, 5, 6, 7)),
    "conv3d_strided_dilated_grouped": (lambda: nn.Conv3d(4, 6, (3, 2, 3), stride=(2, 1, 2), padding=(2, 0, 1),
                                                         dilation=(2, 1, 1), groups=2), (2, 4, 9, 6, 7)),
    "conv3d_unbatched_depth_one": (lambda: nn.Conv3d(3, 2, (1, 2, 2), bias=False), (3, 4, 5, 5)),
    "conv_transpose3d": (lambda: nn.ConvTranspose3d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                         (2, 4, 3, 4, 3)),
    "avg_pool3d": (lambda: Scaled(nn.AvgPool3d((3, 2, 2), stride=(2, 1, 2), padding=(1, 1, 0), ceil_mode=True,
                                               count_include_pad=False)), (2, 3, 7, 6, 5)),
    "avg_pool3d_unbatched_divisor": (lambda: Scaled(nn.AvgPool3d(2, divisor_override=3)), (3, 4, 4, 6)),
    "local_response_norm": (lambda: Scaled(nn.LocalResponseNorm(3)), (2, 6, 5, 5)),
    "max_pool3d": (lambda: Scaled(nn.MaxPool3d((3, 2, 2), stride=(2, 1, 2), padding=(1, 1, 0), ceil_mode=True)),
                   (2, 3, 7, 6, 5)),
    "max_pool3d_dilated_unbatched": (lambda: Scaled(nn.MaxPool3d(2, dilation=(2, 1, 1))), (2, 8, 5, 6)),
    "mnist_stem": (lambda: nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)), (64, 1, 28, 28)),
    "cumsum": (lambda: Scaled(lambda x: x.cumsum(1)), (4, 9)),
    "logcumsumexp": (lambda: Scaled(lambda x: (x * 4).logcumsumexp(1)), (4, 9)),
    "l1_loss": (lambda: Scaled(lambda x: F.l1_loss(x, x.detach().flip(0))), (4, 9)),
    "smooth_l1_loss": (lambda: Scaled(lambda x: F.smooth_l1_loss(x, x.detach() * 0.3)), (4, 9)),
    "kl_div": (lambda: Scaled(lambda x: F.kl_div(F.log_softmax(x, 1), F.softmax(x.detach().flip(1), 1),
                                                 reduction="batchmean")), (4, 9)),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_forward_and_training_step_agree_with_torch(name):
    build, shape = MODULES[name]
    torch.manual_seed(9)
    module, x = build(), torch.randn(*shape)
    target = torch.randn_like(module(x))
    for program in (import_module(module, x),
                    import_training_step(module, lambda out, t: ((out - t) ** 2).mean(), [x], [target])):
        assert_matches_torch(program, rtol=2e-5, atol=2e-5)


def test_sign_is_torchs_at_nan_signed_zeros_and_integers():
    x = torch.tensor([float("nan"), -0.0, 0.0, -2.5, 3.0, float("-inf")])
    i = torch.tensor([-3, 0, 4], dtype=torch.int32)
    program = import_function(lambda a, b: (torch.sign(a), torch.sign(b)), x, i)
    got = program.compile()(*program.arguments())
    for have, want in zip(got, program.expected):
        assert have.dtype == want.dtype
        np.testing.assert_array_equal(have, want)


def test_cdist_and_its_gradients_match_torch_at_every_p_with_zero_distances_and_differences():
    torch.manual_seed(6)
    a, b = torch.randn(2, 5, 4), torch.randn(2, 3, 4)
    b[0, 1], b[1, 0, 1] = a[0, 2], a[1, 0, 1]  # a distance of 0, and a difference of 0

    def distances_and_gradients(a, b):
        a, b = a.requires_grad_(), b.requires_grad_()
        results = []
        for p in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")):
            d = torch.cdist(a, b, p=p)
            loss = (d * torch.arange(15.0).reshape(5, 3)).sum()
            results += [d, *torch.autograd.grad(loss, (a, b))]
        return tuple(results)
    assert_matches_torch(import_function(distances_and_gradients, a, b), rtol=1e-4, atol=1e-5)


def test_one_hot_of_labels_given_at_run_time_matches_torch_and_checks_their_range():
    """F.one_hot of labels that are the call's input (2-D, so the classes are a third dim): the
    one-hot tensor, a Dice loss built on it and the loss's gradient as torch gives them.  A label
    outside [0, n) raises, as torch does, instead of giving a row of zeros; without num_classes
    (a shape read from the data) it is refused by name."""
    from stax import KernelError
    from stax.errors import UnsupportedError
    torch.manual_seed(3)
    x, labels = torch.randn(2, 3, 5), torch.tensor([[0, 4, 2], [2, 1, 3]])

    def dice(x, t):
        x = x.requires_grad_()
        hot, p = F.one_hot(t, 5), F.softmax(x, 2)
        loss = 1 - (2 * (p * hot).sum() + 1) / (p.sum() + hot.sum() + 1)
        return hot, loss, *torch.autograd.grad(loss, x)
    program = import_function(dice, x, labels)
    assert_matches_torch(program, rtol=1e-5, atol=1e-6)
    compiled = program.compile()
    assert compiled(*program.arguments())[0].dtype == np.int64
    for bad in (5, -1):
        wrong = labels.clone()
        wrong[1, 2] = bad
        with pytest.raises(KernelError):
            compiled(*program.arguments(x, wrong))
    with pytest.raises(UnsupportedError, match="pass num_classes"):
        import_function(lambda t: F.one_hot(t), labels)
