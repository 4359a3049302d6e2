"""The fusion log in the spec's words (example 7.1 continued, example 7.2).

    found 1 possible fusions
    fusing op0 with op1 (vertical, shared data 33024 bytes)
    op0_op1: OuterLoopFusedSchedulerNode(SchedulerNode,SchedulerNode)
"""
from __future__ import annotations

from collections import Counter

from stax.scheduler.problems import FusionProblem
from stax.scheduler.strategies import FusionResult
from stax.scheduler.events import Fused, Labels, NotFused, group_name


def node_class(problem: FusionProblem, block: tuple[str, ...]) -> str:
    """The spec's class name for a fused block: outer-loop fusion when rows and reductions mix."""
    kinds = {problem.node_info.get(n, {}).get("kind", "pointwise") for n in block}
    groups = {str(problem.node_info.get(n, {}).get("group")) for n in block}
    inner = ", ".join("SchedulerNode" for _ in block)
    if "reduction" in kinds and len(groups) > 1:
        return f"OuterLoopFusedSchedulerNode({inner.replace(', ', ',')})"
    return f"FusedSchedulerNode({inner.replace(', ', ',')})"


def why_unfused(result: FusionResult) -> str | None:
    """When a strategy that records its decisions fused nothing, why: each reason with the count of
    pairs sharing data it kept apart (an MLP's extern matmuls separate every kernel)."""
    events = result.info.events
    rejections = {(e.a, e.b, e.why()) for e in events if isinstance(e, NotFused)}
    if any(isinstance(e, Fused) for e in events) or not rejections:
        return None
    reasons = Counter(reason for _, _, reason in rejections)
    return (f"no fusion: each of the {len(rejections)} pairs sharing data is illegal: "
            + "; ".join(f"{reason} ({count} pair{'s' if count > 1 else ''})" for reason, count in reasons.most_common()))


def _heading(problem: FusionProblem, result: FusionResult) -> str:
    return (f"strategy {result.info.strategy or '?'}: {result.status}, "
            f"{len(problem.nodes)} nodes -> {len(result.partition)} kernels, modeled traffic {result.cost} bytes")


def _block_line(problem: FusionProblem, block: tuple[str, ...], labels: Labels | None) -> str:
    named = f" ({group_name(block, labels)})" if labels else ""
    return f"{group_name(block)}{named}" + (f": {node_class(problem, block)}" if len(block) > 1 else "")


def fusion_log(problem: FusionProblem, result: FusionResult, verbose: bool = False,
               labels: Labels | None = None) -> str:
    """The strategy's rounds and merges (with each merge's kind), the fused nodes; with ``verbose``
    every rejected candidate and its reason; with ``labels`` each node in the user's words."""
    events = result.info.events
    lines = [_heading(problem, result)]
    lines += [e.text(labels) for e in events if not isinstance(e, NotFused)]
    unfused = why_unfused(result)
    if unfused:
        lines.append(unfused)
    lines += [_block_line(problem, block, labels) for block in result.partition if len(block) > 1]
    if verbose:
        lines += [e.text(labels) for e in events if isinstance(e, NotFused)]
    return "\n".join(lines)


def fusion_decisions(problem: FusionProblem, result: FusionResult, labels: Labels | None = None) -> list[str]:
    """``STAX_LOGS=fusion``: every decision in the order it was taken (each merge with its score,
    each pair kept apart with its reason), then the kernels; a strategy that records no
    decisions (an exact solver) shows its partition."""
    lines = [_heading(problem, result), *(e.decision(labels) for e in result.info.events)]
    return lines + [f"kernel {k}: {_block_line(problem, block, labels)}" for k, block in enumerate(result.partition)]
