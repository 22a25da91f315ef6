"""``ol list``: the modules, what each needs, and where the learner stands."""

from __future__ import annotations

from grader.core.table import render
from grader.layout import assemble
from grader.layout.catalog import Catalog, Module, load_catalog
from grader.layout.workspace import Workspace, resolve_workspace


def list_modules(workspace: str | None = None) -> int:
    catalog = load_catalog()
    ws = resolve_workspace(workspace)
    checks = ws.last_checks()
    rows = [[m.id, m.title, ", ".join(m.needs) or "-", ", ".join(m.learner_files), status(catalog, m, ws, checks.get(m.id))]
            for m in catalog.modules.values()]
    print(render(["module", "title", "needs", "you write", "status"], rows))
    print(f"\nWorkspace: {ws.root}")
    return 0


def status(catalog: Catalog, module: Module, ws: Workspace, last: dict | None) -> str:
    """not started / started, not checked / N of M passing at last check / passing, and whether
    the files have changed since that check."""
    if not ws.started(module):
        return "not started"
    tests = (last or {}).get("tests", {})
    if not tests:
        return "started, not checked"
    passing = sum(1 for name in module.test_names if tests.get(name) == "pass")
    notes = ["with --ref-deps"] if last.get("ref_deps") else []
    if last.get("digest") and _changed_since(catalog, module, ws, last):
        notes.append("files changed since")
    suffix = f" ({', '.join(notes)})" if notes else ""
    if passing == len(module.tests):
        return f"passing{suffix}"
    return f"{passing} of {len(module.tests)} passing at last check{suffix}"


def _changed_since(catalog: Catalog, module: Module, ws: Workspace, last: dict) -> bool:
    try:
        return assemble.digest(assemble.plan(catalog, module, ws, bool(last.get("ref_deps"))), module) != last["digest"]
    except OSError:
        return True
