"""``ol lab``: open the chapter notebooks in JupyterLab, running the learner's workspace.

JupyterLab is started on the course's ``notebooks/`` with ``OL_WORKSPACE`` set to the workspace's
absolute path, which the notebooks' ``course`` package reads first. ``ol lab`` also remembers the
workspace (:mod:`grader.layout.remembered`), so notebooks opened by hand find it too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path

from grader.core.errors import UsageError
from grader.core.paths import course_root
from grader.core.protocol import WORKSPACE_ENV
from grader.layout.catalog import load_catalog
from grader.layout.jupyter import LAB_DEFAULTS, installed_overrides, settings_dir
from grader.layout.remembered import NOTEBOOK_MODULE, remember_workspace, remembered_file, remembered_workspace
from grader.layout.workspace import Workspace, resolve_workspace


def _choose_workspace(arg: str | None) -> tuple[Workspace, str]:
    """Like the other verbs (``--workspace``, ``OL_WORKSPACE``, the current folder), except that a
    current folder holding no started module gives way to the remembered workspace."""
    ws = resolve_workspace(arg)
    if arg or os.environ.get(WORKSPACE_ENV):
        return ws, "--workspace" if arg else WORKSPACE_ENV
    module = load_catalog().get(NOTEBOOK_MODULE)
    remembered = remembered_workspace()
    if not ws.started(module) and remembered is not None:
        return Workspace(remembered), f"the workspace ol start remembered in {remembered_file()}"
    return ws, "the current folder"


def lab_command(ws: Workspace, extra: list[str], root: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The ``jupyter lab`` command and environment that open the chapters on ``ws``."""
    root = root or course_root()
    notebooks = root / "notebooks"
    settings = _write_settings(ws)
    env = dict(os.environ)
    env[WORKSPACE_ENV] = str(ws.root.resolve())
    # The notebooks' course package is importable from a copy of a notebook too, wherever it is opened.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(notebooks), env.get("PYTHONPATH", "")]))
    ours = {"--ServerApp.root_dir": str(notebooks), "--LabApp.app_settings_dir": str(settings)}
    # An option given after -- replaces ol's (JupyterLab refuses one given twice).
    given = {arg.split("=", 1)[0] for arg in extra} | ({"--ServerApp.root_dir"} if "--notebook-dir" in
                                                      {arg.split("=", 1)[0] for arg in extra} else set())
    command = [sys.executable, "-m", "jupyter", "lab",
               *[f"{option}={value}" for option, value in ours.items() if option not in given], *extra]
    return command, env


def _write_settings(ws: Workspace) -> Path:
    """A JupyterLab settings folder in the workspace's ``.ol/``: the installation's defaults, if
    any, with :data:`~grader.layout.jupyter.LAB_DEFAULTS` on top."""
    folder = ws.state_dir / "lab-settings"
    merged = installed_overrides(settings_dir())
    for plugin, values in LAB_DEFAULTS.items():
        merged.setdefault(plugin, {}).update(values)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "overrides.json").write_text(json.dumps(merged, indent=1) + "\n")
    except OSError as err:
        raise UsageError(f"could not write JupyterLab's settings in {folder}: {err.strerror}") from err
    return folder


def _not_started(module_id: str, root: Path, typed: str | None, missing: list[str]) -> UsageError:
    shown = shlex.quote(typed or str(root))
    return UsageError(f"{module_id} is not started in {root} (no tinyllm/{', tinyllm/'.join(missing)}): "
                      f"run ol start {module_id} --workspace {shown}, then ol lab --workspace {shown}")


def lab(workspace: str | None, extra: list[str], dry_run: bool = False) -> int:
    """Open JupyterLab on the chapters with ``OL_WORKSPACE`` set; with ``dry_run``, print the command."""
    module = load_catalog().get(NOTEBOOK_MODULE)
    typed = workspace or os.environ.get(WORKSPACE_ENV)
    if typed and not Path(typed).expanduser().resolve().exists():
        raise _not_started(module.id, Path(typed).expanduser().resolve(), typed, list(module.learner_files))
    ws, chosen_by = _choose_workspace(workspace)
    missing = ws.missing_files(module)
    if missing:
        raise _not_started(module.id, ws.root, typed, missing)
    if importlib.util.find_spec("jupyterlab") is None:
        raise UsageError("JupyterLab is not installed here: pip install -e . (from the course's clone)")
    command, env = lab_command(ws, extra[1:] if extra[:1] == ["--"] else extra)
    if dry_run:
        print(f"{WORKSPACE_ENV}={shlex.quote(env[WORKSPACE_ENV])} PYTHONPATH={shlex.quote(env['PYTHONPATH'])} "
              + shlex.join(command))
        return 0
    remember_workspace(ws.root)
    print(f"ol lab: the chapters run your code in {ws.root} ({chosen_by}); stop JupyterLab with Ctrl-C",
          flush=True)
    sys.stderr.flush()
    os.execve(command[0], command, env)
    return 0  # not reached: JupyterLab replaced this process
