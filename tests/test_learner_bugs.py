"""Every learner bug in ``tests/learner_bugs/`` fails its graded suite, and no hint blames a pitfall.

Each ``bNN_*.patch`` there is a mistake learners make when they write ``sampling.py`` (L10.1),
``spec.py`` (L10.8), ``trees.py`` (L10.9) or ``serve.py`` (L10.10) from the card (the folder's
README says what the learner did and which rule of the card it breaks); none is one of the named
pitfalls. The patch is applied to the reference file in a fresh workspace and ``ol check`` runs as
a learner would, on the whole suite and then with ``-k`` each failed test that alone could name a
pitfall: the check must fail, and since no named pitfall gives the same answers, no hint may name
one; on the whole suite ol must say it is not a named pitfall.

A test run alone is diagnosed from its own cases, as on the whole suite, so a pitfall hinted with
``-k`` must be in that test's ``alone`` list of the whole run's JSON (``grader/README.md``): ``-k``
runs where that list is empty could not hint and are not rerun. Statistical tests are the
exception: on the whole suite they compare only pitfalls no other failing test ruled out, so they
are always rerun alone. ``tests/test_ol_diagnosis.py`` checks ``-k`` against every named pitfall.
"""

import json
import re
from pathlib import Path

import pytest

from ol_helpers import ROOT
from test_ol_diagnosis import MODULES, check_as_learner, hints, learner_workspace

BUGS_DIR = ROOT / "tests" / "learner_bugs"
STATISTICAL = {(mid, t["name"]) for mid, m in MODULES.items() for t in m["test"] if t["kind"] == "statistical"}
BUGS = sorted(BUGS_DIR.glob("b*.patch"))
MODULE_OF_FILE = {"pcg32.py": "L10.1", "sampling.py": "L10.1", "kvpool.py": "L10.1",
                  "spec.py": "L10.8", "trees.py": "L10.9", "serve.py": "L10.10"}
LEAST_PER_MODULE = {"L10.8": 15, "L10.9": 15, "L10.10": 10}


def module_of(patch: Path) -> str:
    files = set(re.findall(r"^\+\+\+ b/solutions/tinyllm/(\S+)", patch.read_text(), re.M))
    assert len(files) == 1 and files <= MODULE_OF_FILE.keys(), f"{patch.name} changes {files}"
    return MODULE_OF_FILE[files.pop()]


def could_hint_alone(module: str, result: dict) -> bool:
    """Whether ``ol check -k`` of this failed test could name a pitfall, from the whole run's JSON."""
    d = result["diagnosis"]
    if d is None or (module, result["name"]) in STATISTICAL:
        return True
    return bool(d["differing_cases"] and d["alone"])


def test_the_battery_holds_sixty_bugs_each_in_the_readme():
    assert len(BUGS) >= 60, f"only {len(BUGS)} learner bugs in {BUGS_DIR}"
    per_module = {m: sum(module_of(p) == m for p in BUGS) for m in MODULE_OF_FILE.values()}
    assert all(per_module[m] >= least for m, least in LEAST_PER_MODULE.items()), per_module
    readme = (BUGS_DIR / "README.md").read_text()
    missing = [p.name for p in BUGS if f"`{p.name}`" not in readme]
    assert not missing, f"README.md has no row for {missing}"


@pytest.mark.parametrize("patch", BUGS, ids=[p.stem for p in BUGS])
def test_learner_bug_fails_and_no_hint_blames_a_pitfall(patch: Path, tmp_path):
    module = module_of(patch)
    ws = learner_workspace(tmp_path, patch, module)
    ran = check_as_learner(module, ws, "--json", str(tmp_path / "results.json"))
    assert ran.code == 1, f"{patch.stem} passes the graded suite: the suite misses this bug\n{ran.out[-2000:]}"
    found = hints(ran.out)
    blamed = [line for line in found if line.startswith("Hint:")]
    assert not blamed, f"{patch.stem} is not a named pitfall, yet on the whole suite: {blamed}"
    tests = json.loads((tmp_path / "results.json").read_text())["tests"]
    if any((t["diagnosis"] or {}).get("differing_cases") for t in tests):
        assert any(line.startswith("Not a named pitfall") for line in found), ran.out[-3000:]
    failed = re.findall(r"^  FAIL     (\w+)", ran.out, re.M)
    assert failed, ran.out[-3000:]
    for test in [t["name"] for t in tests if t["name"] in failed and could_hint_alone(module, t)]:
        alone = check_as_learner(module, ws, "-k", test)
        blamed = [line for line in hints(alone.out) if line.startswith("Hint:")]
        assert not blamed, f"{patch.stem} is not a named pitfall, yet with -k {test}: {blamed}"
