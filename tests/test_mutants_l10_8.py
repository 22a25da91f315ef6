"""Every named pitfall of L10.8 is caught by the graded test the card names for it.

Each mutant (course/mutants/L10.8/sNN.patch) is applied to a fresh copy of solutions/ and the
graded suite runs against the copy through OL_IMPL in a separate process. The mutant must make
its named test fail; the unpatched copy must pass the whole suite.
"""

import os
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CATALOG = tomllib.loads((ROOT / "course/modules/L10.8.toml").read_text())
SUITE = ROOT / CATALOG["tests"]
PITFALLS = {p["id"]: p for p in CATALOG["pitfall"]}


def patched_copy(tmp_path: Path, patch: Path | None) -> Path:
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if patch is not None:
        done = subprocess.run(["patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(patch)],
                              cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, f"{patch.name} does not apply cleanly:\n{done.stdout}{done.stderr}"
    return tmp_path / "solutions"


def run_suite(impl: Path, report: Path, *selection: str) -> dict[str, str]:
    """Run the graded suite on ``impl``; map each test name to passed / failed / skipped."""
    nodes = [f"{SUITE}::test_{name}" for name in selection] or [str(SUITE)]
    env = dict(os.environ, OL_IMPL=str(impl), PYTHONDONTWRITEBYTECODE="1")
    # nbval's import (nbformat, jsonschema) costs seconds per run and the graded suite has no notebooks.
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:nbval",
                    f"--junitxml={report}", *nodes],
                   cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("name").removeprefix("test_")
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[name] = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
    return outcomes


def test_the_reference_passes_the_graded_suite(tmp_path):
    outcomes = run_suite(patched_copy(tmp_path, None), tmp_path / "report.xml")
    assert set(outcomes) == {t["name"] for t in CATALOG["test"]}
    assert all(o == "passed" for o in outcomes.values()), outcomes


def test_every_card_pitfall_has_a_mutant():
    assert sorted(PITFALLS) == [f"s{i:02d}" for i in range(1, 14)]


@pytest.mark.parametrize("pitfall", sorted(PITFALLS))
def test_mutant_is_caught_by_its_named_test(pitfall, tmp_path):
    row = PITFALLS[pitfall]
    impl = patched_copy(tmp_path, ROOT / row["mutant"])
    outcomes = run_suite(impl, tmp_path / "report.xml", row["caught_by"])
    assert outcomes.get(row["caught_by"]) == "failed", \
        f"mutant {pitfall} ({row['title']}) survives test_{row['caught_by']}: {outcomes}"
