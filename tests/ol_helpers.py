"""Helpers for the ``ol`` end-to-end tests: run the real command in a temporary workspace."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_CACHE_ENV = "TINYLLM_TEST_ANSWER_CACHE"
REFERENCE = ROOT / "solutions" / "tinyllm"


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def text(self) -> str:
        return self.out + self.err


def ol_command() -> list[str]:
    """The installed ``ol`` script, else the same entry point through ``python -m grader``."""
    script = shutil.which("ol")
    return [script] if script else [sys.executable, "-m", "grader"]


# One answer cache for every ol run of a test session (ol's default is the user's cache folder).


def _answer_cache() -> Path:
    """ol's answer cache for these tests: the one tests/conftest.py made for the whole run, which
    xdist's workers share (ol writes it content-addressed and atomically, so every pitfall's
    answers are computed once, not once a worker), else one of this process's own."""
    shared = os.environ.get(SHARED_CACHE_ENV)
    if shared:
        return Path(shared)
    own = Path(tempfile.mkdtemp(prefix="ol-test-cache-"))
    atexit.register(shutil.rmtree, own, True)
    return own


ANSWER_CACHE = _answer_cache()
# ol start makes its JupyterLab defaults defaults of the environment's JupyterLab: here, of a scratch one.
LAB_APP_DIR = Path(tempfile.mkdtemp(prefix="ol-test-jupyterlab-"))
atexit.register(shutil.rmtree, LAB_APP_DIR, True)


def ol(*args: str, workspace: Path | None = None, env: dict[str, str] | None = None, limit: float = 120) -> Ran:
    full_env = {k: v for k, v in os.environ.items() if k not in ("OL_IMPL", "OL_WORKSPACE", "OL_COURSE_ROOT")}
    full_env["PYTHONPATH"] = str(ROOT)
    full_env["OL_CACHE_DIR"] = str(ANSWER_CACHE)
    full_env["OL_NO_WARM"] = "1"  # no background warmer competing with the tests for the CPU
    full_env["OL_LAST_WORKSPACE_FILE"] = ""  # scratch workspaces are not the learner's last one
    full_env["JUPYTERLAB_DIR"] = str(LAB_APP_DIR)
    full_env["COLUMNS"] = "120"  # tables as wide as without a terminal, whatever the runner exports
    full_env.update(env or {})
    started = time.monotonic()
    done = subprocess.run([*ol_command(), *args], cwd=workspace or ROOT, env=full_env, capture_output=True,
                          text=True, timeout=limit)
    return Ran(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def put_reference(workspace: Path, *names: str) -> None:
    """Copy reference files into the workspace's ``tinyllm/``."""
    package = workspace / "tinyllm"
    package.mkdir(exist_ok=True)
    for name in names:
        shutil.copyfile(REFERENCE / name, package / name)


def edit(path: Path, old: str, new: str) -> None:
    """Replace the one occurrence of ``old`` in ``path``; fail loudly if the reference moved on."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not in {path} exactly once"
    path.write_text(text.replace(old, new))


def daemons_left(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``: what a hostile submission left running."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found
