"""What every chapter notebook shares: which ``tinyllm`` runs, the banner that says so, short
messages for functions you have not written yet, the ``ol`` check table, and figure panels.

Which code runs: your ``tinyllm/spec.py`` once you have started the module (``ol start L10.8``
in your workspace), with everything else (the sampler, the pool, the tiny llama, the runner) taken
from the reference, as ``ol check --ref-deps`` does. Until then, or when the first cell asks for
it, the reference solution runs and a banner says so.

The workspace is ``OL_WORKSPACE`` when set (as for ``ol``); otherwise the notebook's folder, then
the repository root, whichever first holds ``tinyllm/spec.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import html
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Sequence

# The tiny llama's matrices are small: on a shared 2-core machine, BLAS threads spend more time
# waiting on each other than multiplying, and a pass gets ten times slower and noisy. One thread, as
# for ol check, unless you chose otherwise. This only takes effect before numpy is first imported,
# which is why the notebooks import this module first.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

MODULE = "L10.8"
ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "tinyllm"
LEARNER_FILES = ("spec.py",)
PACKAGE_MODULES = ("pcg32", "sampling", "kvpool", "spec", "model", "runner")

# Where the card states the rule behind each function you write.
CARD_SECTIONS = {
    "SpecConfig.parse": "4", "SpecConfig.__post_init__": "4", "prompt_lookup": "2.1", "ngram_draft": "2.1", "propose": "2.1",
    "residual": "2.2", "sample_dense": "2.2", "speculative_step": "2.2 and 2.3",
    "dense_distribution": "2.2", "verify_draft": "2.2", "blocks_for": "2.4", "rollback": "2.4",
    "generate_stream": "2.2 and 4", "generate": "4",
}

PASS, FAIL, ERROR, NOT_RUN = "pass", "fail", "error", "not run"


@dataclass
class Running:
    """Which code the notebook runs and why."""

    source: str  # "learner" or "reference"
    why: str
    package_dir: Path  # the folder on sys.path holding the assembled tinyllm/
    learner_file: Path | None = None  # your spec.py, when it is the one running
    workspace: Path | None = None

    @property
    def learner(self) -> bool:
        return self.source == "learner"


_current: Running | None = None
_scratch: list[Path] = []
_on_path: list[str] = []


@atexit.register
def _remove_scratch() -> None:
    for path in _scratch:
        shutil.rmtree(path, ignore_errors=True)


def _mkdtemp(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _scratch.append(path)
    return path


# --- Which code runs ---------------------------------------------------------------------------

def workspace_candidates() -> list[Path]:
    """The folders searched for a started module, in order."""
    if os.environ.get("OL_WORKSPACE"):
        return [Path(os.environ["OL_WORKSPACE"]).expanduser().resolve()]
    found: list[Path] = []
    for folder in (Path.cwd().resolve(), ROOT):
        if folder not in found:
            found.append(folder)
    return found


def find_workspace(candidates: Sequence[Path] | None = None) -> Path | None:
    """The first candidate whose ``tinyllm/`` holds every learner file of the module."""
    for folder in workspace_candidates() if candidates is None else candidates:
        if all((Path(folder) / "tinyllm" / name).is_file() for name in LEARNER_FILES):
            return Path(folder)
    return None


def _assemble(learner_dir: Path | None) -> Path:
    """A scratch folder holding ``tinyllm/``: the reference, overlaid with your learner files."""
    base = _mkdtemp("tinyllm-notebook-")
    package = base / "tinyllm"
    package.mkdir()
    for source in REFERENCE.glob("*.py"):
        shutil.copyfile(source, package / source.name)
    if learner_dir is not None:
        for name in LEARNER_FILES:
            shutil.copyfile(learner_dir / name, package / name)
    return base


def _forget_tinyllm() -> None:
    for name in [n for n in sys.modules if n == "tinyllm" or n.startswith("tinyllm.")]:
        del sys.modules[name]
    while _on_path:
        folder = _on_path.pop()
        if folder in sys.path:
            sys.path.remove(folder)


def _import_package(base: Path) -> SimpleNamespace:
    _forget_tinyllm()
    sys.path.insert(0, str(base))
    _on_path.append(str(base))
    importlib.invalidate_caches()
    modules = {}
    for name in PACKAGE_MODULES:
        if (base / "tinyllm" / f"{name}.py").is_file():
            modules[name] = importlib.import_module(f"tinyllm.{name}")
    return SimpleNamespace(**modules)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def use(reference: bool = False, workspace: str | os.PathLike | None = None) -> SimpleNamespace:
    """Import ``tinyllm`` for this notebook and show a banner naming the code that runs.

    ``reference=True`` runs the reference solution even when your module is started. Call it
    again (rerun the first cell) after editing your ``spec.py``: it imports the file afresh.
    Returns a namespace with the package's modules (``spec``, ``sampling``, ``kvpool``, ...) and
    ``running``, a :class:`Running`.
    """
    global _current
    candidates = None if workspace is None else [Path(workspace).expanduser().resolve()]
    found = None if reference else find_workspace(candidates)
    if reference:
        why = "you chose it in the first cell (REFERENCE = True)"
    elif found is None:
        looked = ", ".join(str(p) for p in (candidates or workspace_candidates()))
        why = (f"no started module found (looked for tinyllm/spec.py in {looked}); "
               f"run <code>ol start {MODULE}</code> in your workspace, then rerun this notebook")
    else:
        why = ""
    running = None
    if found is not None:
        base = _assemble(found / "tinyllm")
        running = Running("learner", "", base, found / "tinyllm" / "spec.py", found)
        try:
            _current = running
            modules = _import_package(base)
        except Exception as err:  # a learner file that does not import: show it, run the reference
            where = _learner_frame(err, running)
            at = f" (line {where[1]})" if where else ""
            why = (f"your {found / 'tinyllm' / 'spec.py'} does not import{at}: "
                   f"{html.escape(_first_line(err))}")
            running = None
    if running is None:
        base = _assemble(None)
        running = Running("reference", why, base)
        _current = running
        modules = _import_package(base)
    modules.running = running
    show_banner(running)
    return modules


def current() -> Running:
    if _current is None:
        raise RuntimeError("call course.use() first (the notebook's first code cell does)")
    return _current


def banner_html(running: Running) -> str:
    if running.learner:
        return (f'<div class="course-banner course-learner" style="{_BOX}background:#e8f5e9;'
                f'border-color:#2e7d32">Running <b>your code</b>: '
                f"<code>{html.escape(str(running.learner_file))}</code> "
                "(the sampler, pool, model and runner come from the reference).</div>")
    return (f'<div class="course-banner course-reference" style="{_BOX}background:#fff3e0;'
            f'border-color:#ef6c00"><b>Running the reference solution, not your code</b>: '
            f"{running.why}.</div>")


def banner_text(running: Running) -> str:
    if running.learner:
        return f"Running your code: {running.learner_file}"
    return "Running the reference solution, not your code: " + _strip_tags(running.why)


_BOX = "padding:8px 12px;border:2px solid;border-radius:6px;font-size:14px;"


def _strip_tags(text: str) -> str:
    return text.replace("<code>", "`").replace("</code>", "`")


def show_banner(running: Running | None = None) -> None:
    running = running or current()
    _display(banner_html(running), banner_text(running))


def _display(markup: str, text: str) -> None:
    """HTML in a notebook; the plain text anywhere else (a script, a test)."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(text)
        return
    display({"text/html": markup, "text/plain": text}, raw=True)


# --- Short messages instead of tracebacks ------------------------------------------------------

def _learner_frame(err: BaseException, running: Running | None) -> tuple[str, int] | None:
    """The innermost frame of the traceback that lies in one of your files: (function, line)."""
    if running is None or not running.learner:
        return None
    mine = {str((running.package_dir / "tinyllm" / name).resolve()) for name in LEARNER_FILES}
    hit = None
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if str(Path(code.co_filename).resolve()) in mine:
            hit = (code.co_qualname, tb.tb_lineno)  # qualified: SpecConfig.parse, not parse
        tb = tb.tb_next
    if hit is None and isinstance(err, SyntaxError) and err.filename:
        if str(Path(err.filename).resolve()) in mine:
            hit = ("<module>", err.lineno or 0)
    return hit


def message_for(err: BaseException, running: Running) -> tuple[str, str]:
    """(html, text) of the short message shown for an error raised while running your code."""
    where = _learner_frame(err, running)
    path = running.learner_file
    if isinstance(err, NotImplementedError) and where is not None:
        name = where[0]
        section = CARD_SECTIONS.get(name)
        see = f" (the card, section {section})" if section else ""
        text = (f"`{name}` is not written yet. Write it in {path}{see}, then rerun this cell.")
        return (f'<div class="course-missing" style="{_BOX}background:#e3f2fd;border-color:#1565c0">'
                f"✎ <code>{html.escape(name)}</code> is not written yet. Write it in "
                f"<code>{html.escape(str(path))}</code>{see}, then rerun this cell.</div>"), text
    if where is not None:
        name, line = where
        text = f"your `{name}` raised {_first_line(err)} ({path}, line {line})"
    else:
        text = (f"this cell failed on what your code returned: {_first_line(err)}; "
                "the check cell below names the failing test")
    return (f'<div class="course-raised" style="{_BOX}background:#ffebee;border-color:#c62828">'
            f"✘ {html.escape(text)}</div>"), text


class learner_code(contextlib.ContextDecorator):
    """Run a block (or a function) that calls your code; show a short message if it fails.

    With your code running, an exception becomes one line naming your function, and the block
    is skipped from that point. With the reference running, exceptions propagate: a failure there
    is a bug in the notebook or the reference, and the notebook checks in CI must see it.
    """

    def __enter__(self) -> "learner_code":
        return self

    def __exit__(self, kind, err, tb) -> bool:
        if err is None or not isinstance(err, Exception):
            return False
        running = _current
        if running is None or not running.learner:
            return False
        _display(*message_for(err, running))
        return True


def expect(actual, expected, what: str) -> bool:
    """Show whether ``actual`` equals the card's ``expected``; the reference must always match."""
    import numpy as np

    try:
        same = bool(np.allclose(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float),
                                rtol=1e-9, atol=1e-12)) and np.shape(actual) == np.shape(expected)
    except (TypeError, ValueError):
        same = actual == expected
    mark, color = ("✔", "#2e7d32") if same else ("✘", "#c62828")
    shown_actual = _short(actual)
    text = f"{mark} {what}: {shown_actual}" + ("" if same else f" (the card says {_short(expected)})")
    _display(f'<div style="color:{color};font-family:monospace">{html.escape(text)}</div>', text)
    if not same and not current().learner:
        raise AssertionError(f"the reference disagrees with the card on {what}: "
                             f"{shown_actual} != {_short(expected)}")
    return same


def _short(value) -> str:
    import numpy as np

    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=4, separator=", ")
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value)


# --- The check cell: graded tests through ol ---------------------------------------------------

@dataclass
class TestResult:
    name: str
    status: str
    message: str = ""
    duration: float | None = None


@dataclass
class CheckReport:
    """What ``ol check`` said about some graded tests, shown as a table."""

    status: str  # pass, fail, error, or "not run" when ol could not be run
    tests: list[TestResult] = field(default_factory=list)
    note: str = ""
    checked: str = ""

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
    copy of the reference ``spec.py``, so you see what a full pass looks like.
    """
    running = current()
    if not grader_available():
        return CheckReport(NOT_RUN, [TestResult(t, NOT_RUN) for t in tests],
                           note=("<code>ol</code> is not available in this checkout yet "
                                 f"(no {ROOT / 'grader' / '__main__.py'}); these are the tests this "
                                 "cell will run once it is"))
    if running.learner:
        workspace = running.workspace
        checked = f"your workspace {workspace}"
    else:
        workspace = _mkdtemp("tinyllm-check-")
        (workspace / "tinyllm").mkdir()
        for name in LEARNER_FILES:
            shutil.copyfile(REFERENCE / name, workspace / "tinyllm" / name)
        checked = "a scratch workspace holding the reference spec.py"
    result_file = _mkdtemp("tinyllm-result-") / "result.json"
    command = [sys.executable, "-m", "grader", "check", MODULE, "--ref-deps", "--workspace",
               str(workspace), "--json", str(result_file), "-k", " or ".join(tests)]
    try:
        done = runner(command, ROOT)
    except (OSError, subprocess.SubprocessError) as err:
        return CheckReport(ERROR, [TestResult(t, NOT_RUN) for t in tests],
                           note=f"ol could not be started: {html.escape(_first_line(err))}",
                           checked=checked)
    return read_report(result_file, tests, done, checked)


def read_report(result_file: Path, tests: Sequence[str],
                done: "subprocess.CompletedProcess[str]", checked: str) -> CheckReport:
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
        seen[name] = TestResult(name, str(entry.get("status", ERROR)),
                                str(entry.get("message") or ""), entry.get("duration"))
    results = [seen.pop(t, TestResult(t, ERROR, "ol did not run this test")) for t in tests]
    results.extend(seen.values())
    status = PASS if results and all(t.status == PASS for t in results) else FAIL
    if data.get("status") == ERROR:
        status = ERROR
    note = html.escape(str(data.get("message") or ""))
    return CheckReport(status, results, note=note, checked=checked)


_STATUS_STYLE = {PASS: ("✔ pass", "#2e7d32"), FAIL: ("✘ fail", "#c62828"),
                 ERROR: ("✘ error", "#c62828"), NOT_RUN: ("· not run", "#757575")}


def report_html(report: CheckReport) -> str:
    rows = []
    for t in report.tests:
        label, color = _STATUS_STYLE.get(t.status, (t.status, "#757575"))
        first = t.message.strip().splitlines()[0] if t.message.strip() else ""
        took = f"{t.duration:.2f} s" if isinstance(t.duration, (int, float)) else ""
        rows.append(f"<tr><td><code>{html.escape(t.name)}</code></td>"
                    f'<td style="color:{color};font-weight:bold">{label}</td>'
                    f"<td>{html.escape(first[:160])}</td><td>{took}</td></tr>")
    head = f"<b>ol check {MODULE}</b>: {report.passed} of {len(report.tests)} tests passed"
    if report.checked:
        head += f" (checked: {html.escape(report.checked)})"
    note = f"<div>{report.note}</div>" if report.note else ""
    return (f'<div class="course-check">{head}{note}<table class="course-check-table">'
            "<tr><th>test</th><th>status</th><th>message</th><th>time</th></tr>"
            + "".join(rows) + "</table></div>")


# --- Figure panels -----------------------------------------------------------------------------

def panel(draw: Callable[..., None], controls: dict, primary: str | None = None,
          columns: int = 3):
    """Controls above an output that ``draw(**values)`` fills; redrawn whenever a control moves.

    ``draw`` runs under :class:`learner_code`, so an unwritten function shows its short message
    in place of the figure. The control named ``primary`` carries the CSS class the browser
    check moves; the output carries ``course-figure``.
    """
    import ipywidgets as widgets

    out = widgets.interactive_output(learner_code()(draw), controls)
    out.add_class("course-figure")
    if primary is not None:
        controls[primary].add_class("course-primary")
    boxes = list(controls.values())
    rows = [widgets.HBox(boxes[i:i + columns]) for i in range(0, len(boxes), columns)]
    return widgets.VBox(rows + [out])
