"""``ol export``: the Gradescope and PrairieLearn autograders, run here in folders laid out like the
platforms' (their paths moved with OL_AUTOGRADER_DIR / OL_GRADE_DIR), on passing, failing, hanging
and hostile submissions; every results.json checked field by field against the platform's spec."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ol_helpers import ANSWER_CACHE, REFERENCE, ROOT, ol

pytestmark = pytest.mark.usefixtures("sandboxed")  # every test here grades: bubblewrap

STUB = (ROOT / "course" / "stubs" / "L10.8" / "spec.py").read_text()
SPEC = (REFERENCE / "spec.py").read_text()
SUBMISSIONS = {
    "passing": SPEC,
    # Pitfall s01: copying after the first earlier occurrence, not the latest.
    "failing": SPEC.replace("begin = int(hits[-1]) + n", "begin = int(hits[0]) + n"),
    # SpecConfig.parse never returns: one test times out, the others pass.
    "hanging": SPEC.replace("        names = [d.value for d in Draft]\n", "        while True:\n            pass\n"),
    "hostile": ("import sys, os\nr = sys.modules.get('grader.child.recorder')\nif r is not None:\n"
                "    r._send({'event': 'collected', 'tests': []})\n    r._send({'event': 'end', 'exitstatus': 0})\n"
                "print('All tests passed')\nos._exit(0)\n" + STUB),
}
OPTIONS = ("--no-hints", "--timeout", "8", "--limit", "40")
GRADESCOPE_TOP = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
                  "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
GRADESCOPE_TEST = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
                   "visibility", "extra_data"}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}


def put_submission(folder: Path, text: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "spec.py").write_text(text)     # the file alone, as an upload form keeps it


def run_script(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("OL_")}
    full.update(env, OL_PYTHON=sys.executable, OL_CACHE_DIR=str(ANSWER_CACHE))
    return subprocess.run(["bash", str(script)], env=full, capture_output=True, text=True, timeout=120)


def check_gradescope(results: dict, max_score: float) -> None:
    """gradescope/autograder_samples, docs/specs.md."""
    assert set(results) <= GRADESCOPE_TOP, set(results) - GRADESCOPE_TOP
    assert isinstance(results["score"], (int, float)) and isinstance(results["execution_time"], (int, float))
    assert isinstance(results["output"], str) and results["visibility"] in VISIBILITY
    assert results["stdout_visibility"] in VISIBILITY and results["output_format"] in FORMATS
    assert len(results["tests"]) == 20
    for i, test in enumerate(results["tests"]):
        assert set(test) <= GRADESCOPE_TEST, set(test) - GRADESCOPE_TEST
        assert isinstance(test["name"], str) and test["name"] and test["number"] == str(i + 1)
        assert test["status"] in ("passed", "failed") and test["visibility"] in VISIBILITY
        assert test["output_format"] in FORMATS and isinstance(test["output"], str)
        assert 0 <= test["score"] <= test["max_score"]
        assert (test["score"] == test["max_score"]) == (test["status"] == "passed")
        assert test["status"] == "passed" or test["output"], "a failed test says why"
    assert results["score"] == sum(t["score"] for t in results["tests"])
    assert sum(t["max_score"] for t in results["tests"]) == max_score


def check_prairielearn(results: dict) -> None:
    """PrairieLearn's externalGrading.md: score in [0, 1], gradable, tests with points / max_points."""
    assert set(results) <= {"gradable", "score", "message", "output", "tests", "format_errors"}
    assert results["gradable"] is True
    assert isinstance(results["score"], float) and 0.0 <= results["score"] <= 1.0
    assert isinstance(results["message"], str) and isinstance(results["output"], str)
    for test in results["tests"]:
        assert set(test) == {"name", "points", "max_points", "message", "output"}
        assert isinstance(test["name"], str) and 0 <= test["points"] <= test["max_points"]
        assert isinstance(test["message"], str) and isinstance(test["output"], str)
    total = sum(t["max_points"] for t in results["tests"])
    assert results["score"] == pytest.approx(sum(t["points"] for t in results["tests"]) / total)
    assert len(json.dumps(results)) <= 1_000_000


def test_gradescope_autograder(tmp_path):
    package = tmp_path / "L10.8-gradescope.zip"
    made = ol("export", "gradescope", "L10.8", *OPTIONS, "--out", str(package))
    assert made.code == 0, made.text
    base = tmp_path / "autograder"
    with zipfile.ZipFile(package) as z:
        names = set(z.namelist())
        assert {"setup.sh", "run_autograder", "ol/pyproject.toml", "ol/grader/cli.py",
                "ol/course/tests/test_l10_8.py"} <= names
        z.extractall(base / "source")
        for info in z.infolist():     # zipfile drops the mode bits; Gradescope's unzip keeps them
            (base / "source" / info.filename).chmod(info.external_attr >> 16 & 0o777)
    assert os.access(base / "source" / "run_autograder", os.X_OK)
    setup = (base / "source" / "setup.sh").read_text()
    assert "pip install" in setup and subprocess.run(["bash", "-n", str(base / "source" / "setup.sh")]).returncode == 0

    scores = {}
    for kind in ("passing", "hanging", "hostile"):
        put_submission(base / "submission", SUBMISSIONS[kind])
        done = run_script(base / "source" / "run_autograder", {"OL_AUTOGRADER_DIR": str(base)})
        assert done.returncode == 0, done.stderr
        results = json.loads((base / "results" / "results.json").read_text())
        check_gradescope(results, 20)
        scores[kind] = results["score"]
        if kind == "hanging":
            timed_out = [t["name"] for t in results["tests"] if "timed out" in t["output"]]
            assert timed_out == ["config_parses_runtime_values"] and results["execution_time"] < 60
    assert scores == {"passing": 20, "hanging": 19, "hostile": 0}


def test_prairielearn_grader(tmp_path):
    folder = tmp_path / "tests"
    made = ol("export", "prairielearn", "L10.8", *OPTIONS, "--out", str(folder))
    assert made.code == 0, made.text
    assert os.access(folder / "run.sh", os.X_OK) and (folder / "ol" / "grader" / "verdict" / "platform.py").is_file()
    base = tmp_path / "grade"
    scores = {}
    for kind in ("failing", "hostile", "passing"):
        put_submission(base / "student", SUBMISSIONS[kind])
        done = run_script(folder / "run.sh", {"OL_GRADE_DIR": str(base)})
        assert done.returncode == 0, done.stderr
        results = json.loads((base / "results" / "results.json").read_text())
        check_prairielearn(results)
        scores[kind] = results["score"]
        if kind == "failing":
            failed = {t["name"]: t["message"] for t in results["tests"] if t["points"] < t["max_points"]}
            # s01's named test, and the recorded generations it also changes (as ol check says), fail on
            # their public cases. The export draws fresh cases for each submission, and s01 answers some
            # of the lookup's drawn short contexts wrongly too: a test may fail on those alone, its
            # message's first line naming the drawn case.
            public = {"prompt_lookup_matches_python_l8_6", "sampled_generation_matches_python_l8_6"}
            assert public <= set(failed), failed
            elsewhere = {name: message for name, message in failed.items()
                         if name not in public and "(drawn when graded)" not in message.split("\n", 1)[0]}
            assert not elsewhere, elsewhere
    assert scores["passing"] == 1.0 and scores["hostile"] == 0.0 and 0 < scores["failing"] < 1


def test_export_refuses_an_unknown_platform(tmp_path):
    ran = ol("export", "moodle", "L10.8", "--out", str(tmp_path / "x"))
    assert ran.code == 2 and "invalid choice" in ran.err
