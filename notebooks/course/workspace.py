"""Which workspace a notebook runs: the first folder whose ``tinyllm/`` holds the chapter's learner file.

1. ``OL_WORKSPACE``, which ``ol lab`` sets to the workspace's absolute path. Set by hand to a
   relative path, it is relative to the folder where it was set: the Jupyter server's current
   folder (the shell you typed ``jupyter lab`` in) when this runs in a kernel the server started,
   else this process's current folder. When set, it is the only place looked at, as for ``ol``.
2. The workspace ``ol start`` last started, as the grader remembers it
   (:mod:`grader.layout.remembered`: ``<repo>/.ol-workspace``).
3. The notebook's folder, then the repository root.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from grader.core.protocol import WORKSPACE_ENV
from grader.layout.remembered import remembered_workspace

from course.chapters import ROOT, Chapter, chapter
from course.state import STATE


def launch_dir() -> Path:
    """The folder a relative ``OL_WORKSPACE`` is relative to: the current folder of the Jupyter
    server that started this kernel (it inherited the variable from the shell it was typed in),
    else this process's current folder."""
    parent = os.environ.get("JPY_PARENT_PID", "")
    if parent.isdigit():
        try:
            return Path(os.readlink(f"/proc/{parent}/cwd"))
        except OSError:  # not Linux, or the server is gone
            pass
    return Path.cwd()


def workspace_search() -> list[tuple[Path, str]]:
    """The folders searched for a started module, in order, each with how it came to be searched."""
    named = os.environ.get(WORKSPACE_ENV)
    if named:
        path = Path(named).expanduser()
        if path.is_absolute():
            return [(path.resolve(), WORKSPACE_ENV)]
        base = launch_dir()
        return [((base / path).resolve(), f"{WORKSPACE_ENV}={named}, relative to {base}")]
    found: list[tuple[Path, str]] = []
    remembered = remembered_workspace(ROOT)
    for folder, how in ((remembered, "the workspace ol start remembered"),
                        (Path.cwd().resolve(), "the notebook's folder"), (ROOT, "the repository root")):
        if folder is not None and folder.resolve() not in [f for f, _ in found]:
            found.append((folder.resolve(), how))
    return found


def workspace_candidates() -> list[Path]:
    """The folders searched for a started module, in order."""
    return [folder for folder, _ in workspace_search()]


def started(folder: Path, chosen: Chapter | None = None) -> bool:
    """Whether ``folder``'s ``tinyllm/`` holds the chapter's learner file."""
    chosen = chosen or STATE.chapter or chapter()
    return (Path(folder) / "tinyllm" / chosen.learner_file).is_file()


def find_workspace(candidates: Sequence[Path] | None = None) -> Path | None:
    """The first candidate whose ``tinyllm/`` holds the chapter's learner file."""
    for folder in workspace_candidates() if candidates is None else candidates:
        if started(folder):
            return Path(folder)
    return None
