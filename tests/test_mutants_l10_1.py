"""L10.1's named pitfalls are caught by their named tests, and the stubs pass nothing.

Each mutant in ``course/modules/L10.1.toml`` is applied with ``patch -p1`` to a temporary copy of
``solutions/``; the graded suite then runs in a subprocess with ``OL_IMPL`` pointing at the copy.
A pitfall whose named test still passes is a test not worth having.
"""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CATALOG = tomllib.loads((ROOT / "course" / "modules" / "L10.1.toml").read_text())
SUITE = ROOT / CATALOG["tests"]
PITFALLS = {p["id"]: p for p in CATALOG["pitfall"]}


def run_suite(impl: Path, *tests: str) -> subprocess.CompletedProcess:
    """Run the graded suite (or only the named tests) against the ``tinyllm`` package in ``impl``."""
    targets = [f"{SUITE}::test_{name}" for name in tests] or [str(SUITE)]
    # Autoloaded plugins (nbval and its Jupyter imports) cost seconds per run and the suite uses none.
    env = {**os.environ, "OL_IMPL": str(impl), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *targets],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def copy_reference(dest: Path) -> Path:
    shutil.copytree(ROOT / "solutions", dest / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "solutions"


def failed_tests(result: subprocess.CompletedProcess) -> set[str]:
    return set(re.findall(r"^FAILED \S+::test_(\w+)", result.stdout, re.MULTILINE))


def test_catalog_names_real_tests():
    defined = set(re.findall(r"^def test_(\w+)\(", SUITE.read_text(), re.MULTILINE))
    rows = {t["name"] for t in CATALOG["test"]}
    assert rows == defined, f"catalog rows without a test: {rows - defined}; tests without a row: {defined - rows}"
    assert len(PITFALLS) >= 6
    for pitfall in PITFALLS.values():
        assert pitfall["caught_by"] in rows, pitfall["id"]
        assert (ROOT / pitfall["mutant"]).is_file(), pitfall["mutant"]


def test_reference_passes_the_graded_suite():
    result = run_suite(ROOT / "solutions")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.parametrize("pitfall_id", sorted(PITFALLS))
def test_mutant_is_killed_by_its_named_test(pitfall_id, tmp_path):
    pitfall = PITFALLS[pitfall_id]
    impl = copy_reference(tmp_path)
    applied = subprocess.run(["patch", "-p1", "--batch", "-i", str(ROOT / pitfall["mutant"])],
                             cwd=tmp_path, capture_output=True, text=True)
    assert applied.returncode == 0, f"{pitfall['mutant']} does not apply: {applied.stdout}{applied.stderr}"
    result = run_suite(impl, pitfall["caught_by"])
    assert result.returncode == 1, f"expected a test failure, got exit {result.returncode}:\n{result.stdout[-3000:]}"
    assert pitfall["caught_by"] in failed_tests(result), (
        f"{pitfall_id} ({pitfall['title']}) survives test_{pitfall['caught_by']}")


def test_stubs_import_and_pass_nothing(tmp_path):
    impl = copy_reference(tmp_path)
    for name in CATALOG["learner_files"]:
        shutil.copy(ROOT / CATALOG["stubs"] / name, impl / "tinyllm" / name)
    loaded = subprocess.run([sys.executable, "-c", "import tinyllm.spec"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(impl)}, capture_output=True, text=True)
    assert loaded.returncode == 0, f"the reference spec.py cannot import the stubs:\n{loaded.stderr}"
    result = run_suite(impl)
    failed = failed_tests(result)
    expected = {t["name"] for t in CATALOG["test"]}
    assert failed == expected, f"tests that pass on the stubs: {sorted(expected - failed)}"
