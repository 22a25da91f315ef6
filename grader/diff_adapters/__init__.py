"""Case views of the differential tests, one module per course module, for ``ol diff``.

A module ``l10_8.py`` serves ``L10.8``. It maps a differential test's name to a :class:`Differ`:
``cases(root)`` lists the test's cases (a label, the inputs shown to people, and a payload), and
``answer(payload)`` computes one case's answer with whatever ``tinyllm`` is first on ``sys.path``.
ol runs ``answer`` twice in separate processes, once over the reference and once over the
learner's package, and shows where the answers part.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Case:
    label: str
    inputs: str          # for people, one line
    payload: Any


@dataclass(frozen=True)
class Differ:
    cases: Callable[[Path], list[Case]]
    answer: Callable[[Any], Any]


def differs_for(module_id: str) -> dict[str, Differ]:
    """The differential tests ``module_id``'s adapter knows, or none."""
    try:
        adapter = importlib.import_module(f"{__name__}.{module_id.lower().replace('.', '_')}")
    except ModuleNotFoundError:
        return {}
    return dict(adapter.DIFFERS)


def load_json(root: Path, relpath: str) -> Any:
    return json.loads((root / relpath).read_text())


def short(values, limit: int = 12) -> str:
    """A list shown in one line: all of it, or its two ends and how many items it has."""
    values = [str(v) for v in values]
    if len(values) <= limit:
        return f"[{', '.join(values)}]"
    half = limit // 2
    return f"[{', '.join(values[:half])}, ..., {', '.join(values[-half:])}] ({len(values)} items)"
