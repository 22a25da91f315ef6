"""Plain-text tables that fit the terminal: long cells wrap within their column."""

from __future__ import annotations

import shutil
import textwrap

GAP = "  "


def render(header: list[str], rows: list[list[str]], width: int | None = None) -> str:
    """``header`` and ``rows`` as aligned columns; the widest columns after the first wrap to fit ``width``."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    cols = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    budget = width - len(GAP) * (len(cols) - 1)
    # The first column names things people copy into commands: it never wraps.
    while sum(cols) > budget and max(cols[1:]) > 12:
        widest = 1 + cols[1:].index(max(cols[1:]))
        cols[widest] -= 1
    lines = [_line(header, cols), _line(["-" * c for c in cols], cols)]
    for row in rows:
        lines.append(_line(row, cols))
    return "\n".join(lines)


def _line(cells: list[str], cols: list[int]) -> str:
    wrapped = [textwrap.wrap(str(c), w) or [""] for c, w in zip(cells, cols)]
    height = max(len(w) for w in wrapped)
    out = []
    for i in range(height):
        parts = [(w[i] if i < len(w) else "").ljust(c) for w, c in zip(wrapped, cols)]
        out.append(GAP.join(parts).rstrip())
    return "\n".join(out)
