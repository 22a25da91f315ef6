"""Compute a graded suite's case answers over one ``tinyllm`` package, in a process of its own.

    python -m grader.case_worker SUITE IMPL OUT TEST [TEST ...]

``SUITE`` is a graded test file, ``IMPL`` the folder holding ``tinyllm/`` (bound through
``OL_IMPL`` as in a check), ``OUT`` the JSON file to write. For each ``TEST`` it calls the suite's
``cases_<TEST>()`` and writes ``{TEST: {"cases": [{"label", "call", "compare", "answer"}, ...]}}``;
a stub's NotImplementedError becomes the answer ``{"stub": message}``, and a builder that fails,
``{TEST: {"error": message}}``. ol runs it on learner code it does not trust: the process may hang
or exit, and ol only reads the file it leaves.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

STUB = "stub"


def answers(suite: Path, tests: list[str]) -> dict:
    module = _import_suite(suite)
    found: dict = {}
    for test in tests:
        builder = getattr(module, f"cases_{test}", None)
        if builder is None:
            found[test] = {"error": f"the suite has no cases_{test}()"}
            continue
        try:
            cases = builder()
        except NotImplementedError as err:
            found[test] = {"error": f"{STUB}: {_first_line(err)}"}
            continue
        except Exception as err:  # learner code run while building the cases
            found[test] = {"error": f"building the cases raised {type(err).__name__}: {_first_line(err)}"}
            continue
        found[test] = {"cases": [_case(case) for case in cases]}
    return found


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
    sys.path.insert(0, str(suite.parent))
    spec = importlib.util.spec_from_file_location(suite.stem, suite)
    module = importlib.util.module_from_spec(spec)
    sys.modules[suite.stem] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    suite, impl, out, *tests = argv
    os.environ["OL_IMPL"] = impl
    result = answers(Path(suite), tests)
    tmp = Path(f"{out}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
