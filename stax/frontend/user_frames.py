"""Which stack frames are the user's: the line a traced op is labelled with (``Graph.sources``) and
the line an error of a traced function names.  Frames of stax and torch are not the user's (the
spec's worked examples in ``stax.measure.demo`` excepted), nor those of the standard library or
an installed package; a module's place inside stax does not change its frames' side."""
from __future__ import annotations

import functools
import sys
import sysconfig
from pathlib import Path
from typing import Any

#: packages whose frames are not the user's: stax itself, and torch calling stax's backend
_INTERNAL_PACKAGES = ("stax", "torch")
#: stax modules written as a user writes programs (the spec's worked examples)
_USER_MODULES = ("stax.measure.demo",)
#: where code that is not the user's lives besides those packages: the standard library, installed packages
_LIBRARIES = tuple({Path(path).resolve() for key, path in sysconfig.get_paths().items()
                    if key in ("stdlib", "purelib", "platlib")})


@functools.lru_cache(maxsize=None)
def _in_a_library(filename: str) -> bool:
    return any(library in Path(filename).resolve().parents for library in _LIBRARIES)


def is_users(frame: Any) -> bool:
    """Whether a frame runs the user's code: neither stax's nor torch's (the spec's worked
    examples excepted), nor the standard library's or an installed package's."""
    module = frame.f_globals.get("__name__", "")
    if module.partition(".")[0] in _INTERNAL_PACKAGES:
        return module in _USER_MODULES
    return not _in_a_library(frame.f_code.co_filename)


def user_location() -> tuple[str, int]:
    """The (file, line) of the innermost frame of the user's code: the line that made the op
    being traced; ("", 0) when there is none."""
    frame = sys._getframe(1)
    while frame is not None and not is_users(frame):
        frame = frame.f_back
    return ("", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)


def at_user_line(message: str, tb: Any) -> str:
    """``message`` ending with the file and line of the traced function that caused it: the
    innermost frame of ``tb`` in the user's code (none: ``message`` as it is)."""
    where = None
    while tb is not None:
        if is_users(tb.tb_frame):
            where = f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    if where is None or message.endswith(f"(at {where})"):
        return message
    return f"{message} (at {where})"
