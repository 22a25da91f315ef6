"""The last workspace ``ol start`` or ``ol lab`` used, remembered for notebooks opened by hand.

It is kept in ``<course root>/.ol-workspace``, so ``jupyter lab notebooks/`` finds it too. That
file sits in the clone, not in the user's config folder: the notebooks that read it belong to this
clone, and two clones (two courses, or a fresh one beside an old one) then never point at each
other's workspaces. ``OL_LAST_WORKSPACE_FILE`` names another file, or, empty, turns remembering off
(the project's tests do, so their scratch workspaces are never remembered).

Standard library only (with :mod:`grader.core`): the notebooks' ``course`` package imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.core.paths import course_root
from grader.core.protocol import REMEMBER_ENV

REMEMBER_NAME = ".ol-workspace"
# The module whose files the chapters run: ol lab refuses a workspace where it is not started.
NOTEBOOK_MODULE = "L10.8"


def remembered_file(root: Path | None = None) -> Path | None:
    """Where the last started workspace is remembered; None when remembering is turned off."""
    named = os.environ.get(REMEMBER_ENV)
    if named is not None:
        return Path(named).expanduser() if named else None
    return (root or course_root()) / REMEMBER_NAME


def remember_workspace(workspace: Path, root: Path | None = None) -> None:
    """Note ``workspace`` (absolute) as the last one started; a failure to write is only a note."""
    target = remembered_file(root)
    if target is None:
        return
    try:
        target.write_text(str(workspace.resolve()) + "\n")
    except OSError as err:
        print(f"ol: note: could not remember this workspace in {target}: {err.strerror}")


def remembered_workspace(root: Path | None = None) -> Path | None:
    """The last workspace ``ol start`` or ``ol lab`` used, if it is still a folder."""
    target = remembered_file(root)
    try:
        text = target.read_text().strip() if target is not None else ""
    except OSError:
        return None
    return Path(text) if text and Path(text).is_dir() else None
