"""Every named pitfall is caught by its named test, and a module's stubs pass none of its tests.

For each module in ``course/modules/*.toml``: each ``[[pitfall]]``'s mutant is applied with
``patch -p1`` to a fresh copy of ``solutions/`` and the graded suite runs against the copy through
``OL_IMPL`` in its own process. The mutant must make its named test fail; the unpatched copy must
pass the whole suite. (``ol mutants`` prints the full kill matrix; this is the gate.)
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
MODULES = {m["id"]: m for m in (tomllib.loads(p.read_text()) for p in sorted((ROOT / "course/modules").glob("*.toml")))}
PITFALLS = [(mid, p) for mid, m in MODULES.items() for p in m.get("pitfall", [])]


def reference_copy(tmp_path: Path, patch: Path | None = None) -> Path:
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    if patch is not None:
        done = subprocess.run(["patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(patch)],
                              cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, f"{patch.name} does not apply cleanly:\n{done.stdout}{done.stderr}"
    return tmp_path / "solutions"


def run_suite(module: dict, impl: Path, report: Path, *selection: str) -> dict[str, str]:
    """Run ``module``'s graded suite on ``impl``; map each test name to passed / failed / skipped."""
    suite = ROOT / module["tests"]
    nodes = [f"{suite}::test_{name}" for name in selection] or [str(suite)]
    # Autoloaded plugins (nbval's Jupyter imports) cost seconds per run; the graded suites use none.
    env = dict(os.environ, OL_IMPL=str(impl), PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *nodes],
                   cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert report.is_file(), f"the graded suite of {module['id']} did not run"
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        outcomes[case.get("name").removeprefix("test_")] = "failed" if failed else "skipped" if skipped else "passed"
    return outcomes


def test_the_catalog_names_every_card_pitfall():
    assert sorted(p["id"] for p in MODULES["L10.8"]["pitfall"]) == [f"s{i:02d}" for i in range(1, 18)]
    assert sorted(p["id"] for p in MODULES["L10.9"]["pitfall"]) == [f"t{i:02d}" for i in range(1, 17)]
    assert len(MODULES["L10.1"]["pitfall"]) >= 6


@pytest.mark.parametrize("module_id", sorted(MODULES))
def test_the_reference_passes_the_graded_suite(module_id, tmp_path):
    module = MODULES[module_id]
    outcomes = run_suite(module, reference_copy(tmp_path), tmp_path / "report.xml")
    assert set(outcomes) == {t["name"] for t in module["test"]}, "the catalog's tests and the suite's differ"
    assert all(o == "passed" for o in outcomes.values()), outcomes


@pytest.mark.parametrize("module_id, pitfall", PITFALLS, ids=[p["id"] for _, p in PITFALLS])
def test_mutant_is_caught_by_its_named_test(module_id, pitfall, tmp_path):
    impl = reference_copy(tmp_path, ROOT / pitfall["mutant"])
    outcomes = run_suite(MODULES[module_id], impl, tmp_path / "report.xml", pitfall["caught_by"])
    assert outcomes.get(pitfall["caught_by"]) == "failed", \
        f"mutant {pitfall['id']} ({pitfall['title']}) survives test_{pitfall['caught_by']}: {outcomes}"


@pytest.mark.parametrize("module_id", sorted(MODULES))
def test_the_stubs_import_and_pass_no_test(module_id, tmp_path):
    module = MODULES[module_id]
    impl = reference_copy(tmp_path)
    for name in module["learner_files"]:
        shutil.copy(ROOT / module["stubs"] / name, impl / "tinyllm" / name)
    loaded = subprocess.run([sys.executable, "-c", "import tinyllm.spec, tinyllm.runner"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(impl)}, capture_output=True, text=True)
    assert loaded.returncode == 0, f"the package does not import with {module_id}'s stubs:\n{loaded.stderr}"
    outcomes = run_suite(module, impl, tmp_path / "report.xml")
    passing = sorted(name for name, o in outcomes.items() if o != "failed")
    assert not passing, f"tests that pass on {module_id}'s stubs: {passing}"
