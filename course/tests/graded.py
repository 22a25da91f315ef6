"""The one binding point between the graded tests and the code under test, and their fixtures.

``OL_IMPL`` names a folder holding a ``tinyllm`` package (default: the reference, ``solutions/``).
Tests import only ``tinyllm.*``; ``ol check`` points ``OL_IMPL`` at a package it assembles from
the learner's files. Importing this module binds it, under pytest (``conftest.py``) and in
``ol diff``'s worker, which imports a suite without pytest.

A module of its own, not ``conftest.py``: a test that imports from ``conftest`` gets whichever
conftest Python loaded first, the project's own when ``pytest course/tests tests`` runs both.
"""

import json
import os
import sys
from pathlib import Path

from grader.core.protocol import IMPL_ENV

ROOT = Path(__file__).resolve().parents[2]
IMPL = Path(os.environ.get(IMPL_ENV, ROOT / "solutions")).resolve()
sys.path.insert(0, str(IMPL))

FIXTURES = ROOT / "fixtures"


class FixtureError(Exception):
    """A golden fixture is missing or unreadable; the message names the file."""


def load_fixture(relpath: str):
    """Load ``fixtures/<relpath>`` as JSON, naming the file in any error."""
    path = FIXTURES / relpath
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as err:
        raise FixtureError(f"fixture {path} is missing") from err
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FixtureError(f"fixture {path} is corrupt: {err}") from err
