"""``ol tests``: a module's graded tests, what each checks, why it matters, and how each did at the
learner's last check."""

from __future__ import annotations

from datetime import datetime

from grader.core.table import render
from grader.layout.catalog import load_catalog
from grader.layout.workspace import resolve_workspace


def show_tests(module_id: str, workspace: str | None = None) -> int:
    module = load_catalog().get(module_id)
    last = resolve_workspace(workspace).last_checks().get(module.id) or {}
    mine = last.get("tests") or {}
    print(f"{module.id} {module.title}: {len(module.tests)} tests in {module.suite.relative_to(module.root)}\n")
    heads = ["test", "kind", "checks", "why it matters"]
    rows = [[t.name, t.kind, t.checks, t.why] for t in module.tests]
    if mine:
        # beside the name, where a narrow terminal still shows it; a test no -k check ran has no status
        heads.insert(1, "last check")
        rows = [[row[0], mine.get(t.name, "not run"), *row[1:]] for row, t in zip(rows, module.tests)]
    print(render(heads, rows))
    if mine:
        passed = sum(mine.get(name) == "pass" for name in module.test_names)
        unrun = sum(name not in mine for name in module.test_names)
        deps = ", the modules it needs from the reference" if last.get("ref_deps") else ""
        unrun_text = f", {unrun} not run (ol check -k runs some)" if unrun else ""
        print(f"\nYour last check ({_when(last.get('when'))}{deps}): {passed} of {len(module.tests)} passed{unrun_text}.")
    if module.pitfalls:
        print(f"\nNamed pitfalls ({len(module.pitfalls)}), each caught by one test:")
        rows = [[p.id, p.title, p.caught_by] for p in module.pitfalls]
        print(render(["id", "pitfall", "caught by"], rows))
    return 0


def _when(stamp: object) -> str:
    """The check's time as people read it: ``2026-12-05 02:26 UTC``."""
    try:
        return datetime.fromisoformat(str(stamp)).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return "time unknown"
