"""``ol check``: run a module's graded tests against the learner's code; the exit code is the verdict."""

from __future__ import annotations

import tempfile
from pathlib import Path

from grader.core import sandbox
from grader.core.errors import OlError, UsageError
from grader.layout import assemble
from grader.layout.catalog import Catalog, Module, check_fixtures, load_catalog
from grader.layout.workspace import Workspace, resolve_workspace
from grader.running.isolate import prepare
from grader.running.run import SuiteRun, TestOutcome, run_suite
from grader.verdict.diagnose import Diagnosis
from grader.verdict.evaluate import CheckResult, evaluate, write_json

LABELS = {"pass": "pass", "fail": "FAIL", "error": "ERROR"}


def check(module_id: str, workspace: str | None = None, ref_deps: bool = False, keyword: str | None = None,
          timeout: float | None = None, json_path: str | None = None, verbose: bool = False,
          isolate: bool = False) -> int:
    """Check ``module_id`` in the workspace: 0 when every selected test passes, 1 otherwise.

    ``verbose`` also prints pytest's own report of each failure (tracebacks, assertion details).
    ``isolate`` runs the learner's code in a sandboxed process of its own (:mod:`grader.child.judge`),
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
                    impl, env = prepare(sources, Path(tmp), box)
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
        for line in diagnosis.hint_lines({name: o.message or "" for name, o in run.outcomes.items()}):
            print(line)


