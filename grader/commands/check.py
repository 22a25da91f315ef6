"""``ol check``: run a module's graded tests against the learner's code; the exit code is the verdict."""

from __future__ import annotations

import ast
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader import assemble, isolation, sandbox
from grader.catalog import Catalog, Module, check_fixtures, load_catalog
from grader.cases import ANSWERS_ENV
from grader.diagnose import Diagnosis, diagnose, read_recorded
from grader.errors import OlError, UsageError
from grader.run import SuiteRun, TestOutcome, run_suite
from grader.workspace import Workspace, resolve_workspace

RESULTS_VERSION = 3
LABELS = {"pass": "pass", "fail": "FAIL", "error": "ERROR"}


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
        if text is None:
            return None
        for path in sorted(self.paths, key=len, reverse=True):
            text = text.replace(path.rstrip("/") + "/", "").replace(path.rstrip("/"), ".")
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


def check(module_id: str, workspace: str | None = None, ref_deps: bool = False, keyword: str | None = None,
          timeout: float | None = None, json_path: str | None = None, verbose: bool = False,
          isolate: bool = False) -> int:
    """Check ``module_id`` in the workspace: 0 when every selected test passes, 1 otherwise.

    ``verbose`` also prints pytest's own report of each failure (tracebacks, assertion details).
    ``isolate`` runs the learner's code in a sandboxed process of its own (:mod:`grader.isolation`),
    as ``ol grade`` and the platform exports do: slower, and a verdict the code cannot forge. It
    grades the module alone: the modules it needs come from the reference (their objects, a
    ``KvPool`` the given model writes into, must live where the suite's given code runs).

    Usage problems raise :class:`UsageError` (exit 2), a grader that cannot run
    :class:`GraderError` (exit 3); with ``json_path`` either is also written there as an error.
    """
    try:
        catalog = load_catalog()
        module = catalog.get(module_id)
        if timeout is not None and not timeout > 0:
            raise UsageError(f"--timeout must be a positive number of seconds, got {timeout:g}")
        ws = resolve_workspace(workspace)
        missing = ws.missing_files(module)
        if missing:
            raise UsageError(f"{module.id} is not started: {_names(missing)} not in {ws.package}. "
                             f"Run: ol start {module.id}")
        check_fixtures(module)
        if not ref_deps and not isolate:
            _require_needs(catalog, module, ws)
        sources = assemble.plan(catalog, module, ws, ref_deps or isolate,
                                "--ref-deps" if ref_deps else f"isolated: {module.id} alone is graded")
        fingerprint = assemble.digest(sources, module)
        print(f"Checking {module.id} ({module.title}) in {ws.root}")
        _print_sources(sources)
        with tempfile.TemporaryDirectory(prefix="ol-check-") as tmp:
            if isolate:
                sandbox.hide_memory()
                with sandbox.held(sandbox.claim(required=False)) as box:
                    if not box.contained:
                        print(f"  (not sandboxed: {sandbox.why_not_contained()})")
                    impl, env = isolation.prepare(sources, Path(tmp), box)
                    result, run = evaluate(catalog, module, impl, timeout, keyword, _OutcomePrinter(),
                                           announce_diagnosis=True, sandbox=box, env=env)
            else:
                impl = assemble.build(sources, Path(tmp))
                result, run = evaluate(catalog, module, impl, timeout, keyword, _OutcomePrinter(), announce_diagnosis=True)
        result.paths += (str(ws.root),)
    except OlError as err:
        if json_path:
            write_json(json_path, CheckResult.failed_to_run(module_id, str(err)))
        raise
    if not run.outcomes and not run.problem:
        message = f"no test of {module.id} matches -k {keyword!r}; see: ol tests {module.id}"
        if json_path:
            write_json(json_path, CheckResult.failed_to_run(module.id, message))
        raise UsageError(message)
    if verbose and run.failed:
        print(f"\npytest's report:\n{run.output.rstrip()}")
    _print_summary(module, run, keyword, result.seconds, result.diagnosis)
    statuses = {name: o.status for name, o in run.outcomes.items()}
    ws.record_check(module.id, statuses, full=keyword is None, ref_deps=ref_deps,
                    digest=fingerprint if keyword is None else None)
    if json_path:
        write_json(json_path, result)
    return 0 if run.all_passed and not run.problem else 1


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
    return diagnose(catalog, module, impl, failed, timeout or module.timeout,
                    recorded=read_recorded(answers, module.test_names), isolated=isolated)


def _is_stub(message: str | None) -> bool:
    return "NotImplementedError" in (message or "")


def _timed_out(message: str | None) -> bool:
    return (message or "").startswith("timed out")


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _run(module: Module, sources: list[assemble.Source], timeout: float | None, keyword: str | None,
         on_outcome) -> SuiteRun:
    with tempfile.TemporaryDirectory(prefix="ol-check-") as tmp:
        impl = assemble.build(sources, Path(tmp))
        return run_suite(module, impl, timeout=timeout, keyword=keyword, on_outcome=on_outcome)


def _require_needs(catalog: Catalog, module: Module, ws: Workspace) -> None:
    """Refuse (exit 2) when a module ``module`` needs is not started or not passing in the workspace.

    A needed module's verdict is reused from its last check when its sources have not changed
    since; otherwise its suite runs first.
    """
    needs = catalog.needs_of(module)
    for dep in needs:
        missing = ws.missing_files(dep)
        if missing:
            raise UsageError(f"{module.id} needs {dep.id}, and {_names(missing)} not in your workspace. "
                             f"Check against the reference's {dep.id} with: ol check {module.id} --ref-deps "
                             f"(or start it: ol start {dep.id})")
    for dep in needs:
        sources = assemble.plan(catalog, dep, ws, ref_deps=False)
        fingerprint = assemble.digest(sources, dep)
        last = ws.last_checks().get(dep.id, {})
        if last.get("digest") == fingerprint and not last.get("ref_deps"):
            statuses = last.get("tests", {})
        else:
            check_fixtures(dep)
            print(f"{module.id} needs {dep.id}; checking your {dep.id} first ...", flush=True)
            run = _run(dep, sources, None, None, None)
            statuses = {name: o.status for name, o in run.outcomes.items()}
            ws.record_check(dep.id, statuses, full=True, ref_deps=False, digest=fingerprint)
        failing = [n for n in dep.test_names if statuses.get(n) != "pass"]
        if failing:
            shown = ", ".join(failing[:3]) + (", ..." if len(failing) > 3 else "")
            raise UsageError(f"{module.id} needs {dep.id}, and your {dep.id} fails {len(failing)} of {len(dep.tests)} "
                             f"tests ({shown}). Fix it (ol check {dep.id}), or check {module.id} against the "
                             f"reference's {dep.id}: ol check {module.id} --ref-deps")


def _names(files: list[str]) -> str:
    listed = ", ".join(f"tinyllm/{f}" for f in files)
    return f"{listed} is" if len(files) == 1 else f"{listed} are"


def _print_sources(sources: list[assemble.Source]) -> None:
    width = max(len(s.name) for s in sources) + len("tinyllm/")
    for s in sources:
        print(f"  {'tinyllm/' + s.name:<{width}}  {s.origin} ({s.why})")
    print(flush=True)


class _OutcomePrinter:
    """One line per test as it finishes; a reason just printed for the test before reads "same reason"."""

    def __init__(self) -> None:
        self.last: str | None = None

    def __call__(self, outcome: TestOutcome) -> None:
        label = "TIMEOUT" if outcome.timed_out else LABELS[outcome.status]
        headline, *details = (outcome.message or "").splitlines() or [""]
        reason = ""
        if outcome.status != "pass" and outcome.message:
            reason = "  (same reason)" if outcome.message == self.last else f"  {headline}"
        print(f"  {label:<7}  {outcome.name}{reason}", flush=True)
        if outcome.status != "pass" and outcome.message != self.last:
            for line in details:
                print(f"           {line}", flush=True)
        self.last = outcome.message


def _print_summary(module: Module, run: SuiteRun, keyword: str | None, seconds: float,
                   diagnosis: Diagnosis | None) -> None:
    total = len(run.outcomes)
    if not total:
        print(f"\nNo test ran: {run.problem}.")
        return
    scope = f" (selected with -k {keyword!r}; the module has {len(module.tests)})" if keyword else ""
    print(f"\n{len(run.passed)} of {total} tests passed{scope} ({seconds:.1f} s).")
    if run.problem:
        print(f"Note: {run.problem}.")
    if run.extra:
        print(f"Note: the suite has tests the catalog does not list, not counted: {', '.join(run.extra)}.")
    if diagnosis is not None:
        for line in diagnosis.hint_lines():
            print(line)


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
