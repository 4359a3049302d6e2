"""Hints for a mistyped name: the closest known names, by ``difflib``'s similarity ratio."""
from __future__ import annotations

import difflib
from typing import Iterable


#: how much less similar than the closest name a hint may be (``sort`` is not offered for
#: ``softmx`` beside ``softmax``)
MARGIN = 0.25


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` known names close to ``name`` (difflib's ratio at least 0.6, and within
    :data:`MARGIN` of the closest's), closest first (case-insensitive)."""
    by_lower = {k.lower(): k for k in known}
    target = str(name).lower()
    found = difflib.get_close_matches(target, list(by_lower), n=n, cutoff=0.6)
    best = difflib.SequenceMatcher(None, target, found[0]).ratio() if found else 1.0
    return [by_lower[m] for m in found if difflib.SequenceMatcher(None, target, m).ratio() >= best - MARGIN]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'greedy'? "`` (with the trailing space) when a known name is close, else ``""``."""
    found = closest(name, known, n=1)
    return f"did you mean {found[0]!r}? " if found else ""
