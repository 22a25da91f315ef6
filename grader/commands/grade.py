"""``ol grade``: grade a class's submissions of one module, several at a time, into ``grades.csv``.

Each submission (a folder or a zip file holding ``tinyllm/``) is graded by a process of its own
(:mod:`grader.verdict.submission`) with a sandbox of its own, so a submission that hangs, crashes, floods
its output or forks without end costs its own time bound and nothing more. ``--out`` receives
``grades.csv`` and one JSON per submission (the format of ``ol check --json``, plus the score).
Names and messages come from the class, so they are made harmless before they reach ``grades.csv``,
the JSON files and the terminal (:func:`printable`, :func:`cell`, :func:`json_names`).
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import GraderError, UsageError
from grader.core.protocol import WALL_FACTOR
from grader.core.sandbox import Sandbox, claim
from grader.core.text import number, printable, readable_json
from grader.layout.catalog import Catalog, Module, check_fixtures, load_catalog
from grader.running.grading import DEFAULT_LIMIT, Graded, draw_seed, grade_in_worker, stop_workers
from grader.running.run import run_limit

CSV_HEADER = ["submission", "score", "max_score", "status", "failed_tests", "hint"]
# The whole check of one submission, unless --limit says otherwise: CALIBRATION_FACTOR times the
# reference's check on this machine (graded first), within MIN_LIMIT..DEFAULT_LIMIT seconds: far
# above an honest submission's time, far below every test hanging to its timeout.
MIN_LIMIT = 30.0
CALIBRATION_FACTOR = 4.0
# Each test, unless --timeout says otherwise: TEST_FACTOR times the reference's time for that test
# in the same calibration, at least TEST_FLOOR and at most the catalog's timeout. Honest submissions
# graded two at a time on a busy machine took up to 3.5 times the reference's time alone: a
# bound of 10 times leaves them about 3 times that, and the floor covers the tests the reference
# does in milliseconds.
TEST_FACTOR = 10.0
TEST_FLOOR = 2.0
# The submission's name in its JSON file's name, after the position: far below any file system's 255 bytes.
JSON_NAME_LIMIT = 60


def grade(module_id: str, submissions: list[str], jobs: int = 2, out: str | None = None,
          timeout: float | None = None, limit: float | None = None, unsandboxed: bool = False,
          seed: int | None = None, hints: bool = True) -> int:
    """Grade every submission; 0 when each was graded (whatever its score), 3 when ol itself failed on
    one. Learner code runs in bubblewrap (:mod:`grader.core.sandbox`); without it ol refuses, unless
    ``unsandboxed``, which each submission's results record. ``seed``: the seed of the cases the
    grading draws (default: a fresh one), printed and written in each submission's JSON. Without
    ``hints`` no failure is compared with the pitfalls' answers (the ``hint`` column then holds only
    the reason of an ``error``)."""
    catalog = load_catalog()
    module = catalog.get(module_id)
    check_fixtures(module)
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {jobs}")
    for value, flag in ((timeout, "--timeout"), (limit, "--limit")):
        if value is not None and not value > 0:
            raise UsageError(f"{flag} must be a positive number of seconds, got {value:g}")
    if seed is not None and not 0 <= seed < 2**63:
        raise UsageError(f"--seed must be an integer in [0, 2**63), got {seed}")
    paths = _submissions(submissions)
    out_dir = Path(out or "grades")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = _unique_names(paths)
    files = json_names(names)
    box = claim(unsandboxed)
    if unsandboxed:
        print("Grading UNSANDBOXED (--unsandboxed): learner code can read and reach what ol can; "
              "each submission's results say so.", flush=True)
    started = time.monotonic()
    seed = draw_seed() if seed is None else seed
    print(f"Cases drawn for this grading: seed {seed} (--seed {seed} grades the same again).", flush=True)
    if not hints:
        print("No hints (--no-hints): failures are not compared with the pitfalls' answers; grades.csv's hint "
              "column holds only the reason of an error.", flush=True)
    bounds = Bounds(limit, {}) if limit and timeout else calibrate(catalog, module, box, timeout, seed)
    limit = limit or bounds.limit
    progress = _Progress(len(paths))
    stopping = threading.Event()

    def one(item: tuple[Path, str, str]) -> Graded:
        path, name, file = item
        progress.begin()
        graded = grade_in_worker(module.id, path, name, box, timeout, limit, hints=hints, tests=bounds.tests,
                                 seed=seed)
        if stopping.is_set():
            raise KeyboardInterrupt
        graded.results["drawn_seed"] = seed
        (out_dir / file).write_text(json.dumps(readable_json(graded.results), indent=2) + "\n")
        progress.done(graded)
        return graded

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, item) for item in zip(paths, names, files)]
        try:
            graded = [f.result() for f in futures]
        except BaseException:   # interrupted: grade nothing more, stop what runs, record none of it
            stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            stop_workers()
            raise
    progress.finish()
    with open(out_dir / "grades.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_HEADER)
        writer.writerows(g.row for g in graded)
    counts = {s: sum(1 for g in graded if g.results.get("status") == s) for s in ("pass", "fail", "error")}
    print(f"Graded {len(graded)} submissions of {module.id} in {time.monotonic() - started:.1f} s: "
          f"{counts['pass']} pass, {counts['fail']} fail, {counts['error']} error. "
          f"Wrote {out_dir / 'grades.csv'} and one JSON per submission.")
    return 3 if any(g.results.get("grader_error") for g in graded) else 0


@dataclass
class Bounds:
    limit: float                 # seconds for one submission's whole check
    tests: dict[str, float]      # seconds for each test (empty: --timeout or the catalog's, for every test)


def calibrate(catalog: Catalog, module: Module, box: Sandbox, timeout: float | None, seed: int) -> Bounds:
    """Grade the reference first: this machine must pass it, and its times set each submission's
    bounds (the whole check: ``CALIBRATION_FACTOR`` times it, within ``MIN_LIMIT``..``DEFAULT_LIMIT``
    s; each test: :func:`per_test_timeouts`, unless ``timeout`` is given). Bounds are CPU seconds of
    the learner's code, so the reference's own are the catalog's: a busy machine stretches its
    wall-clock time, never what it computes, and never makes it fail here."""
    print(f"Checking the reference's {module.id} here first ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="ol-grade-ref-") as tmp:
        package = Path(tmp) / "reference" / "tinyllm"
        package.mkdir(parents=True)
        for name in module.learner_files:
            shutil.copyfile(catalog.reference / "tinyllm" / name, package / name)
        bound = run_limit(module, timeout or module.timeout)
        graded = grade_in_worker(module.id, package.parent, "reference", box, timeout, bound, hints=False, seed=seed)
    if graded.results.get("status") != "pass":
        failed = [t["name"] for t in graded.results.get("tests", []) if t.get("status") != "pass"]
        why = graded.results.get("message") or f"{', '.join(failed[:3])} failed"
        raise GraderError(f"the reference does not pass {module.id} on this machine ({why}); nothing was graded")
    limit = min(DEFAULT_LIMIT, max(MIN_LIMIT, CALIBRATION_FACTOR * graded.seconds))
    tests = {} if timeout else per_test_timeouts(graded.results, module.timeout)
    each = (f"each test by {min(tests.values()):g} to {max(tests.values()):g} s ({TEST_FACTOR:g} times the reference's, "
            f"at least {TEST_FLOOR:g} s, at most the catalog's {module.timeout:g} s)" if tests else
            f"each test by {timeout or module.timeout:g} s")
    print(f"The reference passes in {graded.seconds:.1f} s; each submission's check is bounded by {limit:.0f} s, "
          f"{each}, in CPU time of the learner's code; on the clock, {WALL_FACTOR:g} times that "
          "(--limit, --timeout to change).", flush=True)
    return Bounds(limit, tests)


def per_test_timeouts(results: dict, ceiling: float) -> dict[str, float]:
    """Each test's timeout from the reference's time for it: ``TEST_FACTOR`` times it, within
    ``TEST_FLOOR``..``ceiling`` seconds (rounded up to a tenth)."""
    return {t["name"]: min(ceiling, max(TEST_FLOOR, math.ceil(10 * TEST_FACTOR * float(t.get("duration") or 0)) / 10))
            for t in results.get("tests", [])}


def _submissions(given: list[str]) -> list[Path]:
    if not given:
        raise UsageError("name at least one submission (a folder or a zip file holding tinyllm/)")
    paths = []
    for text in given:
        path = Path(text)
        if not path.exists():
            raise UsageError(f"no such submission: {printable(text)}")
        paths.append(path)
    return paths


def _unique_names(paths: list[Path]) -> list[str]:
    """Each submission's name in grades.csv and on the terminal: its folder or zip name made
    :func:`printable`, numbered (``-2``, ``-3``, ...) when an earlier one has the same. A number
    never gives a name another submission has of its own: two ``bob`` and a ``bob-2`` are
    ``bob``, ``bob-3`` and ``bob-2``, so no row carries another's name."""
    bases = [printable(path.name or str(path)) for path in paths]
    names: list[str] = []
    for base in bases:
        name, n = base, 1
        while name in names or (name != base and name in bases):
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return names


def json_names(names: list[str]) -> list[str]:
    """Each submission's JSON file: its position in grades.csv, then its name cut to what any file
    system takes (``003-alice.json``), so no two collide and no name is too long or unwritable."""
    width = max(3, len(str(len(names))))
    return [f"{i:0{width}d}-{re.sub(r'[^A-Za-z0-9._-]+', '_', name)[:JSON_NAME_LIMIT]}.json"
            for i, name in enumerate(names, 1)]


class _Progress:
    """A bar redrawn in place on a terminal; one line per graded submission otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.finished = 0
        self.running = 0
        self.tty = sys.stdout.isatty()
        self.lock = threading.Lock()

    def begin(self) -> None:
        with self.lock:
            self.running += 1
            self._draw()

    def done(self, graded: Graded) -> None:
        with self.lock:
            self.running -= 1
            self.finished += 1
            if self.tty:
                self._draw()
            else:
                r = graded.results
                print(f"[{self.finished}/{self.total}] {graded.submission}: {r.get('status')} "
                      f"{number(r.get('score', 0))}/{number(r.get('max_score', 0))} ({graded.seconds:.1f} s)", flush=True)

    def _draw(self) -> None:
        if not self.tty:
            return
        width = 30
        filled = width * self.finished // max(self.total, 1)
        sys.stdout.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.finished}/{self.total} graded, "
                         f"{self.running} running ")
        sys.stdout.flush()

    def finish(self) -> None:
        if self.tty:
            sys.stdout.write("\n")
