"""Run a function in a child process with a hard time limit.

Children come from a forkserver that has already imported the measuring code, so starting one
is cheap and safe from any thread (the sweep's threads, a Dask worker).  The child sends back
``("ok", value)`` or ``("error", traceback)``; if it overruns it is killed and the outcome is
``("timeout", message)``; if it dies, ``("error", exit code)``.
"""
from __future__ import annotations

import functools
import multiprocessing as mp
import traceback
from typing import Any, Callable

PRELOAD = ["experiments.warm"]


@functools.cache
def _context() -> mp.context.BaseContext:
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _child(fn: Callable, args: tuple, send: Any) -> None:
    try:
        outcome = ("ok", fn(*args))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent as text
        outcome = ("error", traceback.format_exc())
    send.send(outcome)
    send.close()


def call_with_limit(fn: Callable, args: tuple, seconds: float) -> tuple[str, Any]:
    """``fn(*args)`` in a child process killed after ``seconds``; returns (status, value or message)."""
    ctx = _context()
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(fn, args, send), daemon=True)
    process.start()
    send.close()
    try:
        if not receive.poll(seconds):
            process.kill()
            return "timeout", f"the cell ran longer than its limit of {seconds:g} s; its process was killed"
        try:
            return receive.recv()
        except EOFError:
            process.join()
            return "error", f"the cell's process died without a result (exit code {process.exitcode})"
    finally:
        process.join(5.0)
        if process.is_alive():
            process.kill()
            process.join()
        receive.close()
