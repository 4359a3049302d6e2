"""Plain-text tables with aligned columns, for the command line."""
from __future__ import annotations

from typing import Sequence


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[str] = ()) -> str:
    """``rows`` under ``headers``, each column as wide as its widest cell; columns named in ``right``
    are right-aligned (numbers), the last column is not padded."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [cell.rjust(w) if h in right else cell.ljust(w) for cell, w, h in zip(row, widths, headers)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(cells[0]), line(["-" * w for w in widths]), *map(line, cells[1:])])
