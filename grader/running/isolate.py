"""ol's side of an isolated check: lay out the learner's package and the judge's.

The learner's package gets the server (``grader/child/learner_server.py``, run there as a script)
and the only part of ol it imports, ``grader.core.protocol``, beside it: nothing of ol's own folder
is in the sandbox. The judge's package holds the reference's files as they are and, for each file
the learner wrote, a stand-in whose names are bound to the learner's process
(:func:`grader.child.judge.bind_module`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import grader
from grader.core.protocol import LEARNER_IMPL_ENV, LEARNER_SANDBOX_ENV, LEARNER_SERVER
from grader.core.sandbox import Sandbox
from grader.layout import assemble

# No file name goes into the stand-in's source: a name is the learner's to choose.
PROXY = '''"""A module of the learner's package, running in a process of its own (grader.child.judge)."""
from grader.child.judge import bind_module

bind_module(__name__, globals())
'''
GRADER = Path(grader.__file__).parent
# What the server imports of ol, laid out as in ol's own folder.
SERVER_NEEDS = ("__init__.py", "core/__init__.py", "core/protocol.py")


def prepare(sources: list[assemble.Source], root: Path, box: Sandbox) -> tuple[Path, dict[str, str]]:
    """Lay out the learner's package (all of ``sources``) and the judge's (the reference's files as
    they are, stand-ins for the learner's) under ``root``; return the judge's ``OL_IMPL`` and the
    environment the judge needs to start the learner's process."""
    learner = assemble.build(sources, root / "learner")
    shutil.copyfile(GRADER / "child" / "learner_server.py", learner / LEARNER_SERVER)
    for name in SERVER_NEEDS:
        (learner / "grader" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(GRADER / name, learner / "grader" / name)
    judge = root / "judge" / "tinyllm"
    judge.mkdir(parents=True)
    judge.parent.chmod(0o700)
    for source in sources:
        if source.origin == "reference":
            shutil.copyfile(source.path, judge / source.name)
        else:
            (judge / source.name).write_text(PROXY)
    return judge.parent, {LEARNER_IMPL_ENV: str(learner), LEARNER_SANDBOX_ENV: box.to_env()}
