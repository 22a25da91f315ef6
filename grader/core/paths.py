"""Where ol finds the course and keeps its answers."""

from __future__ import annotations

import os
from pathlib import Path

from grader.core.errors import GraderError
from grader.core.protocol import CACHE_ENV, COURSE_ROOT_ENV

# The clone ol was installed from: its grader is what every process ol starts imports.
REPO = Path(__file__).resolve().parents[2]


def course_root() -> Path:
    """``OL_COURSE_ROOT`` if set, else the repository this grader was installed from."""
    env = os.environ.get(COURSE_ROOT_ENV)
    root = Path(env).expanduser().resolve() if env else REPO
    if not (root / "course" / "modules").is_dir():
        if env:
            raise GraderError(f"{COURSE_ROOT_ENV}={env} holds no course catalog (course/modules/*.toml)")
        raise GraderError(f"no course catalog beside the grader in {root}: install ol from a clone of the "
                          f"course with 'pip install -e .', or set {COURSE_ROOT_ENV} to the clone")
    return root


def cache_dir() -> Path:
    """Where answers are kept: ``OL_CACHE_DIR``, else the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tinyllm-course" / "answers"
