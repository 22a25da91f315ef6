"""What every oracle shares: the command line that writes its fixture (``python ORACLE --out PATH``)."""

import argparse
import json
from pathlib import Path
from typing import Callable


def indented(fixture: dict) -> str:
    """Sorted keys and a fixed layout: a second run writes the same bytes."""
    return json.dumps(fixture, sort_keys=True, indent=1) + "\n"


def write_main(doc: str, build: Callable[[], dict], render: Callable[[dict], str] = indented) -> None:
    """Parse ``--out`` and write ``render(build())`` there; ``doc`` is the oracle's docstring."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON fixture")
    out = parser.parse_args().out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(build()))
