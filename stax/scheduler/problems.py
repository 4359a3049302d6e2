"""The two optimization problems of the scheduler, as plain data (the seam for experiments).

A ``FusionProblem`` (Definition 7.3) holds the dependency DAG of scheduler nodes, the buffers
they exchange with their sizes, and the pairs of nodes that may not share a kernel (with the
reason).  A fusion strategy maps it to a partition of the nodes into blocks (kernels).

An ``OrderProblem`` (Definition 7.5) holds the DAG of kernels and the buffers the wrapper
allocates; an order strategy maps it to a topological order of the kernels.

Both can be built from a compiled program (``stax.scheduler``) or without one (instance files,
generators, the reductions of Theorem 7.1 and Proposition 7.4), and both serialize to JSON.
One validator per problem judges every strategy's answer by the same rules.

Example (Theorem 7.1's cost model)::

    >>> p = FusionProblem(nodes=("a", "b"),
    ...     buffers=(Buffer("x", 8, None, ("a", "b")), Buffer("t", 4, "a", ("b",)),
    ...              Buffer("y", 4, "b", (), is_output=True)))
    >>> p.cost([("a",), ("b",)]), p.cost([("a", "b")])
    (28, 12)
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from stax.ir.dag import Dag
from stax.errors import InstanceFormatError, InvalidScheduleError
from stax.util.fields import MAX_COUNT, Fields

if TYPE_CHECKING:
    import networkx as nx

FUSION_FORMAT = "stax.fusion-problem"
ORDER_FORMAT = "stax.order-problem"
FORMAT_VERSION = 1

Partition = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Buffer:
    """A buffer of ``size`` bytes written by ``producer`` (None: a graph input) and read by ``users``.

    ``is_output``: the buffer leaves the graph (it is written to main memory whatever the
    partition, and in an order it stays alive until the end).
    """

    name: str
    size: int
    producer: str | None
    users: tuple[str, ...]
    is_output: bool = False


@dataclass(frozen=True)
class ForbiddenPair:
    """Two nodes that may not share a kernel, and why (a ``WhyNoFuse`` reason name)."""

    a: str
    b: str
    reason: str


def _edges(nodes: Sequence[str], buffers: Sequence[Buffer], extra_edges: Iterable[tuple[str, str]]) -> Dag:
    return Dag(nodes, [(buf.producer, user) for buf in buffers if buf.producer is not None for user in buf.users]
               + list(extra_edges))


class _JsonFile:
    """``save``/``load`` of a problem as a versioned JSON file (``to_dict``/``from_dict``)."""

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path):
        return cls.from_dict(read_json(path), str(path))


@dataclass(frozen=True)
class FusionProblem(_JsonFile):
    """Definition 7.3: nodes (in a topological order), buffers, forbidden pairs, kernel limits.

    ``extra_edges`` are ordering-only dependencies (WeakDep: a reader before an in-place writer).
    ``node_info`` carries optional metadata per node (kind, iteration group) for reports.
    """

    nodes: tuple[str, ...]
    buffers: tuple[Buffer, ...]
    forbidden: tuple[ForbiddenPair, ...] = ()
    extra_edges: tuple[tuple[str, str], ...] = ()
    max_nodes: int = 128
    max_buffers: int = 32
    node_info: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, hash=False)
    name: str = ""

    def __post_init__(self) -> None:
        known = set(self.nodes)
        if len(known) != len(self.nodes):
            raise InstanceFormatError("FusionProblem.nodes: node names must be unique")
        for buf in self.buffers:
            for who in ((buf.producer,) if buf.producer else ()) + tuple(buf.users):
                if who not in known:
                    raise InstanceFormatError(
                        f"FusionProblem.buffers[{buf.name!r}]: refers to node {who!r}, which is not in nodes")
        for pair in self.forbidden:
            for who in (pair.a, pair.b):
                if who not in known:
                    raise InstanceFormatError(f"FusionProblem.forbidden: node {who!r} is not in nodes")
        cycle = self.dependencies().find_cycle()
        if cycle:
            raise InstanceFormatError(f"FusionProblem: the dependency graph has a cycle through {cycle}; "
                                      "it must be a DAG")

    # --- structure -------------------------------------------------------------------------
    def dependencies(self) -> Dag:
        """The dependency graph D = (V, E): producer -> user for every buffer, plus extra edges."""
        return _edges(self.nodes, self.buffers, self.extra_edges)

    def dag(self) -> nx.DiGraph:
        """``dependencies()`` as a networkx graph, for the solvers."""
        return self.dependencies().to_networkx()

    def forbidden_set(self) -> dict[frozenset[str], str]:
        return {frozenset((p.a, p.b)): p.reason for p in self.forbidden}

    def buffers_of(self, node: str) -> set[str]:
        """Names of the buffers a node reads or writes."""
        return set(self._touched[node])

    @functools.cached_property
    def _touched(self) -> dict[str, tuple[str, ...]]:
        """Each node's buffers, found in one pass (``buffers_of`` once scanned every buffer)."""
        touched: dict[str, dict[str, None]] = {n: {} for n in self.nodes}
        for buf in self.buffers:
            for node in ((buf.producer,) if buf.producer else ()) + tuple(buf.users):
                touched[node][buf.name] = None
        return {n: tuple(names) for n, names in touched.items()}

    # --- Definition 7.3 ----------------------------------------------------------------------
    def cost(self, partition: Iterable[Iterable[str]]) -> int:
        """Main-memory traffic of a partition (Definition 7.3 as priced in Theorem 7.1).

        A produced buffer is written once if it is a graph output or has a user outside its
        producer's block, and read once by every other block that uses it; a graph input is read
        once by every block that uses it.
        """
        block_of = block_index(partition)
        total = 0
        for buf in self.buffers:
            user_blocks = {block_of[u] for u in buf.users}
            if buf.producer is None:
                total += buf.size * len(user_blocks)
                continue
            home = block_of[buf.producer]
            readers = user_blocks - {home}
            if readers or buf.is_output:
                total += buf.size
            total += buf.size * len(readers)
        return total

    def unfused_cost(self) -> int:
        return self.cost([(n,) for n in self.nodes])

    def validate(self, partition: Iterable[Iterable[str]]) -> Partition:
        """Check Definition 7.3 (and the kernel limits); return the partition as tuples or raise."""
        blocks = tuple(tuple(b) for b in partition)
        seen: dict[str, int] = {}
        dag = self.dependencies()
        for i, block in enumerate(blocks):
            if not block:
                raise InvalidScheduleError(f"block {i} is empty; every block must hold at least one node")
            for n in block:
                if n not in dag:
                    raise InvalidScheduleError(f"block {i} holds {n!r}, which is not a node of the problem")
                if n in seen:
                    raise InvalidScheduleError(f"node {n!r} is in blocks {seen[n]} and {i}; blocks must be disjoint")
                seen[n] = i
        missing = [n for n in self.nodes if n not in seen]
        if missing:
            raise InvalidScheduleError(f"nodes {missing[:5]} are in no block; a partition must cover every node")
        inside: dict[int, dict[frozenset[str], str]] = {}  # per block, the forbidden pairs it holds
        for pair in self.forbidden:
            if pair.a != pair.b and seen[pair.a] == seen[pair.b]:
                inside.setdefault(seen[pair.a], {})[frozenset((pair.a, pair.b))] = pair.reason
        for i, block in enumerate(blocks):
            if len(block) > self.max_nodes:
                raise InvalidScheduleError(f"block {i} has {len(block)} nodes, more than the limit {self.max_nodes}")
            nbuf = len(set().union(*(self._touched[n] for n in block)))
            if nbuf > self.max_buffers and len(block) > 1:  # the limits bound fusion; one node is always a kernel
                raise InvalidScheduleError(f"block {i} touches {nbuf} buffers, more than the limit {self.max_buffers}")
            forbidden = inside.get(i, {})
            for x in range(len(block) if forbidden else 0):
                for y in range(x + 1, len(block)):
                    reason = forbidden.get(frozenset((block[x], block[y])))
                    if reason is not None:
                        raise InvalidScheduleError(
                            f"block {i} holds the forbidden pair ({block[x]}, {block[y]}): {reason}")
        cycle = quotient_dag(dag, blocks).find_cycle()
        if cycle:
            raise InvalidScheduleError(f"the quotient graph has a cycle through blocks {cycle} "
                                       "(Definition 7.3 (2)); merge or split those blocks")
        return blocks

    # --- JSON --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FUSION_FORMAT, "version": FORMAT_VERSION, "name": self.name,
            "nodes": list(self.nodes),
            "buffers": [asdict(b) | {"users": list(b.users)} for b in self.buffers],
            "forbidden": [asdict(p) for p in self.forbidden],
            "extra_edges": [list(e) for e in self.extra_edges],
            "max_nodes": self.max_nodes, "max_buffers": self.max_buffers,
            "node_info": self.node_info,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> "FusionProblem":
        """A problem from its JSON form, every field checked (the error names the file and field)."""
        reader = _reader(data, source, FUSION_FORMAT, FUSION_KEYS)
        nodes = _unique(reader, "nodes", reader.names("nodes", limit="nodes"))
        known = set(nodes)
        forbidden = []
        for i, p in enumerate(reader.list_of("forbidden", dict, default=[])):
            pair = reader.sub(f"forbidden[{i}]", p, ("a", "b", "reason"))
            a, b = (_node(pair, key, known) for key in ("a", "b"))
            if a == b:
                pair.fail("b", "a node other than a (a node always shares its own kernel)", b)
            forbidden.append(ForbiddenPair(a, b, pair.get("reason", str, "a string")))
        return cls(
            nodes=tuple(nodes),
            buffers=_buffers(reader, known, "node"),
            forbidden=tuple(forbidden),
            extra_edges=_extra_edges(reader, known),
            max_nodes=reader.positive("max_nodes", 128),
            max_buffers=reader.positive("max_buffers", 32),
            node_info=_node_info(reader, known),
            name=_description(reader),
        )


@dataclass(frozen=True)
class OrderProblem(_JsonFile):
    """Definition 7.5: kernels (``tasks``, in their original order) and the buffers they allocate.

    Only buffers the wrapper allocates appear (graph inputs belong to the caller).  A buffer is
    live from its producer's step to its last user's step, both included; an output
    (``is_output``) or a buffer without users that is an output stays live to the end.
    """

    tasks: tuple[str, ...]
    buffers: tuple[Buffer, ...]
    extra_edges: tuple[tuple[str, str], ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        known = set(self.tasks)
        if len(known) != len(self.tasks):
            raise InstanceFormatError("OrderProblem.tasks: task names must be unique")
        for buf in self.buffers:
            if buf.producer is None:
                raise InstanceFormatError(f"OrderProblem.buffers[{buf.name!r}]: producer is required "
                                          "(graph inputs belong to the caller and are not listed)")
            for who in (buf.producer,) + tuple(buf.users):
                if who not in known:
                    raise InstanceFormatError(
                        f"OrderProblem.buffers[{buf.name!r}]: refers to task {who!r}, which is not in tasks")
        cycle = self.dependencies().find_cycle()
        if cycle:
            raise InstanceFormatError(f"OrderProblem: the dependency graph has a cycle through {cycle}; "
                                      "it must be a DAG")

    def dependencies(self) -> Dag:
        """The DAG of tasks: producer -> user for every buffer, plus extra edges."""
        return _edges(self.tasks, self.buffers, self.extra_edges)

    def dag(self) -> nx.DiGraph:
        """``dependencies()`` as a networkx graph, for the solvers."""
        return self.dependencies().to_networkx()

    def validate(self, order: Sequence[str]) -> tuple[str, ...]:
        """Check that ``order`` is a topological order of all tasks; return it as a tuple or raise."""
        order = tuple(order)
        if sorted(order) != sorted(self.tasks):
            missing = set(self.tasks) - set(order)
            extra = set(order) - set(self.tasks)
            raise InvalidScheduleError(f"an order must list every task exactly once (missing {sorted(missing)[:5]}, "
                                       f"unknown {sorted(extra)[:5]}, length {len(order)} for {len(self.tasks)} tasks)")
        position = {t: i for i, t in enumerate(order)}
        for a, b in self.dependencies().edges:
            if position[a] > position[b]:
                raise InvalidScheduleError(f"order is not topological: {b!r} runs before {a!r}, which it depends on")
        return order

    def lifetimes(self, order: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Definition 7.5: [def(v), last(v)] of every buffer, as step indices in ``order``."""
        position = {t: i for i, t in enumerate(order)}
        end = len(order) - 1
        result = {}
        for buf in self.buffers:
            start = position[buf.producer]
            last = max((position[u] for u in buf.users), default=start)
            result[buf.name] = (start, end if buf.is_output else max(start, last))
        return result

    def live_bytes(self, order: Sequence[str]) -> list[int]:
        """Bytes live at each step (sum over L(tau) of b(v)), by one sweep over the lifetimes."""
        delta = [0] * (len(order) + 1)
        size = {b.name: b.size for b in self.buffers}
        for name, (start, last) in self.lifetimes(order).items():
            delta[start] += size[name]
            delta[last + 1] -= size[name]
        live, running = [], 0
        for d in delta[:-1]:
            running += d
            live.append(running)
        return live

    def peak(self, order: Sequence[str]) -> int:
        """M* of Definition 7.5 for this order."""
        return max(self.live_bytes(order), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": ORDER_FORMAT, "version": FORMAT_VERSION, "name": self.name,
            "tasks": list(self.tasks),
            "buffers": [asdict(b) | {"users": list(b.users)} for b in self.buffers],
            "extra_edges": [list(e) for e in self.extra_edges],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> "OrderProblem":
        """A problem from its JSON form, every field checked (the error names the file and field)."""
        reader = _reader(data, source, ORDER_FORMAT, ORDER_KEYS)
        tasks = _unique(reader, "tasks", reader.names("tasks", limit="nodes"))
        known = set(tasks)
        return cls(
            tasks=tuple(tasks),
            buffers=_buffers(reader, known, "task"),
            extra_edges=_extra_edges(reader, known),
            name=_description(reader),
        )


def block_index(partition: Iterable[Iterable[str]]) -> dict[str, int]:
    """Map each node to the index of its block."""
    return {n: i for i, block in enumerate(partition) for n in block}


def quotient_dag(dag: Dag | nx.DiGraph, partition: Sequence[Sequence[str]]) -> Dag:
    """D / P: each block contracted to one vertex (indexed by block position)."""
    block_of = block_index(partition)
    return Dag(range(len(partition)), [(block_of[a], block_of[b]) for a, b in dag.edges])


def quotient_graph(dag: Dag | nx.DiGraph, partition: Sequence[Sequence[str]]) -> nx.DiGraph:
    """``quotient_dag`` as a networkx graph, for the solvers."""
    return quotient_dag(dag, partition).to_networkx()


def task_names(partition: Sequence[Sequence[str]]) -> list[str]:
    """One distinct task name per block: a lone node keeps its name, a fused block joins its nodes
    with ``_`` and, where that equals another block's name (nodes ``a``, ``b`` and ``a_b``),
    gets ``#2``, ``#3``, ... appended.  (The compiler names the blocks' C++ kernels instead:
    ``stax.generation.kernel_names``.)"""
    taken = {b[0] for b in partition if len(b) == 1}
    names = []
    for block in partition:
        name = "_".join(block)
        if len(block) > 1:
            base, k = name, 1
            while name in taken:
                k += 1
                name = f"{base}#{k}"
            taken.add(name)
        names.append(name)
    return names


def kernel_order_problem(problem: FusionProblem, partition: Sequence[Sequence[str]],
                         names: Sequence[str] | None = None) -> OrderProblem:
    """The OrderProblem of the kernels a partition makes: one task per block, one buffer per
    produced buffer that leaves its block (block-internal buffers are never allocated).  Default
    task names are ``task_names(partition)``."""
    names = list(names) if names is not None else task_names(partition)
    block_of = block_index(partition)
    buffers = []
    for buf in problem.buffers:
        if buf.producer is None:
            continue
        home = block_of[buf.producer]
        users = tuple(dict.fromkeys(names[block_of[u]] for u in buf.users if block_of[u] != home))
        if users or buf.is_output:
            buffers.append(Buffer(buf.name, buf.size, names[home], users, buf.is_output))
    extra = tuple((names[block_of[a]], names[block_of[b]]) for a, b in problem.extra_edges
                  if block_of[a] != block_of[b])
    return OrderProblem(tasks=tuple(names), buffers=tuple(buffers), extra_edges=extra, name=problem.name)


def read_json(path: str | Path) -> dict[str, Any]:
    """The JSON object in the file at ``path``, or one line saying why there is none."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise InstanceFormatError(f"{path}: cannot read the file ({reason})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstanceFormatError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise InstanceFormatError(f"{path}: its JSON nests arrays or objects too deeply to be a stax file") from None
    if not isinstance(data, dict):
        raise InstanceFormatError(f"{path}: expected a JSON object at the top level, found {type(data).__name__}")
    return data


FUSION_KEYS = ("format", "version", "name", "nodes", "buffers", "forbidden", "extra_edges", "max_nodes",
               "max_buffers", "node_info", "provenance")
ORDER_KEYS = ("format", "version", "name", "tasks", "buffers", "extra_edges", "provenance")
BUFFER_KEYS = ("name", "size", "producer", "users", "is_output")


def _reader(data: dict[str, Any], source: str, fmt: str, known: tuple[str, ...]) -> Fields:
    """The fields of a problem file, its format and version checked."""
    fields = Fields(data, source, error=InstanceFormatError, known=known)
    fields.check_format(fmt, FORMAT_VERSION)
    return fields


def _unique(fields: Fields, key: str, names: list[str]) -> list[str]:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            fields.fail(f"{key}[{i}]", "a name not given before (names must be unique)", name)
        seen.add(name)
    return names


def _node(fields: Fields, key: str, known: set[str], kind: str = "node") -> str:
    name = fields.name(key)
    if name not in known:
        fields.fail(key, f"a {kind} of the problem", name)
    return name


def _description(fields: Fields) -> str:
    """The free-text ``name`` of a problem: printable, at most 1000 characters."""
    return fields.get("name", str, "a printable string of at most 1000 characters", default="",
                      check=lambda v: len(v) <= 1000 and v.isprintable())


def _buffers(fields: Fields, known: set[str], kind: str) -> tuple[Buffer, ...]:
    """The ``buffers`` list: unique names, sizes below 2^62 (their sum too), known producer and
    users, no buffer read by its own producer (a self-loop)."""
    fields.at_most("buffers", "buffers")
    result, seen, total = [], set(), 0
    for i, value in enumerate(fields.list_of("buffers", dict)):
        buf = fields.sub(f"buffers[{i}]", value, BUFFER_KEYS)
        name = buf.name("name")
        if name in seen:
            buf.fail("name", "a buffer name not given before (names must be unique)", name)
        seen.add(name)
        size = buf.count("size")
        total += size
        if total >= MAX_COUNT:
            buf.fail("size", "sizes whose sum stays below 2^62 bytes", size)
        producer = None if value.get("producer") is None else _node(buf, "producer", known, kind)
        users = buf.names("users")
        for j, user in enumerate(users):
            if user not in known:
                buf.fail(f"users[{j}]", f"a {kind} of the problem", user)
            if user == producer:
                buf.fail(f"users[{j}]", f"a {kind} other than the producer (a {kind} cannot read what it writes "
                         "before writing it)", user)
        result.append(Buffer(name, size, producer, tuple(users), buf.flag("is_output", False)))
    return tuple(result)


def _extra_edges(fields: Fields, known: set[str]) -> tuple[tuple[str, str], ...]:
    edges = fields.list_of("extra_edges", list, default=[])
    for i, edge in enumerate(edges):
        if len(edge) != 2 or not all(isinstance(v, str) and v in known for v in edge) or edge[0] == edge[1]:
            fields.fail(f"extra_edges[{i}]", "a pair of two different names of the problem", edge)
    return tuple((a, b) for a, b in edges)


def _node_info(fields: Fields, known: set[str]) -> dict[str, dict[str, Any]]:
    info = fields.get("node_info", dict, "an object mapping node names to objects", default={})
    for node, value in info.items():
        if node not in known or not isinstance(value, dict):
            fields.fail(f"node_info.{node}"[:120], "an object, under the name of a node of the problem", value)
    return info
