"""The check cell: the module's graded tests through ``ol check --json``, shown as a table.

Your workspace is checked when your code is running; otherwise a scratch workspace holding a copy
of the reference's learner file, so you see what a full pass looks like. The verdict is ol's: the
notebook runs no grader of its own.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Sequence

from course.chapters import REFERENCE, ROOT, chapter
from course.display import NOTE, chip, first_line
from course.reload import refresh
from course.state import STATE, current, scratch_dir

PASS, FAIL, ERROR, NOT_RUN = "pass", "fail", "error", "not run"


@dataclass
class TestResult:
    name: str
    status: str
    message: str = ""  # first line: the headline; the lines after it: the failing case
    duration: float | None = None
    diagnosis: dict | None = None  # {"summary": ..., "pitfalls": [...]} when ol recognised a pitfall

    @property
    def headline(self) -> str:
        lines = self.message.strip().splitlines()
        return lines[0] if lines else ""

    @property
    def details(self) -> str:
        return "\n".join(self.message.strip().splitlines()[1:]).strip("\n")


@dataclass
class CheckReport:
    """What ``ol check`` said about some graded tests, shown as a table."""

    status: str  # pass, fail, error, or "not run" when ol could not be run
    tests: list[TestResult] = field(default_factory=list)
    note: str = ""
    checked: str = ""
    module_id: str = ""  # the module ol checked

    @property
    def passed(self) -> int:
        return sum(t.status == PASS for t in self.tests)

    def __repr__(self) -> str:
        return f"CheckReport({self.status}, {self.passed} of {len(self.tests)} passed)"

    def _repr_html_(self) -> str:
        return report_html(self)


Runner = Callable[[list[str], Path], "subprocess.CompletedProcess[str]"]


def _run(command: list[str], cwd: Path) -> "subprocess.CompletedProcess[str]":
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def grader_available() -> bool:
    return (ROOT / "grader" / "__main__.py").is_file()


def check(*tests: str, runner: Runner = _run) -> CheckReport:
    """Run these graded tests of the module through ``ol check`` and return the table.

    Your workspace is checked when your code is running; otherwise a scratch workspace holding a
    copy of the reference's learner file, so you see what a full pass looks like.
    """
    refresh()
    running = current()
    chosen = STATE.chapter or chapter()
    if not grader_available():
        return CheckReport(NOT_RUN, [TestResult(t, NOT_RUN) for t in tests],
                           note=("<code>ol</code> is not available in this checkout yet "
                                 f"(no {ROOT / 'grader' / '__main__.py'}); these are the tests this "
                                 "cell will run once it is"))
    if running.learner:
        workspace = running.workspace
        checked = f"your workspace {workspace}"
    else:
        workspace = scratch_dir("tinyllm-check-")
        (workspace / "tinyllm").mkdir()
        shutil.copyfile(REFERENCE / chosen.learner_file, workspace / "tinyllm" / chosen.learner_file)
        checked = f"a scratch workspace holding the reference {chosen.learner_file}"
    result_file = scratch_dir("tinyllm-result-") / "result.json"
    command = [sys.executable, "-m", "grader", "check", chosen.id, "--ref-deps", "--workspace",
               str(workspace), "--json", str(result_file), "-k", " or ".join(tests)]
    try:
        done = runner(command, ROOT)
    except (OSError, subprocess.SubprocessError) as err:
        return CheckReport(ERROR, [TestResult(t, NOT_RUN) for t in tests],
                           note=f"ol could not be started: {html.escape(first_line(err))}",
                           checked=checked)
    return read_report(result_file, tests, done, checked, chosen.id)


def _diagnosis(value) -> dict | None:
    if not isinstance(value, dict) or not str(value.get("summary") or "").strip():
        return None
    pitfalls = value.get("pitfalls")
    return {"summary": str(value["summary"]).strip(),
            "pitfalls": [str(p) for p in pitfalls] if isinstance(pitfalls, list) else []}


def read_report(result_file: Path, tests: Sequence[str],
                done: "subprocess.CompletedProcess[str]", checked: str, module_id: str = "") -> CheckReport:
    """Turn ``ol check --json`` output into a report; name what went wrong when there is none."""
    try:
        data = json.loads(Path(result_file).read_text())
    except (OSError, json.JSONDecodeError):
        said = (done.stdout + done.stderr).strip().splitlines()[-6:]
        return CheckReport(ERROR, [TestResult(t, NOT_RUN) for t in tests],
                           note=(f"ol check exited with code {done.returncode} and wrote no results"
                                 + (":<pre>" + html.escape("\n".join(said)) + "</pre>" if said else "")),
                           checked=checked)
    seen = {}
    for entry in data.get("tests", []):
        name = str(entry.get("name", ""))
        name = name[5:] if name.startswith("test_") else name
        seen[name] = TestResult(name, str(entry.get("status", ERROR)), str(entry.get("message") or ""),
                                entry.get("duration"), _diagnosis(entry.get("diagnosis")))
    results = [seen.pop(t, TestResult(t, ERROR, "ol did not run this test: it is not in the module's "
                                                "suite (yet)"))
               for t in tests]
    results.extend(seen.values())
    status = PASS if results and all(t.status == PASS for t in results) else FAIL
    if data.get("status") == ERROR:
        status = ERROR
    note = html.escape(str(data.get("message") or ""))
    return CheckReport(status, results, note=note, checked=checked, module_id=module_id)


_LEFT = ' style="text-align:left;vertical-align:top"'
_STATUS = MappingProxyType({PASS: ("✔ pass", "pass"), FAIL: ("✘ fail", "fail"), ERROR: ("✘ error", "fail"),
           NOT_RUN: ("· not run", "note")})


def report_html(report: CheckReport) -> str:
    module_id = report.module_id or (STATE.chapter or chapter()).id
    rows = []
    for t in report.tests:
        label, kind = _STATUS.get(t.status, (t.status, "note"))
        took = f"{t.duration:.2f} s" if isinstance(t.duration, (int, float)) else ""
        rows.append(f'<tr class="course-check-row"><td{_LEFT}><code>{html.escape(t.name)}</code></td>'
                    f"<td{_LEFT}>{chip(label, kind)}</td><td{_LEFT}>{html.escape(t.headline[:240])}</td>"
                    f'<td style="white-space:nowrap">{took}</td></tr>')
        more = ""
        if t.details:
            more += (f"<details><summary>the failing case</summary>"
                     f'<pre style="white-space:pre-wrap;margin:4px 0">{html.escape(t.details)}</pre></details>')
        if t.diagnosis:
            pitfalls = ", ".join(t.diagnosis["pitfalls"])
            more += (f'<div class="course-diagnosis" style="{NOTE}"><b>Likely cause:</b> '
                     f"{html.escape(t.diagnosis['summary'])}"
                     + (f" (pitfall {html.escape(pitfalls)}; <code>ol tests {module_id}</code> lists it)"
                        if pitfalls else "") + "</div>")
        if more:
            rows.append(f'<tr class="course-check-more"><td></td><td colspan="3"{_LEFT}>{more}</td></tr>')
    head = f"<b>ol check {module_id}</b>: {report.passed} of {len(report.tests)} tests passed"
    if report.checked:
        head += f" (checked: {html.escape(report.checked)})"
    note = f"<div>{report.note}</div>" if report.note else ""
    return (f'<div class="course-check" style="color:var(--jp-ui-font-color1,inherit)">{head}{note}'
            '<table class="course-check-table">'
            f"<tr><th{_LEFT}>test</th><th{_LEFT}>status</th><th{_LEFT}>message</th><th>time</th></tr>"
            + "".join(rows) + "</table></div>")
