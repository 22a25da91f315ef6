"""Assemble the ``tinyllm`` package a check runs against, without touching the learner's files.

The module's own learner files come from the workspace; the files of the modules it needs come
from the workspace too, or from the reference with ``--ref-deps``; given files always come from
the reference. Extra ``.py`` files the learner added (helpers no module owns) come along.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import UsageError
from grader.layout.catalog import Catalog, Module
from grader.layout.workspace import Workspace


@dataclass(frozen=True)
class Source:
    name: str        # file name inside tinyllm/
    path: Path       # where it is copied from
    origin: str      # for people: "your workspace" / "reference"
    why: str         # for people: "L10.8", "L10.1, needed", "given", "your helper"


def require_files(catalog: Catalog, module: Module, ws: Workspace, ref_deps: bool, verb: str) -> None:
    """Refuse (exit 2) when the module's files, or without ``ref_deps`` its needs' files, are not in ``ws``."""
    missing = ws.missing_files(module)
    if missing:
        raise UsageError(f"{module.id} is not started: tinyllm/{missing[0]} is not in {ws.package}. "
                         f"Run: ol start {module.id}")
    if not ref_deps:
        absent = [f"{dep.id} (tinyllm/{ws.missing_files(dep)[0]})" for dep in catalog.needs_of(module)
                  if ws.missing_files(dep)]
        if absent:
            raise UsageError(f"{module.id} needs {', '.join(absent)}, not in your workspace; "
                             f"run: ol {verb} {module.id} --ref-deps")


def plan(catalog: Catalog, module: Module, ws: Workspace, ref_deps: bool, why_reference: str = "--ref-deps") -> list[Source]:
    """Where each file of the assembled package comes from, in a stable order (``why_reference``:
    why the modules ``module`` needs come from the reference, when ``ref_deps``)."""
    reference = catalog.reference / "tinyllm"
    sources = {f: Source(f, ws.learner_file(f), "your workspace", module.id) for f in module.learner_files}
    for dep in catalog.needs_of(module):
        for f in dep.learner_files:
            if ref_deps:
                sources.setdefault(f, Source(f, reference / f, "reference", f"{dep.id}, {why_reference}"))
            else:
                sources.setdefault(f, Source(f, ws.learner_file(f), "your workspace", f"{dep.id}, needed"))
    for m in [module, *catalog.needs_of(module)]:
        for f in m.given_files:
            sources.setdefault(f, Source(f, reference / f, "reference", "given"))
    if ws.package.is_dir():
        for path in sorted(ws.package.glob("*.py")):
            if path.name not in sources and catalog.owner_of(path.name) is None and not _given_anywhere(catalog, path.name):
                sources[path.name] = Source(path.name, path, "your workspace", "your helper")
    return list(sources.values())


def build(sources: list[Source], dest: Path) -> Path:
    """Copy ``sources`` into ``dest/tinyllm/``; return ``dest`` (the folder ``OL_IMPL`` names)."""
    package = dest / "tinyllm"
    package.mkdir(parents=True)
    for source in sources:
        shutil.copyfile(source.path, package / source.name)
    return dest


def digest(sources: list[Source], module: Module) -> str:
    """A fingerprint of exactly what a check of ``module`` over ``sources`` would run."""
    h = hashlib.sha256()
    for source in sorted(sources, key=lambda s: s.name):
        h.update(source.name.encode() + b"\0" + source.path.read_bytes() + b"\0")
    h.update(module.suite.read_bytes())
    return h.hexdigest()


def _given_anywhere(catalog: Catalog, name: str) -> bool:
    return any(name in m.given_files for m in catalog.modules.values())
