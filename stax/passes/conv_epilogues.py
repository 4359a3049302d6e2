"""Per-channel epilogues folded into the blocked convolution's tile store, before lowering.

A ``conv2d`` extern's output read only by a chain of per-channel steps -- a bias added, batch
norm's running mean subtracted and its scales multiplied (eval mode), a ReLU last -- is written by
the extern through the epilogue ``relu(conv * scale[co] + shift[co])``, which the kernel
(``stax.kernels.direct_conv``) applies to each tile in registers as it stores it.  The chain's pass over
the output (spec 7.1: a pointwise consumer of an extern is a kernel of its own) is gone.

The steps fold into one scale and one shift, vectors of the output channels, made by small nodes
of their own from the chain's operands::

    add v:  shift += v            sub v:  shift -= v            mul v:  scale *= v, shift *= v

The folded node takes the chain's last node's name (its readers and the outputs stay as traced),
its inputs are ``(padded, weight)`` then the scale and the shift it has, and its attributes say
which it has (``scale``, ``shift``, ``relu``: the decision, as data).  The graph itself is left as
traced; the rewritten copy is what lowering sees.
"""
from __future__ import annotations

from dataclasses import dataclass

from stax.ir import graph as g

#: the per-channel steps that fold into a scale and a shift
_AFFINE_OPS = frozenset({"add", "sub", "mul"})


@dataclass
class _Chain:
    """The epilogue folded so far: the names of its scale and shift nodes (None: 1 and 0), its
    ReLU, and the last node of the chain it replaces."""

    last: str
    scale: str | None = None
    shift: str | None = None
    relu: bool = False


class _Folder:
    """Builds the rewritten graph in program order; a convolution's chain is folded when its last
    node is met, and the nodes the epilogue needs are added just before it."""

    def __init__(self, graph: g.Graph):
        self.graph = graph
        self.users = graph.users()
        self.kept = set(graph.outputs) | set(graph.mutations.values())
        self.nodes: dict[str, g.Node] = {}
        self.chains: dict[str, tuple[g.Node, _Chain, list[g.Node]]] = {}  # by last node

    def _sole_reader(self, name: str) -> g.Node | None:
        users = self.users[name]
        return self.graph.nodes[users[0]] if len(users) == 1 and name not in self.kept else None

    def _channels(self, name: str, conv: g.Node, made: list[g.Node]) -> str | None:
        """A vector of the output channels equal to the operand ``name`` of a chain step, when that
        is a per-channel value broadcast over the output (``expand`` of a (1, C_out, 1, 1) or
        (1, 1, 1, 1) tensor); new nodes go to ``made``."""
        node = self.graph.nodes[name]
        co = conv.shape[1]
        if node.op != "expand":
            return None
        source = self.graph.nodes[node.inputs[0]]
        if len(source.shape) != 4 or source.dtype != conv.dtype or source.shape[1] not in (1, co) or \
                any(source.shape[d] != 1 for d in (0, 2, 3)):
            return None
        vector = g.Node(f"{source.name}.channels", "reshape", (source.name,), (source.shape[1],), source.dtype,
                        (("shape", (source.shape[1],)),))
        made.append(vector)
        if source.shape[1] != co:  # a scalar, which convolutions of other widths may share: named by the width
            made.append(g.Node(f"{vector.name}.to{co}", "expand", (vector.name,), (co,), source.dtype,
                               (("shape", (co,)),)))
        return made[-1].name

    def _fold(self, conv: g.Node) -> tuple[_Chain, list[g.Node]] | None:
        """The epilogue that ``conv``'s chain folds into and the nodes it needs (a step's new scale
        and shift are named after it); None when there is no chain."""
        chain, made = _Chain(conv.name), []

        def vector(name: str, op: str, *inputs: str) -> str:
            made.append(g.Node(name, op, inputs, conv.shape[1:2], conv.dtype))
            return name

        while (step := self._sole_reader(chain.last)) is not None and not chain.relu and \
                step.dtype == conv.dtype and step.shape == conv.shape:
            if step.op == "relu":
                chain.relu = True
            elif step.op in _AFFINE_OPS and step.inputs.count(chain.last) == 1 and \
                    (step.op != "sub" or step.inputs[0] == chain.last):
                v = self._channels(step.inputs[1] if step.inputs[0] == chain.last else step.inputs[0], conv, made)
                if v is None:
                    break
                if step.op == "mul":
                    chain.scale = v if chain.scale is None else vector(f"{step.name}.scale", "mul", chain.scale, v)
                    if chain.shift is not None:
                        chain.shift = vector(f"{step.name}.shift", "mul", chain.shift, v)
                elif chain.shift is not None:
                    chain.shift = vector(f"{step.name}.shift", step.op, chain.shift, v)
                else:
                    chain.shift = v if step.op == "add" else vector(f"{step.name}.shift", "neg", v)
            else:
                break
            chain.last = step.name
        return (chain, made) if chain.last != conv.name else None

    def run(self) -> g.Graph:
        for node in self.graph.nodes.values():
            if node.op == "conv2d" and not node.attrs and (found := self._fold(node)) is not None:
                chain, made = found
                self.chains[chain.last] = (node, chain, made)
                continue
            if node.name in self.chains:
                conv, chain, made = self.chains[node.name]
                self.nodes.update((m.name, m) for m in made)
                node = _folded(conv, chain)
            self.nodes[node.name] = node
        if not self.chains:
            return self.graph
        live = set(self.graph.outputs) | set(self.graph.mutations.values()) | set(self.graph.inputs)
        for node in reversed(list(self.nodes.values())):  # the chains' steps and operands are read no more
            if node.name in live:
                live.update(node.inputs)
        nodes = {name: node for name, node in self.nodes.items() if name in live}
        renamed = {conv.name: last for last, (conv, _, _) in self.chains.items()}
        plans = {renamed.get(n, n): p for n, p in self.graph.conv_plans.items() if renamed.get(n, n) in nodes}
        return g.Graph(nodes, list(self.graph.inputs), list(self.graph.outputs), dict(self.graph.mutations), plans)


def _folded(conv: g.Node, chain: _Chain) -> g.Node:
    """``conv`` with its chain's epilogue, under the chain's last name."""
    channels = tuple(v for v in (chain.scale, chain.shift) if v is not None)
    attrs = tuple((k, True) for k, given in (("relu", chain.relu), ("scale", chain.scale is not None),
                                             ("shift", chain.shift is not None)) if given)
    return g.Node(chain.last, "conv2d", conv.inputs + channels, conv.shape, conv.dtype, attrs)


def fold_conv_epilogues(graph: g.Graph) -> g.Graph:
    """A copy of ``graph`` with the per-channel chains after its blocked convolutions folded into
    them (see the module docstring); the graph itself when there is none."""
    if not any(n.op == "conv2d" for n in graph.nodes.values()):
        return graph
    return _Folder(graph).run()
