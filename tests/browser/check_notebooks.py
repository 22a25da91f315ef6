"""Walk the learner's loop through the chapter notebooks in a real JupyterLab, headless.

As a learner would: ``ol start L10.8 --workspace <scratch>/work``, then JupyterLab started by
``ol lab --workspace <scratch>/work`` (the check sets no ``OL_WORKSPACE`` of its own), serving
copies of the notebooks so the repository's files are never modified. Then:

1. Every chapter runs on the stubs: the banner names the workspace's ``spec.py``, panels draw with
   the reference and say so, sliders, figures, tables and the check table render, no widget fails
   to display, and the primary slider redraws its figure.
2. Chapter 1: a real ``prompt_lookup`` is written into ``spec.py``; rerunning only the cell that
   said it was not written yet shows the card's values; its token strip then draws with the
   learner's ``prompt_lookup`` beside the reference's ``ngram_draft``.
3. Chapter 4 with only ``blocks_for`` and ``rollback`` written: its check passes.
4. Chapters 6 and 7 (module L10.9, ``ol start L10.9`` in the same workspace) run on the stubs of
   ``trees.py``; chapter 6 is run again with ``ModelDrafter._draw`` and ``propose`` written: its
   check passes and its panels say they drew with the learner's code.
5. Chapter 8 (module L10.10, ``ol start L10.10`` in the same workspace) runs on the stubs of
   ``serve.py``; its block tables are figures, so it shows no HTML table.
6. Chapters 1, 5 and 7, saved, kernel shut down, reopened: no "Error displaying widget", the widgets
   show from the saved state. Then in the JupyterLab Dark theme, the banner, strips, chips, labels
   and check table have WCAG contrast >= 4.5 between text and background.
7. The README's other route, a plain ``jupyter lab`` (no settings of ol's) after ``ol start``:
   chapter 1 run, saved with its widget state, kernel shut down, reopened as in 6.

Screenshots of each step go to ``--out`` (``NN_name.png``, ``…-reopened-dark.png``,
``…-failed.png`` on a failure). This script installs nothing: it needs the ``playwright`` Python
package (never ``playwright install``) and Debian's ``chromium``. Exit code 0 when every step passed,
1 when any failed, 2 when it could not run.

    python tests/browser/check_notebooks.py [--out build/screenshots] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
REFERENCE_SPEC = ROOT / "solutions" / "tinyllm" / "spec.py"
REFERENCE_TREES = ROOT / "solutions" / "tinyllm" / "trees.py"
MODULE = "L10.8"
TREES_MODULE = "L10.9"  # chapters 6 and 7 run the learner's trees.py
TREES_CHAPTERS = ("06_draft_model.ipynb", "07_token_trees.ipynb")
LOAD_MODULE, LOAD_CHAPTER = "L10.10", "08_under_load.ipynb"  # chapter 8 runs the learner's serve.py and
#                                                               draws its block tables as figures
DRAFT_CHAPTER = "06_draft_model.ipynb"
DRAFT_METHODS = ("ModelDrafter._draw", "ModelDrafter.propose")  # chapter 6's functions
DRAFT_TESTS = 1  # chapter 6's check: model_drafter_returns_its_q
RENDER_WAIT_S = 15  # how long a widget that should be there may take to appear after the kernel is idle
CHROMIUM_PATHS = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
IDLE = '.jp-StatusBar-TextItem:has-text("| Idle")'
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
PANEL_OF_PRIMARY = ".widget-vbox:has(> .widget-hbox .course-primary)"
PANEL = ".widget-vbox:has(> .course-panel-status)"
WIDGET_ERROR = "Error displaying widget"
# What must read in the dark theme: the course's own boxes, chips and strips.
READABLE = (".course-banner, .course-strip, .course-chip, .course-label, .course-check, "
            ".course-missing, .course-raised, .course-expect")
MIN_CONTRAST = 4.5
# Chapters whose strips (course.strip) must exist and read in the dark theme.
STRIP_CHAPTERS = ("01_drafts.ipynb", "05_the_loop.ipynb", "07_token_trees.ipynb")
FIRST_CHAPTER, ROLLBACK_CHAPTER = "01_drafts.ipynb", "04_kv_rollback.ipynb"
ROLLBACK_TESTS = 2  # chapter 4's check: rollback_hand_example, rollback_drops_one_reference_only


class CannotRun(Exception):
    """Something this check needs is missing; the message says how to get it."""


@dataclass
class Outcome:
    step: str
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    found: str = ""
    screenshot: Path | None = None


def find_chromium(given: str | None) -> str:
    for path in ([given] if given else CHROMIUM_PATHS):
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    raise CannotRun("no Chromium found at " + ", ".join([given] if given else CHROMIUM_PATHS)
                    + ": install Debian's package with `apt-get update && apt-get install -y chromium`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_settings(folder: Path) -> None:
    """User settings for the check: no news or update toasts over the page, and every cell rendered
    (JupyterLab otherwise renders only cells scrolled into view)."""
    settings = {
        ("@jupyterlab", "apputils-extension", "notification"): {"checkForUpdates": False, "fetchNews": "false"},
        ("@jupyterlab", "notebook-extension", "tracker"): {"windowingMode": "none"},
    }
    for (scope, plugin, name), values in settings.items():
        (folder / scope / plugin).mkdir(parents=True, exist_ok=True)
        (folder / scope / plugin / f"{name}.jupyterlab-settings").write_text(json.dumps(values))


def ol_command() -> list[str]:
    script = shutil.which("ol")
    return [script] if script else [sys.executable, "-m", "grader"]


def learner_env(scratch: Path) -> dict[str, str]:
    """The environment of a learner's shell: no OL_WORKSPACE; ol remembers into the scratch folder
    (not the developer's clone)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OL_WORKSPACE", "OL_IMPL")}
    env["OL_LAST_WORKSPACE_FILE"] = str(scratch / "remembered-workspace")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    return env


def start_module(scratch: Path, module: str = MODULE, learner_file: str = "spec.py") -> Path:
    """``ol start MODULE --workspace work`` typed in the scratch folder; the workspace's learner file."""
    done = subprocess.run([*ol_command(), "start", module, "--workspace", "work"], cwd=scratch,
                          env=learner_env(scratch), capture_output=True, text=True, timeout=120)
    written = scratch / "work" / "tinyllm" / learner_file
    if done.returncode != 0 or not written.is_file():
        raise CannotRun(f"ol start {module} failed with code {done.returncode}:\n{done.stdout}{done.stderr}")
    return written


def _definition(tree: ast.Module, name: str) -> ast.FunctionDef:
    """The function ``name`` or the method ``Class.name`` at the top of a module."""
    owner, _, attr = name.rpartition(".")
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner).body if owner else tree.body
    return next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == attr)


def write_reference_functions(learner: Path, *names: str, reference: Path = REFERENCE_SPEC) -> None:
    """Replace functions (or ``Class.method``s) in a learner file with the reference's, as a learner
    saving them."""
    ref_text = reference.read_text()
    ref_lines = ref_text.splitlines(keepends=True)
    for name in names:
        text = learner.read_text()
        node, theirs = _definition(ast.parse(text), name), _definition(ast.parse(ref_text), name)
        lines = text.splitlines(keepends=True)
        learner.write_text("".join(lines[:node.lineno - 1]) + "".join(ref_lines[theirs.lineno - 1:theirs.end_lineno])
                           + "".join(lines[node.end_lineno:]))


class Lab:
    """JupyterLab as ``ol lab --workspace work`` starts it, serving copies of the notebooks; with
    ``plain``, as a plain ``jupyter lab notebooks/`` does (no settings of ol's)."""

    def __init__(self, scratch: Path, notebooks: list[Path], plain: bool = False) -> None:
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.root = scratch / ("served-plain" if plain else "served")
        self.root.mkdir()
        for nb in notebooks:
            shutil.copyfile(nb, self.root / nb.name)
        settings, workspaces = scratch / "settings", scratch / "workspaces"
        write_settings(settings)
        workspaces.mkdir(exist_ok=True)
        server_args = ["--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
                       f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                       "--LabApp.news_url=None", f"--LabApp.user_settings_dir={settings}",
                       f"--LabApp.workspaces_dir={workspaces}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            server_args.append("--allow-root")
        env = learner_env(scratch)
        if plain:
            # In a clone, jupyter lab notebooks/ runs each kernel beside the course package; these
            # kernels run beside copies, so the package comes from the path.
            env["PYTHONPATH"] = os.pathsep.join([str(NOTEBOOKS), env["PYTHONPATH"]])
            command = [sys.executable, "-m", "jupyter", "lab", *server_args]
        else:
            command = [*ol_command(), "lab", "--workspace", "work", "--", *server_args]
        self.log_path = scratch / ("jupyterlab-plain.log" if plain else "jupyterlab.log")
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(command, cwd=scratch, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def url(self, path: str, query: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path}?{query}token={self.token}"

    def api(self, path: str, method: str = "GET"):
        path, _, query = path.partition("?")
        request = urllib.request.Request(self.url(path, f"{query}&" if query else ""), method=method)
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CannotRun(f"ol lab exited with code {self.process.returncode}:\n" + self.log_tail())
            try:
                self.api("api/status")
                return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.5)
        raise CannotRun(f"JupyterLab did not answer within {timeout:.0f} s:\n" + self.log_tail())

    def shut_down_kernels(self) -> None:
        """End the sessions a closed page leaves running: the kernel of a notebook is gone, as the
        next day, and notebooks do not compete for CPU."""
        for session in self.api("api/sessions"):
            self.api(f"api/sessions/{session['id']}", method="DELETE")

    def saved(self, name: str) -> dict:
        """The notebook as last written, read from disk. Read through the contents API while a save
        is being written, the server finds a short file beside its atomic-writing backup, puts the
        backup back in place of the save being written (jupyter_server's repair of an unreadable
        notebook), and a request racing that swap answers 500."""
        return json.loads((self.root / name).read_text(encoding="utf-8"))

    def log_tail(self, lines: int = 15) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()


# --- Driving JupyterLab ------------------------------------------------------------------------------

def open_notebook(page, lab: Lab, name: str) -> None:
    # A workspace of its own, reset, so no earlier notebook's tab is restored beside this one.
    page.goto(lab.url(f"lab/workspaces/{Path(name).stem}/tree/{name}", query="reset&"))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_selector(IDLE, timeout=60_000)


def menu(page, top: str, *items: str) -> None:
    page.locator(f'.lm-MenuBar-itemLabel:text-is("{top}")').click()
    for item in items:
        page.locator(f'.lm-Menu-itemLabel:text-is("{item}")').first.click()


def run_all(page, outcome: Outcome, timeout_s: float) -> bool:
    menu(page, "Run", "Run All Cells")
    try:
        # Run All stops at a failing cell: its traceback ends the wait as well as the check table.
        page.wait_for_selector(f'.course-check table, {STDERR}:has-text("Traceback")', timeout=timeout_s * 1000)
    except Exception:
        outcome.problems.append(f"the notebook did not run to its check cell within {timeout_s:.0f} s")
        return False
    if not page.locator(".course-check table").count():
        outcome.problems.append("a cell failed before the check cell" + errors_shown(page))
        return False
    page.wait_for_selector(IDLE, timeout=60_000)
    return True


def errors_shown(page) -> str:
    shown = [t for t in page.locator(STDERR).all_inner_texts() if "Traceback" in t or "Error" in t]
    return (":\n" + shown[0][-1200:]) if shown else ""


def inspect(page, outcome: Outcome, workspace: Path, tables: bool = True) -> None:
    """Count what rendered and name what is missing (``tables``: the chapter shows HTML tables)."""
    selectors = {
        "banner naming your workspace": f'.course-banner.course-learner:has-text("{workspace}")',
        "sliders": ".jupyter-widgets .widget-slider",
        "figures": ".course-figure img",
        "tables": ".jupyter-widgets table",
        "check table": ".course-check table",
    }
    if not tables:
        del selectors["tables"]
    for selector in selectors.values():
        # An idle kernel has sent every output; the browser may still be drawing the last of them.
        try:
            page.wait_for_selector(selector, timeout=RENDER_WAIT_S * 1000)
        except Exception:
            pass
    counts = {what: page.locator(selector).count() for what, selector in selectors.items()}
    outcome.found = ", ".join(f"{v} {k}" for k, v in counts.items())
    for what, n in counts.items():
        if n == 0:
            outcome.problems.append(f"no {what} rendered" + (
                ": " + page.locator(".course-banner").first.inner_text() if "banner" in what
                and page.locator(".course-banner").count() else ""))
    if page.get_by_text(WIDGET_ERROR).count():
        outcome.problems.append(f'a widget shows "{WIDGET_ERROR}"')
    # Every run here is of the reference or of stubs drawn with it: a cell that failed on what the
    # code returned is a bug of the notebook's, though it shows as the learner's box.
    if page.locator(".course-raised").count():
        outcome.problems.append("a cell failed: " + page.locator(".course-raised").first.inner_text()[:300])
    failed = errors_shown(page)
    if failed:
        outcome.problems.append("a cell printed an error" + failed)


def labels(page) -> list[str]:
    return [" ".join(t.split()) for t in page.locator(".course-panel-status").all_inner_texts()]


def expect_label(page, outcome: Outcome, *wanted: str, timeout_s: float = 30) -> None:
    """Some panel's line says every one of ``wanted`` (a redraw may still be computing)."""
    try:
        page.wait_for_function(
            """(wanted) => [...document.querySelectorAll('.course-panel-status')].some(
                   s => wanted.every(w => s.innerText.replace(/\\s+/g, ' ').includes(w)))""",
            arg=list(wanted), timeout=timeout_s * 1000)
    except Exception:
        outcome.problems.append(f"no panel says {' … '.join(wanted)!r}; the panels say: {labels(page)}")


def move_primary(page, outcome: Outcome) -> None:
    """Press ArrowRight on the primary slider; its panel's figure must change."""
    panel = page.locator(PANEL_OF_PRIMARY).first
    if not panel.count():
        outcome.problems.append("no panel has a primary slider (the course-primary class)")
        return
    figure = panel.locator(".course-figure img").first
    handle = panel.locator(".course-primary .noUi-handle").first
    panel.scroll_into_view_if_needed()
    before = figure.get_attribute("src")
    # A key press can land before the handle takes focus, and a handle at its end does not move
    # right: press again, then the other way, before calling the figure unchanged.
    for key in ("ArrowRight", "ArrowRight", "ArrowLeft"):
        handle.focus()
        handle.press(key)
        try:
            page.wait_for_function(
                """([selector, before]) => {
                    const img = document.querySelector(selector);
                    return img !== null && img.getAttribute("src") !== before;
                }""",
                arg=[f"{PANEL_OF_PRIMARY} .course-figure img", before], timeout=20_000)
            break
        except Exception:
            continue
    else:
        outcome.problems.append("moving the primary slider did not change its figure")
        return
    page.wait_for_selector(IDLE, timeout=60_000)
    page.locator(PANEL_OF_PRIMARY).first.scroll_into_view_if_needed()
    page.wait_for_timeout(300)


def save(page, lab: Lab, name: str, outcome: Outcome) -> None:
    """Save from the File menu; the saved file must hold the widget state (the default ol lab sets,
    and ol start for a plain jupyter lab). A save that lands while an earlier one is still being
    written is tried once more."""
    for _ in range(2):
        page.wait_for_selector(IDLE, timeout=60_000)
        before = lab.api(f"api/contents/{name}?content=0")["last_modified"]
        menu(page, "File", "Save Notebook")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if save_landed(lab, name, before):
                return
            time.sleep(0.5)
    outcome.problems.append("the saved notebook holds no widget state (ol lab and ol start set saveState)")


def save_landed(lab: Lab, name: str, before: str) -> bool:
    """Jupyter's atomic writing rewrites the file in place (its backup is a side copy), so a read
    during the write finds a short file: that is a save under way. Only the file's time is asked
    of the server (no read); the file itself is read from disk (:meth:`Lab.saved`)."""
    try:
        return lab.api(f"api/contents/{name}?content=0")["last_modified"] != before and bool(widget_state(lab, name))
    except ValueError:  # JSON cut short: the save is still being written
        return False


def widget_state(lab: Lab, name: str) -> dict:
    return lab.saved(name).get("metadata", {}).get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}).get("state", {})


# WCAG 2 contrast of each element with its own text, against the first opaque background up the DOM
# (translucent ones blended on the way); translucent text is blended over that background too.
CONTRAST_JS = """(selector) => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const over = (top, bottom) => [0, 1, 2].map(i => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
  const lum = (c) => { const l = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2]; };
  const background = (el) => { const layers = [];
    for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; } }
    let bg = [255, 255, 255, 1]; for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg); return bg; };
  const results = [];
  const seen = new Set();
  for (const root of document.querySelectorAll(selector)) {
    for (const el of [root, ...root.querySelectorAll('*')]) {
      if (seen.has(el)) continue; seen.add(el);
      const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
      const box = el.getBoundingClientRect();
      if (!own || box.width === 0 || box.height === 0) continue;
      const bg = background(el); const fg = over(parse(getComputedStyle(el).color), bg);
      const [a, b] = [lum(fg), lum(bg)];
      results.push({ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05),
                    text: el.textContent.trim().slice(0, 50), where: el.className || el.tagName});
    }
  }
  return results;
}"""


def check_contrast(page, outcome: Outcome, name: str) -> None:
    measured = page.evaluate(CONTRAST_JS, READABLE)
    strips = page.locator(".course-strip").count()
    if name in STRIP_CHAPTERS and strips == 0:
        outcome.problems.append("no token strip (course.strip) to measure")
    if not measured:
        outcome.problems.append("no text found in the banner, strips or labels to measure")
        return
    worst = min(measured, key=lambda m: m["ratio"])
    low = [m for m in measured if m["ratio"] < MIN_CONTRAST]
    outcome.found += f"; dark theme: {len(measured)} texts, {strips} strips, lowest contrast {worst['ratio']:.2f}"
    if low:
        outcome.problems.append(f"{len(low)} texts below contrast {MIN_CONTRAST} in the dark theme, e.g. "
                                + "; ".join(f"{m['ratio']:.2f} for {m['text']!r} ({m['where']})" for m in low[:3]))


# --- The steps ------------------------------------------------------------------------------------

def step(context, lab: Lab, out: Path, label: str, body) -> Outcome:
    """Run ``body(page, outcome)`` on a fresh page; screenshot; close; end the kernels."""
    outcome = Outcome(label)
    for old in (out / f"{label}.png", out / f"{label}-failed.png"):  # no stale picture from a past run
        old.unlink(missing_ok=True)
    started = time.monotonic()
    page = context.new_page()
    try:
        body(page, outcome)
        outcome.screenshot = out / f"{label}.png"
        page.screenshot(path=str(outcome.screenshot))
    except urllib.error.HTTPError as err:
        outcome.problems.append(f"JupyterLab answered {err.code} to {err.url.split('?')[0]}:\n" + lab.log_tail(6))
    except Exception as err:  # a Playwright timeout or a closed page: report it, go on with the next
        outcome.problems.append(f"{type(err).__name__}: {str(err).splitlines()[0]}")
    finally:
        outcome.seconds = time.monotonic() - started
        if outcome.problems:
            outcome.screenshot = out / f"{label}-failed.png"
            try:
                page.screenshot(path=str(outcome.screenshot))
            except Exception:
                outcome.screenshot = None
        page.close()
        lab.shut_down_kernels()
    return outcome


def chapter(lab: Lab, name: str, workspace: Path, spec: Path, timeout_s: float, saved: set[str]):
    def body(page, outcome: Outcome) -> None:
        if name == ROLLBACK_CHAPTER:
            write_reference_functions(spec, "blocks_for", "rollback")
        if name in TREES_CHAPTERS:
            expect_trees_chapter(page, lab, name, workspace, timeout_s, outcome)
            if name in STRIP_CHAPTERS:
                save(page, lab, name, outcome)
                saved.add(name)
            return
        open_notebook(page, lab, name)
        if not run_all(page, outcome, timeout_s):
            return
        inspect(page, outcome, workspace, tables=name != LOAD_CHAPTER)   # chapter 8 draws its tables
        if name == ROLLBACK_CHAPTER:
            head = page.locator(".course-check").first.inner_text()
            if f"{ROLLBACK_TESTS} of {ROLLBACK_TESTS} tests passed" not in head:
                outcome.problems.append("with blocks_for and rollback written, chapter 4's check says: "
                                        + head.splitlines()[0])
            expect_label(page, outcome, "drawn with your", "rollback")
        else:
            expect_label(page, outcome, "drawn with the reference")
        if name == FIRST_CHAPTER:
            edit_is_seen(page, outcome, spec)
        move_primary(page, outcome)
        if name in STRIP_CHAPTERS:
            save(page, lab, name, outcome)
            saved.add(name)

    return body


def expect_trees_chapter(page, lab: Lab, name: str, workspace: Path, timeout_s: float, outcome: Outcome) -> None:
    """A chapter of L10.9 on the stubs of trees.py: everything renders, drawn with the reference."""
    open_notebook(page, lab, name)
    if not run_all(page, outcome, timeout_s):
        return
    inspect(page, outcome, workspace)
    banner = page.locator(".course-banner").first.inner_text()
    if "trees.py" not in banner:
        outcome.problems.append(f"the banner does not name the workspace's trees.py: {banner[:200]}")
    expect_label(page, outcome, "drawn with the reference", "is not written yet")
    move_primary(page, outcome)


def draft_methods_written(lab: Lab, workspace: Path, timeout_s: float):
    """Chapter 6 again with ModelDrafter._draw and propose saved: its check passes, its panels say
    they drew with the learner's code."""
    def body(page, outcome: Outcome) -> None:
        write_reference_functions(workspace / "tinyllm" / "trees.py", *DRAFT_METHODS, reference=REFERENCE_TREES)
        open_notebook(page, lab, DRAFT_CHAPTER)
        if not run_all(page, outcome, timeout_s):
            return
        head = page.locator(".course-check").first.inner_text()
        outcome.found = head.splitlines()[0][:120]
        if f"{DRAFT_TESTS} of {DRAFT_TESTS} tests passed" not in head:
            outcome.problems.append("with ModelDrafter._draw and propose written, chapter 6's check says: "
                                    + head.splitlines()[0])
        expect_label(page, outcome, "drawn with your", "ModelDrafter._draw")
        if page.locator(".course-missing").count():
            outcome.problems.append("a cell still says a function is not written yet: "
                                    + page.locator(".course-missing").first.inner_text()[:200])

    return body


def edit_is_seen(page, outcome: Outcome, spec: Path) -> None:
    """Write prompt_lookup into spec.py; rerun only the cell that said it was not written yet."""
    cells = page.locator(".jp-Notebook .jp-Cell")
    complained = [i for i in range(cells.count())
                  if cells.nth(i).locator('.course-missing:has-text("prompt_lookup")').count()]
    if not complained:
        outcome.problems.append("no cell said prompt_lookup is not written yet")
        return
    write_reference_functions(spec, "prompt_lookup")
    cell = cells.nth(complained[0])
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Control+Enter")  # run this cell only, and stay on it
    try:
        page.wait_for_function(
            """(i) => { const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
                        return cell.querySelector('.course-expect') && !cell.querySelector('.course-missing'); }""",
            arg=complained[0], timeout=30_000)
    except Exception:
        outcome.problems.append("after writing prompt_lookup, rerunning the cell still does not show its values: "
                                + cell.locator(".jp-OutputArea").inner_text()[:300])
        return
    page.wait_for_selector(IDLE, timeout=60_000)
    if not cell.locator(".course-reloaded").count():
        outcome.problems.append("the rerun cell does not say it picked up the saved spec.py")
    shown = cell.locator(".course-expect").all_inner_texts()
    if len(shown) < 3 or not all(t.strip().startswith("✔") for t in shown):
        outcome.problems.append(f"the rerun cell shows {shown}, not three ✔ lines")
    # The token strip (the first panel) redraws with the learner's prompt_lookup, ngram_draft a stub.
    strip_panel = page.locator(PANEL).first
    strip_panel.scroll_into_view_if_needed()
    strip_panel.locator(".widget-slider .noUi-handle").first.press("ArrowRight")
    try:
        page.wait_for_function(
            """() => { const s = document.querySelector('.course-panel-status');
                       return s && s.innerText.includes('drawn with your prompt_lookup'); }""", timeout=30_000)
    except Exception:
        outcome.problems.append(f"the token strip did not redraw with your prompt_lookup; it says {labels(page)[:1]}")
        return
    page.wait_for_selector(IDLE, timeout=60_000)
    expect_label(page, outcome, "ngram_draft is not written yet")


def run_and_save(lab: Lab, name: str, timeout_s: float):
    """Run every cell, then save: in a plain jupyter lab, whose settings are the environment's."""
    def body(page, outcome: Outcome) -> None:
        open_notebook(page, lab, name)
        if run_all(page, outcome, timeout_s):
            save(page, lab, name, outcome)
            outcome.found = f"saved with the state of {len(widget_state(lab, name))} widget models"

    return body


def reopened(lab: Lab, name: str):
    """Saved, kernel ended: open again without running; then the dark theme."""
    def body(page, outcome: Outcome) -> None:
        page.goto(lab.url(f"lab/workspaces/{Path(name).stem}-reopened/tree/{name}", query="reset&"))
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        page.wait_for_selector(IDLE, timeout=60_000)
        try:
            page.wait_for_selector(".course-figure img, .jupyter-widgets .widget-slider", timeout=20_000)
        except Exception:
            pass
        page.wait_for_timeout(1000)  # widget views render after the models load
        if page.get_by_text(WIDGET_ERROR).count():
            outcome.problems.append(f'reopened after its kernel ended, a widget shows "{WIDGET_ERROR}"')
        sliders = page.locator(".jupyter-widgets .widget-slider").count()
        figures = page.locator(".course-figure img").count()
        outcome.found = f"reopened: {sliders} sliders, {figures} figures from the saved state"
        if not sliders or not figures:
            outcome.problems.append("reopened, the panels show no sliders or figures")
        if page.locator('body[data-jp-theme-name="JupyterLab Dark"]').count() == 0:
            menu(page, "Settings", "Theme", "JupyterLab Dark")
            page.wait_for_selector('body[data-jp-theme-name="JupyterLab Dark"]', state="attached",
                                   timeout=30_000)
            page.wait_for_timeout(1000)
        check_contrast(page, outcome, name)
        shown = page.locator(".course-strip") if page.locator(".course-strip").count() else page.locator(".course-banner")
        shown.first.scroll_into_view_if_needed()

    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebooks to check (default: notebooks/0*.ipynb)")
    parser.add_argument("--out", default="build/screenshots", help="folder for the screenshots")
    parser.add_argument("--chromium", help="the Chromium executable (default: Debian's)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds for one notebook to run")
    args = parser.parse_args(argv)
    notebooks = [Path(p).resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("0*.ipynb"))
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing or not notebooks:
        print(f"check_notebooks: no such notebook: {', '.join(missing) or 'none in ' + str(NOTEBOOKS)}",
              file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("check_notebooks: the playwright package is missing: `pip install playwright` "
              "(do not run `playwright install`; the browser comes from Debian)", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="notebook-browser-check-"))
    lab = None
    outcomes: list[Outcome] = []
    started = time.monotonic()
    try:
        chromium = find_chromium(args.chromium)
        spec = start_module(scratch)
        workspace = spec.parent.parent
        if any(nb.name in TREES_CHAPTERS for nb in notebooks):
            start_module(scratch, TREES_MODULE, "trees.py")
        if any(nb.name == LOAD_CHAPTER for nb in notebooks):
            start_module(scratch, LOAD_MODULE, "serve.py")
        lab = Lab(scratch, notebooks)
        lab.wait_ready()
        saved: set[str] = set()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
            context = browser.new_context(viewport={"width": 1280, "height": 2200})
            steps = [(nb.stem, chapter(lab, nb.name, workspace, spec, args.timeout, saved)) for nb in notebooks]
            if any(nb.name == DRAFT_CHAPTER for nb in notebooks):
                steps.append((f"{Path(DRAFT_CHAPTER).stem}-written", draft_methods_written(lab, workspace, args.timeout)))
            for label, body in steps:
                outcomes.append(step(context, lab, out, label, body))
                report(outcomes[-1])
            for nb in notebooks:
                if nb.name in saved:
                    outcomes.append(step(context, lab, out, f"{nb.stem}-reopened-dark", reopened(lab, nb.name)))
                    report(outcomes[-1])
            if any(nb.name == FIRST_CHAPTER for nb in notebooks):
                # The README's other route: a plain jupyter lab, after ol start.
                lab.stop()
                lab = Lab(scratch, [NOTEBOOKS / FIRST_CHAPTER], plain=True)
                lab.wait_ready()
                stem = Path(FIRST_CHAPTER).stem
                for label, body in ((f"{stem}-plain-jupyter-lab", run_and_save(lab, FIRST_CHAPTER, args.timeout)),
                                    (f"{stem}-plain-reopened-dark", reopened(lab, FIRST_CHAPTER))):
                    outcomes.append(step(context, lab, out, label, body))
                    report(outcomes[-1])
            browser.close()
    except CannotRun as err:
        print(f"check_notebooks: {err}", file=sys.stderr)
        return 2
    finally:
        if lab is not None:
            lab.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    failed = [o for o in outcomes if o.problems]
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} steps passed the browser check in "
          f"{time.monotonic() - started:.1f} s; screenshots in {out}")
    return 1 if failed else 0


def report(outcome: Outcome) -> None:
    verdict = "ok" if not outcome.problems else "FAILED"
    print(f"{outcome.step}: {verdict} in {outcome.seconds:.1f} s ({outcome.found})", flush=True)
    for problem in outcome.problems:
        print(f"    {problem}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
