"""Short messages instead of tracebacks, and the card's expected values checked in place.

Outside panels (worked examples, checks), your code runs alone: a function you have not written yet
(a stub) shows one line naming it and its card section; any other exception one line naming your
function and where it raised.
"""

from __future__ import annotations

import contextlib
import html
from pathlib import Path

from course.chapters import chapter
from course.display import BOX, chip, display, first_line, short
from course.reload import LearnerFileError, refresh
from course.state import STATE, Running, current


def _learner_frame(err: BaseException, running: Running | None) -> tuple[str, int] | None:
    """The innermost frame of the traceback that lies in one of your files: (function, line)."""
    if running is None or not running.learner:
        return None
    chosen = STATE.chapter or chapter()
    mine = {str((running.package_dir / "tinyllm" / chosen.learner_file).resolve())}
    hit = None
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if str(Path(code.co_filename).resolve()) in mine:
            hit = (code.co_qualname, tb.tb_lineno)  # qualified: SpecConfig.parse, not parse
        tb = tb.tb_next
    if hit is None and isinstance(err, SyntaxError) and err.filename:
        if str(Path(err.filename).resolve()) in mine:
            hit = ("<module>", err.lineno or 0)
    return hit


def section_of(name: str) -> str:
    """Where the card states ``name``'s rule, for a message."""
    section = (STATE.chapter or chapter()).section(name)
    return f"card section {section}" if section else "the card"


def message_for(err: BaseException, running: Running) -> tuple[str, str]:
    """(html, text) of the short message shown for an error raised while running your code."""
    if isinstance(err, LearnerFileError):
        return (f'<div class="course-raised" style="{BOX}border-color:#c62828">✘ '
                f"{html.escape(str(err))}</div>"), str(err)
    where = _learner_frame(err, running)
    path = running.learner_file
    if isinstance(err, NotImplementedError) and where is not None:
        name = where[0]
        section = (STATE.chapter or chapter()).section(name)
        see = f" (the card, section {section})" if section else ""
        text = (f"`{name}` is not written yet. Write it in {path}{see}, then rerun this cell.")
        return (f'<div class="course-missing" style="{BOX}border-color:#1565c0">'
                f"✎ <code>{html.escape(name)}</code> is not written yet. Write it in "
                f"<code>{html.escape(str(path))}</code>{see}, then rerun this cell.</div>"), text
    if where is not None:
        name, line = where
        text = f"your `{name}` raised {first_line(err)} ({path}, line {line})"
    else:
        text = (f"this cell failed on what your code returned: {first_line(err)}; "
                "the check cell below names the failing test")
    return (f'<div class="course-raised" style="{BOX}border-color:#c62828">'
            f"✘ {html.escape(text)}</div>"), text


class learner_code(contextlib.ContextDecorator):
    """Run a block (or a function) that calls your code; show a short message if it fails.

    With your code running, an exception becomes one line naming your function, and the block
    is skipped from that point. With the reference running, exceptions propagate: a failure there
    is a bug in the notebook or the reference, and the notebook checks in CI must see it.
    """

    def __enter__(self) -> "learner_code":
        refresh()
        return self

    def __exit__(self, kind, err, tb) -> bool:
        if err is None or not isinstance(err, Exception):
            return False
        running = STATE.running
        if running is None or not running.learner:
            return False
        display(*message_for(err, running))
        return True


def expect(actual, expected, what: str) -> bool:
    """Show whether ``actual`` equals the card's ``expected``; the reference must always match."""
    import numpy as np

    try:
        same = bool(np.allclose(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float),
                                rtol=1e-9, atol=1e-12)) and np.shape(actual) == np.shape(expected)
    except (TypeError, ValueError):
        same = actual == expected
    mark = "✔" if same else "✘"
    shown_actual = short(actual)
    said = f"{what}: {shown_actual}" + ("" if same else f" (the card says {short(expected)})")
    text = f"{mark} {said}"
    display(f'<div class="course-expect" style="font-family:monospace;color:var(--jp-ui-font-color1,inherit)">'
             f'{chip(mark, "pass" if same else "fail")} {html.escape(said)}</div>', text)
    if not same and not current().learner:
        raise AssertionError(f"the reference disagrees with the card on {what}: "
                             f"{shown_actual} != {short(expected)}")
    return same
