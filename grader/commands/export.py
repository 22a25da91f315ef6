"""``ol export``: a module's autograder for Gradescope or PrairieLearn, and what runs inside it.

``ol export gradescope MODULE`` writes a zip (``setup.sh``, ``run_autograder`` and a copy of the
course under ``ol/``); ``ol export prairielearn MODULE`` writes a folder for a question's
``tests/`` (``run.sh`` and the same copy). Inside the platform's container both scripts call
``python -m grader.export run PLATFORM``, which grades the submission as ``ol grade`` grades one
(a sandboxed process of its own) and writes the platform's ``results.json``. Every path the
platform fixes can be moved with an environment variable, so the scripts run anywhere:

| platform | submission | results | variable (default) |
| --- | --- | --- | --- |
| Gradescope | ``$D/submission/`` | ``$D/results/results.json`` | ``OL_AUTOGRADER_DIR`` (``/autograder``) |
| PrairieLearn | ``$D/student/`` | ``$D/results/results.json`` | ``OL_GRADE_DIR`` (``/grade``) |
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from grader.catalog import Catalog, Module, check_fixtures, load_catalog
from grader.errors import UsageError
from grader.grade import DEFAULT_LIMIT, grade_in_worker, readable_json
from grader.sandbox import claim, why_not_contained

PLATFORMS = ("gradescope", "prairielearn")
CONFIG = "ol-export.json"
COPY = "ol"
# What the copy of the course holds: the grader, the catalog, suites, stubs, mutants, fixtures, reference.
COPIED = ("pyproject.toml", "README.md", "grader", "course", "fixtures", "solutions")
# PrairieLearn's default timeout is 30 s for the whole job: leave room for Python and the results.
PRAIRIELEARN_LIMIT = 20.0
OUTPUT_LIMIT = 8000
PL_RESULTS_LIMIT = 1_000_000

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
exec "$PY" -B -m grader.export run gradescope --config "$HERE/ol-export.json"
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
exec "$PY" -B -m grader.export run prairielearn --config "$HERE/ol-export.json"
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
    from grader import diagnose

    module = load_catalog(copy).get(module_id)
    previous = os.environ.get(diagnose.CACHE_ENV)
    os.environ[diagnose.CACHE_ENV] = str(cache)
    try:
        store = diagnose.AnswerStore(load_catalog(copy), module)
        for pitfall in [None, *module.pitfalls]:
            store.answers(pitfall, module.test_names, module.timeout)
    finally:
        if previous is None:
            os.environ.pop(diagnose.CACHE_ENV, None)
        else:
            os.environ[diagnose.CACHE_ENV] = previous


def _zip(root: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                info = zipfile.ZipInfo.from_file(path, str(path.relative_to(root)))
                info.external_attr = (stat.S_IFREG | (0o755 if os.access(path, os.X_OK) else 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, path.read_bytes())


# --- inside the platform's container ------------------------------------------------------------

def run_platform(platform: str, config_path: Path) -> int:
    """Grade the platform's submission folder and write its results.json; always exits 0 once written."""
    started = time.monotonic()
    config = json.loads(config_path.read_text())
    if platform == "gradescope":
        base = Path(os.environ.get("OL_AUTOGRADER_DIR", "/autograder"))
        submission, results_path = base / "submission", base / "results" / "results.json"
    else:
        base = Path(os.environ.get("OL_GRADE_DIR", "/grade"))
        submission, results_path = base / "student", base / "results" / "results.json"
    module = load_catalog().get(config["module"])
    box = claim(required=False)
    if not box.contained:
        # The platform's own log (hidden from students): learner code ran outside bubblewrap here.
        print(f"ol: learner code ran without bubblewrap ({why_not_contained()}), as another user where possible")
    try:
        results = grade_in_worker(module.id, submission, submission.name, box, config.get("timeout"),
                                  float(config["limit"]), bool(config.get("hints", True))).results
    except Exception as err:  # ol failed, not the submission: say so rather than leave no results
        results = {"status": "error", "message": f"the grader failed: {type(err).__name__}: {err}", "tests": [],
                   "score": 0.0, "max_score": sum(t.points for t in module.tests), "hint": "", "grader_error": True}
    seconds = time.monotonic() - started
    convert = to_gradescope if platform == "gradescope" else to_prairielearn
    # A learner's message may carry bytes that are not UTF-8: escaped, so the platform can read the file.
    results = convert(readable_json(results), module, seconds)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _test_rows(results: dict, module: Module) -> list[tuple[str, float, str, str]]:
    """(name, points, status, text) for every catalog test; a test that never ran failed with the run's reason."""
    ran = {t["name"]: t for t in results.get("tests", [])}
    reason = results.get("message") or "this test did not run"
    rows = []
    for test in module.tests:
        t = ran.get(test.name)
        if t is None:
            rows.append((test.name, test.points, "fail", f"not run: {reason}"))
            continue
        text = t.get("message") or ""
        diagnosis = (t.get("diagnosis") or {}).get("summary")
        if diagnosis:
            text += f"\n\nDiagnosis: {diagnosis}"
        rows.append((test.name, test.points, t["status"], text))
    return rows


def _summary(results: dict, module: Module) -> str:
    lines = [f"{module.id} ({module.title}): {results['score']:g} of {results['max_score']:g} points."]
    if results.get("status") == "error" and results.get("message"):
        lines.append(f"Your code could not be graded as a whole: {results['message']}")
    if results.get("hint"):
        lines.append(results["hint"])
    return _clip("\n".join(lines))


def to_gradescope(results: dict, module: Module, seconds: float) -> dict:
    """Gradescope's results.json (gradescope/autograder_samples, docs/specs.md)."""
    tests = [{"name": name, "number": str(i + 1), "score": points if status == "pass" else 0.0, "max_score": points,
              "status": "passed" if status == "pass" else "failed", "output": _clip(text), "output_format": "text",
              "visibility": "visible"}
             for i, (name, points, status, text) in enumerate(_test_rows(results, module))]
    return {"score": float(sum(t["score"] for t in tests)), "execution_time": round(seconds, 2),
            "output": _summary(results, module), "output_format": "text", "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests}


def to_prairielearn(results: dict, module: Module, seconds: float) -> dict:
    """PrairieLearn's results.json (externalGrading.md): score in [0, 1]; gradable false only when
    the grader itself failed (not the student's doing, no attempt used)."""
    tests = [{"name": name, "points": points if status == "pass" else 0.0, "max_points": points,
              "message": _clip(text.split("\n", 1)[0] if text else ""), "output": _clip(text)}
             for name, points, status, text in _test_rows(results, module)]
    total = sum(t["max_points"] for t in tests)
    data = {"gradable": not results.get("grader_error"),
            "score": round(sum(t["points"] for t in tests) / total, 6) if total else 0.0,
            "message": _summary(results, module), "output": f"graded in {seconds:.1f} s", "tests": tests}
    while len(json.dumps(data)) > PL_RESULTS_LIMIT:
        for t in data["tests"]:
            t["output"] = t["output"][: len(t["output"]) // 2]
    return data


def _clip(text: str, limit: int = OUTPUT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.export")
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="inside the platform's container: grade the submission, write results.json")
    run.add_argument("platform", choices=PLATFORMS)
    run.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    return run_platform(args.platform, args.config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
