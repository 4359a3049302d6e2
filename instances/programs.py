"""The program suite: small tensor programs written with torch-style methods (traced by stax).

Each :class:`Program` has a name, the function, ``inputs(size, seed, columns)`` giving numpy
inputs, and a one-line description.  ``size`` is the number n of rows (tokens, batch) of the
main input; feature widths are fixed or m = ``columns`` (``size`` unless given), as each entry
says.  Matrix products are extern kernels (``@``), everything else is generated code.

    >>> program = get_program("softmax")
    >>> [a.shape for a in program.inputs(64)], [a.shape for a in program.inputs(64, columns=128)]
    ([(64, 64)], [(64, 128)])
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from stax.errors import StaxError
from stax.measure.demo import example_7_1, example_7_2
from stax.lowering import CostModel

Inputs = Callable[[int, int, np.random.Generator], list[np.ndarray]]  # (rows, columns, rng)

HIDDEN = 32  # feature width of the model-like programs (MLP, transformer block)


@dataclass(frozen=True)
class Program:
    """A suite entry: ``fn`` traced on ``inputs(size, seed, columns)`` and lowered with ``cost_model``."""

    name: str
    fn: Callable
    make_inputs: Inputs
    description: str
    cost_model: CostModel = CostModel()

    def inputs(self, size: int, seed: int = 0, columns: int | None = None) -> list[np.ndarray]:
        """Fresh numpy inputs for ``size`` rows and ``columns`` (default ``size``) features where
        the program's width is free (reproducible from ``seed``)."""
        for what, value in (("size", size), ("columns", size if columns is None else columns)):
            if not isinstance(value, int) or value < 1:
                raise StaxError(f"program {self.name!r}: {what} must be a positive integer, got {value!r}")
        return self.make_inputs(size, size if columns is None else columns, np.random.default_rng(seed))


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# --- the programs ------------------------------------------------------------------------------

def transposed_add(x, y):
    """x + y^T: one operand read across its rows (a tiled or strided kernel)."""
    return x + y.t()


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def layernorm(x, weight, bias, eps: float = 1e-5):
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdim=True)
    return centered * (var + eps).rsqrt() * weight + bias


def rmsnorm(x, weight, eps: float = 1e-6):
    return x * ((x * x).mean(-1, keepdim=True) + eps).rsqrt() * weight


def rmsnorm_pow(x, weight, eps: float = 1e-6):
    """RMS norm as LLaMA writes it: the square as ``.pow(2)``."""
    return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * weight


def layernorm_pow(x, weight, bias, eps: float = 1e-5):
    """Layer norm with the variance written ``((x - m) ** 2).mean(-1)``."""
    centered = x - x.mean(-1, keepdim=True)
    return centered * ((centered ** 2).mean(-1, keepdim=True) + eps).rsqrt() * weight + bias


def mse(a, t):
    difference = a - t
    return (difference * difference).mean()


def mse_pow(a, t):
    """The mean squared error as model code writes it: ``.pow(2).mean()``."""
    return (a - t).pow(2).mean()


def polynomial(x):
    return x * x * x - 2 * (x * x) + x.abs().sqrt()


def polynomial_pow(x):
    """``polynomial`` written with ``**``."""
    return x ** 3 - 2 * x ** 2 + x.abs() ** 0.5


def normalize(x, eps: float = 1e-12):
    return x / (x * x).sum(-1, keepdim=True).sqrt().clamp_min(eps)


def normalize_norm(x, eps: float = 1e-12):
    """``F.normalize`` over the last dim: the norm as ``x.norm(p=2, dim=-1, keepdim=True)``."""
    return x / x.norm(p=2, dim=-1, keepdim=True).clamp_min(eps)


def gelu(x):
    """GELU in its exact (erf) form."""
    return 0.5 * x * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())


def bias_gelu(x, bias):
    return gelu(x + bias)


def adam_step(param, grad, m, v, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
              eps: float = 1e-8, step: int = 10):
    """One Adam update of ``param`` with moments ``m`` and ``v``, all updated in place."""
    m.mul_(beta1).add_(grad * (1 - beta1))
    v.mul_(beta2).add_(grad * grad * (1 - beta2))
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    update = m_hat / (v_hat.sqrt() + eps)
    param.copy_(param - lr * update)
    return update


def batchnorm_stats(x):
    """Per-feature mean and (biased) variance over the batch, dim 0."""
    mean = x.mean(0)
    var = ((x - mean) * (x - mean)).mean(0)
    return mean, var


def logsumexp(x):
    top = x.amax(-1, keepdim=True)
    return ((x - top).exp().sum(-1, keepdim=True).log() + top).squeeze(-1)


def cross_entropy(logits, targets, classes):
    """Mean cross-entropy from logits and int targets (n, 1); ``classes`` is 0..c-1 as (1, c)."""
    one_hot = (classes == targets).float()
    picked = (logits * one_hot).sum(-1)
    return (logsumexp(logits) - picked).mean()


def masked_attention_softmax(scores, mask):
    """Scaled scores, masked (False: hidden) with -inf, then softmax over the keys."""
    scaled = scores * (1.0 / math.sqrt(scores.shape[-1]))
    return softmax(scaled.masked_fill(mask.logical_not(), float("-inf")))


def mlp(x, w1, b1, w2, b2):
    """W2 gelu(W1 x + b1) + b2, matmuls as extern kernels."""
    return gelu(x @ w1 + b1) @ w2 + b2


def mlp_block(x, w1, b1, w2, b2):
    """The MLP with its residual connection."""
    return x + mlp(x, w1, b1, w2, b2)


def transformer_block(x, mask, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w1, b1, w2, b2):
    """A pre-norm single-head transformer block: causal attention, then the MLP, with residuals."""
    h = layernorm(x, ln1_w, ln1_b)
    q, k, v = h @ wq, h @ wk, h @ wv
    attention = masked_attention_softmax(q @ k.t(), mask)
    x = x + (attention @ v) @ wo
    return x + mlp(layernorm(x, ln2_w, ln2_b), w1, b1, w2, b2)


# --- their inputs ----------------------------------------------------------------------------

def _matrix(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [_normal(rng, n, m)]


def _transposed_pair(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [_normal(rng, n, m), _normal(rng, m, n)]


def _pair(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [_normal(rng, n, m), _normal(rng, n, m)]


def _row_affine(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [_normal(rng, n, m), _normal(rng, m), _normal(rng, m)]


def _row_scale(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [_normal(rng, n, m), _normal(rng, m)]


def _adam(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [_normal(rng, n, m), _normal(rng, n, m), _normal(rng, n, m) * 0.1,
            np.abs(_normal(rng, n, m)) * 0.01]


def _cross_entropy(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    classes = max(2, m // 4)
    return [_normal(rng, n, classes), rng.integers(0, classes, size=(n, 1)).astype(np.int64),
            np.arange(classes, dtype=np.int64).reshape(1, classes)]


def _causal(n: int, m: int) -> np.ndarray:
    return np.tril(np.ones((n, m), dtype=bool))


def _attention(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [_normal(rng, n, m), _causal(n, m)]


def _mlp_weights(rng: np.random.Generator, d: int) -> list[np.ndarray]:
    scale = 1 / math.sqrt(d)
    return [_normal(rng, d, 4 * d) * scale, _normal(rng, 4 * d), _normal(rng, 4 * d, d) * scale, _normal(rng, d)]


def _mlp(n: int, _: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [_normal(rng, n, HIDDEN), *_mlp_weights(rng, HIDDEN)]


def _transformer(n: int, _: int, rng: np.random.Generator) -> list[np.ndarray]:
    d, scale = HIDDEN, 1 / math.sqrt(HIDDEN)
    ln = [np.ones(d, np.float32), np.zeros(d, np.float32)]
    projections = [_normal(rng, d, d) * scale for _ in range(4)]
    return [_normal(rng, n, d), _causal(n, n), *ln, *projections, *ln, *_mlp_weights(rng, d)]


_SUITE = [
    Program("example_7_1", example_7_1, _matrix, "spec example 7.1: each row divided by its sum; x (n, m)"),
    Program("example_7_2", example_7_2, _matrix, "spec example 7.2: sum and max of one shared exp; x (n, m)"),
    Program("transposed_add", transposed_add, _transposed_pair, "x + y.t(); x (n, m), y (m, n)"),
    Program("softmax", softmax, _matrix, "row softmax with the max subtracted; x (n, m)"),
    Program("layernorm", layernorm, _row_affine, "layer norm over the last dim with weight and bias; x (n, m)"),
    Program("rmsnorm", rmsnorm, _row_scale, "RMS norm over the last dim with a weight; x (n, m)"),
    Program("rmsnorm_pow", rmsnorm_pow, _row_scale, "rmsnorm with x.pow(2); x (n, m)"),
    Program("layernorm_pow", layernorm_pow, _row_affine, "layernorm with ((x - m) ** 2).mean(-1); x (n, m)"),
    Program("mse", mse, _pair, "mean squared error with d * d; a, t (n, m)"),
    Program("mse_pow", mse_pow, _pair, "mean squared error with (a - t).pow(2).mean(); a, t (n, m)"),
    Program("polynomial", polynomial, _matrix, "x * x * x - 2 * (x * x) + x.abs().sqrt(); x (n, m)"),
    Program("polynomial_pow", polynomial_pow, _matrix, "x ** 3 - 2 * x ** 2 + x.abs() ** 0.5; x (n, m)"),
    Program("normalize", normalize, _matrix, "each row over its 2-norm, sqrt((x * x).sum(-1)); x (n, m)"),
    Program("normalize_norm", normalize_norm, _matrix, "each row over x.norm(p=2, dim=-1) (F.normalize); x (n, m)"),
    Program("bias_gelu", bias_gelu, _row_scale, "GELU (erf form) of x + bias; x (n, m)"),
    Program("adam_step", adam_step, _adam, "Adam step updating param, m, v in place; four (n, m) tensors"),
    Program("batchnorm_stats", batchnorm_stats, _matrix, "batch-norm mean and variance over dim 0; x (n, m)"),
    Program("logsumexp", logsumexp, _matrix, "stable log-sum-exp of each row; x (n, m)"),
    Program("cross_entropy", cross_entropy, _cross_entropy,
            "mean cross-entropy of logits (n, m/4) and int targets via a one-hot comparison"),
    Program("attention_softmax", masked_attention_softmax, _attention,
            "scaled, causally masked softmax of attention scores (n, m)"),
    Program("mlp_block", mlp_block, _mlp, f"residual MLP x + W2 gelu(W1 x); x (n, {HIDDEN}), hidden {4 * HIDDEN}"),
    Program("transformer_block", transformer_block, _transformer,
            f"pre-norm single-head causal transformer block; x (n, {HIDDEN})"),
]

PROGRAMS: dict[str, Program] = {p.name: p for p in _SUITE}


def get_program(name: str) -> Program:
    """The suite entry called ``name``."""
    if name not in PROGRAMS:
        raise StaxError(f"no program named {name!r} in the suite; known: {', '.join(PROGRAMS)}")
    return PROGRAMS[name]
