"""A fixture that does not match its catalog entry stops ``ol`` with exit 3, naming the file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from ol_helpers import ROOT, ol, put_reference


def copy_course(dest):
    """The parts of the repository ol reads, copied so a test can damage them."""
    for part in ("course", "fixtures", "solutions"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_an_edited_fixture_stops_check_with_exit_3(tmp_path):
    root = copy_course(tmp_path / "course_root")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    put_reference(workspace, "spec.py")
    env = {"OL_COURSE_ROOT": str(root)}
    assert ol("check", "L10.8", "--ref-deps", "-k", "prompt_lookup", workspace=workspace, env=env).code == 0
    golden = root / "fixtures" / "L10.8" / "spec_golden.json"
    # One recorded answer changed by one: still valid JSON, no longer the catalogued bytes.
    edited, count = re.subn(r'"next_u32": (\d+)', lambda m: f'"next_u32": {int(m.group(1)) + 1}', golden.read_text(), count=1)
    assert count == 1
    golden.write_text(edited)
    ran = ol("check", "L10.8", "--ref-deps", workspace=workspace, env=env)
    assert ran.code == 3, ran.text
    assert "fixtures/L10.8/spec_golden.json" in ran.err and "sha256" in ran.err
    assert ol("mutants", "L10.8", workspace=workspace, env=env).code == 3
    golden.unlink()
    missing = ol("check", "L10.8", "--ref-deps", workspace=workspace, env=env)
    assert missing.code == 3 and "is missing" in missing.err


def test_the_graded_suites_and_the_projects_tests_collect_together():
    """``pytest course/tests tests`` in one session: the suites read their fixtures through
    ``course/tests/graded.py``, not through a ``conftest`` that another folder's conftest shadows."""
    # Autoloaded plugins (nbval's Jupyter imports, hypothesis) cost seconds and have no conftest to shadow.
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    ran = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
                          "course/tests", "tests"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert re.search(r"^\d+ tests collected", ran.stdout, re.M), ran.stdout[-500:]
