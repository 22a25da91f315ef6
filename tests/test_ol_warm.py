"""``ol start`` fills the hints' answer cache in the background, one warmer per module at a time."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time

from ol_helpers import ROOT, ol


def test_start_launches_a_warmer_that_yields_to_one_already_running(tmp_path):
    cache = tmp_path / "cache"
    lock_file = cache / "L10.8" / "warming.lock"
    lock_file.parent.mkdir(parents=True)
    with open(lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)   # a warmer is already at it
        ran = ol("start", "L10.8", "--workspace", str(tmp_path / "ws"),
                 env={"OL_CACHE_DIR": str(cache), "OL_NO_WARM": ""})
        assert ran.code == 0, ran.text
        assert "computing the named pitfalls' answers in the background" in ran.out
        started = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "grader.verdict.warm", "L10.8"], cwd=ROOT, capture_output=True,
                                text=True, env={"OL_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin",
                                                "PYTHONPATH": str(ROOT)}, timeout=60)
        assert second.returncode == 0, second.stderr
        assert time.monotonic() - started < 30
    assert [p.name for p in (cache / "L10.8").iterdir()] == ["warming.lock"], "a second warmer computed answers"


def test_no_warmer_when_turned_off(tmp_path):
    ran = ol("start", "L10.8", "--workspace", str(tmp_path / "ws"), env={"OL_CACHE_DIR": str(tmp_path / "c")})
    assert ran.code == 0 and "background" not in ran.out
    assert not (tmp_path / "c").exists()
