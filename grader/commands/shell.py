"""``ol shell``: a Python prompt on the package ``ol check`` runs, where every call ol prints can be pasted.

The package is assembled as for a check (your files, the reference's given files, and with
``--ref-deps`` the reference's L10.1), and everything a failing case's ``call`` names is imported:
``numpy as np``, every module of the package, the fake targets, and the graded suite's helpers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.core.paths import REPO
from grader.core.protocol import IMPL_ENV
from grader.layout import assemble
from grader.layout.catalog import load_catalog
from grader.layout.workspace import resolve_workspace


def shell(module_id: str, workspace: str | None = None, ref_deps: bool = False, command: str | None = None) -> int:
    """Start ``python -i`` (or run ``command``) with the module's names imported; its exit code."""
    catalog = load_catalog()
    module = catalog.get(module_id)
    ws = resolve_workspace(workspace)
    assemble.require_files(catalog, module, ws, ref_deps, "shell")
    with tempfile.TemporaryDirectory(prefix="ol-shell-") as tmp:
        impl = assemble.build(assemble.plan(catalog, module, ws, ref_deps), Path(tmp))
        startup = Path(tmp) / "startup.py"
        startup.write_text(_startup(impl, module.suite))
        # PYTHONSAFEPATH: the workspace (the cwd) must not come first on sys.path, or its tinyllm/
        # (ol start writes an __init__.py there) hides the assembled package.
        env = {**os.environ, IMPL_ENV: str(impl), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONSAFEPATH": "1",
               "PYTHONPATH": os.pathsep.join([str(impl), str(module.suite.parent), str(REPO)])}
        if command is None:
            print(f"Python with {module.id}'s names: tinyllm from {ws.package}"
                  f"{' (L10.1 from the reference)' if ref_deps else ''}. Paste any call ol printed; Ctrl-D leaves.")
            return subprocess.call([sys.executable, "-i"], env={**env, "PYTHONSTARTUP": str(startup)}, cwd=ws.root)
        code = f"exec(open({str(startup)!r}).read())\n{command}"
        return subprocess.call([sys.executable, "-c", code], env=env, cwd=ws.root)


def _startup(impl: Path, suite: Path) -> str:
    modules = sorted(p.stem for p in (impl / "tinyllm").glob("*.py") if p.stem != "__init__")
    lines = ["import numpy as np"] + [f"from tinyllm.{name} import *" for name in modules]
    lines += ["from fakes import *" if (suite.parent / "fakes.py").is_file() else "", f"from {suite.stem} import *"]
    return "\n".join(line for line in lines if line) + "\n"
