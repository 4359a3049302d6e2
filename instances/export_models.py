"""Write the whole-model instances of ``instances/whole_models.py`` (needs torch) to
``instances/data/models/`` (and ``LARGE`` to ``instances/data/large/``) as gzip-compressed JSON.

``MODEL-LAYERS-KIND.fusion.json.gz`` is the FusionProblem of the scheduler nodes (the default
fusion rule); ``...order.json.gz`` is the OrderProblem with one kernel per scheduler node (what
``Instance.order_problem()`` derives from the fusion file; shipped alone where the fusion file's
forbidden pairs would make it large).  Forbidden pairs keep only their reason's name.

    python -m instances.export_models                   # the shipped set (about 10 minutes)
    python -m instances.export_models gpt2:4:train      # one MODEL:LAYERS:KIND[:fusion|order]
"""
from __future__ import annotations

import argparse
import gzip
import json
import time
from dataclasses import replace
from pathlib import Path

from stax.scheduler.problems import FusionProblem, OrderProblem, kernel_order_problem

OUT = Path(__file__).resolve().parent / "data" / "models"
LARGE_OUT = OUT.parent / "large"  # kept apart from the sweep over data/models/*: CP-SAT alone needs a GB on them

#: (model, layers, kind, which files): the shipped set
SHIPPED = [
    ("gpt2", 12, "train", "order"), ("gpt2", 12, "forward", "fusion"), ("gpt2", 30, "train", "order"),
    ("bert", 12, "train", "order"), ("bert", 12, "forward", "fusion"),
    ("resnet", 8, "train", "fusion"), ("resnet", 8, "forward", "fusion"),
    ("mixer", 8, "train", "fusion"), ("mixer", 8, "forward", "fusion"),
]
#: written to ``LARGE_OUT``: a training step's FusionProblem of more than 500 nodes
LARGE = [("gpt2", 12, "train", "fusion")]


def fusion_problem(model: str, layers: int, train: bool, seed: int = 0) -> FusionProblem:
    """The scheduler nodes' FusionProblem of a whole model (``whole_models.whole_model``)."""
    from stax.compiler import fusion_problem_of

    from instances.whole_models import whole_model
    program = whole_model(model, train, layers, seed)
    info = program.provenance
    title = (f"models/{model}-{layers}-{'train' if train else 'forward'} ({info['model']}; seed {seed}; "
             f"torch {info['torch']})")
    problem = fusion_problem_of(program.graph(), name=title)
    return replace(problem, forbidden=tuple(replace(p, reason=p.reason.split(":")[0]) for p in problem.forbidden))


def node_order_problem(problem: FusionProblem) -> OrderProblem:
    """One kernel per scheduler node."""
    order = kernel_order_problem(problem, [(n,) for n in problem.nodes])
    return replace(order, name=f"{problem.name}, one kernel per scheduler node")


def write(path: Path, data: dict) -> int:
    blob = gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0)
    path.write_bytes(blob)
    return len(blob)


def export(model: str, layers: int, kind: str, which: str, out: Path) -> None:
    began = time.perf_counter()
    problem = fusion_problem(model, layers, kind == "train")
    stem = f"{model}-{layers}-{kind}"
    target = problem if which == "fusion" else node_order_problem(problem)
    size = write(out / f"{stem}.{which}.json.gz", target.to_dict())
    print(f"{stem}.{which}: {len(problem.nodes)} scheduler nodes, {len(problem.buffers)} buffers, "
          f"{len(problem.forbidden)} forbidden pairs, {size} bytes, {time.perf_counter() - began:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", help="MODEL:LAYERS:KIND[:fusion|order] (default: the shipped set)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    todo = [(*entry, args.out) for entry in SHIPPED] + [(*entry, LARGE_OUT) for entry in LARGE]
    if args.which:
        todo = []
        for spec in args.which:
            model, layers, kind, *files = spec.split(":")
            todo.append((model, int(layers), kind, files[0] if files else "fusion", args.out))
    for model, layers, kind, which, out in todo:
        out.mkdir(parents=True, exist_ok=True)
        export(model, layers, kind, which, out)


if __name__ == "__main__":
    main()
