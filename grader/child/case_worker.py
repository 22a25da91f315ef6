"""Entry point of a diagnosis's worker process: a graded suite's case answers over ``tinyllm`` packages.

    python -m grader.child.case_worker SUITE JOBS

``SUITE`` is a graded test file; ``JOBS`` a JSON file listing packages, each
``{"impl": folder holding tinyllm/, "out": JSON file to write, "tests": [...], "trace": bool}``.
The packages are done one after the other in this process (numpy, scipy and the fixtures are
loaded once); before each, the previous package and the suite are unloaded and ``OL_IMPL`` points
at the next, as in a check. For each test it calls the suite's ``cases_<test>()`` and writes
``{test: {"cases": [{"label", "call", "compare", "answer"}, ...]}}``; a stub's
NotImplementedError becomes the answer ``{"stub": message}``, and a builder that fails,
``{test: {"error": message}}``. With ``trace``, each test also lists the functions of the package
its cases called (``"called": ["spec.py:verify_draft", ...]``): a pitfall that changes none of them
answers that test as the reference does, and the diagnosis need not run it.

ol runs it on learner code it does not trust (one package, the learner's, per process): the process
may hang or exit, and ol only reads the files it leaves.
"""

from __future__ import annotations

import cProfile
import importlib.util
import json
import os
import sys
from pathlib import Path

from grader.core.protocol import IMPL_ENV

STUB = "stub"


def answers(suite: Path, tests: list[str], package: Path | None = None) -> dict:
    """Each test's answers over the package ``OL_IMPL`` names; with ``package``, also what they called."""
    module = _import_suite(suite)
    found: dict = {}
    for test in tests:
        builder = getattr(module, f"cases_{test}", None)
        if builder is None:
            found[test] = {"error": f"the suite has no cases_{test}()"}
            continue
        if package is None:
            found[test] = _test_answers(builder)
            continue
        profile = cProfile.Profile()   # C-level: it slows the cases far less than a trace function
        profile.enable()
        try:
            found[test] = _test_answers(builder)
        finally:
            profile.disable()
        found[test]["called"] = _called(profile, str(package.resolve() / "tinyllm"))
    return found


def _test_answers(builder) -> dict:
    try:
        cases = builder()
    except NotImplementedError as err:
        return {"error": f"{STUB}: {_first_line(err)}"}
    except Exception as err:  # learner code run while building the cases
        return {"error": f"building the cases raised {type(err).__name__}: {_first_line(err)}"}
    return {"cases": [_case(case) for case in cases]}


def _called(profile: cProfile.Profile, folder: str) -> list[str]:
    """``file.py:qualname`` of each function of the package that ran while ``profile`` was on."""
    codes = (entry.code for entry in profile.getstats())
    return sorted({f"{Path(c.co_filename).name}:{c.co_qualname}" for c in codes
                   if not isinstance(c, str) and c.co_filename.startswith(folder)})


def _case(case) -> dict:
    try:
        answer = case.answer()
    except NotImplementedError as err:
        answer = {STUB: _first_line(err)}
    return {"label": case.label, "call": case.call, "compare": case.compare, "answer": answer}


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _import_suite(suite: Path):
    if str(suite.parent) not in sys.path:
        sys.path.insert(0, str(suite.parent))
    spec = importlib.util.spec_from_file_location(suite.stem, suite)
    module = importlib.util.module_from_spec(spec)
    sys.modules[suite.stem] = module
    spec.loader.exec_module(module)
    return module


def _unload(suite: Path, impl: str | None) -> None:
    """Forget the suite's modules and the last package, so the next import binds the next package."""
    folder = str(suite.parent.resolve())
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None) or ""
        if name == "tinyllm" or name.startswith("tinyllm.") or where.startswith(folder):
            del sys.modules[name]
    if impl is not None:
        sys.path[:] = [p for p in sys.path if p != str(Path(impl).resolve())]


def run_jobs(suite: Path, jobs: list[dict]) -> None:
    previous = None
    for job in jobs:
        _unload(suite, previous)
        os.environ[IMPL_ENV] = job["impl"]
        previous = job["impl"]
        result = answers(suite, job["tests"], Path(job["impl"]) if job.get("trace") else None)
        tmp = Path(f"{job['out']}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(job["out"])


def main(argv: list[str]) -> int:
    suite, jobs = argv
    run_jobs(Path(suite), json.loads(Path(jobs).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
