"""Entry point of a submission's grading process: ``python -m grader.verdict.submission MODULE OUT [options]``
(``ol grade`` and the platform exports start it, :mod:`grader.running.grading`).

``OL_SUBMISSION`` (in the environment, so that no command line names it) is a folder or a zip file
holding ``tinyllm/`` (at its top or one folder down). Its
``tinyllm/*.py`` files are copied (or extracted) into a temporary workspace, never changed where
they are; the check runs there as an isolated check (:mod:`grader.child.judge`: the learner's code in
a :class:`~grader.core.sandbox.Sandbox` of its own), and ``OUT`` receives the results as
``ol check --json`` writes them, plus ``score``, ``max_score`` and ``hint``. ``ol grade`` runs one such
process per submission, in a cgroup of its own where the machine has them, so a submission that
exhausts memory, floods or forks harms only its own process tree, which is killed when it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

from grader.core import sandbox
from grader.core.errors import OlError
from grader.core.protocol import CHECK_CPU_ENV, LEARNER_IMPL_ENV, SUBMISSION_ENV, check_wall
from grader.layout import assemble
from grader.layout.catalog import check_fixtures, load_catalog
from grader.layout.workspace import Workspace
from grader.running import isolate
from grader.verdict.evaluate import CheckResult, evaluate

PACKAGE = "tinyllm"
# A learner's file is source code: anything larger is not a submission to run.
MAX_FILE = 1 << 20
MAX_FILES = 200
# Reading a zip's directory costs time and memory in proportion to its entries (200,000 took 1 s and
# 17 MiB): this bounds them, far above a zipped tinyllm/ (the whole course is 5 MiB).
MAX_ARCHIVE = 64 << 20
ENCRYPTED = 0x1     # bit 0 of a zip entry's flags: a password is needed to read it


class BadSubmission(Exception):
    """The submission holds no gradable ``tinyllm/``; the message says why, for the grades table."""


def locate_package(root: Path) -> Path:
    """The ``tinyllm`` folder in ``root``: at its top, one folder down, ``root`` itself, or (no such
    folder anywhere) ``root`` when it holds ``.py`` files."""
    if root.name == PACKAGE and root.is_dir() and not root.is_symlink():
        return root
    direct = root / PACKAGE
    if direct.is_symlink():
        raise BadSubmission("tinyllm/ is a symbolic link: submit the folder itself")
    if direct.is_dir():
        return direct
    nested = sorted(p / PACKAGE for p in root.iterdir()
                    if p.is_dir() and not p.is_symlink() and (p / PACKAGE).is_dir() and not p.name.startswith("__MACOSX"))
    linked = [p for p in nested if p.is_symlink()]
    if linked:
        raise BadSubmission(f"{linked[0].relative_to(root)} is a symbolic link: submit the folder itself")
    if len(nested) == 1:
        return nested[0]
    if nested:
        raise BadSubmission(f"several tinyllm/ folders: {', '.join(str(p.relative_to(root)) for p in nested)}")
    if any(p.is_file() for p in root.glob("*.py")):
        return root    # the files alone, as a platform's upload form keeps them
    raise BadSubmission("no tinyllm/ folder (looked at the top and one folder down) and no .py file at the top")


def copy_package(submission: Path, dest: Path) -> Path:
    """Copy the submission's ``tinyllm/*.py`` into ``dest/tinyllm``; return ``dest`` (the workspace)."""
    package = dest / PACKAGE
    package.mkdir(parents=True)
    if submission.is_dir():
        source = locate_package(submission)
        files = [p for p in sorted(source.glob("*.py")) if p.is_symlink() or p.is_file()]
        _check_count(len(files))
        for path in files:
            _check_name(path.name)
            if path.is_symlink():
                raise BadSubmission(f"tinyllm/{path.name} is a symbolic link: submit the file itself")
            if path.stat().st_size > MAX_FILE:
                raise BadSubmission(f"tinyllm/{path.name} is larger than {MAX_FILE >> 10} KiB")
            shutil.copyfile(path, package / path.name)
        return dest
    # is_file first: zipfile would wait forever on a named pipe.
    if submission.is_file() and zipfile.is_zipfile(submission):
        for name, data in _extract_package(submission).items():
            (package / name).write_bytes(data)
        return dest
    raise BadSubmission("neither a folder nor a zip file")


def _check_name(name: str) -> None:
    """A module's file: a Python identifier and ``.py``, as ``import`` needs (a name is the
    learner's to choose, and the grader's own files name the modules by it)."""
    if not name[:-3].isidentifier() or not name.isascii():
        raise BadSubmission(f"tinyllm/{name[:80]!r} is not a module's file name: a Python identifier, then .py")


def _check_count(count: int) -> None:
    if count > MAX_FILES:
        raise BadSubmission(f"tinyllm/ holds {count} .py files, more than {MAX_FILES}")


def _extract_package(archive: Path) -> dict[str, bytes]:
    """The ``.py`` files directly inside the archive's one ``tinyllm/`` folder, by name. A zip that
    cannot be read, or holds an entry that is encrypted, a link, too large or outside the zip's
    folder, is refused with the reason."""
    if archive.stat().st_size > MAX_ARCHIVE:
        raise BadSubmission(f"the zip is larger than {MAX_ARCHIVE >> 20} MiB: zip the tinyllm/ folder alone")
    try:
        with zipfile.ZipFile(archive) as z:
            return _read_package(z)
    except BadSubmission:
        raise
    except UnicodeDecodeError as err:
        raise BadSubmission("a file name in the zip is not UTF-8, though the zip says it is") from err
    # A damaged zip fails in many ways (BadZipFile, zlib.error, lzma.LZMAError, EOFError, struct.error,
    # NotImplementedError for an unknown method, ...): each means only that it cannot be read.
    except Exception as err:
        raise BadSubmission(f"the zip cannot be read: {err or type(err).__name__}") from err


def _read_package(z: zipfile.ZipFile) -> dict[str, bytes]:
    infos = z.infolist()
    for info in infos:
        parts = info.filename.split("/")
        if info.filename.startswith("/") or ".." in parts:
            raise BadSubmission(f"the zip's entry {info.filename} points outside the zip's folder")
    entries = [i for i in infos if not i.is_dir() and not i.filename.startswith("__MACOSX/")]
    folders = sorted({"/".join(parts[:-1]) for parts in (i.filename.split("/") for i in entries)
                      if len(parts) in (2, 3) and parts[-2] == PACKAGE and parts[-1].endswith(".py")})
    if not folders:
        raise BadSubmission("no tinyllm/ folder in the zip (looked at the top and one folder down)")
    if len(folders) > 1:
        raise BadSubmission(f"several tinyllm/ folders in the zip: {', '.join(folders)}")
    chosen = [i for i in entries if i.filename.rsplit("/", 1)[0] == folders[0] and i.filename.endswith(".py")]
    _check_count(len(chosen))
    files = {}
    for info in chosen:
        name = info.filename.rsplit("/", 1)[1]
        _check_name(name)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise BadSubmission(f"tinyllm/{name} is a symbolic link in the zip: zip the file itself")
        if info.flag_bits & ENCRYPTED:
            raise BadSubmission(f"tinyllm/{name} is encrypted in the zip: zip it again without a password")
        if info.file_size > MAX_FILE:
            raise BadSubmission(f"tinyllm/{name} is larger than {MAX_FILE >> 10} KiB")
        with z.open(info) as src:
            data = src.read(MAX_FILE + 1)   # never more, whatever the entry claims: a zip bomb stops here
        if len(data) > MAX_FILE:
            raise BadSubmission(f"tinyllm/{name} is larger than {MAX_FILE >> 10} KiB")
        files[name] = data
    return files


def grade_one(module_id: str, submission: Path, timeout: float | None, limit: float | None,
              box: sandbox.Sandbox, hints: bool = True) -> dict:
    """The results of one submission (``ol check --json``'s format plus its score and hint)."""
    catalog = load_catalog()
    module = catalog.get(module_id)
    check_fixtures(module)
    with tempfile.TemporaryDirectory(prefix="ol-grade-") as tmp:
        try:
            ws = Workspace(copy_package(submission, Path(tmp) / "workspace"))
        except (BadSubmission, OSError) as err:
            return _with_score(CheckResult.failed_to_run(module.id, f"{submission.name}: {err}", module))
        missing = ws.missing_files(module)
        if missing:
            why = ", ".join(f"tinyllm/{f}" for f in missing)
            return _with_score(CheckResult.failed_to_run(module.id, f"missing from the submission: {why}", module))
        # Each module is graded alone: the modules it needs come from the reference (the given model
        # writes K/V into their KvPool, which must live in the judge; and a mistake in L10.1 costs
        # points in L10.1 only).
        sources = assemble.plan(catalog, module, ws, True, f"{module.id} alone is graded")
        judge_impl, env = isolate.prepare(sources, Path(tmp) / "isolated", box)
        if limit is not None:
            env[CHECK_CPU_ENV] = f"{limit:g}"
        result, _ = evaluate(catalog, module, judge_impl, timeout, limit=limit and check_wall(limit),
                             sandbox=box, env=env,
                             diagnose_failures=hints)
        result.paths += (env[LEARNER_IMPL_ENV],)
    return _with_score(result)


def _with_score(result: CheckResult) -> dict:
    score, max_score = result.points()
    hints = result.diagnosis.hint_lines() if result.diagnosis is not None else []
    return {**result.as_json(), "score": score, "max_score": max_score, "hint": hints[0] if hints else ""}


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt     # unwinds through main's cleanup: what this grading started is killed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.verdict.submission")
    parser.add_argument("module")
    parser.add_argument("out", type=Path)
    parser.add_argument("--sandbox", default=None, help="the sandbox, as Sandbox.to_env writes it")
    parser.add_argument("--timeout", type=float)
    parser.add_argument("--limit", type=float)
    parser.add_argument("--no-hints", action="store_true")
    args = parser.parse_args(argv)
    sandbox.become_subreaper()
    sandbox.hide_memory()
    signal.signal(signal.SIGTERM, _stop)
    try:
        given = sandbox.Sandbox.from_env(args.sandbox) if args.sandbox is not None else sandbox.claim()
        with sandbox.held(given, whole_tree=True) as box:
            results = grade_one(args.module, Path(os.environ[SUBMISSION_ENV]), args.timeout, args.limit, box,
                                hints=not args.no_hints)
            if not box.contained:
                results["sandbox"] = "none: graded with --unsandboxed"
    except OlError as err:
        results = {**CheckResult.failed_to_run(args.module, str(err)).as_json(), "score": 0.0, "max_score": 0.0,
                   "hint": "", "grader_error": True}
    finally:
        sandbox.kill_descendants()
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
