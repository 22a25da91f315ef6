"""Pictures before code: inside a panel, whose functions drew it, and where yours and the reference's part.

Inside :func:`drawing` (a panel's redraw), a function of yours that raises ``NotImplementedError``
is replaced, call by call, by the reference's; a function you have written draws with yours, and
when it is one of the chapter's compared functions, the reference's runs beside it on copies of
the same inputs (at most :data:`COMPARE_CALLS` calls of each per redraw, so a Monte Carlo panel
does not take twice as long) and the first difference is noted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Callable

from course.display import first_line, short
from course.state import STATE

COMPARE_CALLS = 30


@dataclass
class Draw:
    """What one panel redraw ran: your functions, the stubs drawn with the reference, differences."""

    used: list[str] = field(default_factory=list)
    substituted: list[str] = field(default_factory=list)
    difference: str = ""
    compared: dict[str, int] = field(default_factory=dict)


@contextlib.contextmanager
def no_comparison():
    """Inside a panel, run your functions without the reference beside them: for timed runs, whose
    wall-clock a comparison would inflate. Stubs are still drawn with the reference."""
    outer, STATE.comparing = STATE.comparing, False
    try:
        yield
    finally:
        STATE.comparing = outer


@contextlib.contextmanager
def drawing():
    """Record, for one redraw, whose functions drew it (:func:`course.panel` uses this)."""
    outer, STATE.drawing = STATE.drawing, Draw()
    try:
        yield STATE.drawing
    finally:
        STATE.drawing = outer


def same_value(a, b) -> bool:
    """Equal as the card means it: numbers to 1e-9, sequences and dataclasses element by element."""
    import numpy as np

    if is_dataclass(a) and is_dataclass(b) and not isinstance(a, type):
        return type(a).__name__ == type(b).__name__ and all(
            same_value(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        try:
            x, y = np.asarray(a), np.asarray(b)
        except (TypeError, ValueError):
            return False
        if x.shape != y.shape:
            return False
        if x.dtype.kind in "biuf" and y.dtype.kind in "biuf":
            return bool(np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True))
        return all(same_value(p, q) for p, q in zip(list(a), list(b)))
    if isinstance(a, (int, float, np.number)) and isinstance(b, (int, float, np.number)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return bool(np.isclose(float(a), float(b), rtol=1e-9, atol=1e-12, equal_nan=True))
    try:
        return bool(a == b)
    except Exception:
        return False


def compare(draw: Draw, name: str, inputs: tuple, mine, reference: Callable) -> None:
    """Run the reference's ``name`` on ``inputs`` (copies of what yours got) and note in ``draw``
    where its answer and yours (``mine``) part."""
    shown_args = ", ".join([short(a, 60) for a in inputs[0]] + [f"{k}={short(v, 60)}" for k, v in inputs[1].items()])
    STATE.in_reference += 1
    try:
        theirs = reference(*inputs[0], **inputs[1])
    except Exception as err:
        draw.difference = (f"your `{name}` and the reference's differ on this panel's inputs: "
                           f"{name}({shown_args}) gives {short(mine, 80)} with yours; the reference "
                           f"raises {first_line(err)}")
        return
    finally:
        STATE.in_reference -= 1
    if not same_value(mine, theirs):
        draw.difference = (f"your `{name}` and the reference's differ on this panel's inputs: "
                           f"{name}({shown_args}) gives {short(mine, 80)} with yours, "
                           f"{short(theirs, 80)} with the reference's")
