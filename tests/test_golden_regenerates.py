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


ALL = catalog_fixtures()
# The trained weights' oracle needs torch, which the course itself never installs: their bytes are
# held to the catalog's sha256 only.
FIXTURES = [(m, f) for m, f in ALL if f.get("byte_for_byte", True)]


def test_the_catalog_names_fixtures():
    assert FIXTURES, "no [[fixture]] in course/modules/*.toml"


@pytest.mark.parametrize("module, fixture", ALL, ids=[f["path"] for _, f in ALL])
def test_every_fixture_matches_its_catalog_sha256(module, fixture):
    committed = ROOT / fixture["path"]
    assert (ROOT / fixture["oracle"]).is_file(), f"{fixture['path']}: its oracle {fixture['oracle']} is missing"
    assert hashlib.sha256(committed.read_bytes()).hexdigest() == fixture["sha256"], \
        f"{fixture['path']} does not match the sha256 in {module}'s catalog"


@pytest.mark.parametrize("module, fixture", FIXTURES, ids=[f["path"] for _, f in FIXTURES])
def test_oracle_rewrites_its_fixture_byte_for_byte(module, fixture, tmp_path):
    committed = ROOT / fixture["path"]
    out = tmp_path / committed.name
    done = subprocess.run([sys.executable, str(ROOT / fixture["oracle"]), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{fixture['oracle']} failed:\n{done.stderr}"
    assert out.read_bytes() == committed.read_bytes(), \
        f"{fixture['oracle']} no longer writes {fixture['path']} ({module}): regenerate and re-record the sha256"
