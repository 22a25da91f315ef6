"""``ol start``: put a module's stubs into the learner's ``tinyllm/``, never over their work."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

from grader.core.errors import GraderError, UsageError
from grader.layout.catalog import Catalog, Module, load_catalog
from grader.layout.jupyter import install_defaults
from grader.layout.remembered import NOTEBOOK_MODULE, remember_workspace
from grader.layout.workspace import Workspace, resolve_workspace
from grader.verdict.warm import warm_in_background


def start(module_id: str, workspace: str | None = None, force: bool = False) -> int:
    """Write ``module_id``'s stubs into the workspace; with ``force``, back up what they replace first."""
    catalog = load_catalog()
    module = catalog.get(module_id)
    ws = resolve_workspace(workspace, create=True)
    stubs = _stub_paths(module)
    existing = [f for f in module.learner_files if ws.learner_file(f).exists()]
    if existing and not force:
        names = ", ".join(str(ws.learner_file(f)) for f in existing)
        raise UsageError(f"{names} already exists; ol start never overwrites your work. "
                         f"To start {module.id} over, run: ol start {module.id} --force (it backs the file up first)")
    ws.package.mkdir(parents=True, exist_ok=True)
    if existing:
        backup = _backup(ws, existing)
        print(f"Backed up {', '.join(existing)} to {backup}")
    init = ws.learner_file("__init__.py")
    if not init.exists():
        shutil.copyfile(catalog.reference / "tinyllm" / "__init__.py", init)
    for name, stub in stubs.items():
        shutil.copyfile(stub, ws.learner_file(name))
        print(f"Wrote {ws.learner_file(name)}")
    remember_workspace(ws.root, catalog.root)  # for notebooks opened without ol lab
    note = install_defaults()  # so does a plain jupyter lab save the figures with the notebooks
    if note:
        print(f"ol: note: {note}")
    print(_next_steps(catalog, module, ws))
    if warm_in_background(module):
        print("\n(ol is computing the named pitfalls' answers in the background, at low priority, so that "
              "ol check's hints come quickly.)")
    return 0


def _stub_paths(module: Module) -> dict[str, Path]:
    stubs = {f: module.stubs / f for f in module.learner_files}
    missing = [str(p) for p in stubs.values() if not p.is_file()]
    if missing:
        raise GraderError(f"the stubs of {module.id} are missing: {', '.join(missing)}")
    return stubs


def _backup(ws: Workspace, names: list[str]) -> Path:
    """Copy ``names`` to ``.ol/backups/<timestamp>/``; return that folder."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    folder = ws.state_dir / "backups" / stamp
    folder.mkdir(parents=True)
    for name in names:
        shutil.copy2(ws.learner_file(name), folder / name)
    return folder


def _next_steps(catalog: Catalog, module: Module, ws: Workspace) -> str:
    """The commands to run next, with ``--workspace`` when the workspace is not the current folder."""
    where = "" if ws.root == Path.cwd().resolve() else f" --workspace {ws.root}"
    lines = ["", "Next:", f"  ol tests {module.id}          # what the tests check and why",
             f"  (edit {ws.package / module.learner_files[0]}{' ...' if len(module.learner_files) > 1 else ''})",
             f"  ol check {module.id}{where}          # the exit code is the verdict"]
    if module.id == NOTEBOOK_MODULE:
        lines.insert(3, f"  ol lab{where}   # the chapters in JupyterLab, running your file")
    unstarted = [dep.id for dep in catalog.needs_of(module) if not ws.started(dep)]
    if unstarted:
        lines.append(f"  ol check {module.id} --ref-deps{where}   # until your {', '.join(unstarted)} passes")
    return "\n".join(lines)
