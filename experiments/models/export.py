"""Export the FusionProblem and OrderProblem of real PyTorch models (needs torch) into
``instances/data/torch/`` so that solvers and sweeps use them without torch.

For each model of :mod:`experiments.models.suite`, and each training step of the model zoo
(:mod:`experiments.models.zoo`, into ``zoo/``) or, with ``--real-zoo``, of the real-model zoo
(:mod:`experiments.models.real_zoo`: torchvision, timm, transformers, into ``real/``, gzip-compressed:
``.json.gz``), it writes ``MODEL.fusion.json`` (the scheduler nodes of the translated program)
and ``MODEL.order.json`` (the kernels of the greedy fusion, the
compiler's default, and the buffers the wrapper allocates). Each file carries its provenance in
``name`` and in an extra top-level ``provenance`` object that the problem readers ignore;
forbidden pairs keep only their reason's name, to keep the files small.

    python -m experiments.models.export [--small] [--real-zoo] [--out DIR] [MODEL ...]
"""
from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments.models.real_zoo import REAL_TRAINING
from experiments.models.suite import MODELS
from experiments.models.zoo import TRAINING
from stax.scheduler.problems import FusionProblem
from stax.torch.capture import TorchProgram

OUT = Path(__file__).resolve().parents[2] / "instances" / "data" / "torch"
PROGRAMS = {**MODELS, **TRAINING}


def provenance(program: TorchProgram, small: bool, problem: str) -> dict[str, Any]:
    """What the file was made from: model, input shapes, torch version, the problem's source."""
    info = program.provenance
    return {"model": info["model"], "kind": info["kind"], "torch": info["torch"],
            "inputs": [[name, shape] for name, shape in info["inputs"].items()],
            "problem": problem, "shapes": "small" if small else "full",
            "made_by": "python -m experiments.models.export" + (" --small" if small else "")
                       + (" --real-zoo" if program.name.startswith("real_") else "")}


def short_reasons(problem: FusionProblem) -> FusionProblem:
    """Forbidden pairs with only the ``WhyNoFuse`` reason name (``incompatible_groups``): the
    details repeat ``node_info`` and would make most of the file."""
    pairs = tuple(replace(p, reason=p.reason.split(":")[0]) for p in problem.forbidden)
    return replace(problem, forbidden=pairs)


def write(path: Path, data: dict[str, Any]) -> int:
    """Write ``data`` as JSON, gzip-compressed (reproducibly: no timestamp) for a ``.gz`` path."""
    text = json.dumps(data, separators=(",", ":")) + "\n"
    payload = gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text.encode()
    path.write_bytes(payload)
    return len(payload)


def export(model: str, small: bool, out: Path) -> list[tuple[Path, int]]:
    """Write both problems of ``model``; returns the files and their sizes in bytes."""
    program = {**PROGRAMS, **REAL_TRAINING}[model](small)
    compiled = program.compile(fusion="greedy", order="original")
    shapes = ", ".join(f"{n}{tuple(s)}" for n, s in list(program.provenance["inputs"].items())[-3:])
    title = f"torch/{model} ({program.provenance['kind']}; ... {shapes}; torch {program.provenance['torch']})"
    fusion = replace(short_reasons(compiled.fusion_problem), name=title)
    order = replace(compiled.order_problem, name=f"{title}, kernels of greedy fusion")
    written = []
    for suffix, problem, source in (("fusion", fusion, "scheduler nodes (FusionProblem)"),
                                    ("order", order, "kernels of greedy fusion (OrderProblem)")):
        path = out / f"{model}.{suffix}.json{'.gz' if model in REAL_TRAINING else ''}"
        path.parent.mkdir(parents=True, exist_ok=True)
        written.append((path, write(path, problem.to_dict() | {"provenance": provenance(program, small, source)})))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"default: all of {', '.join(PROGRAMS)}")
    parser.add_argument("--small", action="store_true", help="the tests' tiny shapes instead of the full ones")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--real-zoo", action="store_true",
                        help="the real-model zoo's training steps instead (pip install -e '.[models]')")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    programs = REAL_TRAINING if args.real_zoo else PROGRAMS
    for model in args.models or programs:
        if model not in programs:
            parser.error(f"unknown model {model!r}; choose from {', '.join(programs)}")
        for path, size in export(model, args.small, args.out):
            print(f"{path}: {size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
