"""Run a module's graded suite in a child process and decide each test's outcome from its records.

The child is ``python -m pytest`` with ol's recorder plugin (:mod:`grader.child.recorder`) and no other
plugin, configuration, or cache. The plugin streams one record per test over a pipe; this module
is the watchdog: a test that runs past its timeout has its whole process group killed (a loop in
Python or inside numpy's C code stops all the same), is recorded as timed out, and the remaining
tests run in a fresh process. A test passes only when its own record says so; a process that
exits early, hangs at import, or never reports a test fails those tests with the reason.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader.core.paths import REPO
from grader.core.protocol import (FD_ENV, HANG_DUMP, HANG_SIGNAL, IMPL_ENV, LEARNER_IMPL_ENV, NONCE_ENV, TEST_TIMEOUT_ENV,
                                  WALL_FACTOR, where_in_dump)
from grader.core.sandbox import Sandbox, limit_process
from grader.layout.catalog import Module
from grader.layout.stubs import written_functions

# Starting Python, numpy and pytest, and importing the suite, on a busy machine.
STARTUP_ALLOWANCE = 10.0
# How long a finished session may take to exit (atexit handlers of the code under test).
EXIT_GRACE = 3.0
# In an isolated check the judge ends a test that runs out of time itself (grader.child.judge: its CPU
# bound, or WALL_FACTOR times it on the wall clock) and goes on; the watchdog waits until then and
# this much longer before it kills the judge.
JUDGE_GRACE = 2.0


def judge_grace(timeout: float) -> float:
    """How much longer than ``timeout`` the watchdog gives a test of an isolated check."""
    return (WALL_FACTOR - 1) * timeout + JUDGE_GRACE

# Test processes running now, so an interrupted ol can stop them all (see stop_all).
_LIVE: set[subprocess.Popen] = set()

PYTEST_INI = """[pytest]
addopts =
python_files = test_*.py
console_output_style = classic
"""


@dataclass
class TestOutcome:
    name: str                 # the catalog's test name (the pytest function without "test_")
    status: str               # "pass" | "fail" | "error" (error: timed out or the process died)
    message: str | None
    duration: float

    @property
    def timed_out(self) -> bool:
        return self.status == "error" and (self.message or "").startswith("timed out")


@dataclass
class SuiteRun:
    outcomes: dict[str, TestOutcome]     # by test name, in catalog order, for the tests that were selected
    problem: str | None = None           # what went wrong with the run as a whole, if anything
    extra: list[str] = field(default_factory=list)   # test functions in the suite the catalog does not list
    output: str = ""                     # what pytest printed (its failure reports), every process in turn
    broken: str | None = None            # why no test could run at all (the code under test did not import)

    @property
    def passed(self) -> list[str]:
        return [n for n, o in self.outcomes.items() if o.status == "pass"]

    @property
    def failed(self) -> list[str]:
        return [n for n, o in self.outcomes.items() if o.status != "pass"]

    @property
    def all_passed(self) -> bool:
        return bool(self.outcomes) and not self.failed


def run_limit(module: Module, timeout: float) -> float:
    """The bound on a whole run: every test at its timeout, plus startup."""
    return timeout * len(module.tests) + 2 * STARTUP_ALLOWANCE


def run_suite(module: Module, impl: Path, timeout: float | None = None, keyword: str | None = None,
              limit: float | None = None, on_outcome: Callable[[TestOutcome], None] | None = None,
              sandbox: Sandbox | None = None, env: dict[str, str] | None = None) -> SuiteRun:
    """Run ``module``'s graded suite against the ``tinyllm`` package in ``impl``.

    ``timeout`` bounds each test (default: the catalog's), ``limit`` the whole run (default
    :func:`run_limit`); ``keyword`` is pytest's ``-k``. ``on_outcome`` hears each test's outcome as
    soon as it is known. With a ``sandbox`` (an isolated check) every test process has
    :func:`~grader.core.sandbox.limit_process`'s limits; ``env`` adds to its environment.
    """
    timeout = timeout or module.timeout
    state = _RunState(module, keyword is not None, time.monotonic() + (limit or run_limit(module, timeout)),
                      on_outcome, str(impl / "tinyllm"))
    with tempfile.TemporaryDirectory(prefix="ol-run-") as tmp:
        rundir = Path(tmp)
        (rundir / "pytest.ini").write_text(PYTEST_INI)
        targets = [str(module.suite)]
        while True:
            _run_once(module, impl, rundir, targets, keyword if not state.restarted else None, timeout, state,
                      sandbox, env or {})
            if state.stopped or not state.remaining():
                break
            state.restarted = True
            targets = [f"{module.suite}::test_{name}" for name in state.remaining()]
    return state.finish()


class _RunState:
    """What every child process of one run has reported so far."""

    def __init__(self, module: Module, keyword: bool, deadline: float,
                 on_outcome: Callable[[TestOutcome], None] | None, package: str) -> None:
        self.module = module
        self.catalog_names = module.test_names
        self.expected: list[str] | None = None if keyword else list(self.catalog_names)
        self.deadline = deadline
        self.on_outcome = on_outcome
        self.items: dict[str, list[str]] = {}              # test name -> its pytest node ids
        self.item_results: dict[str, TestOutcome] = {}     # node id -> outcome
        self.outcomes: dict[str, TestOutcome] = {}
        self.collect_errors: list[str] = []
        self.extra: list[str] = []
        self.problem: str | None = None
        self.stopped = False
        self.restarted = False
        self.package = package    # the assembled package's temporary path, shown to people as "tinyllm"
        self.output: list[str] = []
        self.broken: str | None = None

    def remaining(self) -> list[str]:
        return [n for n in (self.expected or []) if n not in self.outcomes]

    def collected(self, node_ids: list[str]) -> None:
        names = {}
        for node_id in node_ids:
            function = node_id.split("::")[-1].split("[")[0]
            name = function.removeprefix("test_")
            if name in self.catalog_names:
                names.setdefault(name, []).append(node_id)
            elif function not in self.extra:
                self.extra.append(function)
        self.items.update(names)
        if self.expected is None:
            self.expected = [n for n in self.catalog_names if n in names]

    def item_done(self, node_id: str, outcome: TestOutcome) -> None:
        self.item_results[node_id] = outcome
        name = outcome.name
        nodes = self.items.get(name, [node_id])
        if all(n in self.item_results for n in nodes):
            parts = [self.item_results[n] for n in nodes]
            bad = next((p for p in parts if p.status != "pass"), None)
            label = ""
            if bad is not None and len(nodes) > 1:
                label = f"[{nodes[parts.index(bad)].split('[', 1)[1]} "
            merged = TestOutcome(name, bad.status if bad else "pass",
                                 f"{label}{bad.message}" if bad else None, sum(p.duration for p in parts))
            self.settle(merged)

    def settle(self, outcome: TestOutcome) -> None:
        if outcome.name in self.outcomes or (self.expected is not None and outcome.name not in self.expected):
            return
        if outcome.message:
            outcome.message = outcome.message.replace(self.package, "tinyllm")
        self.outcomes[outcome.name] = outcome
        if self.on_outcome:
            self.on_outcome(outcome)

    def fail_remaining(self, status: str, message: str) -> None:
        if not self.expected:
            self.problem = self.problem or message
        for name in self.remaining():
            self.settle(TestOutcome(name, status, message, 0.0))
        self.stopped = True

    def finish(self) -> SuiteRun:
        if self.expected is None:
            self.expected = []
        ordered = {n: self.outcomes[n] for n in self.expected if n in self.outcomes}
        return SuiteRun(ordered, self.problem, self.extra, "".join(self.output).replace(self.package, "tinyllm"),
                        self.broken)

    def fail_unimported(self, message: str) -> None:
        """No test ran because the code under test could not be imported: every remaining test fails."""
        self.broken = self.broken or message
        self.fail_remaining("fail", message)


def _child_env(impl: Path, fd: int, nonce: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update({
        IMPL_ENV: str(impl),
        FD_ENV: str(fd),
        NONCE_ENV: nonce,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": str(REPO),
    })
    # One BLAS thread per test process: the tests' matrices are small, and mutants run side by side.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    return env


def _run_once(module: Module, impl: Path, rundir: Path, targets: list[str], keyword: str | None,
              timeout: float, state: _RunState, sandbox: Sandbox | None, extra_env: dict[str, str]) -> None:
    """One child process: run ``targets`` and feed its records into ``state`` until it ends or is killed."""
    read_fd, write_fd = os.pipe()
    nonce = secrets.token_hex(16)
    # no:unraisableexception: its teardown runs five full garbage collections, a quarter of a
    # one-test check, to report exceptions raised in __del__, which no verdict reads.
    command = [sys.executable, "-B", "-m", "pytest", *targets, "-p", "grader.child.recorder",
               "-c", str(rundir / "pytest.ini"), "--rootdir", str(module.suite.parent),
               "-p", "no:cacheprovider", "-p", "no:stepwise", "-p", "no:unraisableexception",
               "-q", "--no-header", "-rN"]
    isolated = LEARNER_IMPL_ENV in extra_env
    if isolated:
        command += ["-p", "grader.child.judge"]
    if keyword:
        command += ["-k", keyword]
    log_path = rundir / "output.log"
    with open(log_path, "wb") as log:
        try:
            env = {**_child_env(impl, write_fd, nonce), TEST_TIMEOUT_ENV: f"{timeout:g}", **extra_env}
            child = subprocess.Popen(command, cwd=rundir, env=env,
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                     start_new_session=True,
                                     preexec_fn=limit_process if sandbox is not None else None)
        finally:
            os.close(write_fd)
        _LIVE.add(child)
        try:
            _watch(child, read_fd, nonce, timeout, state, log_path, judge_grace(timeout) if isolated else 0.0)
        finally:
            os.close(read_fd)
            _kill_group(child)
            _LIVE.discard(child)
    state.output.append(log_path.read_text(errors="replace"))


def _watch(child: subprocess.Popen, read_fd: int, nonce: str, timeout: float, state: _RunState,
           log_path: Path, grace: float) -> None:
    """Feed the child's records into ``state``; kill it when a test runs ``grace`` past its timeout."""
    selector = selectors.DefaultSelector()
    selector.register(read_fd, selectors.EVENT_READ)
    phase_deadline = time.monotonic() + timeout + grace + STARTUP_ALLOWANCE
    current: str | None = None       # node id of the test running now
    current_start = 0.0
    collected = ended = False
    internal_error: str | None = None
    buffer = b""
    eof = False
    while not eof:
        now = time.monotonic()
        deadline = min(phase_deadline, state.deadline)
        if now >= deadline and ended and now < state.deadline:
            break
        if now >= deadline:
            site = _hang_site(child, log_path.parent, state.module) if current and now < state.deadline else None
            _kill_group(child)
            if now >= state.deadline:
                state.problem = "the whole check took longer than its bound and was stopped"
                if current:
                    state.item_done(current, _outcome(current, "error", "timed out: the whole check ran out of time", now - current_start))
                state.fail_remaining("error", "not run: the whole check ran out of time")
            elif current:
                where = f", in {site}" if site else ""
                state.item_done(current, _outcome(current, "error", f"timed out after {timeout:g} s{where}", now - current_start))
            elif not collected:
                state.fail_unimported(f"importing the code under test took longer than {timeout + STARTUP_ALLOWANCE:g} s; "
                                             "is there a loop at import time?")
            else:
                state.fail_remaining("fail", f"the test process stalled between tests for more than {timeout:g} s")
            return
        if not selector.select(deadline - now):
            continue
        chunk = os.read(read_fd, 65536)
        eof = not chunk
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            record = _parse(line, nonce)
            if record is None:
                continue
            event = record.get("event")
            now = time.monotonic()
            if event == "collected":
                collected = True
                state.collected([str(t) for t in record.get("tests", [])])
                phase_deadline = now + timeout + grace
            elif event == "collect_error":
                state.collect_errors.append(str(record.get("message") or "the suite could not be collected"))
            elif event == "start":
                current, current_start = str(record.get("id")), now
                phase_deadline = now + timeout + grace
            elif event == "result" and record.get("id") == current:
                status = "pass" if record.get("outcome") == "pass" else "fail"
                state.item_done(current, _outcome(current, status, record.get("message"), float(record.get("duration") or 0.0)))
                current = None
                phase_deadline = now + timeout + grace
            elif event == "internal_error":
                internal_error = str(record.get("message"))
            elif event == "end":
                ended = True
                phase_deadline = now + EXIT_GRACE
    status = _wait(child, EXIT_GRACE)
    _conclude(state, status, current, current_start, collected, ended, internal_error, log_path)


def _conclude(state: _RunState, status: int | None, current: str | None, current_start: float,
              collected: bool, ended: bool, internal_error: str | None, log_path: Path) -> None:
    """Settle what the records left open once the child has exited (``status``) or been killed."""
    how = _exit_description(status)
    if current is not None:
        reason = (f"the test stopped pytest: {internal_error}" if internal_error else
                  f"the test process {how} during this test (did the code call os._exit or crash?)")
        state.item_done(current, _outcome(current, "error", reason, time.monotonic() - current_start))
        return
    if not collected:
        reason = internal_error or _last_line(log_path) or "no output"
        state.fail_unimported(f"the test process {how} while importing the code under test: {reason}")
        return
    if state.collect_errors:
        state.fail_unimported(f"the suite could not be imported: {state.collect_errors[0]}")
        return
    if internal_error:
        stop = state.fail_unimported if not state.outcomes else lambda m: state.fail_remaining("fail", m)
        stop(f"pytest stopped: {internal_error}")
        return
    if not ended:
        state.fail_remaining("fail", f"the test process {how} before this test ran (did the code call os._exit?)")
        return
    for name in state.remaining():
        missing = name not in state.items
        state.settle(TestOutcome(name, "fail", f"the graded suite has no test_{name}" if missing else "this test did not run", 0.0))
    state.stopped = True


def _outcome(node_id: str, status: str, message: str | None, duration: float) -> TestOutcome:
    name = node_id.split("::")[-1].split("[")[0].removeprefix("test_")
    return TestOutcome(name, status, message, round(duration, 4))


def _parse(line: bytes, nonce: str) -> dict | None:
    """A record from ol's plugin, or None for anything else written to the pipe."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not secrets.compare_digest(str(record.get("nonce", "")), nonce):
        return None
    return record


def _wait(child: subprocess.Popen, grace: float) -> int | None:
    try:
        return child.wait(grace)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        return None


def stop_all() -> None:
    """Kill every test process still running (ol was interrupted)."""
    for child in list(_LIVE):
        _kill_group(child)


def _hang_site(child: subprocess.Popen, rundir: Path, module: Module) -> str | None:
    """Where in the learner's package the test process is stuck: its stack, asked for by
    ``HANG_SIGNAL`` (``grader.child.recorder``), read back within a second; a place in given code
    says so (:func:`~grader.core.protocol.where_in_dump`)."""
    if HANG_SIGNAL is None:
        return None
    try:
        os.kill(child.pid, HANG_SIGNAL)
    except (ProcessLookupError, PermissionError):
        return None
    dump, until = rundir / HANG_DUMP, time.monotonic() + 1.0
    while time.monotonic() < until and not (dump.is_file() and dump.stat().st_size):
        time.sleep(0.02)
    time.sleep(0.05)   # the handler writes the whole stack at once; this lets the last write land
    try:
        return where_in_dump(dump.read_text(errors="replace"), written_functions(module))
    except OSError:
        return None


def _kill_group(child: subprocess.Popen) -> None:
    """Kill the child and anything it started (it leads its own session)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        pass


def _exit_description(status: int | None) -> str:
    if status is None:
        return "stopped responding and was killed"
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""
