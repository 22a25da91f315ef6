"""Every learner bug in ``tests/learner_bugs/`` fails the graded L10.8 suite, and no hint blames a pitfall.

Each ``bNN_*.patch`` there is a mistake learners make when they write ``spec.py`` from the card
(the folder's README says what the learner did, which rule of the card it breaks and the smallest
case that shows it); none is one of the named pitfalls. The patch is applied to the reference
``spec.py`` in a fresh workspace and ``ol check`` runs as a learner would: it must fail, and since
no named pitfall gives the same answers, no hint may name one; ol must say it is not a named
pitfall and show the first differing case instead.
"""

from pathlib import Path

import pytest

from ol_helpers import ROOT, ol
from test_ol_diagnosis import hints, learner_workspace

BUGS_DIR = ROOT / "tests" / "learner_bugs"
BUGS = sorted(BUGS_DIR.glob("b*.patch"))


def test_the_battery_holds_fourteen_bugs_each_in_the_readme():
    assert len(BUGS) >= 14, f"only {len(BUGS)} learner bugs in {BUGS_DIR}"
    readme = (BUGS_DIR / "README.md").read_text()
    missing = [p.name for p in BUGS if f"`{p.name}`" not in readme]
    assert not missing, f"README.md has no row for {missing}"


@pytest.mark.parametrize("patch", BUGS, ids=[p.stem for p in BUGS])
def test_learner_bug_fails_and_no_hint_blames_a_pitfall(patch: Path, tmp_path):
    ws = learner_workspace(tmp_path, patch)
    ran = ol("check", "L10.8", "--ref-deps", workspace=ws)
    assert ran.code == 1, f"{patch.stem} passes the graded suite: the suite misses this bug\n{ran.out[-2000:]}"
    found = hints(ran.out)
    blamed = [line for line in found if line.startswith("Hint:")]
    assert not blamed, f"{patch.stem} is not a named pitfall, yet: {blamed}"
    assert any(line.startswith("Not a named pitfall") for line in found), ran.out[-3000:]
