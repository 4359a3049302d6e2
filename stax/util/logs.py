"""``STAX_LOGS``: watch the compiler's decisions as they are taken, in the manner of ``TORCH_LOGS``.

``STAX_LOGS=fusion,order`` turns on those channels; each is a logger of Python's ``logging``
(``stax.fusion``, ``stax.order``, ...) writing to stderr at level INFO.  The variable is read each
time stax schedules or builds (``configure_from_env``), not only at import.  Without it stax
leaves the loggers alone, so a program may configure them through ``logging`` itself.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import IO, Callable, Iterable

from stax.errors import StaxError
from stax.util.suggest import did_you_mean

ENV = "STAX_LOGS"
#: each channel and what it shows (docs/logging.md has examples)
CHANNELS = {
    "fusion": "each fusion decision: taken or not, its score or reason, in the user's op names",
    "order": "the kernel order: its strategy, peak and each step's kernel",
    "memory": "the memory plan: planned peak, and each buffer's storage (new, reused, in place)",
    "kernels": "each kernel's form, vector width and parallel depth, and the ops it computes",
    "schedule": "one line per schedule: strategies, nodes, kernels, parallel regions",
    "timing": "the seconds each pass took (trace, lower, fusion, order, code generation, gcc)",
}
ALL = "all"


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record is written (so a redirected
    or captured stderr gets it)."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, value: IO[str]) -> None:
        pass  # StreamHandler.__init__ sets it; the property above decides


def logger(channel: str) -> logging.Logger:
    """The logger of one channel (``stax.fusion``)."""
    return logging.getLogger(f"stax.{channel}")


def parse(text: str, source: str = ENV) -> tuple[str, ...]:
    """The channels a ``STAX_LOGS`` value names (comma-separated, ``all`` for every one)."""
    names = tuple(dict.fromkeys(c.strip().lower() for c in text.split(",") if c.strip()))
    if ALL in names:
        return tuple(CHANNELS)
    for name in names:
        if name not in CHANNELS:
            raise StaxError(f"{source}={text!r}: there is no channel {name!r}; {did_you_mean(name, CHANNELS)}"
                            f"the channels are {', '.join(CHANNELS)} (or {ALL}), comma-separated")
    return names


_handler: _Stderr | None = None
_applied: str | None = None  # the STAX_LOGS value last applied; None: stax has not touched the loggers


def configure(channels: Iterable[str]) -> None:
    """Turn the named channels on (INFO, written to stderr) and the others off; with no channel,
    hand the loggers back to ``logging``'s own configuration."""
    global _handler
    chosen = set(channels)
    root = logging.getLogger("stax")
    if _handler is not None:
        root.removeHandler(_handler)
        _handler = None
    for channel in CHANNELS:
        logger(channel).setLevel(logging.INFO if channel in chosen else logging.NOTSET if not chosen
                                 else logging.WARNING)
    root.propagate = not chosen
    if chosen:
        _handler = _Stderr()
        _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        root.addHandler(_handler)


def configure_from_env() -> None:
    """Apply ``STAX_LOGS`` when it changed since the last call (cheap when it did not)."""
    global _applied
    text = os.environ.get(ENV, "")
    if text == (_applied or ""):
        return
    configure(parse(text))
    _applied = text


def log(channel: str, lines: Callable[[], Iterable[str]]) -> None:
    """Write each of ``lines()`` as one INFO record of the channel; ``lines`` is called only when
    the channel is on."""
    channel_logger = logger(channel)
    if channel_logger.isEnabledFor(logging.INFO):
        for line in lines():
            channel_logger.info(line)
