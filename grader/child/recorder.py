"""Entry point of ol's test process (the judge), loaded as ``-p grader.child.recorder``: a pytest
plugin that streams each test's outcome to ol over a pipe.

ol decides the verdict from these records, not from pytest's exit code or output. The records go
to a pipe ol opened for this process alone (its number and a per-run nonce arrive in environment
variables this module removes as soon as it is imported, before any code under test runs).

A test counts as passed only when its function really ran (seen from ``pytest_pyfunc_call``,
below any report pytest or a plugin could rewrite) and raised nothing, its setup and teardown
succeeded, it was not skipped, and pytest's machinery is still the one this module saw at start.
Learner code that replaces pytest's functions, registers its own plugin, or stubs out numpy's
assertions fails every test from then on, with a message naming what changed.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import sys
import time

import pytest

from grader.core.protocol import FD_ENV, HANG_DUMP, HANG_SIGNAL, NONCE_ENV, where_in_package

MESSAGE_LIMIT = 400
# A failed case's message (grader.cases) spans lines: which case, the call, expected, yours, the rule.
ASSERTION_LIMIT = 2000

_fd = int(os.environ.pop(FD_ENV, "-1"))
_nonce = os.environ.pop(NONCE_ENV, "")
if _fd >= 0:
    os.set_inheritable(_fd, False)

# The modules whose functions decide whether a test failed. Names bound when this plugin loads
# must still be bound to the same objects whenever a test starts or ends.
_WATCHED_MODULES = (
    "builtins", "pytest", "pluggy", "pluggy._hooks", "pluggy._callers", "pluggy._manager", "pluggy._result",
    "_pytest.runner", "_pytest.python", "_pytest.reports", "_pytest.main", "_pytest.outcomes",
    "_pytest.python_api", "_pytest.raises", "_pytest.fixtures", "_pytest.nodes", "_pytest.skipping",
    "_pytest.assertion.rewrite", "numpy.testing", "numpy.testing._private.utils", "numpy", "grader.cases", __name__,
)
_WATCHED_CLASSES = (
    ("_pytest.python", "Function"), ("_pytest.nodes", "Item"), ("_pytest.nodes", "Node"),
    ("_pytest.reports", "TestReport"), ("_pytest.reports", "BaseReport"), ("_pytest.runner", "CallInfo"),
    ("_pytest.main", "Session"), ("pluggy", "HookCaller"), ("pluggy", "PluginManager"),
    ("pluggy._result", "Result"), ("_pytest.fixtures", "FixtureDef"), ("_pytest.fixtures", "FixtureRequest"),
    ("_pytest.config", "Config"),
)


def _send(record: dict) -> None:
    if _fd < 0:
        return
    data = (json.dumps({"nonce": _nonce, **record}) + "\n").encode()
    while data:
        data = data[os.write(_fd, data):]


def _first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= MESSAGE_LIMIT else line[:MESSAGE_LIMIT - 3] + "..."


def _describe(exc: BaseException) -> str:
    """``Type: first line``, plus where in the code under test it was raised when not an assert.

    A failed assertion keeps its whole message: the graded tests write the failing case there.
    """
    if isinstance(exc, AssertionError) and str(exc).strip():
        text = "\n".join(line.rstrip() for line in str(exc).strip().splitlines())
        return text if len(text) <= ASSERTION_LIMIT else text[:ASSERTION_LIMIT - 3] + "..."
    detail = _first_line(str(exc))
    if getattr(type(exc), "says_it_all", False):    # ol's own reasons (grader.child.judge): no class name
        return detail
    name = type(exc).__name__
    text = f"{name}: {detail}" if detail else name
    where = None if isinstance(exc, AssertionError) else where_in_package(exc.__traceback__)
    return f"{text} ({where})" if where else text


def _report_reason(report) -> str:
    """The exception line of a failed report (the last "E   ..." line in pytest's text), with the
    place in the package under test when pytest names one (a syntax error's file and line)."""
    text = getattr(report, "longreprtext", "") or ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    if not errors:
        return _first_line(text) or "failed"
    place = next((e for e in errors if e.startswith('File "') and "/tinyllm/" in e), None)
    if place:
        place = "tinyllm/" + place.split("/tinyllm/", 1)[1].replace('", line', ", line")
    return _first_line(f"{errors[-1]} ({place})" if place else errors[-1])


class _Snapshot:
    """What the watched modules and classes were bound to when the plugin loaded."""

    def __init__(self) -> None:
        self.namespaces: list[tuple[str, object, dict]] = []
        for name in _WATCHED_MODULES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            self.namespaces.append((name, module, dict(vars(module))))
        for module_name, class_name in _WATCHED_CLASSES:
            cls = getattr(sys.modules.get(module_name), class_name, None)
            if isinstance(cls, type):
                self.namespaces.append((f"{module_name}.{class_name}", cls, dict(vars(cls))))
        self.modules = {name: sys.modules.get(name) for name in _WATCHED_MODULES}

    def first_change(self) -> str | None:
        for name, module in self.modules.items():
            if module is not None and sys.modules.get(name) is not module:
                return f"the module {name} was replaced in sys.modules"
        for where, owner, before in self.namespaces:
            now = vars(owner)
            for key, value in before.items():
                if now.get(key, _Snapshot) is not value:
                    return f"{where}.{key} was replaced"
        return None


class Recorder:
    """Collects what each test did and streams one record per test to ol."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.snapshot = _Snapshot()
        self.tampered: str | None = None
        self.plugins: set[int] = set()
        self.item: dict = {}

    def _check_machinery(self) -> None:
        if self.tampered:
            return
        change = self.snapshot.first_change()
        if change is None:
            extra = [p for p in self.config.pluginmanager.get_plugins() if id(p) not in self.plugins and not _is_conftest(p)]
            if extra:
                change = f"a pytest plugin was registered by the code under test ({_plugin_name(extra[0])})"
        if change:
            self.tampered = f"the code under test changed the test machinery: {change}"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.plugins = {id(p) for p in self.config.pluginmanager.get_plugins()}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            _send({"event": "collect_error", "where": report.nodeid, "message": _report_reason(report)})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._check_machinery()
        _send({"event": "collected", "tests": [item.nodeid for item in session.items]})

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self._check_machinery()
        self.item = {"called": False, "error": None, "started": time.perf_counter()}
        _send({"event": "start", "id": nodeid})

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        self.item["called"] = True
        try:
            return (yield)
        except BaseException as exc:
            self.item["error"] = _describe(exc)
            raise

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when != "call":
            if call.excinfo is not None and not self.item.get("error"):
                skipped = call.excinfo.errisinstance(pytest.skip.Exception)
                prefix = "skipped" if skipped else f"error in {call.when}"
                self.item["error"] = f"{prefix}: {_report_reason(report) if report.failed else _describe(call.excinfo.value)}"
        elif report.failed and not self.item.get("error"):
            self.item["error"] = _report_reason(report)
        return report

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self._check_machinery()
        item = self.item
        if self.tampered:
            outcome, message = "fail", self.tampered
        elif item.get("error"):
            outcome, message = "fail", item["error"]
        elif not item.get("called"):
            outcome, message = "fail", "the test function never ran"
        else:
            outcome, message = "pass", None
        _send({"event": "result", "id": nodeid, "outcome": outcome, "message": message,
               "duration": round(time.perf_counter() - item.get("started", time.perf_counter()), 4)})

    def pytest_internalerror(self, excrepr, excinfo) -> None:
        _send({"event": "internal_error", "message": _describe(excinfo.value)})

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        _send({"event": "internal_error", "message": _describe(excinfo.value)})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._check_machinery()
        _send({"event": "end", "exitstatus": int(exitstatus), "tampered": self.tampered})


def _is_conftest(plugin: object) -> bool:
    return os.path.basename(getattr(plugin, "__file__", "") or "") == "conftest.py"


def _plugin_name(plugin: object) -> str:
    return getattr(plugin, "__name__", None) or type(plugin).__name__


def pytest_configure(config: pytest.Config) -> None:
    _dump_stack_on_signal()   # first: the recorder's snapshot of this module then holds the open file
    config.pluginmanager.register(Recorder(config), "ol-recorder")


_HANG_FILE = None   # kept open for faulthandler, which writes to it from its signal handler


def _dump_stack_on_signal() -> None:
    """ol asks a test past its timeout where it is (``HANG_SIGNAL``) before killing it: the stack
    goes to ``HANG_DUMP``, written from C, so a loop in numpy's code answers too."""
    global _HANG_FILE
    if HANG_SIGNAL is None:
        return
    try:
        _HANG_FILE = open(HANG_DUMP, "w")
        faulthandler.register(HANG_SIGNAL, file=_HANG_FILE, all_threads=False)
    except (OSError, RuntimeError, ValueError):
        _HANG_FILE = None   # a folder we may not write: the timeout is reported without a place

