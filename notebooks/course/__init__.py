"""What every chapter notebook shares, behind the names the notebooks use (``import course``).

- :func:`use`: which ``tinyllm`` runs (your learner file, or the reference) and the banner that
  says so (:mod:`course.loading`, :mod:`course.workspace`); your saved edits are picked up before
  every cell (:mod:`course.reload`).
- :func:`panel`: figures that draw before you have written the code, a stub of yours replaced by
  the reference's and the panel saying so (:mod:`course.panels`, :mod:`course.compare`).
- :class:`learner_code`, :func:`expect`: short messages for functions you have not written yet
  and the card's values checked in place (:mod:`course.messages`).
- :func:`check`: the ``ol check`` table (:mod:`course.checkcell`).
- :func:`chip`, :func:`strip`, :func:`token_label`, :data:`CHIP_COLOURS`: theme-safe token chips
  (:mod:`course.display`).

The chapters' modules, learner files and card sections come from the course's catalog and stubs
(:mod:`course.chapters`); the remembered workspace from the grader. Everything that changes while
a notebook runs is one object, :data:`course.state.STATE`.
"""

import os
import sys
from pathlib import Path

# The tiny llama's matrices are small: on a shared 2-core machine, BLAS threads spend more time
# waiting on each other than multiplying, and a pass gets ten times slower and noisy. One thread, as
# for ol check, unless you chose otherwise. This only takes effect before numpy is first imported,
# which is why the notebooks import this package first.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

# The catalog and the remembered workspace are the grader's (grader/layout/): importable from the
# clone these notebooks belong to, after anything already on the path.
if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parents[2]))

from course.chapters import ROOT, bench_workloads, chapter  # noqa: E402
from course.checkcell import ERROR, FAIL, NOT_RUN, PASS, CheckReport, TestResult, check, report_html  # noqa: E402
from course.compare import drawing, no_comparison, same_value  # noqa: E402
from course.display import (CHIP_COLOURS, banner_html, banner_text, chip, show_banner, strip,  # noqa: E402
                            token_label)
from course.loading import use  # noqa: E402
from course.messages import expect, learner_code, message_for  # noqa: E402
from course.panels import draw_label, panel  # noqa: E402
from course.reload import code_version, refresh  # noqa: E402
from course.state import STATE, current, reset  # noqa: E402
from course.workspace import find_workspace, workspace_candidates  # noqa: E402

__all__ = [
    # what the notebooks use
    "use", "check", "expect", "panel", "learner_code", "chip", "strip", "CHIP_COLOURS", "token_label",
    "bench_workloads", "no_comparison", "code_version", "ROOT",
    # what the notebooks' tests and the curious use
    "STATE", "reset", "current", "chapter", "refresh", "drawing", "draw_label", "same_value", "message_for",
    "banner_html", "banner_text", "show_banner", "report_html", "CheckReport", "TestResult",
    "PASS", "FAIL", "ERROR", "NOT_RUN", "find_workspace", "workspace_candidates",
]
