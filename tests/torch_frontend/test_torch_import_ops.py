"""ATen ops of torch's front end that decompose to nothing stax had: ``argmax``/``argmin``,
``max``/``min`` along a dim (values and indices), ``linalg_vector_norm``, ``logsumexp``,
``div`` with a rounding mode, ``bitwise_xor``, the pad modes (``reflection_pad*``,
``replication_pad*``, circular) and their gradients, ``scatter`` / ``scatter_reduce`` with a
reduction, and ``as_strided`` / ``as_strided_scatter`` of dense, transposed, sliced and expanded tensors
(torch's own check of a view's size against its source stands for broadcasting: these ops take
none).  Each program is imported from torch, compiled, and compared with eager torch and with
the numpy evaluation of the traced program (:mod:`stax.reference`)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch: pip install 'stax[torch]'")
import torch.nn.functional as F  # noqa: E402

from stax.errors import UnsupportedError  # noqa: E402
from stax.reference import evaluate  # noqa: E402
from stax.torch.capture import import_function  # noqa: E402

GEN = torch.Generator().manual_seed(28)


def normal(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=GEN, dtype=dtype)


def integers(*shape: int, low: int = -9, high: int = 9, dtype=torch.int32) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=GEN, dtype=dtype)


def ties_and_nans(x: torch.Tensor) -> torch.Tensor:
    x = torch.round(x * 2) / 2  # few distinct values: tied extremes
    x.reshape(-1)[::7] = float("nan")
    return x


def signed_divisors(*shape: int) -> torch.Tensor:
    return integers(*shape, low=1, high=6) * (integers(*shape, low=0, high=2) * 2 - 1)


def grad_of(fn):
    """The gradient of ``sum(fn(x, ...) ** 2)`` with respect to ``x`` (the backward's ops)."""
    def step(x, *rest):
        return torch.autograd.grad(fn(x, *rest).square().sum(), x)[0]
    return step


def needs_grad(x: torch.Tensor) -> torch.Tensor:
    return x.clone().requires_grad_()


INDEX = torch.tensor([[0, 3, 0, 1, 0], [2, 0, 0, 3, 1], [0, 0, 3, 3, 2]])
CASES = {
    "argmax and argmin with ties and NaN": (
        lambda x: (x.argmax(1), x.argmin(0, keepdim=True), x.argmax(), x.argmin(dim=-1)), [ties_and_nans(normal(6, 9))]),
    "argmax of integers and of a 0-d tensor": (lambda i, z: (i.argmax(0), i.argmin(), z.argmax(), z.argmin(0)),
                                               [integers(5, 4, low=-2, high=2), normal()]),
    "max.dim and min.dim": (lambda x: (*x.max(1), *x.min(0, keepdim=True), *torch.max(x, -1, keepdim=True)),
                            [ties_and_nans(normal(5, 8))]),
    "max.dim of integers and bool, max, min and maximum": (
        lambda i, y: (*i.max(0), *(i > 0).min(1), i.max(), i.min(), torch.max(i, y), torch.min(y, i)),
        [integers(4, 6), integers(1, 6)]),
    "max.dim of a 0-d tensor and over an empty dim's neighbour": (
        lambda z, e: (*z.max(0), *z.min(-1, keepdim=True), *e.max(1)), [normal(), normal(0, 3)]),
    "linalg_vector_norm": (
        lambda x: (torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 1, 0), x.norm(p=float("inf"), dim=1),
                   torch.linalg.vector_norm(x, float("-inf"), (0, 1), keepdim=True), torch.linalg.vector_norm(x, 0, 1),
                   torch.linalg.vector_norm(x, 3, -1), torch.linalg.vector_norm(x, 2, 1, dtype=torch.float64),
                   F.normalize(x, dim=1), F.normalize(x, p=1, dim=0)), [normal(5, 7)]),
    "linalg_vector_norm of empty and 0-d tensors": (
        lambda e, z: (torch.linalg.vector_norm(e, 2, 0), e.norm(p=1, dim=0), torch.linalg.vector_norm(z),
                      z.norm(p=3)), [normal(0, 4), normal()]),
    "logsumexp with infinities, integers and an empty dim": (
        lambda x, i, e: (x.logsumexp(1), x.logsumexp((0, 1), keepdim=True), i.logsumexp(0), e.logsumexp(0)),
        [torch.tensor([[1, 2, 3], [-np.inf] * 3, [np.inf, 0, 1], [np.nan, 0, 1]]), integers(4, 3), normal(0, 3)]),
    "div with rounding_mode on negative integers and floats, broadcast": (
        lambda i, j, x, y: (i.div(j, rounding_mode="trunc"), i.div(j, rounding_mode="floor"),
                            x.div(y, rounding_mode="trunc"), x.div(y, rounding_mode="floor"),
                            i.div(-4, rounding_mode="trunc"), i.div(-4, rounding_mode="floor"),
                            torch.div(7, j, rounding_mode="floor"), i.long().div(j[:1], rounding_mode="trunc")),
        [integers(6, 5, low=-20, high=20), signed_divisors(6, 5), normal(6, 1) * 10, normal(1, 5)]),
    "div with rounding_mode of 0-d and empty tensors": (
        lambda z, w, e: (z.div(w, rounding_mode="trunc"), e.div(3, rounding_mode="floor"), z.div(-2, rounding_mode="floor")),
        [torch.tensor(-7), torch.tensor(2), integers(0, 3)]),
    "bitwise xor, and, or, not and logical_xor": (
        lambda i, j, a, b: (i ^ j, i & j, i | j, ~i, i ^ 6, 5 ^ j, a ^ b, a & b, a | b, ~a, torch.logical_xor(i, b),
                            i[:1] ^ j, torch.bitwise_xor(a, b[0])),
        [integers(4, 6, low=-50, high=50), integers(4, 6, low=-50, high=50, dtype=torch.int64),
         integers(4, 6, low=0, high=2) > 0, integers(4, 6, low=0, high=2) > 0]),
    "bitwise xor of 0-d and empty tensors": (lambda z, e: (z ^ 3, e ^ e, ~z), [torch.tensor(12), integers(0, 2)]),
    "reflection, replication and circular pads, batched and not": (
        lambda x, y, v: (F.pad(x, (2, 1), mode="reflect"), F.pad(x, (1, 2), mode="replicate"),
                         F.pad(y, (2, 1, 1, 3), mode="reflect"), F.pad(y, (0, 3, 2, 1), mode="replicate"),
                         F.pad(y[0], (1, 2, 3, 0), mode="reflect"), F.pad(v, (1, 1, 2, 0, 1, 2), mode="reflect"),
                         F.pad(v, (2, 0, 1, 1, 0, 1), mode="replicate"), F.pad(x, (3, 1), mode="circular"),
                         F.pad(y, (1, 2, 0, 3), mode="circular")),
        [normal(2, 3, 5), normal(2, 3, 4, 5), normal(1, 2, 3, 4, 5)]),
    "pads of integers and of an empty batch": (
        lambda i, e: (F.pad(i, (2, 2), mode="reflect"), F.pad(i, (1, 3), mode="replicate"), F.pad(e, (1, 1), mode="reflect")),
        [integers(2, 3, 5), normal(0, 3, 4)]),
    "reflection pad's gradient": (grad_of(lambda x: F.pad(x, (2, 1, 3, 1), mode="reflect")), [needs_grad(normal(2, 3, 4, 5))]),
    "replication pad's gradient": (grad_of(lambda x: F.pad(x, (3, 1, 0, 2), mode="replicate")), [needs_grad(normal(2, 3, 4, 5))]),
    "reflection and replication 1-d and 3-d pads' gradients": (
        grad_of(lambda x: F.pad(x, (2, 1, 1, 2, 1, 0), mode="reflect") + F.pad(x, (2, 1, 1, 2, 1, 0), mode="replicate")),
        [needs_grad(normal(1, 2, 3, 4, 5))]),
    "circular pad's gradient": (grad_of(lambda x: F.pad(x, (3, 0, 1, 2), mode="circular")), [needs_grad(normal(1, 2, 4, 5))]),
    "max.dim's, norm's and logsumexp's gradients": (
        grad_of(lambda x: x.max(1).values * x.norm(dim=1) + x.logsumexp(1)), [needs_grad(normal(4, 6))]),
    "scatter with reduce add and multiply": (
        lambda x, s: (x.scatter(0, INDEX, s, reduce="add"), x.scatter(1, INDEX, s, reduce="multiply"),
                      x.scatter(0, INDEX, 2.0, reduce="multiply"), x.scatter(1, INDEX, -1.5, reduce="add")),
        [normal(4, 6), normal(3, 5)]),
    "scatter_reduce, every reduction, with and without self": (
        lambda x, s: tuple(x.scatter_reduce(d, INDEX, s, r, include_self=i) for r in ("sum", "prod", "mean", "amax", "amin")
                           for i in (True, False) for d in (0, 1)),
        [ties_and_nans(normal(4, 6)), normal(3, 5)]),
    "scatter_reduce of integers rounds the mean down": (
        lambda x, s: tuple(x.scatter_reduce(0, INDEX, s, r, include_self=i) for r in ("sum", "prod", "mean", "amax", "amin")
                           for i in (True, False)),
        [integers(4, 6, dtype=torch.int64), integers(3, 5, dtype=torch.int64)]),
    "scatter_reduce of 0-d and empty indices, and its gradient": (
        lambda x, z, s: (z.scatter_reduce(0, torch.tensor(0), torch.tensor(3.0), "mean"),
                         x.scatter_reduce(1, INDEX[:, :0], s, "amax"),
                         grad_of(lambda x, s: x.scatter_reduce(0, INDEX, s, "sum"))(x, s)),
        [needs_grad(normal(4, 6)), normal(), normal(3, 5)]),
    "as_strided views of contiguous, transposed and sliced tensors": (
        lambda x, y: (x.as_strided((2, 2), (1, 4)), x.exp().t().as_strided((2, 2), (1, 3), 1),
                      x.reshape(-1).as_strided((2, 6), (6, 1)), y.permute(2, 0, 1).as_strided((2, 3), (12, 4), 1),
                      (x + 0)[1:].as_strided((2, 3), (4, 1), 5), (y * 2)[1].as_strided((2, 2), (4, 1), 13),
                      x.as_strided((3, 2, 2), (0, 4, 2), 1), x.as_strided((2, 1, 3), (4, 7, 1), 2)),
        [normal(3, 4), normal(2, 3, 4)]),
    "as_strided of integers and bool, and empty and 0-d views": (
        lambda i, b: (i.as_strided((2, 2), (2, 4)), b.t().as_strided((3,), (2,), 1), i.as_strided((), (), 5),
                      i.as_strided((0, 3), (3, 1)), b.as_strided((2, 0), (1, 1), 2)),
        [integers(3, 4, dtype=torch.int64), integers(3, 4, low=0, high=2) > 0]),
    "as_strided_scatter into contiguous, transposed, sliced and expanded tensors": (
        lambda x, s: (torch.as_strided_scatter(x, s, (2, 3), (4, 1), 1), torch.as_strided_scatter(x.t(), s, (2, 3), (1, 3)),
                      torch.as_strided_scatter((x + 0)[1:], s, (2, 3), (1, 4), 0),  # writes outside the slice too
                      torch.as_strided_scatter(x[:1].expand(3, 4), s, (2, 3), (1, 2)),
                      torch.as_strided_scatter(x, s[:1, :1], (1, 1), (0, 0), 11)),
        [normal(3, 4), normal(2, 3)]),
    "as_strided and as_strided_scatter of slices with gaps, split parts and expanded tensors": (
        lambda x, s: ((x + 0)[:, 1:].as_strided((2, 2), (4, 1), 2), (x + 0).split(2, 1)[1].as_strided((2, 2), (4, 1), 2),
                      x[:1].expand(3, 4).as_strided((2, 2), (1, 2)),
                      torch.as_strided_scatter((x + 0)[:, 1:], s[:, :2], (2, 2), (4, 1), 0),  # a gap written too
                      torch.as_strided_scatter((x + 0).t()[1:], s[:, 1:], (2, 2), (1, 4), 1)),
        [normal(3, 4), normal(2, 3)]),
    "as_strided_scatter of integers and of an empty view": (
        lambda i, s: (torch.as_strided_scatter(i, s, (3, 2), (1, 3)), torch.as_strided_scatter(i, s[:0], (0, 2), (1, 3))),
        [integers(3, 4, dtype=torch.int64), integers(3, 2, dtype=torch.int64)]),
    "diagonal, diag, trace and diagonal_scatter at every offset and pair of dims": (
        lambda x, y, s: (x.diagonal(), x.diagonal(2), x.diagonal(-1), y.diagonal(1, 0, 2), y.diagonal(-1, -1, -3),
                         torch.diag(x), torch.trace(x), x.diagonal(9), torch.diagonal_scatter(x, s[:3]),
                         torch.diagonal_scatter(y, s[:6].reshape(2, 3), -1, 2, 1), y.diagonal(0, 1, 2).sum(-1)),
        [normal(3, 5), normal(2, 3, 4), normal(6)]),
    "diagonal of integers and bool, and of empty tensors": (
        lambda i, e: (i.diagonal(1), (i > 0).diagonal(-1), e.diagonal(), e.diagonal(0, 0, 2),
                      torch.diagonal_scatter(i, i.diagonal(1) * 2, 1)),
        [integers(4, 5, dtype=torch.int64), normal(0, 3, 2)]),
    "diagonal's and diagonal_scatter's gradients": (
        lambda x, s: torch.autograd.grad((x.exp().diagonal(1, 0, 2).square().sum()
                                          + torch.diagonal_scatter(x.sin(), s.exp(), -1, 1, 2).square().sum()), (x, s)),
        [needs_grad(normal(3, 4, 5)), needs_grad(normal(3, 3))]),
    "as_strided's and as_strided_scatter's gradients": (
        lambda x, s: torch.autograd.grad((torch.as_strided_scatter(x.exp(), s.sin(), (2, 2), (1, 4), 1).square().sum()
                                          + x.t().as_strided((2, 3), (1, 4)).square().sum()), (x, s)),
        [needs_grad(normal(3, 4)), needs_grad(normal(2, 2))]),
}


def check(case: str, **options) -> None:
    fn, inputs = CASES[case]
    program = import_function(fn, *inputs, name=case)
    compiled = program.compile(**options)
    got = compiled(*program.arguments())
    got = got if isinstance(got, tuple) else (got,)
    reference = evaluate(program.graph(), *program.arguments())
    assert len(got) == len(program.expected) == len(reference)
    for i, (g, want, ref) in enumerate(zip(got, program.expected, reference)):
        assert g.dtype == want.dtype and g.shape == want.shape, (i, g.dtype, want.dtype, g.shape, want.shape)
        for other, what in ((want, "eager torch"), (ref, "the numpy reference")):
            if g.dtype.kind == "f":
                np.testing.assert_allclose(g, other, rtol=2e-5, atol=2e-5, equal_nan=True, err_msg=f"output {i} vs {what}")
            else:
                np.testing.assert_array_equal(g, other, err_msg=f"output {i} vs {what}")


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter:UserWarning")
@pytest.mark.parametrize("fusion", ["greedy", "none"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_imported_op_matches_torch_and_numpy(case, fusion):
    check(case, fusion=fusion)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter:UserWarning")
@pytest.mark.parametrize("fusion", ["cpsat", "mwc"])
@pytest.mark.parametrize("case", ["scatter_reduce, every reduction, with and without self",
                                  "reflection pad's gradient", "circular pad's gradient", "max.dim and min.dim"])
def test_imported_op_under_the_exact_fusions(case, fusion):
    check(case, fusion=fusion, fusion_params={"time_limit": 2.0})


def test_pads_are_translated_whole_and_fuse():
    """A reflection pad and its gradient are ATen's own ops in the captured graph (not an
    ``index`` per padded dim) and compile to affine loads, in one kernel each way."""
    x = needs_grad(normal(2, 3, 16, 16))
    program = import_function(grad_of(lambda x: F.pad(x, (2, 2, 2, 2), mode="reflect")), x)
    targets = {str(n.target) for n in program.fx_graph.graph.nodes if n.op == "call_function"}
    assert {"aten.reflection_pad2d.default", "aten.reflection_pad2d_backward.default"} <= targets
    assert not any("index" in t for t in targets)
    compiled = program.compile()
    assert len([k for k in compiled.kernels if not k.extern]) <= 2


def test_unsupported_arguments_name_the_op():
    x = normal(3, 4)
    with pytest.raises(UnsupportedError, match=r"aten.as_strided: the view size \[2, 2\], stride \[3, 2\], offset 0 is not "
                                               "a box of the storage"):
        import_function(lambda x: x.as_strided((2, 2), (3, 2)).exp(), x).graph()
    with pytest.raises(UnsupportedError, match="aten.as_strided: the view .* reaches outside the input's storage run"):
        import_function(lambda x: (x + 0)[1:].as_strided((2, 2), (4, 1), 0), x).graph()
    with pytest.raises(UnsupportedError, match="aten.as_strided: the view .* reads storage between or beyond the input's"):
        import_function(lambda x: (x + 0)[:, 1:].as_strided((2, 2), (4, 1), 0), x).graph()
    with pytest.raises(UnsupportedError, match=r"aten.as_strided: the input \(shape \(2, 2\), stride \(8, 3\)\) overlaps "
                                               "itself or its strides do not nest"):
        import_function(lambda x: (x + 0)[::2, ::3].as_strided((2, 2), (8, 3)), x).graph()
