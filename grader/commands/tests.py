"""``ol tests``: a module's graded tests, what each checks, and why it matters."""

from __future__ import annotations

from grader.core.table import render
from grader.layout.catalog import load_catalog


def show_tests(module_id: str) -> int:
    module = load_catalog().get(module_id)
    print(f"{module.id} {module.title}: {len(module.tests)} tests in {module.suite.relative_to(module.root)}\n")
    rows = [[t.name, t.kind, t.checks, t.why] for t in module.tests]
    print(render(["test", "kind", "checks", "why it matters"], rows))
    if module.pitfalls:
        print(f"\nNamed pitfalls ({len(module.pitfalls)}), each caught by one test:")
        rows = [[p.id, p.title, p.caught_by] for p in module.pitfalls]
        print(render(["id", "pitfall", "caught by"], rows))
    return 0
