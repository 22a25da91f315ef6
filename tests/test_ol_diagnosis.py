"""``ol check`` names the mistake from behaviour: each named pitfall, played as a learner's file.

Each pitfall's mutant is applied to a copy of the reference ``spec.py`` in a fresh workspace, and
``ol check`` runs as a learner would, on the whole suite and with ``-k`` its named test alone. The
first hint must name that pitfall, and the failing test's message must carry its case (the call,
yours, the rule). Learner bugs that are not named pitfalls are in ``test_learner_bugs.py``.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from ol_helpers import ROOT, ol

CATALOG = tomllib.loads((ROOT / "course/modules/L10.8.toml").read_text())
PITFALLS = [(p["id"], p["caught_by"]) for p in CATALOG["pitfall"]]


def learner_workspace(tmp_path: Path, patch: Path) -> Path:
    """A started L10.8 workspace whose spec.py is the reference with ``patch`` applied."""
    assert ol("start", "L10.8", "--workspace", str(tmp_path)).code == 0
    spec = tmp_path / "tinyllm" / "spec.py"
    spec.write_text((ROOT / "solutions/tinyllm/spec.py").read_text())
    text = patch.read_text().replace("solutions/tinyllm/spec.py", "tinyllm/spec.py")
    done = subprocess.run(["patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch"], input=text, cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"{patch.name} does not apply:\n{done.stdout}{done.stderr}"
    return tmp_path


def hints(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("Hint:", "Not a named pitfall"))]


@pytest.mark.parametrize("scope", ["whole suite", "-k its named test"])
@pytest.mark.parametrize("pitfall,named", PITFALLS, ids=[p for p, _ in PITFALLS])
def test_the_first_hint_names_the_pitfall(pitfall, named, scope, tmp_path):
    ws = learner_workspace(tmp_path, ROOT / f"course/mutants/L10.8/{pitfall}.patch")
    selection = ["-k", named] if scope.startswith("-k") else []
    ran = ol("check", "L10.8", "--ref-deps", *selection, workspace=ws)
    assert ran.code == 1, ran.text
    found = hints(ran.out)
    assert found and found[0].startswith(f"Hint: pitfall {pitfall},"), \
        f"{pitfall} on the {scope}: the first hint is {found[:1]}\n{ran.out[-3000:]}"
    if selection:
        failed = ran.out.split(f"FAIL     {named}", 1)[1]
        for part in ("call:", "yours:", "rule:"):
            assert part in failed.split("\n\n", 1)[0], f"the failure of {named} has no {part!r}:\n{failed[:2000]}"
