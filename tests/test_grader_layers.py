"""The grader's layers (grader/README.md): no import cycle, no import that goes up a layer, no verb
importing another.

Every ``import`` of a ``grader`` module counts, at the top of a file or inside a function.
"""

import ast
import subprocess
import sys
from pathlib import Path

GRADER = Path(__file__).resolve().parents[1] / "grader"
# What each layer may import besides itself; ``grader.cases`` (the suites' library) is in ``core``.
MAY_IMPORT = {"core": set(), "layout": {"core"}, "child": {"core"}, "running": {"core", "layout"},
              "verdict": {"core", "layout", "child", "running"},
              "commands": {"core", "layout", "child", "running", "verdict"}, "cli": {"core", "commands"}}


def layer(module: str) -> str:
    parts = module.split(".")
    if module in ("grader", "grader.cases") or parts[1] == "core":
        return "core"
    return parts[1] if parts[1] in MAY_IMPORT else "cli"   # grader.cli, grader.__main__


def imports(outside: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """Each grader module and the grader modules it imports; ``outside`` receives the others' roots."""
    modules = {".".join(("grader", *p.relative_to(GRADER).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in GRADER.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                          for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
        if outside is not None:
            outside[name] = {m.split(".")[0] for m in found} - {"grader", "__future__"}
    return graph


def test_no_cycle_and_no_import_up_the_layers():
    graph = imports()
    upward = [f"{a} -> {b}" for a, targets in graph.items() for b in targets
              if layer(b) != layer(a) and layer(b) not in MAY_IMPORT[layer(a)]]
    assert not upward, f"imports that go up the layers: {upward}"
    verbs = [f"{a} -> {b}" for a, targets in graph.items() for b in targets
             if layer(a) == layer(b) == "commands" and a != "grader.commands"]
    assert not verbs, f"a verb imports another (put what they share in a layer below): {verbs}"
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != "open", f"import cycle: {' -> '.join(path[path.index(nxt):] + [nxt])}"
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])


def test_the_cli_and_ol_list_import_neither_numpy_nor_rpyc():
    code = ("import sys, grader.cli, grader.commands.list, grader.commands.tests; "
            "print(sorted(m for m in ('numpy', 'rpyc', 'grader.child.judge') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=GRADER.parent, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_core_needs_only_the_standard_library():
    outside: dict[str, set[str]] = {}
    imports(outside)
    foreign = {m: sorted(roots - sys.stdlib_module_names) for m, roots in outside.items() if layer(m) == "core"}
    assert not any(foreign.values()), foreign
