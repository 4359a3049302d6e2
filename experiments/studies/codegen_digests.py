"""SHA-256 digests of the C++ that stax generates for the suite, a seeded fuzz sample and the
model zoo, at every ISA level (spec section 8), made without gcc and with no host dependence;
the source positions in kernel comments are left out, as they say where the user's code lives.

A refactoring that must not change code generation writes the digests before it and checks
them after: ``python -m experiments.studies.codegen_digests --write tests/data/cpp_digests.json``, then
``--check tests/data/cpp_digests.json`` (exit status 1 and the cases that differ)."""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import stax
from stax.compiler import schedule_graph, translation_unit_of
from instances.programs import PROGRAMS
from instances.random_programs import FuzzProgram

ISAS = ("none", "avx2", "avx512")
#: where a kernel comment says an op was written (``exp@model.py:12``): the user's file, not code generation
SOURCE_POSITION = re.compile(r"@[\w.-]+\.py:\d+")
#: the fuzz sample: 40 programs of ``instances.random_programs.generate`` (seeds 0-39), saved so that
#: a new op in the fuzzer's table, which changes what a seed draws, leaves the sample as it was
FUZZ_SAMPLE = Path(__file__).resolve().parents[2] / "tests" / "data" / "fuzz_sample.json"


def digest(graph: stax.Graph, parameters: tuple[str, ...], isa: str, fusion: str = "greedy") -> str:
    options = stax.Options.from_keywords(fusion=fusion, order="best", isa=isa, threads=2)
    source = translation_unit_of(schedule_graph(graph, options, parameters))
    return hashlib.sha256(SOURCE_POSITION.sub("@<source>", source).encode()).hexdigest()


def _suite() -> Iterator[tuple[str, Callable[[], tuple[stax.Graph, tuple[str, ...]]]]]:
    for name, program in PROGRAMS.items():
        yield f"suite/{name}", lambda p=program: (stax.trace(p.fn, *p.inputs(48, 0, 40)), ())


def _fuzz() -> Iterator[tuple[str, Callable[[], tuple[stax.Graph, tuple[str, ...]]]]]:
    for seed, program in json.loads(FUZZ_SAMPLE.read_text()).items():
        yield f"fuzz/{seed}", lambda p=program: (FuzzProgram.from_dict(p).trace(), ())


def _zoo() -> Iterator[tuple[str, Callable[[], tuple[stax.Graph, tuple[str, ...]]]]]:
    if importlib.util.find_spec("torch") is None:
        return
    from experiments.models.zoo import ZOO
    for name, make in ZOO.items():
        for mode in ("forward", "training"):
            def graph(make=make, mode=mode) -> tuple[stax.Graph, tuple[str, ...]]:
                program = getattr(make(True), mode)()
                return program.graph(), ()
            yield f"zoo/{name}/{mode}", graph


def digests(groups: tuple[str, ...] = ("suite", "fuzz", "zoo")) -> dict[str, str]:
    """``{case: digest}``; a case is ``<group>/<program>[/<mode>]/<fusion>/<isa>``."""
    makers = {"suite": _suite, "fuzz": _fuzz, "zoo": _zoo}
    out = {}
    for group in groups:
        for case, make in makers[group]():
            graph, parameters = make()
            for isa in ISAS:
                out[f"{case}/greedy/{isa}"] = digest(graph, parameters, isa)
            if group == "suite":
                out[f"{case}/none/avx512"] = digest(graph, parameters, "avx512", fusion="none")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, metavar="JSON", help="write the digests to this file")
    action.add_argument("--check", type=Path, metavar="JSON", help="compare the digests with this file's")
    parser.add_argument("--groups", default="suite,fuzz,zoo", help="comma-separated: suite, fuzz, zoo")
    args = parser.parse_args(argv)
    made = digests(tuple(args.groups.split(",")))
    if args.write:
        args.write.write_text(json.dumps(made, indent=1, sort_keys=True) + "\n")
        print(f"{len(made)} digests written to {args.write}")
        return 0
    saved = json.loads(args.check.read_text())
    differ = sorted(case for case in made if saved.get(case) != made[case])
    for case in differ:
        print(f"differs: {case}")
    print(f"{len(made) - len(differ)} of {len(made)} cases give the saved C++")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
