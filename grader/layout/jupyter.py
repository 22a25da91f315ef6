"""JupyterLab's settings for the chapters: the widgets' state saved with each notebook.

A notebook reopened after its kernel ended (the next day, a restart) shows its last figures only
when JupyterLab saved the widgets' state in it; by default it does not, and each panel then reads
"Error displaying widget: model not found". ``ol lab`` starts JupyterLab with a settings folder of
its own holding :data:`LAB_DEFAULTS`. ``ol start`` also makes them defaults of this environment's
JupyterLab (``<prefix>/share/jupyter/lab/settings/overrides.d/tinyllm-course.json``, the folder
JupyterLab reads such defaults from), so that a plain ``jupyter lab notebooks/`` saves the state
too. The learner's own settings win over both.
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import sys
from pathlib import Path

LAB_DEFAULTS = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}
DEFAULTS_FILE = "tinyllm-course.json"


def settings_dir() -> Path | None:
    """This environment's JupyterLab settings folder (``<app dir>/settings``); None without JupyterLab.

    The app directory as ``jupyterlab.commands.get_app_dir`` finds it (``JUPYTERLAB_DIR``, else the
    prefix JupyterLab is installed under), without importing that module, which takes seconds.
    """
    found = importlib.util.find_spec("jupyterlab")
    if found is None:
        return None
    if os.environ.get("JUPYTERLAB_DIR"):
        return Path(os.environ["JUPYTERLAB_DIR"]).resolve() / "settings"
    user_base = site.getuserbase()
    prefix = user_base if (found.origin or "").startswith(user_base) and not sys.prefix.startswith(user_base) \
        else sys.prefix
    return Path(prefix) / "share" / "jupyter" / "lab" / "settings"


def installed_overrides(folder: Path | None) -> dict:
    """The defaults ``folder`` gives JupyterLab, merged as JupyterLab merges them: each
    ``overrides.d/*.json`` in name order, then ``overrides.json``; a file that cannot be read is skipped."""
    merged: dict = {}
    if folder is None:
        return merged
    for path in [*sorted((folder / "overrides.d").glob("*.json")), folder / "overrides.json"]:
        try:
            values = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for plugin, settings in values.items() if isinstance(values, dict) else ():
            if isinstance(settings, dict):
                merged.setdefault(plugin, {}).update(settings)
    return merged


def install_defaults() -> str | None:
    """Make :data:`LAB_DEFAULTS` defaults of this environment's JupyterLab; a note saying why not
    when the file cannot be written, else None."""
    folder = settings_dir()
    if folder is None:
        return None
    target = folder / "overrides.d" / DEFAULTS_FILE
    text = json.dumps(LAB_DEFAULTS, indent=1) + "\n"
    try:
        if target.is_file() and target.read_text() == text:
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    except OSError as err:
        return (f"could not write {target} ({err.strerror}): a plain jupyter lab will not save the "
                "widgets' state with the notebooks (ol lab does)")
    return None
