"""A pitfall's mutant: its patch applied to a copy of the reference."""

from __future__ import annotations

import subprocess
from pathlib import Path


def apply_patch(patch: Path, tree: Path) -> str | None:
    """Apply ``patch`` with ``patch -p1`` inside ``tree``; the reason it failed, or None."""
    if not patch.is_file():
        return f"the mutant {patch} is missing"
    try:
        done = subprocess.run(["patch", "-p1", "--batch", "--forward", "--silent", "-d", str(tree), "-i", str(patch)],
                              capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "the 'patch' program is not installed"
    if done.returncode != 0:
        detail = (done.stdout + done.stderr).strip().splitlines()
        return f"{patch.name} does not apply to the reference ({detail[0] if detail else 'patch failed'})"
    return None
