"""ATen's fused layers, the fast paths torch's modules take in inference, as the ops they fuse:
decompositions that the front end traces in their place (``capture._decompositions``; this
module imports torch, so only the front end's tracing imports it).

``nn.TransformerEncoderLayer`` (and ``nn.TransformerEncoder``) in eval mode without gradients
calls ``aten._transformer_encoder_layer_fwd``, one CPU kernel for the whole layer: self-attention
(the query scaled by ``1 / sqrt(head dim)`` before its product with the keys), the residual sums,
both layer norms (before or after each block, ``norm_first``) and the feed-forward block with
ReLU or GELU.  Its mask is the attention mask (``mask_type`` 0, ``(L, L)``), the key padding mask
(1, ``(B, L)``) or both merged (2, ``(B, H, L, L)``); as ATen's ``masked_softmax`` it masks every
position where the mask is non-zero, and a row masked whole gives zeros.
"""
from __future__ import annotations

import math
from typing import Any

import torch

functional = torch.nn.functional


def _attention(x: Any, num_heads: int, qkv_weight: Any, qkv_bias: Any, proj_weight: Any, proj_bias: Any,
               mask: Any, mask_type: int | None) -> Any:
    """Multi-head self-attention of ``x`` (batch, length, width) as ATen's native kernel computes it."""
    batch, length, width = x.shape
    head = width // num_heads
    q, k, v = functional.linear(x, qkv_weight, qkv_bias).view(batch, length, 3, num_heads, head).permute(2, 0, 3, 1, 4)
    scores = (q * (1.0 / math.sqrt(head))) @ k.transpose(-2, -1)
    if mask is None:
        weights = scores.softmax(-1)
    else:
        masked = (mask.view(batch, 1, 1, length) if mask_type == 1 else mask) != 0
        weights = scores.masked_fill(masked, float("-inf")).softmax(-1).masked_fill(masked, 0.0)
    heads = (weights @ v).transpose(1, 2).reshape(batch, length, width)
    return functional.linear(heads, proj_weight, proj_bias)


def transformer_encoder_layer(src: Any, embed_dim: int, num_heads: int, qkv_weight: Any, qkv_bias: Any,
                              proj_weight: Any, proj_bias: Any, use_gelu: bool, norm_first: bool, eps: float,
                              norm_weight_1: Any, norm_bias_1: Any, norm_weight_2: Any, norm_bias_2: Any,
                              ffn_weight_1: Any, ffn_bias_1: Any, ffn_weight_2: Any, ffn_bias_2: Any,
                              mask: Any = None, mask_type: int | None = None) -> Any:
    """``aten._transformer_encoder_layer_fwd`` (see the module docstring)."""

    def norm(x: Any, weight: Any, bias: Any) -> Any:
        return functional.layer_norm(x, (embed_dim,), weight, bias, eps)

    def feed_forward(x: Any) -> Any:
        hidden = functional.linear(x, ffn_weight_1, ffn_bias_1)
        hidden = functional.gelu(hidden) if use_gelu else functional.relu(hidden)
        return functional.linear(hidden, ffn_weight_2, ffn_bias_2)

    def attend(x: Any) -> Any:
        return _attention(x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type)

    if norm_first:
        x = src + attend(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attend(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


def fused_layer_decompositions() -> dict[Any, Any]:
    """The fused layers' ATen ops and their decompositions."""
    aten = torch.ops.aten
    return {aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer}
