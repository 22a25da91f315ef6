"""Names and messages from a class, made harmless on their way to a terminal, a CSV cell or a JSON file."""

from __future__ import annotations

import re

# A cell of grades.csv starting with one of these is a formula to a spreadsheet (OWASP's rule against
# CSV injection): such a cell gets a leading apostrophe, which the spreadsheet shows as text.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A learner's message (an import error's, say) may be megabytes: a spreadsheet shows a cell whole up to here.
CELL_LIMIT = 1000


_SURROGATE = re.compile("[\ud800-\udfff]")


def readable(text: str) -> str:
    """``text`` with no lone surrogate, so that it can be written as UTF-8: a byte that was not
    UTF-8 (a file name's, read as Python does) as ``\\xNN``, any other surrogate as ``\\uNNNN``."""
    def escape(m: re.Match) -> str:
        code = ord(m.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
    return _SURROGATE.sub(escape, text)


def printable(text: str) -> str:
    """:func:`readable` on one line: control, format and separator characters escaped (``\\n``,
    ``\\x1b``, ``\\u202e``), so that no name or message starts a line or moves the cursor."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in readable(text))


def cell(text: str) -> str:
    """A cell of grades.csv: :func:`printable`, at most ``CELL_LIMIT`` characters, never a formula."""
    shown = printable(text[:CELL_LIMIT])
    if len(text) > CELL_LIMIT or len(shown) > CELL_LIMIT:
        shown = shown[:CELL_LIMIT - 3] + "..."
    return "'" + shown if shown.startswith(FORMULA_START) else shown


def readable_json(value: object) -> object:
    """Parsed JSON with every string :func:`readable`, so that its file is valid UTF-8 everywhere."""
    if isinstance(value, str):
        return readable(value)
    if isinstance(value, list):
        return [readable_json(v) for v in value]
    if isinstance(value, dict):
        return {readable(k): readable_json(v) for k, v in value.items()}
    return value


def number(x: float) -> str:
    """A score as people write it: ``3``, ``2.5``."""
    return f"{x:g}"
