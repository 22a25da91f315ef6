"""The learner's workspace: the folder holding their ``tinyllm/`` package, and ol's notes about it.

ol keeps its own state in ``.ol/`` beside ``tinyllm/`` (never inside it): the last check of each
module and the backups ``ol start --force`` makes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.core.errors import UsageError
from grader.core.protocol import WORKSPACE_ENV
from grader.layout.catalog import Module

STATE_VERSION = 1


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def package(self) -> Path:
        return self.root / "tinyllm"

    @property
    def state_dir(self) -> Path:
        return self.root / ".ol"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "last_check.json"

    def learner_file(self, name: str) -> Path:
        return self.package / name

    def missing_files(self, module: Module) -> list[str]:
        """The module's learner files not yet in the workspace."""
        return [f for f in module.learner_files if not self.learner_file(f).is_file()]

    def started(self, module: Module) -> bool:
        return not self.missing_files(module)

    def last_checks(self) -> dict[str, dict]:
        """Per module, what its last check recorded (an unreadable state file counts as none)."""
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            return {}
        modules = data.get("modules")
        return modules if isinstance(modules, dict) else {}

    def record_check(self, module_id: str, statuses: dict[str, str], full: bool, ref_deps: bool,
                     digest: str | None) -> None:
        """Remember a check's per-test statuses; a partial (``-k``) run updates only the tests it ran.

        ``digest`` names the exact sources checked, so a later check of a module that needs this one
        can reuse the verdict instead of running the suite again.
        """
        modules = self.last_checks()
        previous = modules.get(module_id, {})
        tests = dict(statuses) if full else {**previous.get("tests", {}), **statuses}
        modules[module_id] = {
            "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tests": tests,
            "ref_deps": ref_deps,
            "digest": digest if full else None,
        }
        try:
            self.state_dir.mkdir(exist_ok=True)
            tmp = self.state_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": STATE_VERSION, "modules": modules}, indent=1) + "\n")
            tmp.replace(self.state_file)
        except OSError as err:
            print(f"ol: note: could not record this check in {self.state_file}: {err}")


def resolve_workspace(arg: str | None, create: bool = False) -> Workspace:
    """``--workspace`` if given, else ``OL_WORKSPACE``, else the current folder.

    With ``create`` (``ol start``), a workspace folder that does not exist yet is made.
    """
    raw = arg or os.environ.get(WORKSPACE_ENV) or os.getcwd()
    root = Path(raw).expanduser().resolve()
    if create and not root.exists():
        try:
            root.mkdir(parents=True)
        except OSError as err:
            raise UsageError(f"could not create the workspace {root}: {err.strerror}") from err
    if not root.is_dir():
        source = "--workspace" if arg else WORKSPACE_ENV
        raise UsageError(f"the workspace {root} ({source}) is not a folder")
    return Workspace(root)
