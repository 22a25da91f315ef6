"""Every learner bug in ``tests/learner_bugs/`` fails the graded L10.8 suite.

Each ``bNN_*.patch`` there is a mistake learners make when they write ``spec.py`` from the card
(the folder's README says what the learner did, which rule of the card it breaks and the smallest
case that shows it); none is one of the named pitfalls. The patch is applied with
``patch -p1 --fuzz=0`` to a fresh copy of ``solutions/`` and the graded suite runs on the copy
through ol's own runner. At least one test that the unpatched reference passes must fail.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from grader.catalog import Module, load_catalog
from grader.run import run_suite

ROOT = Path(__file__).resolve().parents[1]
BUGS_DIR = ROOT / "tests" / "learner_bugs"
BUGS = sorted(BUGS_DIR.glob("b*.patch"))


@pytest.fixture(scope="module")
def module() -> Module:
    return load_catalog(ROOT).get("L10.8")


def reference_copy(tmp_path: Path, patch: Path | None = None) -> Path:
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    if patch is not None:
        done = subprocess.run(["patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(patch)],
                              cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, f"{patch.name} does not apply cleanly:\n{done.stdout}{done.stderr}"
    return tmp_path / "solutions"


@pytest.fixture(scope="module")
def reference_passes(module, tmp_path_factory) -> set[str]:
    """The graded tests the unpatched reference passes: a bug counts as caught only by one of these."""
    run = run_suite(module, reference_copy(tmp_path_factory.mktemp("reference")))
    assert run.passed, f"the reference passes no graded L10.8 test: {run.problem or run.output[-2000:]}"
    return set(run.passed)


def test_the_battery_holds_fourteen_bugs_each_in_the_readme():
    assert len(BUGS) >= 14, f"only {len(BUGS)} learner bugs in {BUGS_DIR}"
    readme = (BUGS_DIR / "README.md").read_text()
    missing = [p.name for p in BUGS if f"`{p.name}`" not in readme]
    assert not missing, f"README.md has no row for {missing}"


@pytest.mark.parametrize("patch", BUGS, ids=[p.stem for p in BUGS])
def test_learner_bug_fails_the_graded_suite(module, patch, reference_passes, tmp_path):
    run = run_suite(module, reference_copy(tmp_path, patch))
    caught = sorted(set(run.failed) & reference_passes)
    assert caught, (f"{patch.stem} passes every graded test the reference passes "
                    f"({len(reference_passes)}): the suite misses this bug")
