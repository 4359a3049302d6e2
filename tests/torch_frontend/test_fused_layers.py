"""ATen's fused encoder layer (``stax.torch.fused_layers``): ``nn.TransformerEncoderLayer`` and
``nn.TransformerEncoder`` in eval mode under ``no_grad`` take torch's fast path, and through
``backend="stax"`` they compile with no fallback and agree with eager torch and with a float64
run, for each mask (attention, key padding, both), ``norm_first`` and activation."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch", reason="the torch.compile backend needs torch: pip install 'stax[torch]'")

from stax.torch import backend as torch_backend  # noqa: E402
from stax.torch import fused_layers  # noqa: E402
from stax.torch.backend import StaxFallbackWarning  # noqa: E402
from tests.torch_frontend.test_torch_backend import fresh_dynamo  # noqa: E402,F401 (autouse: a fresh dynamo per test)

nn = torch.nn


@pytest.fixture
def decomposed(monkeypatch):
    """The number of times the fused layer's decomposition was traced."""
    calls = []
    traced = fused_layers.transformer_encoder_layer

    def counting(*args, **kwargs):
        calls.append(1)
        return traced(*args, **kwargs)
    monkeypatch.setattr(fused_layers, "transformer_encoder_layer", counting)
    return calls


def masks(kind: str, batch: int, length: int) -> dict:
    """A layer's keyword arguments: an attention mask (masking the last column but the diagonal),
    a key padding mask (the last two positions of the first sequence), or both."""
    attention = torch.zeros(length, length, dtype=torch.bool)
    attention[:-1, -1] = True
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[0, -2:] = True
    return {"none": {}, "attention": {"src_mask": attention}, "padding": {"src_key_padding_mask": padding},
            "both": {"src_mask": attention, "src_key_padding_mask": padding}}[kind]


#: the modules and the masks tested with them: nn.TransformerEncoder checks whether an attention
#: mask is causal with bool() of a tensor, where dynamo breaks the graph (and runs it eagerly)
CASES = [("layer", mask) for mask in ("none", "attention", "padding", "both")] + [("encoder", "none"),
                                                                                  ("encoder", "padding")]


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
@pytest.mark.parametrize("module, mask", CASES)
def test_an_encoder_in_inference_compiles_whole_and_matches_eager_and_float64(module, mask, norm_first, activation,
                                                                              decomposed):
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first)
    model = (layer if module == "layer" else nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)).eval()
    x = torch.randn(3, 6, 16)
    kwargs = masks(mask, 3, 6)
    if module == "encoder":
        kwargs = {"src_key_padding_mask": kwargs["src_key_padding_mask"]} if kwargs else {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", StaxFallbackWarning)
        eager = model(x, **kwargs)
        got = torch.compile(model, backend="stax")(x, **kwargs)
        exact = model.double()(x.double(), **kwargs)
    assert decomposed, "the fast path was not taken: the test did not reach the fused layer"
    assert all(g.kind == "inference" and g.compiled is not None for g in torch_backend.compiled_graphs())
    stax_error = (got.double() - exact).abs().max().item()
    eager_error = (eager.double() - exact).abs().max().item()
    assert stax_error <= max(2 * eager_error, 1e-5), (stax_error, eager_error)
