"""The one binding point between the graded tests and the code under test.

``OL_IMPL`` names a folder holding a ``tinyllm`` package (default: the reference, ``solutions/``).
Tests import only ``tinyllm.*``; ``ol check`` points ``OL_IMPL`` at a package it assembles from
the learner's files.
"""

import hashlib
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


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
