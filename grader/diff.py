"""``ol diff``: for each differential test, the first cases where the learner's answers and the reference's part.

Both answers are computed in separate processes (the learner's package could hang or exit), by
the module's case view in :mod:`grader.diff_adapters`.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from grader import assemble
from grader.catalog import Module, check_fixtures, load_catalog
from grader.diff_adapters import Case, differs_for, short
from grader.errors import GraderError, UsageError
from grader.workspace import resolve_workspace

FLOAT_TOLERANCE = 1e-9
WORKER_LIMIT = 120.0


def diff(module_id: str, workspace: str | None = None, ref_deps: bool = False, shown: int = 3) -> int:
    """Print the first ``shown`` differing cases per differential test; 0 when nothing differs."""
    if shown < 1:
        raise UsageError(f"--cases must be at least 1, got {shown}")
    catalog = load_catalog()
    module = catalog.get(module_id)
    ws = resolve_workspace(workspace)
    missing = ws.missing_files(module)
    if missing:
        raise UsageError(f"{module.id} is not started: tinyllm/{missing[0]} is not in {ws.package}. Run: ol start {module.id}")
    if not ref_deps:
        absent = [f"{dep.id} (tinyllm/{ws.missing_files(dep)[0]})" for dep in catalog.needs_of(module) if ws.missing_files(dep)]
        if absent:
            raise UsageError(f"{module.id} needs {', '.join(absent)}, not in your workspace; run: ol diff {module.id} --ref-deps")
    check_fixtures(module)
    differs = differs_for(module.id)
    tests = [t.name for t in module.tests if t.kind == "differential"]
    if not tests:
        print(f"{module.id} has no differential tests.")
        return 0
    any_differ = False
    with tempfile.TemporaryDirectory(prefix="ol-diff-") as tmp:
        impl = assemble.build(assemble.plan(catalog, module, ws, ref_deps), Path(tmp) / "yours")
        for name in tests:
            if name not in differs:
                print(f"{name}: no case view for this test; its failure message in ol check is the detail.\n")
                continue
            reference = _answers(module, name, catalog.reference, Path(tmp) / "reference.json")
            yours = _answers(module, name, impl, Path(tmp) / "yours.json")
            cases = differs[name].cases(module.root)
            any_differ = _show(name, cases, reference, yours, shown) or any_differ
    return 1 if any_differ else 0


def first_difference(ref: Any, got: Any, path: str = "") -> str | None:
    """Where ``got`` first parts from ``ref`` ("tokens[2]", "" for the whole value), or None."""
    if isinstance(ref, dict) and isinstance(got, dict):
        for key in ref:
            where = first_difference(ref[key], got.get(key), f"{path}.{key}" if path else key)
            if where is not None:
                return where
        return None
    if isinstance(ref, list) and isinstance(got, list):
        for i, (a, b) in enumerate(zip(ref, got)):
            where = first_difference(a, b, f"{path}[{i}]")
            if where is not None:
                return where
        return None if len(ref) == len(got) else f"{path}[{min(len(ref), len(got))}] (lengths {len(ref)} and {len(got)})"
    if isinstance(ref, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return None if math.isclose(ref, got, rel_tol=0, abs_tol=FLOAT_TOLERANCE) else path
    return None if ref == got and type(ref) is type(got) else path


def _show(name: str, cases: list[Case], reference: list[dict], yours: list[dict], shown: int) -> bool:
    differing = []
    for case, ref, got in zip(cases, reference, yours):
        if "error" in ref:
            raise GraderError(f"the reference fails {name} case {case.label}: {ref['error']}")
        if "error" in got:
            differing.append((case, ref["answer"], f"raises {got['error']}", ""))
            continue
        where = first_difference(ref["answer"], got["answer"])
        if where is not None:
            differing.append((case, ref["answer"], got["answer"], where))
    if not differing:
        print(f"{name}: all {len(cases)} cases agree with the reference.\n")
        return False
    print(f"{name}: {len(differing)} of {len(cases)} cases differ; the first {min(shown, len(differing))}:")
    for case, ref, got, where in differing[:shown]:
        print(f"  case {case.label}")
        print(f"    inputs:    {case.inputs}")
        print(f"    reference: {_brief(ref)}")
        print(f"    yours:     {got if isinstance(got, str) else _brief(got)}")
        if where:
            print(f"    they part at {where}")
    print()
    return True


def _brief(value: Any) -> str:
    """An answer in one readable line: long lists keep their two ends."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_brief(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return short([_brief(v) for v in value])
    return repr(value)


def _answers(module: Module, test: str, impl: Path, out: Path) -> list[dict]:
    """Run the case view over ``impl`` in its own process; a hang or crash is a usage-level message."""
    out.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [sys.executable, "-m", "grader.diff_worker", module.id, test, str(impl), str(module.suite.parent),
               str(module.root), str(out)]
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = child.communicate(timeout=WORKER_LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise UsageError(f"computing {test}'s answers took longer than {WORKER_LIMIT:g} s; "
                         f"run ol check {module.id} to see which test hangs")
    if child.returncode != 0 or not out.is_file():
        last = (err or "").strip().splitlines()
        raise UsageError(f"computing {test}'s answers stopped (status {child.returncode}): "
                         f"{last[-1] if last else 'no message'}")
    return json.loads(out.read_text())
