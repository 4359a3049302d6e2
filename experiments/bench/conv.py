"""GFLOP/s of stax's 2-D convolutions against a BLAS GEMM of the same FLOPs and torch's conv2d.

For each shape and thread count, in one process: the compiled convolution in the form
``stax.frontend.ops.conv_forms.plan_conv`` picks (its rule), in each forced form (direct: the fused reduction of
graph ops; gemm: im2col columns times the weight on the BLAS extern; blocked: ``stax.kernels.direct_conv``'s
kernel on the padded input, for stride 1 and one group, ``-`` elsewhere), and the training step's three
convolutions (forward, input gradient, weight gradient; 3x the forward's FLOPs); numpy's matmul
of the GEMM the convolution is (M = C_out / groups, K = C / groups * kH * kW, N = batch * OH * OW,
one per group) on the same number of BLAS threads, and the same GEMM on the BLAS stax's own
products call (``lib``: ``stax.kernels.blas``, MKL when installed, from every thread of the kernels'
team); torch's eager conv2d (and its forward plus backward) on as many threads, when torch is
installed.  Ratios are to the GEMM's rate: the convolution at library speed is 0.8 or more.

    python -m experiments.bench.conv [--threads 1 2] [--rounds 5] [--best] [--shapes resnet64 ...]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from threadpoolctl import threadpool_limits

import stax
from stax.environment import isa_from_env
from stax.kernels import blas
from stax.frontend.ops import nn
from stax.frontend.ops.conv_forms import ConvForm, blocked_applies, plan_conv
from stax.kernels.matmul import Route, plan_product, run_product
from stax.measure.timing import time_call


@dataclass(frozen=True)
class Shape:
    """A convolution: input (N, C, H, W), weight (C_out, C / groups, kH, kW), stride, padding, groups."""
    name: str
    x: tuple[int, int, int, int]
    w: tuple[int, int, int, int]
    stride: int = 1
    padding: int = 0
    groups: int = 1

    def out_hw(self) -> tuple[int, int]:
        return tuple((self.x[2 + d] + 2 * self.padding - self.w[2 + d]) // self.stride + 1 for d in (0, 1))

    def gemm(self) -> tuple[int, int, int, int]:
        """(groups, M, K, N) of the equivalent GEMM."""
        oh, ow = self.out_hw()
        return self.groups, self.w[0] // self.groups, self.w[1] * self.w[2] * self.w[3], self.x[0] * oh * ow

    def flops(self) -> int:
        g, m, k, n = self.gemm()
        return 2 * g * m * k * n


SHAPES = {s.name: s for s in [
    Shape("resnet64", (8, 64, 32, 32), (64, 64, 3, 3), 1, 1),
    Shape("resnet128", (8, 128, 16, 16), (128, 128, 3, 3), 1, 1),
    Shape("stem7x7", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    Shape("pointwise", (8, 256, 16, 16), (64, 256, 1, 1)),
    Shape("strided", (8, 64, 32, 32), (128, 64, 3, 3), 2, 1),
    Shape("zoo_resnet", (8, 32, 16, 16), (32, 32, 3, 3), 1, 1),
    Shape("cifar_stem", (16, 3, 32, 32), (16, 3, 3, 3), 1, 1),
    Shape("cifar_s2", (16, 16, 32, 32), (32, 16, 3, 3), 2, 1),
    Shape("cifar_s2b", (16, 32, 16, 16), (64, 32, 3, 3), 2, 1),
    Shape("grouped", (8, 64, 16, 16), (64, 16, 3, 3), 1, 1, 4),
    Shape("depthwise", (8, 32, 16, 16), (32, 1, 3, 3), 1, 1, 32),
]}


#: the BLAS's and torch's threads spin a while after a call, holding the cores the next candidate
#: needs: without a pause, stax's two-thread convolution timed right after the BLAS ran at about
#: half its rate (experiments.bench.narrow_gemm found the same)
SETTLE_SECONDS = 0.25


def _stax_calls(shape: Shape, form: ConvForm | None, threads: int) -> tuple[Callable, Callable]:
    """The compiled forward and training-step convolutions, each as a call with its arguments."""
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in (shape.x, shape.w))
    g = rng.standard_normal((shape.x[0], shape.w[0], *shape.out_hw())).astype(np.float32)
    conv = {"stride": shape.stride, "padding": shape.padding, "groups": shape.groups}
    forward = stax.compile(lambda x, w: nn.conv2d(x, w, form=form, **conv), x, w, threads=threads)

    def step(x, w, g):
        return (nn.conv2d(x, w, form=form, **conv), nn.conv2d_input_grad(g, w, x.shape, form=form, **conv),
                nn.conv2d_weight_grad(g, x, w.shape, form=form, **conv))
    training = stax.compile(step, x, w, g, threads=threads)
    return (lambda: forward(x, w)), (lambda: training(x, w, g))


def _gemm_operands(shape: Shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gr, m, k, n = shape.gemm()
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((gr, m, k)).astype(np.float32), rng.standard_normal((gr, k, n)).astype(np.float32)
    return a, b, np.empty((gr, m, n), np.float32)


def _blas_call(shape: Shape) -> Callable:
    a, b, out = _gemm_operands(shape)
    return lambda: np.matmul(a, b, out=out)


def _library_call(shape: Shape, threads: int) -> Callable | None:
    """The GEMM on the BLAS that stax's products call (the team route of ``stax.kernels.matmul``), or None
    when stax found no BLAS ``gemm``."""
    if blas.gemm("float32") is None:
        return None
    a, b, out = _gemm_operands(shape)
    product = dataclasses.replace(plan_product(a.shape, b.shape, out.shape, "float32", True, threads, isa_from_env()),
                                  route=Route.TEAM)
    return lambda: run_product(product, a, b, out)


def _torch_calls(shape: Shape, torch: Any) -> tuple[Callable, Callable]:
    x, w = torch.randn(*shape.x), torch.randn(*shape.w)
    conv = {"stride": shape.stride, "padding": shape.padding, "groups": shape.groups}
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    g = torch.randn(shape.x[0], shape.w[0], *shape.out_hw())

    def training():
        xg.grad = wg.grad = None
        torch.nn.functional.conv2d(xg, wg, **conv).backward(g)
    return (lambda: torch.nn.functional.conv2d(x, w, **conv)), training


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def row(shape: Shape, threads: int, rounds: int, torch: Any, best: bool = False) -> dict[str, float]:
    """GFLOP/s of every candidate for ``shape`` at ``threads`` threads: the median (or the best)
    over ``rounds`` alternating rounds (each candidate timed once per round: the machine's load
    moves between them), each timing after a pause of SETTLE_SECONDS."""
    gflop = shape.flops() / 1e9
    calls: dict[str, tuple[Callable, float]] = {"blas": (_blas_call(shape), gflop)}
    library = _library_call(shape, threads)
    if library is not None:
        calls["lib"] = (library, gflop)
    blocked = blocked_applies((shape.stride,) * 2, (1, 1), shape.groups, "float32", isa_from_env())
    for label, form in (("rule", None), ("direct", ConvForm.DIRECT), ("gemm", ConvForm.GEMM),
                        ("blocked", ConvForm.BLOCKED)):
        if form is ConvForm.BLOCKED and not blocked:
            continue
        forward, training = _stax_calls(shape, form, threads)
        calls[label], calls[f"{label}_train"] = (forward, gflop), (training, 3 * gflop)
    if torch is not None:
        forward, training = _torch_calls(shape, torch)
        calls["torch"], calls["torch_train"] = (forward, gflop), (training, 3 * gflop)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (call, work) in calls.items():
            time.sleep(SETTLE_SECONDS)
            if name == "blas":
                with threadpool_limits(threads):
                    seconds = time_call(call, 3)
            elif name.startswith("torch"):
                before = torch.get_num_threads()
                torch.set_num_threads(threads)
                try:
                    with torch.no_grad() if name == "torch" else contextlib.nullcontext():
                        seconds = time_call(call, 3)
                finally:
                    torch.set_num_threads(before)
            else:
                seconds = time_call(call, 3)
            samples[name].append(work / seconds)
    return {name: max(rates) if best else statistics.median(rates) for name, rates in samples.items()}


def _cell(rates: dict[str, float], key: str | tuple[str, str], width: int) -> str:
    """A rate (a key), or the ratio of two (a pair), or ``-`` where one was not measured."""
    if isinstance(key, tuple):
        return f"{rates[key[0]] / rates[key[1]]:{width}.2f}" if key[0] in rates and key[1] in rates else f"{'-':>{width}}"
    return f"{rates[key]:{width}.1f}" if key in rates else f"{'-':>{width}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per figure")
    parser.add_argument("--best", action="store_true",
                        help="each figure is the best round's rate, not the median (on a machine others load)")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES), metavar="SHAPE",
                        help=f"default: all of {', '.join(SHAPES)}")
    args = parser.parse_args()
    torch = _torch()
    library = blas.gemm("float32")
    print(f"GFLOP/s ({'best' if args.best else 'median'} of {args.rounds} rounds); rule = the form plan_conv picks; "
          "blocked = stax.kernels.direct_conv's kernel (stride 1, one group); train = forward + input gradient + weight "
          "gradient (3x the forward's FLOPs); /blas = rate / the same GEMM's rate on numpy's BLAS; lib = that GEMM "
          f"on the BLAS stax's products call ({library.provider if library else 'none found'}), /lib = rate / it")
    columns = [("blas", "blas"), ("lib", "lib"), ("rule", "rule"), ("direct", "direct"), ("gemm", "gemm"),
               ("blocked", "blocked"), ("torch", "torch"), ("rule/blas", ("rule", "blas")),
               ("blk/blas", ("blocked", "blas")), ("rule/lib", ("rule", "lib")), ("blk/lib", ("blocked", "lib")),
               ("torch/blas", ("torch", "blas")), ("train", "rule_train"), ("d_trn", "direct_train"),
               ("g_trn", "gemm_train"), ("trn/blas", ("rule_train", "blas")), ("trn/lib", ("rule_train", "lib")),
               ("torch_trn", "torch_train"), ("t_trn/blas", ("torch_train", "blas"))]
    print(f"{'shape':<11} {'thr':>3} {'form':>7} " + " ".join(f"{head:>{max(6, len(head))}}" for head, _ in columns))
    for name in args.shapes:
        shape = SHAPES[name]
        form = plan_conv((shape.x[0], shape.x[1]), shape.w, shape.out_hw(), shape.groups,
                         blocked=blocked_applies((shape.stride,) * 2, (1, 1), shape.groups, "float32",
                                                 isa_from_env())).form.value
        for threads in args.threads:
            r = row(shape, threads, args.rounds, torch, args.best)
            cells = [_cell(r, key, max(6, len(head))) for head, key in columns]
            print(f"{name:<11} {threads:>3} {form:>7} " + " ".join(cells), flush=True)
    print("shapes: " + "; ".join(f"{s.name} x{s.x} w{s.w} stride {s.stride} pad {s.padding} groups {s.groups}"
                                  for s in (SHAPES[n] for n in args.shapes)))


if __name__ == "__main__":
    main()
