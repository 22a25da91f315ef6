"""A check's result: one module's suite run over one assembled package, its failures diagnosed.

What ``ol check`` prints and writes with ``--json``, and what a grading process
(:mod:`grader.verdict.submission`) reports for a submission.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.cases import first_line
from grader.core.errors import UsageError
from grader.core.protocol import ANSWERS_ENV
from grader.layout.catalog import Catalog, Module
from grader.running.run import SuiteRun, TestOutcome, run_suite
from grader.verdict.diagnose import Diagnosis, TestDiagnosis, diagnose, read_recorded

RESULTS_VERSION = 3

@dataclass
class CheckResult:
    """One check of a module over one assembled package: what ``ol check --json`` and ``ol grade`` report.

    ``status`` follows exercism's test-runner results v3: ``"error"`` when no test result stands for
    the code (the code under test could not be imported, the whole check ran out of time, a usage or
    grader error), with the reason in ``message``; else ``"pass"`` or ``"fail"`` and no message.
    """

    module_id: str
    status: str
    message: str | None
    outcomes: list[TestOutcome] = field(default_factory=list)
    diagnosis: Diagnosis | None = None
    seconds: float = 0.0
    module: Module | None = None
    paths: tuple[str, ...] = ()      # absolute folders shown relative in messages (the course, the workspace)

    @classmethod
    def failed_to_run(cls, module_id: str, message: str, module: Module | None = None) -> "CheckResult":
        return cls(module_id, "error", message, module=module)

    def points(self) -> tuple[float, float]:
        """The points of the passed tests and of all the module's tests (the catalog's ``points``, 1 by default)."""
        if self.module is None:
            return 0.0, 0.0
        weights = {t.name: t.points for t in self.module.tests}
        return sum(weights.get(o.name, 0.0) for o in self.outcomes if o.status == "pass"), sum(weights.values())

    def as_json(self) -> dict:
        """Per-test results in the format grader/README.md documents (exercism test-runner v3)."""
        sources = test_sources(self.module) if self.module is not None else {}
        tasks = {t.name: t.task_id for t in self.module.tests} if self.module is not None else {}
        tests = []
        for o in self.outcomes:
            entry = {"name": o.name, "status": o.status, "message": self._relative(o.message),
                     "duration": o.duration, "test_code": sources.get(o.name, ""),
                     "diagnosis": self.diagnosis.as_json(o.name) if self.diagnosis is not None else None}
            if tasks.get(o.name) is not None:
                entry["task_id"] = tasks[o.name]
            tests.append(entry)
        return {"version": RESULTS_VERSION, "status": self.status,
                "message": self._relative(self.message) if self.status == "error" else None,
                "module": self.module_id, "tests": tests}

    def _relative(self, text: str | None) -> str | None:
        """``text`` with each of ``paths`` shown relative (``.`` for the folder itself), where a path
        starts: ``/check/work/main/x`` is not ``/work/main/x``."""
        if text is None:
            return None
        for path in sorted(self.paths, key=len, reverse=True):
            starts = re.compile(rf"(?<![\w./~-]){re.escape(path.rstrip('/'))}(/|(?![\w.-]))")
            text = starts.sub(lambda m: "" if m.group(1) == "/" else ".", text)
        return text


def evaluate(catalog: Catalog, module: Module, impl: Path, timeout: float | None = None,
             keyword: str | None = None, on_outcome=None, announce_diagnosis: bool = False,
             limit: float | None = None, diagnose_failures: bool = True, **run_options) -> tuple[CheckResult, SuiteRun]:
    """Run ``module``'s suite on the package in ``impl`` and diagnose its failures; nothing is printed
    except through ``on_outcome`` and, with ``announce_diagnosis``, a line before the diagnosis."""
    with tempfile.TemporaryDirectory(prefix="ol-answers-") as answers:
        if diagnose_failures:
            # The suite writes each test's answers down as it checks them: the diagnosis reads them
            # instead of running the learner's code again.
            run_options["env"] = {**(run_options.get("env") or {}), ANSWERS_ENV: answers}
        started = time.monotonic()
        run = run_suite(module, impl, timeout=timeout, keyword=keyword, limit=limit, on_outcome=on_outcome,
                        **run_options)
        seconds = time.monotonic() - started
        diagnosis = (_diagnose(catalog, module, impl, run, timeout, announce_diagnosis, Path(answers),
                               isolated=run_options.get("sandbox") is not None) if diagnose_failures else None)
    stopped = run.problem or run.broken
    if stopped:
        status = "error"
    else:
        status = "pass" if run.all_passed else "fail" if run.outcomes else "error"
    result = CheckResult(module.id, status, stopped if status == "error" else None, list(run.outcomes.values()),
                         diagnosis, seconds, module, (str(impl), str(catalog.root)))
    return result, run


def _diagnose(catalog: Catalog, module: Module, impl: Path, run: SuiteRun, timeout: float | None,
              announce: bool, answers: Path, isolated: bool = False) -> Diagnosis | None:
    """Compare the learner's answers on the tests that failed on an assertion with each named pitfall's.

    Tests that failed on a stub, a crash, a timeout or a broken import are left out: their message
    already says what is wrong, and there are no answers to compare.
    """
    if run.problem or run.broken:
        return None
    failed = [n for n, o in run.outcomes.items()
              if o.status == "fail" and not _is_stub(o.message) and not _timed_out(o.message)]
    if not failed:
        return None
    if announce:
        print(f"\nComparing your answers on {_plural(len(failed), 'failing test')} with the reference's and each "
              "named pitfall's ...", flush=True)
    try:
        return diagnose(catalog, module, impl, failed, timeout or module.timeout,
                        recorded=read_recorded(answers, module.test_names), isolated=isolated)
    except Exception as err:  # a hint helps; the verdict stands without one, so failing to find one never fails a check
        note = f"no diagnosis: ol could not compare these answers ({type(err).__name__}: {first_line(str(err))})"
        return Diagnosis(module, {test: TestDiagnosis(test, note=note) for test in failed})


def _is_stub(message: str | None) -> bool:
    return "NotImplementedError" in (message or "")


def _timed_out(message: str | None) -> bool:
    return (message or "").startswith("timed out")


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def write_json(path: str, result: CheckResult) -> None:
    try:
        Path(path).write_text(json.dumps(result.as_json(), indent=2) + "\n")
    except OSError as err:
        raise UsageError(f"cannot write the results to {path}: {err}") from err


def test_sources(module: Module) -> dict[str, str]:
    """Each catalog test's code, for people: the suite's ``cases_<name>()`` builder and ``test_<name>()``."""
    try:
        text = module.suite.read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return {}
    functions = {node.name: ast.get_source_segment(text, node) or "" for node in tree.body
                 if isinstance(node, ast.FunctionDef)}
    return {t.name: "\n\n".join(functions[f] for f in (f"cases_{t.name}", t.function) if f in functions)
            for t in module.tests}
