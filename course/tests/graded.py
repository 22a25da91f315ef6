"""The one binding point between the graded tests and the code under test, and their fixtures.

``OL_IMPL`` names a folder holding a ``tinyllm`` package (default: the reference, ``solutions/``).
Tests import only ``tinyllm.*``; ``ol check`` points ``OL_IMPL`` at a package it assembles from
the learner's files. Importing this module binds it, under pytest (``conftest.py``) and in
``ol diff``'s worker, which imports a suite without pytest.

A module of its own, not ``conftest.py``: a test that imports from ``conftest`` gets whichever
conftest Python loaded first, the project's own when ``pytest course/tests tests`` runs both.
"""

import importlib
import importlib.util
import json
import os
import random
import sys
from pathlib import Path
from types import ModuleType

from grader.core.protocol import DRAWN_SEED_ENV, IMPL_ENV

ROOT = Path(__file__).resolve().parents[2]
IMPL = Path(os.environ.get(IMPL_ENV, ROOT / "solutions")).resolve()
sys.path.insert(0, str(IMPL))

FIXTURES = ROOT / "fixtures"
REFERENCE = ROOT / "solutions" / "tinyllm"
REFERENCE_PACKAGE = "ol_reference"  # the reference's name beside the code under test, which is tinyllm
# Cases a rule test draws when graded (each module's hand examples are public: a table of them has
# no answer for these); a recorded test draws more (its suite says how many).
DRAWN_RULE_CASES = 3


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


def drawn(test: str) -> random.Random | None:
    """The draws of a test's cases that no submission can know ahead, or None outside a grading.

    ``ol grade`` and the platform exports set ``OL_DRAWN_SEED`` (one seed a grading, printed and
    written in each submission's results); with the test's name it seeds the draws, so every
    process that builds the test's cases (the check, the diagnosis) builds the same ones, and
    the same seed grades the same again.
    """
    text = os.environ.get(DRAWN_SEED_ENV)
    if not text:
        return None
    try:
        seed = int(text)
    except ValueError:
        raise ValueError(f"{DRAWN_SEED_ENV} must be an integer, got {text!r}") from None
    return random.Random(f"{seed}:{test}")


def reference(name: str) -> ModuleType:
    """The reference's ``tinyllm.<name>`` (``solutions/tinyllm``), loaded as a package of its own
    beside the code under test: what a drawn case expects is the reference's answer to it, worked
    out here in the judge, where the learner's code never runs."""
    if REFERENCE_PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(REFERENCE_PACKAGE, REFERENCE / "__init__.py",
                                                      submodule_search_locations=[str(REFERENCE)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[REFERENCE_PACKAGE] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{REFERENCE_PACKAGE}.{name}")
