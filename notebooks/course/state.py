"""The one thing that changes while a notebook runs: which chapter's module, which code, which redraw.

Every other module of the package reads and writes :data:`STATE`; nothing else is rebound at run
time. Tests start afresh with :func:`reset`.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from course.chapters import Chapter
    from course.compare import Draw
    from course.reload import Session


@dataclass
class Running:
    """Which code the notebook runs and why."""

    source: str  # "learner" or "reference"
    why: str
    package_dir: Path  # the folder on sys.path holding the assembled tinyllm/
    learner_file: Path | None = None  # your learner file, when it is the one running
    workspace: Path | None = None
    found_by: str = ""  # how the workspace was found, for the banner

    @property
    def learner(self) -> bool:
        return self.source == "learner"


@dataclass
class State:
    chapter: Chapter | None = None      # the module whose learner file runs (use(module=...))
    running: Running | None = None      # set by use()
    session: Session | None = None      # your learner file, reloaded as you save it
    drawing: Draw | None = None         # the panel redraw under way, if any
    in_reference: int = 0               # > 0 while a reference function runs to compare with yours
    comparing: bool = True              # False inside no_comparison()
    on_path: list[str] = field(default_factory=list)  # folders use() put on sys.path
    scratch: list[Path] = field(default_factory=list)  # temporary folders, removed at exit
    chapters: dict[str, Chapter] = field(default_factory=dict)  # read from the catalog, by module id


STATE = State()


def reset() -> None:
    """Forget the chapter, the running code and any redraw (the scratch folders stay until exit)."""
    scratch = STATE.scratch
    STATE.__init__()
    STATE.scratch = scratch


def current() -> Running:
    if STATE.running is None:
        raise RuntimeError("call course.use() first (the notebook's first code cell does)")
    return STATE.running


def scratch_dir(prefix: str) -> Path:
    """A temporary folder that lives until the kernel exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    STATE.scratch.append(path)
    return path


@atexit.register
def _remove_scratch() -> None:
    for path in STATE.scratch:
        shutil.rmtree(path, ignore_errors=True)
