"""Every golden fixture in the catalog is what its oracle writes, byte for byte, and its sha256.

Each ``[[fixture]]`` of each ``course/modules/*.toml`` names the file and the oracle script that
writes it from the reference (``python ORACLE --out PATH``). The oracle runs in its own process,
to a temporary path, and the bytes must equal the committed file's.
"""

import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def catalog_fixtures() -> list[tuple[str, dict]]:
    rows = []
    for toml in sorted((ROOT / "course/modules").glob("*.toml")):
        module = tomllib.loads(toml.read_text())
        rows += [(module["id"], fixture) for fixture in module.get("fixture", [])]
    return rows


FIXTURES = catalog_fixtures()


def test_the_catalog_names_fixtures():
    assert FIXTURES, "no [[fixture]] in course/modules/*.toml"


@pytest.mark.parametrize("module, fixture", FIXTURES, ids=[f["path"] for _, f in FIXTURES])
def test_oracle_rewrites_its_fixture_byte_for_byte(module, fixture, tmp_path):
    committed = ROOT / fixture["path"]
    out = tmp_path / committed.name
    done = subprocess.run([sys.executable, str(ROOT / fixture["oracle"]), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{fixture['oracle']} failed:\n{done.stderr}"
    assert out.read_bytes() == committed.read_bytes(), \
        f"{fixture['oracle']} no longer writes {fixture['path']} ({module}): regenerate and re-record the sha256"
    assert hashlib.sha256(committed.read_bytes()).hexdigest() == fixture["sha256"], \
        f"{fixture['path']} does not match the sha256 in {module}'s catalog"
