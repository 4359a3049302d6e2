"""The ``stax`` command line."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import click
import numpy as np

from .errors import StaxError


def _load_function(target: str):
    if ":" not in target:
        raise click.BadParameter(f"{target!r}: expected FILE.py:FUNCTION, for example examples.py:softmax")
    path, name = target.rsplit(":", 1)
    if not Path(path).exists():
        raise click.BadParameter(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise click.BadParameter(f"{path} defines no function {name!r}")
    return getattr(module, name)


def _parse_shapes(text: str) -> list[tuple[int, ...]]:
    try:
        return [tuple(int(d) for d in s.split("x")) if s else () for s in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected shapes like 64x128 or 64x128,128 (one per argument)")


def _random_input(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(1, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@click.group()
def main() -> None:
    """Stax: a tensor compiler whose fusion and ordering strategies can be swapped, solved exactly and timed."""


@main.command("compile")
@click.argument("target")
@click.option("--shapes", required=True, help="One shape per argument, e.g. 64x128 or 64x128,128")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--fusion", default="greedy", show_default=True, help="Fusion strategy name")
@click.option("--order", default="best", show_default=True, help="Order strategy name")
@click.option("--show-code/--no-show-code", default=False)
@click.option("--log/--no-log", default=True, help="Print the fusion log")
def compile_command(target: str, shapes: str, dtype: str, fusion: str, order: str, show_code: bool, log: bool) -> None:
    """Compile FILE.py:FN for the given shapes, run it once on random inputs and check it."""
    from .compiler import compile as stax_compile
    from .reference import evaluate
    from .timing import time_call

    fn = _load_function(target)
    rng = np.random.default_rng(0)
    arrays = [_random_input(s, dtype, rng) for s in _parse_shapes(shapes)]
    try:
        compiled = stax_compile(fn, *arrays, fusion=fusion, order=order)
        if show_code:
            click.echo(compiled.source)
        if log:
            click.echo(compiled.fusion_log)
        outputs = compiled(*[a.copy() for a in arrays])
        expected = evaluate(compiled.graph, *[a.copy() for a in arrays])
    except StaxError as exc:
        raise click.ClickException(str(exc))
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for i, (got, ref) in enumerate(zip(outputs, expected)):
        err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)), initial=0.0))
        click.echo(f"output {i}: shape {got.shape} {got.dtype}, max abs difference from the numpy reference {err:.3g}")
    seconds = time_call(lambda: compiled(*arrays))
    click.echo(f"{len(compiled.kernels)} kernels, modeled traffic {compiled.modeled_traffic()} bytes, "
               f"median time {seconds * 1e6:.1f} us")


@main.command()
def demo() -> None:
    """Compile and run the seed's examples 7.1 and 7.2: print the code, the fusion log and a timing."""
    from .examples import run_demo
    try:
        run_demo(click.echo)
    except StaxError as exc:
        raise click.ClickException(str(exc))


if __name__ == "__main__":
    sys.exit(main())
