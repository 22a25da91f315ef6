"""``course.use()``: which ``tinyllm`` a notebook runs, and the banner that says so.

Your learner file once you have started the module (``ol start L10.8`` writes ``spec.py``), with
everything else (the sampler, the pool, the tiny llama, the runner) taken from the reference, as
``ol check --ref-deps`` does. Until then, or when the first cell asks for it (``REFERENCE = True``),
the reference solution runs and the banner says so. Where the workspace is found:
:mod:`course.workspace`.
"""

from __future__ import annotations

import contextlib
import html
import importlib
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from course.chapters import REFERENCE, Chapter, chapter
from course.display import show_banner
from course.reload import Session, load_error_text, watch_cells
from course.state import STATE, Running, scratch_dir
from course.workspace import started, workspace_search


def _assemble(learner_dir: Path | None, chosen: Chapter) -> Path:
    """A scratch folder holding ``tinyllm/``: the reference, overlaid with your learner file."""
    base = scratch_dir("tinyllm-notebook-")
    package = base / "tinyllm"
    package.mkdir()
    for source in REFERENCE.glob("*.py"):
        shutil.copyfile(source, package / source.name)
    if learner_dir is not None:
        shutil.copyfile(learner_dir / chosen.learner_file, package / chosen.learner_file)
    return base


def _forget_tinyllm() -> None:
    for name in [n for n in sys.modules if n == "tinyllm" or n.startswith("tinyllm.")]:
        del sys.modules[name]
    while STATE.on_path:
        folder = STATE.on_path.pop()
        if folder in sys.path:
            sys.path.remove(folder)


def _import_package(base: Path, chosen: Chapter, after_learner: Callable[[object], None] | None = None) -> SimpleNamespace:
    """Import the assembled package; ``after_learner`` sees your learner module before the modules that
    import names from it (the runner) do."""
    _forget_tinyllm()
    sys.path.insert(0, str(base))
    STATE.on_path.append(str(base))
    importlib.invalidate_caches()
    modules = {}
    for name in chosen.package_modules:
        if (base / "tinyllm" / f"{name}.py").is_file():
            modules[name] = importlib.import_module(f"tinyllm.{name}")
            if name == chosen.stem and after_learner is not None:
                after_learner(modules[name])
    return SimpleNamespace(**modules)


def use(reference: bool = False, workspace: str | os.PathLike | None = None,
        module: str = "L10.8") -> SimpleNamespace:
    """Import ``tinyllm`` for this notebook and show a banner naming the code that runs.

    ``reference=True`` runs the reference solution even when your module is started. Your saved
    edits to your learner file are picked up before every cell runs; rerunning this cell starts afresh.
    Returns a namespace with the package's modules (``spec``, ``sampling``, ``kvpool``, ...) and
    ``running``, a :class:`Running`. ``module="L10.9"`` runs your ``trees.py`` instead (chapters 6
    and 7), everything else from the reference.
    """
    chosen = chapter(module)
    STATE.chapter, STATE.session = chosen, None
    search = ([(Path(workspace).expanduser().resolve(), "use(workspace=...)")] if workspace is not None
              else workspace_search())
    found = None if reference else next(((f, how) for f, how in search if started(f, chosen)), None)
    if reference:
        why = "you chose it in the first cell (REFERENCE = True)"
    elif found is None:
        looked = ", ".join(str(p) for p, _ in search)
        why = (f"no started module found (looked for tinyllm/{chosen.learner_file} in {looked}); "
               f"start one with <code>ol start {chosen.id} --workspace work</code>, then open the chapters "
               f"with <code>ol lab --workspace work</code> (or rerun this cell)")
    else:
        why = ""
    running, modules, watched = None, None, None
    if found is not None:
        folder, how = found
        watched = folder / "tinyllm" / chosen.learner_file
        base = _assemble(folder / "tinyllm", chosen)
        running = Running("learner", "", base, watched, folder, how)
        session = Session(running, watched, chosen)
        try:
            STATE.running = running
            modules = _import_package(base, chosen, after_learner=session.adopt)
            STATE.session = session
        except Exception as err:  # a learner file that does not import: show it, run the reference
            why = load_error_text(err, watched, chosen.learner_file).replace("rerun this cell", "rerun any cell")
            why = html.escape(why)
            running = None
    if running is None:
        base = _assemble(None, chosen)
        running = Running("reference", why, base)
        STATE.running = running
        modules = _import_package(base, chosen)
        if watched is not None:  # watch the broken file: once it imports, it runs
            running.workspace, running.found_by = found
            session = Session(running, watched, chosen)
            session.module = getattr(modules, chosen.stem)
            session.text = (REFERENCE / chosen.learner_file).read_text()
            with contextlib.suppress(OSError):
                session.stamp = (watched.stat().st_mtime_ns, watched.stat().st_size)
            session._load_reference()
            STATE.session = session
    watch_cells(STATE.session is not None)
    modules.running = running
    show_banner(running)
    return modules
