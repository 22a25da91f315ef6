"""Figure panels: controls above a figure redrawn whenever a control moves, drawn before you have
written the code (:mod:`course.compare`), with a line saying whose code drew it."""

from __future__ import annotations

from typing import Callable

from course.compare import Draw, drawing
from course.display import NOTE, chip, code_spans
from course.messages import learner_code, section_of
from course.state import STATE


def draw_label(record: Draw) -> tuple[str, str]:
    """(html, text): one line saying whose code drew a panel, and the first difference found."""
    if STATE.running is None or not STATE.running.learner:
        return "", ""
    parts, text_parts = [], []
    if record.used:
        names = ", ".join(f"`{n}`" for n in record.used)
        text_parts.append(f"drawn with your {names}")
    if record.substituted:
        missing = "; ".join(f"`{n}` is not written yet ({section_of(n)})" for n in record.substituted)
        text_parts.append(f"drawn with the reference: {missing}")
    text = "; ".join(text_parts)
    if text:
        kind = "note" if record.substituted else "pass"
        mark = "reference" if record.substituted else "your code"
        parts.append(f'<div class="course-label" style="{NOTE}">{chip(mark, kind)} '
                     f"{code_spans(text)}</div>")
    if record.difference:
        parts.append(f'<div class="course-label course-differs" style="{NOTE}">{chip("differs", "fail")} '
                     f"{code_spans(record.difference)}</div>")
        text = "\n".join(filter(None, [text, record.difference]))
    return "".join(parts), text


def panel(draw: Callable[..., None], controls: dict, primary: str | None = None,
          columns: int = 3, slow: bool = False):
    """Controls above an output that ``draw(**values)`` fills; redrawn whenever a control moves.

    ``draw`` runs under :class:`learner_code` and :func:`drawing`: a stub of yours is replaced by
    the reference's function and a line above the figure says so (or that yours drew it, or where
    yours and the reference's differ). While it draws, that line says "computing…". With ``slow``,
    sliders redraw when released rather than while dragged. The control named ``primary`` carries
    the CSS class the browser check moves; the output carries ``course-figure``.
    """
    import ipywidgets as widgets

    status = widgets.HTML(value="")
    status.add_class("course-panel-status")

    def redraw(**values) -> None:
        status.value = f'<div class="course-computing" style="{NOTE}">⏳ computing…</div>'
        with drawing() as record:
            learner_code()(draw)(**values)
        status.value = draw_label(record)[0]

    if slow:
        for control in controls.values():
            if hasattr(control, "continuous_update"):
                control.continuous_update = False
    out = widgets.interactive_output(redraw, controls)
    out.add_class("course-figure")
    if primary is not None:
        controls[primary].add_class("course-primary")
    boxes = list(controls.values())
    rows = [widgets.HBox(boxes[i:i + columns]) for i in range(0, len(boxes), columns)]
    return widgets.VBox(rows + [status, out])
