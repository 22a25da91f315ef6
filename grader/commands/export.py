"""``ol export``: a module's autograder for Gradescope or PrairieLearn, and what runs inside it.

``ol export gradescope MODULE`` writes a zip (``setup.sh``, ``run_autograder`` and a copy of the
course under ``ol/``); ``ol export prairielearn MODULE`` writes a folder for a question's
``tests/`` (``run.sh`` and the same copy). Inside the platform's container both scripts start
``python -m grader.verdict.platform PLATFORM``, which grades the submission and writes the
platform's ``results.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

from grader.core.errors import UsageError
from grader.core.protocol import CACHE_ENV
from grader.layout.catalog import Catalog, check_fixtures, load_catalog
from grader.running.grading import DEFAULT_LIMIT
from grader.verdict.diagnose import AnswerStore
from grader.verdict.platform import PLATFORMS

CONFIG = "ol-export.json"
COPY = "ol"
# What the copy of the course holds: the grader, the catalog, suites, stubs, mutants, fixtures, reference.
COPIED = ("pyproject.toml", "README.md", "grader", "course", "fixtures", "solutions")
# PrairieLearn's default timeout is 30 s for the whole job: leave room for Python and the results.
PRAIRIELEARN_LIMIT = 20.0

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once to build the image: install the course's grader and its dependencies
# (numpy, scipy, pytest, ...) from PyPI, from the copy of the course beside this script.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${OL_PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3.11-venv python3-pip
  PY=python3.11
fi
"$PY" -m pip install --quiet "$HERE/ol"
echo "$PY" > "$HERE/ol-python"
# The learner's code runs in bubblewrap where the container allows it (ol's output says when not).
command -v bwrap >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) || true
# Without it, the learner's code runs as another user: it must not read the suite, the fixtures or the reference.
chmod -R go-rwx "$HERE"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: grade /autograder/submission, write
# /autograder/results/results.json (OL_AUTOGRADER_DIR moves /autograder, for a local run).
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${OL_PYTHON:-$(cat "$HERE/ol-python" 2>/dev/null || echo python3)}"
export OL_COURSE_ROOT="$HERE/ol" OL_CACHE_DIR="${OL_CACHE_DIR:-$HERE/ol-cache}" PYTHONPATH="$HERE/ol"
exec "$PY" -B -m grader.verdict.platform gradescope --config "$HERE/ol-export.json"
"""

RUN_SH = """#!/usr/bin/env bash
# PrairieLearn's entrypoint (externalGradingOptions.entrypoint = "/grade/tests/run.sh"): grade
# /grade/student, write /grade/results/results.json (OL_GRADE_DIR moves /grade, for a local run).
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${OL_PYTHON:-python3}"
# Where bubblewrap cannot run, the learner's code runs as another user: it must not read the suite,
# the fixtures or the reference.
chmod -R go-rwx "$HERE" 2>/dev/null || true
export OL_COURSE_ROOT="$HERE/ol" OL_CACHE_DIR="${OL_CACHE_DIR:-$HERE/ol-cache}" PYTHONPATH="$HERE/ol"
exec "$PY" -B -m grader.verdict.platform prairielearn --config "$HERE/ol-export.json"
"""


def export(platform: str, module_id: str, out: str | None = None,
           timeout: float | None = None, limit: float | None = None, hints: bool = True) -> int:
    """Write the autograder for ``platform``; 0 on success."""
    if platform not in PLATFORMS:
        raise UsageError(f"unknown platform {platform!r}; one of {', '.join(PLATFORMS)}")
    catalog = load_catalog()
    module = catalog.get(module_id)
    check_fixtures(module)
    for value, flag in ((timeout, "--timeout"), (limit, "--limit")):
        if value is not None and not value > 0:
            raise UsageError(f"{flag} must be a positive number of seconds, got {value:g}")
    config = {"module": module.id, "timeout": timeout, "hints": hints,
              "limit": limit or (PRAIRIELEARN_LIMIT if platform == "prairielearn" else DEFAULT_LIMIT)}
    with tempfile.TemporaryDirectory(prefix="ol-export-") as tmp:
        root = Path(tmp) / "autograder"
        _lay_out(catalog, root, platform, config, hints)
        if platform == "gradescope":
            target = Path(out or f"{module.id}-gradescope.zip")
            _zip(root, target)
        else:
            target = Path(out or f"{module.id}-prairielearn")
            if target.exists() and any(target.iterdir()):
                raise UsageError(f"{target} exists and is not empty; name another folder with --out")
            shutil.copytree(root, target, dirs_exist_ok=True)
    print(f"Wrote {target}: the {platform} autograder of {module.id} ({_plural(len(module.tests), 'test')}, "
          f"{sum(t.points for t in module.tests):g} points).")
    return 0


def _lay_out(catalog: Catalog, root: Path, platform: str, config: dict, hints: bool) -> None:
    root.mkdir(parents=True)
    copy = root / COPY
    for name in COPIED:
        source = catalog.root / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ol"))
        elif source.is_file():
            copy.mkdir(exist_ok=True)
            shutil.copyfile(source, copy / name)
    (root / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    scripts = {"setup.sh": SETUP_SH, "run_autograder": RUN_AUTOGRADER} if platform == "gradescope" else {"run.sh": RUN_SH}
    for name, text in scripts.items():
        (root / name).write_text(text)
        (root / name).chmod(0o755)
    if hints:
        _warm_answers(catalog, copy, root / "ol-cache", config["module"])


def _warm_answers(catalog: Catalog, copy: Path, cache: Path, module_id: str) -> None:
    """The reference's and every pitfall's answers to every test, so hints cost the platform nothing."""
    module = load_catalog(copy).get(module_id)
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(cache)
    try:
        store = AnswerStore(load_catalog(copy), module)
        for pitfall in [None, *module.pitfalls]:
            store.answers(pitfall, module.test_names, module.timeout)
    finally:
        if previous is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = previous


def _zip(root: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                info = zipfile.ZipInfo.from_file(path, str(path.relative_to(root)))
                info.external_attr = (stat.S_IFREG | (0o755 if os.access(path, os.X_OK) else 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, path.read_bytes())


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
