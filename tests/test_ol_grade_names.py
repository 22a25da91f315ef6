"""``ol grade`` survives any name and any zip: one intact row per submission, whatever the class holds."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import zipfile
from pathlib import Path

import pytest
from ol_helpers import REFERENCE, ol

from grader.commands.grade import _unique_names, json_names
from grader.core import sandbox
from grader.core.text import cell
from grader.layout.catalog import load_catalog
from grader.running.grading import Graded
from grader.verdict import platform

CORRECT = (REFERENCE / "spec.py").read_bytes()
FORMULA = "=2+5+cmd|' -C calc'!A0"
# A name that would redraw the terminal's line and print a verdict of its own (a folder's name holds no '/').
FORGER = "mallory\r\x1b[2K[1\u22159] control: pass 20\u221520 (1.0 s)\n[9\u22159] x\u2028y"
# An import error whose message holds bytes that are not UTF-8.
BAD_BYTES_IMPORT = b"raise ImportError(b'bad \\xff\\xfe bytes'.decode('utf-8', 'surrogateescape'))\n"
CSV_HEADER = ["submission", "score", "max_score", "status", "failed_tests", "hint"]


def folder(root: Path, name: str | bytes, spec: bytes | None = None) -> Path:
    """A submission folder (``name`` as bytes: not UTF-8); with ``tinyllm/spec.py`` when ``spec`` is given."""
    path = os.path.join(os.fsencode(root), os.fsencode(name))
    os.makedirs(path)
    if spec is not None:
        os.makedirs(os.path.join(path, b"tinyllm"))
        with open(os.path.join(path, b"tinyllm", b"spec.py"), "wb") as f:
            f.write(spec)
    return Path(os.fsdecode(path))


def zipped(path: Path, entries: dict[str, bytes], method: int = zipfile.ZIP_STORED,
           link: bool = False) -> bytes:
    """Write a zip of ``entries`` (their names as written) and return its bytes."""
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = method
            if link:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, data)
    return path.read_bytes()


def patched(path: Path, data: bytes, old: bytes, new: bytes, flags: int) -> Path:
    """``data`` with every ``old`` replaced by ``new`` (same length) and ``flags`` set on every entry."""
    data = bytearray(data.replace(old, new))
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):   # local and central headers
        at = data.find(signature)
        while at >= 0:
            data[at + offset] |= flags & 0xFF
            data[at + offset + 1] |= flags >> 8
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
    return path


def hostile_zips(root: Path) -> dict[str, Path]:
    """Each zip a class can hold that cannot be graded, by what is wrong with it."""
    root.mkdir()
    spec = {"tinyllm/spec.py": CORRECT}
    made = {}
    made["encrypted"] = patched(root / "encrypted.zip", zipped(root / "encrypted.zip", spec), b"", b"", 0x1)
    made["not UTF-8"] = patched(root / "names.zip", zipped(root / "names.zip", {"tinyllm/X.py": b"", **spec}),
                                b"tinyllm/X.py", b"tinyllm/\xff.py", 0x800)
    bomb = root / "bomb.zip"
    zipped(bomb, {"tinyllm/spec.py": CORRECT + b"#" * (8 << 20)}, zipfile.ZIP_DEFLATED)
    made["larger"] = bomb
    made["symbolic link"] = root / "link.zip"
    zipped(made["symbolic link"], {"tinyllm/spec.py": str(REFERENCE / "spec.py").encode()}, link=True)
    made["outside"] = root / "traversal.zip"
    zipped(made["outside"], {**spec, "../../escaped.py": b"print('out')\n"})
    made["more than"] = root / "many.zip"
    zipped(made["more than"], {**spec, **{f"tinyllm/m{i}.py": b"" for i in range(200)}})
    damaged = bytearray(zipped(root / "damaged.zip", spec, zipfile.ZIP_DEFLATED))
    middle = damaged.find(b"tinyllm/spec.py") + 200
    damaged[middle:middle + 64] = bytes(64)
    made["cannot be read"] = root / "damaged.zip"
    made["cannot be read"].write_bytes(bytes(damaged))
    return made


@pytest.mark.usefixtures("sandboxed")
def test_any_name_and_any_zip_gets_one_intact_row(tmp_path):
    subs = tmp_path / "subs"
    control = folder(subs, "control", CORRECT)
    long_name = folder(subs, "n" * 252, CORRECT)
    undecodable = folder(subs, b"caf\xe9-\xff", BAD_BYTES_IMPORT)
    formula = folder(subs, FORMULA)
    forger = folder(subs, FORGER)
    dups = [folder(subs / "a", "dup"), folder(subs / "b", "dup"), folder(subs, "dup-2")]
    linked = folder(subs, "linked")
    (linked / "tinyllm").mkdir()
    (linked / "tinyllm" / "spec.py").symlink_to(REFERENCE / "spec.py")
    zips = hostile_zips(tmp_path / "zips")
    everything = [control, long_name, undecodable, formula, forger, *dups, linked, *zips.values()]

    out = tmp_path / "out"
    # Nothing here hangs: bounds generous enough that a busy machine does not fail the correct ones.
    ran = ol("grade", "L10.8", *map(str, everything), "--jobs", "2", "--out", str(out),
             "--timeout", "30", "--limit", "120", limit=600)
    assert ran.code == 0, ran.text

    rows = list(csv.reader(io.StringIO((out / "grades.csv").read_bytes().decode("utf-8"), newline="")))
    assert rows[0] == CSV_HEADER
    rows = rows[1:]
    assert len(rows) == len(everything) and all(len(r) == len(CSV_HEADER) for r in rows), rows
    names = [r[0] for r in rows]
    assert names == [cell(name) for name in _unique_names(everything)]
    assert names[2] == "caf\\xe9-\\xff" and names[3] == "'" + FORMULA
    assert names[5:8] == ["dup", "dup-3", "dup-2"]   # b/dup is not numbered as the submission named dup-2
    for row in rows:
        assert not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in row), row
        assert not any(ch in c for c in row for ch in "\n\r\x1b\u2028"), row
    by_position = [dict(zip(CSV_HEADER, r)) for r in rows]
    for graded in by_position[:2]:
        assert (graded["status"], graded["score"], graded["max_score"]) == ("pass", "20", "20"), graded
    for graded in by_position[2:]:
        assert graded["status"] == "error" and graded["score"] == "0", graded
    assert "bad \\xff\\xfe bytes" in by_position[2]["hint"]
    assert by_position[3]["hint"].startswith("'" + FORMULA)
    assert "symbolic link" in by_position[8]["hint"]
    for graded, why in zip(by_position[9:], zips):
        assert why in graded["hint"], (why, graded)

    files = sorted(p.name for p in out.glob("*.json"))
    assert files == json_names(names) and len(set(files)) == len(everything)
    for name in files:
        text = (out / name).read_bytes().decode("utf-8")
        assert "\\ud" not in text.lower(), name       # no lone surrogate for a strict reader to refuse
        json.loads(text)

    # One progress line per submission, each its own: no name redraws the line or starts another.
    assert not any(ch in ran.out for ch in "\r\x1b\u2028")
    progress = [line for line in ran.out.splitlines() if re.match(r"\[\d+/\d+\] ", line)]
    assert len(progress) == len(everything), ran.out
    assert sum(": pass 20/20 " in line for line in progress) == 2, ran.out
    assert any(line.startswith(f"[{len(progress)}/{len(everything)}]") for line in progress)
    assert "mallory\\r\\x1b[2K" in ran.out


def test_names_for_people_and_files():
    names = _unique_names([Path("a/x"), Path("b/x"), Path("x-2"), Path(os.fsdecode(b"caf\xe9")), Path("a\tb")])
    # b/x is numbered past x-2, a submission's own name: no row carries another submission's name
    assert names == ["x", "x-3", "x-2", "caf\\xe9", "a\\tb"]
    files = json_names(names + ["n" * 252])
    assert files[0] == "001-x.json" and files[3] == "004-caf_xe9.json"
    assert len(set(files)) == len(files) and all(len(f.encode()) < 80 for f in files)
    assert cell("@SUM(A1)") == "'@SUM(A1)" and cell("-1") == "'-1" and cell("20") == "20"
    assert len(cell("x" * 10**6)) == 1000


def test_platform_results_survive_bytes_that_are_not_utf8(tmp_path, monkeypatch):
    """A learner's message with bytes that are not UTF-8 still gives the platform a results.json it can read."""
    message = "the suite could not be imported: bad \udcff bytes"
    results = {"version": 3, "status": "error", "message": message, "tests": [], "score": 0.0,
               "max_score": 20.0, "hint": ""}
    monkeypatch.setattr(platform, "grade_in_worker", lambda *args, **named: Graded("submission", results, 1.0))
    monkeypatch.setattr(platform, "claim", lambda **_: sandbox.Sandbox())
    config = tmp_path / "ol-export.json"
    config.write_text(json.dumps({"module": "L10.8", "timeout": None, "limit": 20.0, "hints": False}))
    module = load_catalog().get("L10.8")
    for name, variable in (("gradescope", "OL_AUTOGRADER_DIR"), ("prairielearn", "OL_GRADE_DIR")):
        base = tmp_path / name
        monkeypatch.setenv(variable, str(base))
        assert platform.run_platform(name, config) == 0
        text = (base / "results" / "results.json").read_bytes().decode("utf-8")
        assert "\\ud" not in text.lower() and "bad \\\\xff bytes" in text, text[:500]
        written = json.loads(text)
        assert len(written["tests"]) == len(module.tests)
