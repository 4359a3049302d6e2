"""Hints for a mistyped name: the closest known names, by ``difflib``'s similarity ratio."""
from __future__ import annotations

import difflib
from typing import Iterable


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` known names close to ``name``, closest first (case-insensitive)."""
    known = list(known)
    by_lower = {k.lower(): k for k in known}
    return [by_lower[m] for m in difflib.get_close_matches(str(name).lower(), list(by_lower), n=n, cutoff=0.6)]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'greedy'? "`` (with the trailing space) when a known name is close, else ``""``."""
    found = closest(name, known, n=1)
    return f"did you mean {found[0]!r}? " if found else ""
