"""The fusion log in the seed's words (example 7.1 continued, example 7.2).

    found 1 possible fusions
    fusing op0 with op1 (vertical, shared data 33024 bytes)
    op0_op1: OuterLoopFusedSchedulerNode(SchedulerNode,SchedulerNode)
"""
from __future__ import annotations

from collections import Counter

from ..problems import FusionProblem
from ..strategy import FusionResult


def fusion_kind(problem: FusionProblem, a: tuple[str, ...], b: tuple[str, ...]) -> str:
    """vertical (one reads what the other writes), SAME_VARS_REDUCE (two reductions over the same
    iteration group), or horizontal (only shared inputs)."""
    members = set(a) | set(b)
    for buf in problem.buffers:
        if buf.producer in members and any(u in members and (buf.producer in a) != (u in a) for u in buf.users):
            return "vertical"
    info = problem.node_info
    groups = {str(info.get(n, {}).get("group")) for n in members}
    if all(info.get(n, {}).get("kind") == "reduction" for n in members) and len(groups) == 1:
        return "SAME_VARS_REDUCE"
    return "horizontal"


def node_class(problem: FusionProblem, block: tuple[str, ...]) -> str:
    """The seed's class name for a fused block: outer-loop fusion when rows and reductions mix."""
    kinds = {problem.node_info.get(n, {}).get("kind", "pointwise") for n in block}
    groups = {str(problem.node_info.get(n, {}).get("group")) for n in block}
    inner = ", ".join("SchedulerNode" for _ in block)
    if "reduction" in kinds and len(groups) > 1:
        return f"OuterLoopFusedSchedulerNode({inner.replace(', ', ',')})"
    return f"FusedSchedulerNode({inner.replace(', ', ',')})"


def why_unfused(result: FusionResult) -> str | None:
    """When a strategy that records its rejected pairs fused nothing, why: each reason with the
    count of pairs sharing data it kept apart (an MLP's extern matmuls separate every kernel)."""
    rejections = set(result.info.get("rejections", ()))
    if result.info.get("merges") or not rejections:
        return None
    reasons = Counter(reason for _, _, reason in rejections)
    return (f"no fusion: each of the {len(rejections)} pairs sharing data is illegal: "
            + "; ".join(f"{reason} ({count} pair{'s' if count > 1 else ''})" for reason, count in reasons.most_common()))


def fusion_log(problem: FusionProblem, result: FusionResult, verbose: bool = False) -> str:
    """The strategy's log lines, the kind of each merge, the fused nodes; with ``verbose`` every
    rejected candidate and its reason."""
    split = {"_".join(b): b for b in result.partition}
    lines = [f"strategy {result.info.get('strategy', '?')}: {result.status}, "
             f"{len(problem.nodes)} nodes -> {len(result.partition)} kernels, modeled traffic {result.cost} bytes"]
    merges = {(a, b): s for a, b, s in result.info.get("merges", [])}
    for line in result.info.get("log", []):
        if line.startswith("fusing "):
            a, b = line[len("fusing "):].split(" with ")
            kind = fusion_kind(problem, tuple(a.split("_")), tuple(b.split("_")))
            score = merges.get((a, b))
            line += f" ({kind}" + (f", shared data {score[1]} bytes)" if score else ")")
        lines.append(line)
    unfused = why_unfused(result)
    if unfused:
        lines.append(unfused)
    for name, block in split.items():
        if len(block) > 1:
            lines.append(f"{name}: {node_class(problem, block)}")
    if verbose:
        for a, b, reason in result.info.get("rejections", []):
            lines.append(f"cannot fuse {a} with {b}: {reason}")
    return "\n".join(lines)
