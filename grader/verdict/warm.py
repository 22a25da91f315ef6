"""Entry point of the warmer ``ol start`` leaves behind: fill the answer cache of a module's hints ahead
of the first failing check.

    python -m grader.verdict.warm MODULE

``ol start`` runs this detached, at the lowest CPU priority: while the learner reads the card and
writes code, the reference's answers to the module's cases are computed, then every named
pitfall's on the tests its patch can change, all in one process (a few seconds of CPU per module),
so the first ``ol check`` that fails gets its hints in seconds.
One warmer per module at a time (a lock file in the cache); ``OL_NO_WARM=1`` turns it off.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

from grader.core.paths import cache_dir
from grader.core.protocol import NO_WARM_ENV
from grader.layout.catalog import Module, load_catalog
from grader.verdict.diagnose import AnswerStore, has_cases, worker_env


def warm_in_background(module: Module) -> bool:
    """Start a detached warmer for ``module``; False when turned off or there is nothing to warm."""
    if os.environ.get(NO_WARM_ENV) or not module.pitfalls or not has_cases(module):
        return False
    subprocess.Popen([sys.executable, "-B", "-m", "grader.verdict.warm", module.id], env=worker_env(),
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, preexec_fn=lambda: os.nice(19))
    return True


def warm(module_id: str) -> int:
    catalog = load_catalog()
    module = catalog.get(module_id)
    folder = cache_dir() / module.id
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "warming.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another warmer is at it
        AnswerStore(catalog, module).fill(list(module.pitfalls), module.test_names, module.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(warm(sys.argv[1]))
