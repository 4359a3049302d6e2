"""Each scheduler node in the user's words: the kind of op that made its buffer and the line of
the user's file that traced it (``exp@model.py:12``), for the fusion log, ``STAX_LOGS``, kernel
comments and schedules.

A label is safe by construction, so it may go into generated C++ comments: the kind is an
identifier (a graph op), the file is a basename whose every character outside
``[A-Za-z0-9_.-]`` is replaced by ``_``, the line a number.  A node whose op cannot be traced
back (one a pass made) keeps its scheduler name (``op3``).
"""
from __future__ import annotations

import os
import re
from typing import Mapping

from stax.ir.graph import Graph
from stax.scheduler.nodes import Scheduler

OP_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(@[A-Za-z0-9_.-]+:[0-9]+)?")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def op_label(kind: str, where: tuple[str, int]) -> str:
    """``kind@file:line``, or the kind alone when the location is unknown."""
    if not _IDENTIFIER.fullmatch(kind):
        kind = "op"
    file, line = where
    if not file:
        return kind
    return f"{kind}@{_UNSAFE.sub('_', os.path.basename(file))}:{int(line)}"


def _traced_node(graph: Graph, origin: str) -> tuple[str, str]:
    """The traced node a buffer computes, from its ``origin`` (``n3``, a pass's ``n3.inverse``,
    an input updated in place ``arg0 (in-place)``), and the suffix of its kind: ``_`` for the
    store into the input, as torch names in-place methods (``add_``)."""
    name = origin.split(" ")[0].split(".")[0]
    return (graph.mutations.get(name, name), "_") if origin.endswith("(in-place)") else (name, "")


def node_labels(graph: Graph, scheduler: Scheduler) -> dict[str, str]:
    """Each scheduler node's label, from the traced graph's ops and source lines."""
    labels = {}
    for node in scheduler.nodes:
        traced, suffix = _traced_node(graph, node.buffer.origin)
        if traced in graph.nodes:
            labels[node.name] = op_label(graph.nodes[traced].op + suffix, graph.sources.get(traced, ("", 0)))
        else:
            labels[node.name] = node.name
    return labels


def check_labels(labels: Mapping[str, str], nodes: tuple[str, ...]) -> None:
    """Raise ValueError unless ``labels`` names only ``nodes``, each with a safe label."""
    unknown = sorted(set(labels) - set(nodes))
    if unknown:
        raise ValueError(f"labels name nodes the fusion problem does not have: {unknown}")
    bad = {n: label for n, label in labels.items() if not isinstance(label, str) or not OP_LABEL.fullmatch(label)}
    if bad:
        raise ValueError(f"labels must read kind@file:line (letters, digits, _ . -), found {bad}")

