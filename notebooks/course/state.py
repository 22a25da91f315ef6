"""The one thing that changes while a notebook runs: which chapter's module, which code, which redraw.

Every other module of the package reads and writes :data:`STATE`; nothing else is rebound at run
time. Tests start afresh with :func:`reset`.
"""

from __future__ import annotations

import atexit
import fcntl
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
    owner: Path | None = None  # this kernel's lock file, held locked while it lives (scratch_dir)
    owner_fd: int = -1
    chapters: dict[str, Chapter] = field(default_factory=dict)  # read from the catalog, by module id


STATE = State()


def reset() -> None:
    """Forget the chapter, the running code and any redraw (the scratch folders stay until exit)."""
    kept = STATE.scratch, STATE.owner, STATE.owner_fd
    STATE.__init__()
    STATE.scratch, STATE.owner, STATE.owner_fd = kept


def current() -> Running:
    if STATE.running is None:
        raise RuntimeError("call course.use() first (the notebook's first code cell does)")
    return STATE.running


OWNER_PREFIX = "tinyllm-kernel-"


def scratch_dir(prefix: str) -> Path:
    """A temporary folder that lives until the kernel exits.

    A kernel that is killed (nbval stops kernels so, and a crash does) runs no exit handler. So
    each kernel holds a lock file, ``tinyllm-kernel-<token>.lock``, locked while it lives, and its
    folders' names carry the token. A kernel making its first folder removes the folders of every
    kernel whose lock nobody holds: the system frees a lock when its process dies, whatever the
    process ids in and out of containers say."""
    if STATE.owner is None:
        _remove_orphans()
        STATE.owner_fd, name = tempfile.mkstemp(prefix=OWNER_PREFIX, suffix=".lock")
        fcntl.flock(STATE.owner_fd, fcntl.LOCK_EX)
        STATE.owner = Path(name)
    token = STATE.owner.name.removeprefix(OWNER_PREFIX).removesuffix(".lock")
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{token}-"))
    STATE.scratch.append(path)
    return path


def _remove_orphans() -> None:
    """Remove the folders of kernels that died without removing them, and their lock files."""
    temp = Path(tempfile.gettempdir())
    for lock in temp.glob(f"{OWNER_PREFIX}*.lock"):
        try:
            with open(lock) as held:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                token = lock.name.removeprefix(OWNER_PREFIX).removesuffix(".lock")
                for folder in temp.glob(f"tinyllm-*-{token}-*"):
                    shutil.rmtree(folder, ignore_errors=True)
                lock.unlink()
        except OSError:  # held by a live kernel, someone else's, or gone already
            continue


@atexit.register
def _remove_scratch() -> None:
    for path in STATE.scratch:
        shutil.rmtree(path, ignore_errors=True)
    if STATE.owner is not None:
        STATE.owner.unlink(missing_ok=True)
