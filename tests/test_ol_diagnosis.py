"""``ol check`` names the mistake from behaviour: each named pitfall, played as a learner's file.

For every module, each pitfall's mutant is applied to a copy of the reference's learner files in
a fresh workspace, and ``ol check`` runs as a learner would, on the whole suite and with ``-k`` its
named test alone. The first hint must name that pitfall, and the failing test's message must carry
its case (the call, yours, the rule). Learner bugs that are not named pitfalls are in
``test_learner_bugs.py``.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest

from ol_helpers import ROOT, ol

MODULES = {m["id"]: m for m in (tomllib.loads(p.read_text()) for p in sorted((ROOT / "course/modules").glob("*.toml")))}
PITFALLS = [(mid, p["id"], p["caught_by"]) for mid, m in MODULES.items() for p in m.get("pitfall", [])]
_STARTED: dict[str, Path] = {}   # module -> a workspace ol started in, made once a process


def started(module: str) -> Path:
    """A workspace where ``ol start module`` ran. Each test copies it: one ``ol start`` a module and
    process, not one a test (tests/test_ol_start.py tests the command itself)."""
    if module not in _STARTED:
        folder = Path(tempfile.mkdtemp(prefix="ol-test-started-"))
        atexit.register(shutil.rmtree, folder, True)
        assert ol("start", module, "--workspace", str(folder)).code == 0
        _STARTED[module] = folder
    return _STARTED[module]


def learner_workspace(tmp_path: Path, patch: Path, module: str = "L10.8") -> Path:
    """A started workspace of ``module`` whose learner files are the reference's with ``patch`` applied."""
    shutil.copytree(started(module), tmp_path, dirs_exist_ok=True)
    for name in MODULES[module]["learner_files"]:
        (tmp_path / "tinyllm" / name).write_text((ROOT / "solutions/tinyllm" / name).read_text())
    text = patch.read_text().replace("solutions/tinyllm/", "tinyllm/")
    done = subprocess.run(["patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch"], input=text, cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"{patch.name} does not apply:\n{done.stdout}{done.stderr}"
    return tmp_path


def check_as_learner(module: str, workspace: Path, *selection: str):
    """``ol check`` of ``module`` in ``workspace``, over the reference's modules it needs."""
    return ol("check", module, *(["--ref-deps"] if MODULES[module].get("needs") else []), *selection,
              workspace=workspace)


def hints(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("Hint:", "Not a named pitfall"))]


@pytest.mark.parametrize("scope", ["whole suite", "-k its named test"])
@pytest.mark.parametrize("module,pitfall,named", PITFALLS, ids=[p for _, p, _ in PITFALLS])
def test_the_first_hint_names_the_pitfall(module, pitfall, named, scope, tmp_path):
    ws = learner_workspace(tmp_path, ROOT / f"course/mutants/{module}/{pitfall}.patch", module)
    selection = ["-k", named] if scope.startswith("-k") else []
    ran = check_as_learner(module, ws, *selection)
    assert ran.code == 1, ran.text
    found = hints(ran.out)
    assert found and found[0].startswith(f"Hint: pitfall {pitfall},"), \
        f"{pitfall} on the {scope}: the first hint is {found[:1]}\n{ran.out[-3000:]}"
    if selection:
        failed = ran.out.split(f"FAIL     {named}", 1)[1]
        for part in ("call:", "yours:", "rule:"):
            assert part in failed.split("\n\n", 1)[0], f"the failure of {named} has no {part!r}:\n{failed[:2000]}"
