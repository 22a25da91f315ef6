"""``ol stubs``: write the learner's stubs from the reference's markers (``grader/layout/stubs.py``)."""

from __future__ import annotations

from grader.layout.catalog import load_catalog
from grader.layout.stubs import module_stubs


def stubs(module_id: str = "all", check: bool = False) -> int:
    """Write the stubs of one module (or all); with ``check``, write nothing and return 1 when a
    committed stub is not what the reference makes."""
    catalog = load_catalog()
    modules = list(catalog.modules.values()) if module_id.lower() == "all" else [catalog.get(module_id)]
    stale = []
    for module in modules:
        for path, (text, tasks) in module_stubs(catalog, module).items():
            shown = path.relative_to(catalog.root)
            if path.is_file() and path.read_text() == text:
                print(f"{shown}: up to date ({len(tasks)} functions to write)")
            elif check:
                stale.append(str(shown))
                print(f"{shown}: not what solutions/tinyllm/{path.name} makes")
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                print(f"{shown}: written ({len(tasks)} functions to write)")
    if stale:
        print(f"\n{len(stale)} stale: run ol stubs to write them from the reference")
        return 1
    return 0
