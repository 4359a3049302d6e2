"""The ``stax`` command line (above the library: it may import ``experiments`` and ``instances``,
which nothing under ``stax/`` does)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import click
import numpy as np

from stax.errors import StaxError


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


def _parse_params(pairs: tuple[str, ...], option: str) -> dict[str, object]:
    """``KEY=VALUE`` pairs as strategy parameters; a value is read as JSON (5, 2.5, true, "x") or
    else kept as text."""
    params: dict[str, object] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE (for example time_limit=5)", param_hint=option)
        try:
            params[key] = json.loads(text)
        except json.JSONDecodeError:
            params[key] = text
    return params


def _results_table(results: str):
    """The results table at ``results``, or a command-line error that says what is wrong."""
    from experiments.sweep.results import load_results
    try:
        return load_results(results)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc))


def _check_arity(fn, shapes: list[tuple[int, ...]]) -> None:
    """One shape per parameter of ``fn``, or an error naming them."""
    import inspect
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    except (TypeError, ValueError):  # no signature to read: the call will tell
        return
    if len(shapes) != len(params):
        example = ",".join(["64x128"] * len(params)) or "''"
        raise click.BadParameter(f"{len(shapes)} shape(s) for {len(params)} argument(s) of "
                                 f"{getattr(fn, '__name__', 'the function')}({', '.join(params)}); give one shape per "
                                 f"argument, separated by commas, e.g. --shapes {example}", param_hint="--shapes")


def _check_dtype(dtype: str) -> str:
    from stax.dtypes import canonical
    try:
        return canonical(dtype)
    except StaxError as exc:
        raise click.BadParameter(str(exc), param_hint="--dtype")


class _NamesOption(click.Option):
    """An option naming a strategy: its help lists the registered names (read when help is shown)."""

    def __init__(self, *args, registry: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.registry = registry

    def get_help_record(self, ctx):
        from stax.scheduler import strategies as strategy
        names = getattr(strategy, self.registry).names()
        self.help = f"{self.help}: {', '.join(names)} (see `stax strategies`)"
        return super().get_help_record(ctx)


def _random_input(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(1, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@click.group()
@click.version_option(package_name="stax", prog_name="stax", message="%(prog)s %(version)s")
def main() -> None:
    """Stax: a tensor compiler whose fusion and ordering strategies can be swapped, solved exactly and timed."""


def _scheduling_options(fn):
    """The options that make a schedule: input shapes and dtype, strategies, threads, vector level."""
    options = [
        click.option("--shapes", help="One shape per argument, e.g. 64x128 or 64x128,128"),
        click.option("--dtype", default="float32", show_default=True,
                     help="Dtype of every input: float32, float64, int32, int64 or bool"),
        click.option("--fusion", default="greedy", show_default=True, help="Fusion strategy", cls=_NamesOption,
                     registry="fusion_strategies"),
        click.option("--order", default="best", show_default=True, help="Order strategy", cls=_NamesOption,
                     registry="order_strategies"),
        click.option("--fusion-param", "fusion_params", multiple=True, metavar="KEY=VALUE",
                     help="A parameter of the fusion strategy (repeatable), e.g. time_limit=5"),
        click.option("--order-param", "order_params", multiple=True, metavar="KEY=VALUE",
                     help="A parameter of the order strategy (repeatable), e.g. max_states=1000"),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="Kernel threads  [default: the machine's cores]"),
        click.option("--isa", default=None, help="Vector level: none, avx2 or avx512  [default: the CPU's best]"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@main.command("compile")
@click.argument("target")
@_scheduling_options
@click.option("--show-code/--no-show-code", default=False)
@click.option("--log/--no-log", default=True, help="Print the fusion log")
@click.option("--explain", is_flag=True,
              help="Write each fusion decision and the kernel order to stderr, as STAX_LOGS=fusion,order does")
@click.option("--schedule", "schedule_file", type=click.Path(exists=True, dir_okay=False),
              help="Build this saved schedule of FN (`stax schedule ... -o FILE.json`) instead of scheduling anew")
def compile_command(target: str, shapes: str | None, dtype: str, fusion: str, order: str,
                    fusion_params: tuple[str, ...], order_params: tuple[str, ...], threads: int | None,
                    isa: str | None, show_code: bool, log: bool, explain: bool, schedule_file: str | None) -> None:
    """Compile FILE.py:FN for the given shapes (or build its saved schedule), run it once on random
    inputs and check it."""
    from stax.compiler import compile as stax_compile
    from stax.reference import evaluate
    from stax.measure.timing import time_call

    from stax.scheduler.strategies import fusion_strategies, order_strategies
    if explain:
        _explain_channels()
    fn = _load_function(target)
    rng = np.random.default_rng(0)
    if schedule_file:
        compiled, arrays = _build_saved(fn, schedule_file, rng)
        if explain:
            from stax.explain import log_saved_decisions
            log_saved_decisions(compiled.schedule)
    else:
        dtype = _check_dtype(dtype)
        fusion_options = _parse_params(fusion_params, "--fusion-param")
        order_options = _parse_params(order_params, "--order-param")
        try:  # named as the command line names them, before anything is traced
            fusion_strategies.check(fusion, fusion_options, option="--fusion-param")
            order_strategies.check(order, order_options, option="--order-param")
        except StaxError as exc:
            raise click.ClickException(str(exc))
        parsed = _required_shapes(fn, shapes)
        arrays = [_random_input(s, dtype, rng) for s in parsed]
    try:
        if not schedule_file:
            compiled = stax_compile(fn, *arrays, fusion=fusion, order=order, threads=threads, isa=isa,
                                    fusion_params=fusion_options, order_params=order_options)
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
    click.echo(f"{_kernel_count(len(compiled.block_kernels), len(compiled.kernels))}, modeled traffic "
               f"{compiled.modeled_traffic} B, median time {seconds * 1e6:.1f} us")


def _kernel_count(kernels: int, calls: int) -> str:
    """``4 kernels in 1 call``: one kernel per block of the partition; adjacent kernels sharing a
    parallel region are one C++ call (spec 8.5), as ``repr`` of a compiled function says."""
    return f"{kernels} kernel{'s' * (kernels != 1)} in {calls} call{'s' * (calls != 1)}"


def _explain_channels() -> None:
    """``--explain``: the channels fusion and order of ``STAX_LOGS``, beside any it already names."""
    from stax.util.logs import ENV, configure_from_env, parse
    try:
        channels = parse(os.environ.get(ENV, ""))
    except StaxError as exc:
        raise click.ClickException(str(exc))
    os.environ[ENV] = ",".join(dict.fromkeys([*channels, "fusion", "order"]))
    configure_from_env()


@main.command()
def demo() -> None:
    """Compile and run the spec's examples 7.1 and 7.2: print the code, the fusion log and a timing."""
    from stax.measure.demo import run_demo
    try:
        run_demo(click.echo)
    except StaxError as exc:
        raise click.ClickException(str(exc))


def _workers_option(fn):
    return click.option("--workers", type=click.IntRange(min=1), default=None,
                        help="Parallel cell processes (default: the number of cores)")(fn)


def _sweep_flags(fn):
    """The options every command running a sweep takes."""
    fn = click.option("--allow-failures", is_flag=True, help="Exit 0 even when cells failed or timed out")(fn)
    fn = click.option("--keep-stale", is_flag=True,
                      help="Reuse rows of cells done by other code or settings instead of redoing them")(fn)
    fn = click.option("--dry-run", is_flag=True, help="List the cells and which are done; run nothing")(fn)
    return _workers_option(fn)


def _run_and_report(config_path: str | Path, out: str | None, workers: int | None, scheduler: str | None,
                    raise_errors: bool, report: bool, allow_failures: bool = False, keep_stale: bool = False,
                    dry_run: bool = False, rerun: str = "") -> None:
    """Run a sweep and end it with the strategies' summary (and the report); exit 1 if a cell failed."""
    import os

    try:
        if scheduler:  # before the slow imports: a wrong address fails within seconds
            from experiments.sweep.cluster import probe
            probe(scheduler)
        from experiments.sweep.config import load_config
        from experiments.report.summary import format_summary, strategy_summary
        from experiments.sweep.run import run_sweep
        config = load_config(config_path)
        out_dir = Path(out or Path("results") / config.name)
        if dry_run:
            from experiments.sweep.status import describe_plan
            click.echo(describe_plan(config, out_dir))
            return
        started = time.time()
        summary = run_sweep(config, out_dir, workers=workers or os.cpu_count() or 1, scheduler=scheduler,
                            raise_errors=raise_errors, echo=click.echo, keep_stale=keep_stale)
    except StaxError as exc:
        raise click.ClickException(str(exc))
    except KeyboardInterrupt:
        from experiments.sweep.status import interrupted
        raise click.ClickException(interrupted(out_dir, started, rerun or f"stax sweep {config_path} --out {out_dir}"))
    click.echo(f"{summary.cells} cells ({summary.skipped} were already done, {summary.failed} failed or timed out "
               f"in this run); table: {summary.out / 'results.parquet'} and {summary.out / 'results.csv'}")
    if len(summary.table):
        click.echo(format_summary(strategy_summary(summary.table)))
    if report:
        from experiments.report.html import write_report
        path = write_report(summary.table, summary.out, config.name)
        click.echo(f"report: {path} (figures beside it: {', '.join(p.name for p in sorted(summary.out.glob('*.png')))})")
    elif len(summary.table):
        click.echo(f"plots and an HTML report of this table: stax report {summary.out} (or rerun with --report)")
    failed = int((summary.table["status"] != "ok").sum()) if len(summary.table) else 0
    if failed and not allow_failures:
        raise click.ClickException(f"{failed} of {summary.cells} cells failed or timed out (their errors: "
                                   f"{summary.out / 'failed'}, the table's error column); rerunning retries them, "
                                   "--allow-failures exits 0")


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), help="Results directory (default results/NAME)")
@_sweep_flags
@click.option("--scheduler", default=None, help="Dask scheduler address: run the cells on that cluster")
@click.option("--raise", "raise_errors", is_flag=True, help="Run cells in this process and re-raise the first failure")
@click.option("--report/--no-report", default=False, help="Also write the plots and report.html")
def sweep(config: str, out: str | None, workers: int | None, scheduler: str | None, raise_errors: bool,
          report: bool, allow_failures: bool, keep_stale: bool, dry_run: bool) -> None:
    """Run the sweep of CONFIG (TOML); finished cells are skipped, so rerunning resumes. Ends with a
    table per strategy and exits 1 if a cell failed."""
    _run_and_report(config, out, workers, scheduler, raise_errors, report, allow_failures, keep_stale, dry_run)


@main.command("main-job")
@click.option("--out", type=click.Path(file_okay=False), default="results/main-job", show_default=True)
@_sweep_flags
def main_job(out: str, workers: int | None, allow_failures: bool, keep_stale: bool, dry_run: bool) -> None:
    """The built-in sweep (experiments/configs/main.toml): programs and abstract instances, every
    strategy against the CP-SAT optimum; leaves the table, plots and report.html in OUT."""
    import experiments
    _run_and_report(Path(experiments.__file__).parent / "configs" / "main.toml", out, workers, None, False, True,
                    allow_failures, keep_stale, dry_run, rerun=f"stax main-job --out {out}")


@main.command()
@click.argument("results", type=click.Path(exists=True))
@click.option("--out", type=click.Path(file_okay=False), help="Where to write the PNGs (default: beside the table)")
def plot(results: str, out: str | None) -> None:
    """Draw the figures of a results directory (or .parquet/.csv table)."""
    from experiments.report.plots import plot_all
    target = Path(out or (results if Path(results).is_dir() else Path(results).parent))
    table = _results_table(results)
    paths = plot_all(table, target)
    for path in paths:
        click.echo(str(path))
    if not paths:
        finished = int((table["status"] == "ok").sum())
        raise click.ClickException(f"no figure to draw: {finished} of {len(table)} cells finished (see the status "
                                   "and error columns)")


@main.command()
@click.argument("results", type=click.Path(exists=True))
@click.option("--out", type=click.Path(file_okay=False), help="Where to write report.html (default: beside the table)")
@click.option("--title", default=None, help="The report's title  [default: the sweep's name]")
def report(results: str, out: str | None, title: str | None) -> None:
    """Write a self-contained report.html (figures embedded, summary tables) of a results table."""
    from experiments.report.html import sweep_name, write_report
    target = Path(out or (results if Path(results).is_dir() else Path(results).parent))
    click.echo(str(write_report(_results_table(results), target, title or sweep_name(results))))


@main.command()
@click.argument("a", type=click.Path(exists=True))
@click.argument("b", type=click.Path(exists=True))
@click.option("--factor", type=click.FloatRange(min=1), default=1.1, show_default=True,
              help="A ratio beyond this (either way) with disjoint intervals is significant")
@click.option("--all", "show_all", is_flag=True, help="List every timed cell, not only the changed ones")
def compare(a: str, b: str, factor: float, show_all: bool) -> None:
    """Compare the kernel times of two results tables cell by cell (B / A), like asv compare."""
    from experiments.report.compare import compare as compare_tables, format_comparison
    click.echo(format_comparison(compare_tables(_results_table(a), _results_table(b), factor), not show_all))


@main.group()
def instances() -> None:
    """List and inspect named instances (program suite, generators, shipped files)."""


@instances.command("list")
def instances_list() -> None:
    """Every instance family and shipped file."""
    from instances.store import catalogue

    from experiments.textable import text_table
    click.echo(text_table(("name", "kind", "description"),
                          [(row["name"], row["kind"], row["description"]) for row in catalogue()]))


@instances.command("status")
@click.option("--only", default="", help="Only instances whose name contains this text")
@click.option("--open", "open_only", is_flag=True, help="Only the rows not solved")
def instances_status(only: str, open_only: bool) -> None:
    """The status table of the shipped instances (instances/data/status.csv): best known value,
    best proven bound, and which strategy found each; `python -m experiments.studies.instance_status` regenerates it."""
    from instances.status import TABLE_PATH, StatusTable

    from experiments.textable import text_table
    try:
        table = StatusTable.load()
    except StaxError as exc:
        raise click.ClickException(str(exc))
    rows = [r for r in table.rows if only in r.instance and not (open_only and r.status == "solved")]
    numbers = ("nodes", "buffers", "value", "bound", "gap %", "seconds")
    click.echo(text_table(("instance", "problem", *numbers[:4], "gap %", "status", "value by", "bound by", "seconds",
                           "limit", "stax"),
                          [(r.instance, r.problem, r.nodes, r.buffers, r.value, r.bound, f"{100 * r.gap:.2f}", r.status,
                            r.value_by, r.bound_by, f"{r.bound_seconds:.2f}", f"{r.time_limit:g}", r.stax_version)
                           for r in rows], right=numbers))
    solved = sum(r.status == "solved" for r in rows)
    click.echo(f"{len(rows)} rows: {solved} solved, {len(rows) - solved} open ({TABLE_PATH}; seconds: the bound's "
               "strategy's, on the machine load each row records)")


@main.command()
def strategies() -> None:
    """Every fusion and order strategy a name selects: its parameters (with defaults) and what it does."""
    from stax.scheduler.catalog import entries
    from experiments.textable import text_table
    click.echo(text_table(("kind", "name", "parameters", "description"),
                          [(e.kind, e.name, e.parameters or "-", e.doc) for e in entries()]))


@instances.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the problem as JSON (the file format)")
@click.option("--save", type=click.Path(dir_okay=False), help="Write the problem to this JSON file")
def instances_show(name: str, as_json: bool, save: str | None) -> None:
    """Summarize instance NAME (e.g. softmax/64, layered/16/0, data/layered-12-0, file.json)."""
    import json

    from instances.store import describe, load
    try:
        inst = load(name)
    except StaxError as exc:
        raise click.ClickException(str(exc))
    problem = inst.fusion or inst.order
    click.echo(json.dumps(problem.to_dict(), indent=1) if as_json else describe(inst))
    if save:
        problem.save(save)
        click.echo(f"saved to {save}")


def _required_shapes(fn, shapes: str | None) -> list[tuple[int, ...]]:
    if shapes is None:
        raise click.UsageError("give --shapes (one shape per argument, e.g. --shapes 64x128)")
    parsed = _parse_shapes(shapes)
    _check_arity(fn, parsed)
    return parsed


def _load_schedule(path: str):
    from stax.decisions import Schedule
    try:
        return Schedule.load(path)
    except StaxError as exc:
        raise click.ClickException(str(exc))


def _build_saved(fn, path: str, rng: np.random.Generator):
    """A saved schedule of ``fn`` built, and random inputs of its graph's shapes; the options that
    make a schedule are refused, as the file holds every decision."""
    from stax.compiler import build
    from stax.frontend.tracing import TensorSpec, trace
    from stax.decisions import graph_to_dict
    ctx = click.get_current_context()
    given = [f"--{name.replace('_', '-')}" for name in ("shapes", "dtype", "fusion", "order", "fusion_params",
                                                         "order_params", "threads", "isa")
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"--schedule builds the decisions saved in {path}; drop {', '.join(given)}")
    sched = _load_schedule(path)
    nodes = [sched.graph.nodes[name] for name in sched.graph.inputs]
    try:
        traced = trace(fn, *[TensorSpec(n.shape, n.dtype, n.attr("strides")) for n in nodes])
        if graph_to_dict(traced) != graph_to_dict(sched.graph):
            raise click.ClickException(f"{path} is a schedule of another program than {getattr(fn, '__name__', fn)} "
                                       "(their traced graphs differ); make it again with `stax schedule`")
        compiled = build(sched)
    except StaxError as exc:
        raise click.ClickException(str(exc))
    arrays = [_random_input(n.shape, n.dtype, rng) for n in nodes]
    return compiled, arrays


@main.command("schedule")
@click.argument("target")
@_scheduling_options
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="The schedule's JSON file")
def schedule_command(target: str, shapes: str | None, dtype: str, fusion: str, order: str,
                     fusion_params: tuple[str, ...], order_params: tuple[str, ...], threads: int | None,
                     isa: str | None, out: str) -> None:
    """Schedule FILE.py:FN for the given shapes (every pass up to gcc; no compiler needed) and save
    the schedule; `stax compile FILE.py:FN --schedule FILE.json` builds it."""
    from stax.compiler import schedule
    from stax.frontend.tracing import TensorSpec
    fn = _load_function(target)
    specs = [TensorSpec(s, _check_dtype(dtype)) for s in _required_shapes(fn, shapes)]
    try:
        sched = schedule(fn, *specs, fusion=fusion, order=order, threads=threads, isa=isa,
                         fusion_params=_parse_params(fusion_params, "--fusion-param"),
                         order_params=_parse_params(order_params, "--order-param"))
        sched.save(out)
    except StaxError as exc:
        raise click.ClickException(str(exc))
    forms = sorted({k.form for k in sched.kernels})
    click.echo(f"{len(sched.fusion_problem.nodes)} nodes -> {_kernel_count(len(sched.kernels), len(sched.spans))} "
               f"({', '.join(forms)}), "
               f"modeled traffic {sched.fusion.cost} B, planned peak {sched.memory.peak} B; saved to {out}")


@main.command("diff")
@click.argument("first", type=click.Path(exists=True, dir_okay=False))
@click.argument("second", type=click.Path(exists=True, dir_okay=False))
def diff_command(first: str, second: str) -> None:
    """Where two saved schedules differ: blocks, kernel order, kernel forms, options."""
    from stax.decisions import diff
    text = diff(_load_schedule(first), _load_schedule(second), (first, second))
    click.echo(text or "the schedules make the same decisions")


if __name__ == "__main__":
    sys.exit(main())
