"""Seeded synthetic training graphs: the structure of a whole model's training step at any size.

A training step of ``layers`` layers: a forward chain whose layers are a matmul (an extern
kernel that fuses with nothing) and one to three pointwise or reduction ops, some with a
residual read of the layer's input; a loss; a backward chain that, per forward op in reverse,
computes the gradient from the upstream gradient and a *saved activation* of the forward pass;
and per matmul a *weight-gradient* branch (upstream gradient times the saved input) that
nothing reads: a dangling output, like a parameter's ``.grad``.  Parameters and the batch are
graph inputs.  ``training_fusion(size, seed)`` has about ``size`` scheduler nodes;
``training_order(size, seed)`` is its OrderProblem with one kernel per node.
"""
from __future__ import annotations

import random

from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem, OrderProblem, kernel_order_problem

NODES_PER_LAYER = 7  # on average: matmul + 2 ops forward, their gradients, data and weight gradients


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[str] = []
        self.kind: dict[str, str] = {}
        self.reads: dict[str, list[str]] = {}  # buffer -> users
        self.size: dict[str, int] = {}
        self.producer: dict[str, str | None] = {}
        self.outputs: set[str] = set()

    def input(self, name: str, size: int) -> str:
        self.size[name], self.producer[name], self.reads[name] = size, None, []
        return name

    def op(self, name: str, kind: str, reads: list[str], size: int) -> str:
        """Node ``name`` reading ``reads`` and writing buffer ``name``; returns the buffer."""
        self.nodes.append(name)
        self.kind[name] = kind
        for buf in dict.fromkeys(reads):
            self.reads[buf].append(name)
        self.size[name], self.producer[name], self.reads[name] = size, name, []
        return name

    def problem(self, name: str, forbid: bool = True) -> FusionProblem:
        """The FusionProblem; ``forbid``: list the extern nodes' forbidden pairs (an OrderProblem
        does not need them, and at thousands of nodes they are millions)."""
        buffers = tuple(Buffer(b, self.size[b], self.producer[b], tuple(users), b in self.outputs or
                               (self.producer[b] is not None and not users)) for b, users in self.reads.items())
        externs = [n for n in self.nodes if self.kind[n] == "extern"] if forbid else []
        forbidden = tuple(ForbiddenPair(a, b, "extern") for a in externs for b in self.nodes if a != b
                          and (self.kind[b] != "extern" or a < b))
        return FusionProblem(nodes=tuple(self.nodes), buffers=buffers, forbidden=forbidden,
                             node_info={n: {"kind": self.kind[n]} for n in self.nodes}, name=name)


def training_fusion(size: int, seed: int) -> FusionProblem:
    """A synthetic training step of about ``size`` scheduler nodes (module doc), seeded."""
    return _build(size, seed).problem(f"training/{size}/{seed}")


def _build(size: int, seed: int) -> _Builder:
    rng = random.Random(seed)
    b = _Builder()
    width = rng.choice([1, 2, 4]) * 2 ** 20  # bytes of one activation
    act = b.input("x", width)
    saved: list[tuple[str, list[tuple[str, str, str]]]] = []  # per layer: its input and (op, kind, saved) list
    layers = max(1, round(size / NODES_PER_LAYER))
    for i in range(layers):
        layer_in = act
        weight = b.input(f"w{i}", rng.choice([1, 2, 4, 8]) * 2 ** 18)
        ops = [(b.op(f"mm{i}", "extern", [act, weight], width), "extern", act)]
        act = ops[0][0]
        for k in range(rng.randint(1, 3)):
            kind = rng.choice(["pointwise", "pointwise", "reduction"])
            reads = [act] + ([layer_in] if k == 0 and rng.random() < 0.5 else [])
            out = b.op(f"f{i}_{k}", kind, reads, width // 8 if kind == "reduction" else width)
            ops.append((out, kind, act))
            act = out
        saved.append((weight, ops))
    loss = b.op("loss", "reduction", [act], 4)
    grad = loss
    for i in reversed(range(layers)):
        weight, ops = saved[i]
        for out, kind, inp in reversed(ops):
            if kind == "extern":
                b.outputs.add(b.op(f"dw{i}", "extern", [grad, inp], b.size[weight]))
                grad = b.op(f"dx{i}", "extern", [grad, weight], b.size[inp])
            else:
                grad = b.op(f"d{out}", kind, [grad, inp] + ([out] if rng.random() < 0.3 else []), b.size[inp])
    b.outputs.add(grad)
    return b


def training_order(size: int, seed: int) -> OrderProblem:
    """``training_fusion``'s OrderProblem with one kernel per scheduler node."""
    problem = _build(size, seed).problem(f"training/{size}/{seed}", forbid=False)
    order = kernel_order_problem(problem, [(n,) for n in problem.nodes])
    return OrderProblem(order.tasks, order.buffers, order.extra_edges, name=problem.name)
