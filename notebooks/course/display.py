"""What the notebooks show: theme-safe colours and token chips, the banner naming the code that
runs, and HTML in a notebook with plain text anywhere else."""

from __future__ import annotations

import html
from types import MappingProxyType
from typing import Sequence

from course.chapters import chapter
from course.state import STATE, Running, current

# --- Theme-safe colours ------------------------------------------------------------------------
# Text on JupyterLab's own backgrounds uses its theme variables (light and dark); anything with a
# coloured background sets the text colour too. The fallbacks after the comma are for renderers
# without JupyterLab's variables.

BOX = ("padding:8px 12px;border:2px solid;border-radius:6px;font-size:14px;"
        "background:var(--jp-layout-color2,#f3f3f3);color:var(--jp-ui-font-color0,#111);")
NOTE = "font-size:13px;padding:2px 0;color:var(--jp-ui-font-color1,inherit);"

# kind: (background, text, border); text on background has WCAG contrast >= 4.5 (tested).
CHIP_COLOURS = MappingProxyType({
    "plain": ("#f5f5f5", "#212121", "1px solid #9e9e9e"),
    "suffix": ("#bbdefb", "#0d3c78", "2px solid #1565c0"),
    "match": ("#fff59d", "#3e2723", "1px solid #f9a825"),
    "copy": ("#c8e6c9", "#1b4d1f", "1px solid #2e7d32"),
    "draft": ("#e8f5e9", "#1b4d1f", "2px dashed #2e7d32"),
    "accepted": ("#c8e6c9", "#1b4d1f", "1px solid #2e7d32"),
    "corrected": ("#ffe0b2", "#4e2600", "1px solid #ef6c00"),
    "bonus": ("#bbdefb", "#0d3c78", "1px solid #1565c0"),
    "rejected": ("#ffcdd2", "#7f0000", "1px solid #c62828"),
    "pass": ("#c8e6c9", "#1b4d1f", "1px solid #2e7d32"),
    "fail": ("#ffcdd2", "#7f0000", "1px solid #c62828"),
    "note": ("#eeeeee", "#303030", "1px solid #9e9e9e"),
})


def chip(text, kind: str = "plain", title: str | None = None) -> str:
    """One token (or a short label) as a coloured box that reads in light and dark themes.

    ``kind`` is one of :data:`CHIP_COLOURS`: ``plain`` (a context token), ``suffix``, ``match``
    (the earlier occurrence), ``copy`` (the copied continuation), ``draft``, ``accepted``,
    ``corrected``, ``bonus``, ``rejected`` (struck through), ``pass``, ``fail``, ``note``.
    """
    if kind not in CHIP_COLOURS:
        raise ValueError(f"unknown chip kind {kind!r}; expected one of {', '.join(CHIP_COLOURS)}")
    background, colour, border = CHIP_COLOURS[kind]
    strike = "text-decoration:line-through;" if kind == "rejected" else ""
    hover = f' title="{html.escape(title, quote=True)}"' if title else ""
    return (f'<span class="course-chip course-chip-{kind}"{hover} style="display:inline-block;'
            f"min-width:1.6em;margin:2px;padding:1px 4px;text-align:center;font-family:monospace;white-space:pre;"
            f'border-radius:3px;background:{background};color:{colour};border:{border};{strike}">'
            f"{html.escape(str(text))}</span>")


def strip(parts: Sequence[str], note: str = "") -> str:
    """Chips (HTML from :func:`chip`) in one wrapping line, the container the browser check reads."""
    tail = f'<span style="{NOTE}margin-left:8px">{note}</span>' if note else ""
    return ('<div class="course-strip" style="line-height:2.4em;color:var(--jp-ui-font-color1,inherit)">'
            + "".join(parts) + tail + "</div>")


def token_label(token: int) -> str:
    """A byte token as strips and figures show it: its character, a visible mark for a space (·),
    a newline (↵) or a tab (→), and the hex value of anything else unprintable."""
    token = int(token)
    return {10: "↵", 32: "·", 9: "→"}.get(token, chr(token) if 33 <= token < 127 else f"x{token:02x}")


def banner_html(running: Running) -> str:
    if running.learner:
        found = f" (found: {html.escape(running.found_by)})" if running.found_by else ""
        return (f'<div class="course-banner course-learner" style="{BOX}border-color:#2e7d32">'
                f"Running <b>your code</b>: <code>{html.escape(str(running.learner_file))}</code>{found}; "
                f"{(STATE.chapter or chapter()).from_reference}. Save your edits and rerun "
                "any cell: it uses the saved file. To run the reference instead, set "
                "<code>REFERENCE = True</code> in this cell and rerun it; for another workspace, "
                "<code>ol lab --workspace DIR</code>.</div>")
    switch = ("set <code>REFERENCE = False</code> in this cell and rerun it"
              if running.why.startswith("you chose") else
              "<code>ol lab --workspace DIR</code> opens the chapters on your workspace")
    return (f'<div class="course-banner course-reference" style="{BOX}border-color:#ef6c00">'
            f"<b>Running the reference solution, not your code</b>: {running.why}. To run yours: "
            f"{switch}.</div>")


def banner_text(running: Running) -> str:
    if running.learner:
        return f"Running your code: {running.learner_file}"
    return "Running the reference solution, not your code: " + _strip_tags(running.why)


def _strip_tags(text: str) -> str:
    return html.unescape(text.replace("<code>", "`").replace("</code>", "`"))


def show_banner(running: Running | None = None) -> None:
    running = running or current()
    display(banner_html(running), banner_text(running))


def display(markup: str, text: str) -> None:
    """HTML in a notebook; the plain text anywhere else (a script, a test)."""
    try:
        from IPython import get_ipython
        from IPython.display import display as show
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(text)
        return
    show({"text/html": markup, "text/plain": text}, raw=True)


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def short(value, limit: int | None = None) -> str:
    import numpy as np

    if isinstance(value, np.ndarray):
        text = np.array2string(value, precision=4, separator=", ")
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = repr(value)
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + "…"
    return text


def code_spans(text: str) -> str:
    """Escape ``text``, turning `name` into <code>name</code>."""
    pieces = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))
