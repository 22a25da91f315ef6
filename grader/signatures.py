"""Each named pitfall's failure signature: the tests its mutant fails, as ``ol mutants --save`` found them.

``ol check`` uses them for hints: a learner whose failing tests include a pitfall's whole signature
(its named test among them, failing on an assertion) probably made that mistake. The files live in
``grader/signatures/<module>.json``; without one, a pitfall's signature is its named test alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from grader.catalog import Module, Pitfall

SIGNATURES_DIR = Path(__file__).resolve().parent / "signatures"


def path_for(module_id: str) -> Path:
    return SIGNATURES_DIR / f"{module_id}.json"


def load(module_id: str) -> dict[str, list[str]]:
    """Pitfall id -> the tests its mutant fails; empty when none were saved or the file is unreadable."""
    try:
        data = json.loads(path_for(module_id).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): [str(t) for t in v] for k, v in data.items()} if isinstance(data, dict) else {}


def save(module_id: str, signatures: dict[str, list[str]]) -> Path:
    path = path_for(module_id)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(signatures, indent=1) + "\n")
    return path


def matching(module: Module, failing: set[str], failing_on_assert: set[str]) -> list[Pitfall]:
    """Pitfalls whose named test is in ``failing_on_assert`` and whose whole signature is in ``failing``.

    A signature equal to ``failing`` is an exact match and, if there is one, only exact matches are
    returned; otherwise the largest signatures (those explaining the most failures) come first.
    """
    saved = load(module.id)
    found: list[tuple[int, Pitfall]] = []
    for pitfall in module.pitfalls:
        signature = set(saved.get(pitfall.id, [pitfall.caught_by]))
        if pitfall.caught_by in failing_on_assert and signature <= failing:
            found.append((len(signature), pitfall))
    exact = [p for size, p in found if size == len(failing)]
    if exact:
        return exact
    return [p for _, p in sorted(found, key=lambda sp: -sp[0])]
