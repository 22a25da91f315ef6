"""One submission graded by a process of its own (:mod:`grader.verdict.submission`), bounded from here.

``ol grade`` and the platform exports (:mod:`grader.verdict.platform`) both grade this way.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.core.paths import REPO
from grader.core.protocol import DRAWN_SEED_ENV, SUBMISSION_ENV, TEST_TIMEOUTS_ENV, check_wall
from grader.core.sandbox import Cgroup, Sandbox, cgroup_name
from grader.core.text import cell, number
from grader.running.run import STARTUP_ALLOWANCE

# A submission's whole check, in CPU seconds of the learner's code, unless the instructor says otherwise.
DEFAULT_LIMIT = 60.0
# Beyond the check: assembling, the diagnosis of failed tests, writing the results.
WORKER_MARGIN = 120.0


def draw_seed() -> int:
    """A fresh seed for the cases a grading draws: from the system's entropy, so no submission can
    know it ahead; the grading prints it, and the same seed grades the same again."""
    return secrets.randbits(63)


@dataclass
class Graded:
    submission: str
    results: dict
    seconds: float

    @property
    def row(self) -> list[str]:
        r = self.results
        failed = [t["name"] for t in r.get("tests", []) if t.get("status") != "pass"]
        hint = r.get("hint") or (r.get("message") or "" if r.get("status") == "error" else "")
        return [cell(text) for text in (self.submission, number(r.get("score", 0.0)), number(r.get("max_score", 0.0)),
                                        r.get("status", "error"), ";".join(failed), " ".join(hint.split()))]


def grade_in_worker(module_id: str, path: Path, name: str, box: Sandbox, timeout: float | None,
                    limit: float, hints: bool = True, tests: dict[str, float] | None = None,
                    seed: int | None = None) -> Graded:
    """One submission graded by ``python -m grader.verdict.submission`` in the sandbox ``box``, bounded from here too.
    ``seed``: the seed of the cases the grading draws (:func:`draw_seed`), which the judge reads and the
    learner's process never sees."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ol-grade-out-") as tmp:
        out = Path(tmp) / "results.json"
        # The submission's path travels in the environment, which only this user can read: no
        # command line names it.
        command = [sys.executable, "-B", "-m", "grader.verdict.submission", module_id, str(out),
                   "--sandbox", box.to_env(), "--limit", str(limit)]
        if not hints:
            command.append("--no-hints")
        if timeout:
            command += ["--timeout", str(timeout)]
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
               SUBMISSION_ENV: str(path.resolve())}
        if tests:
            env[TEST_TIMEOUTS_ENV] = json.dumps(tests)
        env.pop(DRAWN_SEED_ENV, None)
        if seed is not None:
            env[DRAWN_SEED_ENV] = str(seed)
        child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, start_new_session=True)
        _WORKERS.add(child)
        bound = check_wall(limit) + WORKER_MARGIN
        try:
            _, err = child.communicate(timeout=bound + STARTUP_ALLOWANCE)
        except subprocess.TimeoutExpired:
            _stop(child)
            return Graded(name, _error(module_id, f"grading took longer than {bound:g} s and was stopped"),
                          time.monotonic() - started)
        finally:
            _WORKERS.discard(child)
            # Whatever the worker left (a case worker of a diagnosis cut short, a learner's process):
            # its cgroup is ended with everything in it.
            Cgroup(cgroup_name(child.pid)).close()
        try:
            results = json.loads(out.read_text())
        except (OSError, ValueError):
            tail = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            results = {**_error(module_id, f"ol could not grade this submission: {tail[0]}"), "grader_error": True}
    return Graded(name, results, time.monotonic() - started)


_WORKERS: set[subprocess.Popen] = set()


def stop_workers() -> None:
    """Ask every grading process to stop (each then kills what it started), then kill them."""
    for child in list(_WORKERS):
        _stop(child)


def _stop(child: subprocess.Popen) -> None:
    """Ask a grading process to stop (it then kills what it started), then kill its group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate()


def _error(module_id: str, message: str) -> dict:
    return {"version": 3, "status": "error", "message": message, "module": module_id, "tests": [],
            "score": 0.0, "max_score": 0.0, "hint": ""}
