"""What greedy fusion (Algorithm 7.1) decided, as typed events; the fusion log is rendered from them.

A round starts with its count of legal candidates (``Round``); each merge records the two groups,
the score tuple of spec 7.3 and whether the fusion is vertical or horizontal, read from the
dependencies between the groups (``Fused``); each pair kept apart records a ``WhyNoFuse`` reason
(TorchInductor's ``WhyNoFuse``) with its detail (``NotFused``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any, Iterable, Mapping, Union

from stax.scheduler.problems import Buffer, FusionProblem

Group = tuple[str, ...]
Score = tuple[int, int, int, int]


class WhyNoFuse(Enum):
    """Why two groups may not, or did not, share a kernel."""

    FORBIDDEN = "forbidden"  # a pair the FusionProblem forbids (its reason is the detail)
    TOO_MANY_NODES = "too many nodes"
    TOO_MANY_BUFFERS = "too many buffers"
    SHARED_BYTES_BELOW_THRESHOLD = "shared bytes below threshold"
    CYCLE = "would create a cycle (Proposition 7.1)"
    PEAK_GROWTH = "would raise peak memory by more than"  # the allowed growth is the detail
    FUSED_THIS_ROUND = "already fused this round"


class FusionKind(Enum):
    VERTICAL = "vertical"  # one group reads what the other writes
    SAME_VARS_REDUCE = "SAME_VARS_REDUCE"  # two reductions over the same iteration group
    HORIZONTAL = "horizontal"  # only shared inputs


Labels = Mapping[str, str]  # node -> its label in the user's words (``stax.scheduler.labels``)


def group_name(group: Group, labels: Labels | None = None) -> str:
    """A group's name: its nodes joined by ``_`` (``op0_op1``), or with ``labels`` their labels
    joined by ``+`` (``amax@model.py:5+exp@model.py:5``)."""
    if not labels:
        return "_".join(group)
    return "+".join(labels.get(n, n) for n in group)


@dataclass(frozen=True)
class Round:
    number: int
    candidates: int

    def text(self, labels: Labels | None = None) -> str:
        return f"round {self.number}: found {self.candidates} possible fusions"

    def decision(self, labels: Labels | None = None) -> str:
        return self.text()


@dataclass(frozen=True)
class Fused:
    a: Group
    b: Group
    score: Score  # spec 7.3's (tau, sigma, omega, -delta)
    kind: FusionKind

    def text(self, labels: Labels | None = None) -> str:
        return f"fusing {group_name(self.a, labels)} with {group_name(self.b, labels)} ({self.kind.value}, " \
               f"shared data {self.score[1]} bytes)"

    def decision(self, labels: Labels | None = None) -> str:
        """The merge with its whole score (spec 7.3), for ``STAX_LOGS=fusion``."""
        tau, sigma, omega, delta = self.score
        return (f"fused {group_name(self.a, labels)} with {group_name(self.b, labels)}: {self.kind.value}, score "
                f"(same type {tau}, shared {sigma} B in {omega} buffer{'s' * (omega != 1)}, distance {-delta})")


@dataclass(frozen=True)
class NotFused:
    a: Group
    b: Group
    reason: WhyNoFuse
    detail: str = ""

    def why(self) -> str:
        if not self.detail:
            return self.reason.value
        return f"{self.reason.value}{': ' if self.reason is WhyNoFuse.FORBIDDEN else ' '}{self.detail}"

    def text(self, labels: Labels | None = None) -> str:
        return f"cannot fuse {group_name(self.a, labels)} with {group_name(self.b, labels)}: {self.why()}"

    def decision(self, labels: Labels | None = None) -> str:
        return f"not fused {group_name(self.a, labels)} with {group_name(self.b, labels)}: {self.why()}"


Event = Union[Round, Fused, NotFused]
_EVENTS = {cls.__name__: cls for cls in (Round, Fused, NotFused)}


def fusion_kind(problem: FusionProblem, a: Group, b: Group, buffers: Iterable[Buffer] | None = None) -> FusionKind:
    """Vertical when a buffer one group writes is read by the other; else SAME_VARS_REDUCE when all
    are reductions of one iteration group; else horizontal.  ``buffers``: the ones to look at
    (default: all the problem's; the buffers both groups touch are enough)."""
    members = set(a) | set(b)
    for buf in problem.buffers if buffers is None else buffers:
        if buf.producer in members and any(u in members and (buf.producer in a) != (u in a) for u in buf.users):
            return FusionKind.VERTICAL
    info = problem.node_info
    groups = {str(info.get(n, {}).get("group")) for n in members}
    if all(info.get(n, {}).get("kind") == "reduction" for n in members) and len(groups) == 1:
        return FusionKind.SAME_VARS_REDUCE
    return FusionKind.HORIZONTAL


def event_to_dict(event: Event) -> dict[str, Any]:
    data = asdict(event)
    for key, value in data.items():
        if isinstance(value, Enum):
            data[key] = value.value
    return {"event": type(event).__name__, **data}


def event_from_dict(data: dict[str, Any]) -> Event:
    """An event from ``event_to_dict``'s form (a schedule file)."""
    cls = _EVENTS.get(data.get("event"))
    if cls is None:
        raise ValueError(f"event must be one of {', '.join(_EVENTS)}, found {data.get('event')!r}")
    values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
    for key in ("a", "b", "score"):
        if key in values:
            values[key] = tuple(values[key])
    if cls is Fused:
        values["kind"] = FusionKind(values["kind"])
    if cls is NotFused:
        values["reason"] = WhyNoFuse(values["reason"])
    return cls(**values)
