"""Run every chapter notebook in a real JupyterLab, headless, and check that its widgets work.

For each notebook: open it in JupyterLab (served on 127.0.0.1 with a token), run all cells, check
that the banner, sliders, figures, tables and the ol check table rendered and that no widget failed
to display, move the notebook's primary control and wait for its figure to change, then save a
screenshot. The notebooks run against the reference (``OL_WORKSPACE`` points at an empty folder)
on copies, so the repository's files are never modified.

This script installs nothing. It needs the ``playwright`` Python package (``pip install
playwright``; never ``playwright install``) and Debian's ``chromium`` (``apt-get install -y
chromium``). Exit code 0 when every notebook passed, 1 when any failed, 2 when it could not run.

    python tests/browser/check_notebooks.py [--out build/screenshots] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
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
CHROMIUM_PATHS = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
IDLE = '.jp-StatusBar-TextItem:has-text("| Idle")'
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
PANEL_OF_PRIMARY = ".widget-vbox:has(> .widget-hbox .course-primary)"


class CannotRun(Exception):
    """Something this check needs is missing; the message says how to get it."""


@dataclass
class Outcome:
    notebook: str
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
    """User settings that keep toasts off the page: no news, no update checks."""
    plugin = folder / "@jupyterlab" / "apputils-extension"
    plugin.mkdir(parents=True)
    (plugin / "notification.jupyterlab-settings").write_text(
        json.dumps({"checkForUpdates": False, "fetchNews": "false"}))


class Lab:
    """A JupyterLab server on 127.0.0.1 serving copies of the notebooks, stopped by its PID."""

    def __init__(self, scratch: Path, notebooks: list[Path]) -> None:
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.root = scratch / "served"
        self.root.mkdir()
        for nb in notebooks:
            shutil.copyfile(nb, self.root / nb.name)
        settings, workspaces, empty = scratch / "settings", scratch / "workspaces", scratch / "workspace"
        write_settings(settings)
        workspaces.mkdir()
        empty.mkdir()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(NOTEBOOKS), env.get("PYTHONPATH", "")]))
        env["OL_WORKSPACE"] = str(empty)
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
                   f"--port={self.port}", f"--IdentityProvider.token={self.token}",
                   f"--ServerApp.root_dir={self.root}", "--LabApp.news_url=None",
                   f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={workspaces}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        self.log_path = scratch / "jupyterlab.log"
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(command, cwd=self.root, env=env, stdout=self._log,
                                        stderr=subprocess.STDOUT)

    def url(self, path: str, query: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path}?{query}token={self.token}"

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CannotRun(f"JupyterLab exited with code {self.process.returncode}:\n"
                                + self.log_tail())
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise CannotRun(f"JupyterLab did not answer within {timeout:.0f} s:\n" + self.log_tail())

    def shut_down_kernels(self) -> None:
        """End the sessions a closed page leaves running, so notebooks do not compete for CPU."""
        with urllib.request.urlopen(self.url("api/sessions"), timeout=10) as answer:
            sessions = json.loads(answer.read())
        for session in sessions:
            request = urllib.request.Request(self.url(f"api/sessions/{session['id']}"), method="DELETE")
            with urllib.request.urlopen(request, timeout=30):
                pass

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


def check_notebook(context, lab: Lab, name: str, out: Path, timeout_s: float) -> Outcome:
    outcome = Outcome(name)
    started = time.monotonic()
    page = context.new_page()
    try:
        # A workspace of its own, reset, so no earlier notebook's tab is restored beside this one.
        page.goto(lab.url(f"lab/workspaces/{Path(name).stem}/tree/{name}", query="reset&"))
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        page.wait_for_selector(IDLE, timeout=60_000)
        page.locator('.lm-MenuBar-itemLabel:text-is("Run")').click()
        page.locator('.lm-Menu-itemLabel:text-is("Run All Cells")').click()
        try:
            # Run All stops at a failing cell: its traceback ends the wait as well as the last cell.
            page.wait_for_selector(f'.course-check table, {STDERR}:has-text("Traceback")',
                                   timeout=timeout_s * 1000)
        except Exception:
            outcome.problems.append(f"the notebook did not run to its check cell within {timeout_s:.0f} s")
            return outcome
        if not page.locator(".course-check table").count():
            outcome.problems.append("a cell failed before the check cell" + errors_shown(page))
            return outcome
        page.wait_for_selector(IDLE, timeout=60_000)
        inspect(page, outcome)
        move_primary(page, outcome)
        screenshot = out / (Path(name).stem + ".png")
        page.screenshot(path=str(screenshot))
        outcome.screenshot = screenshot
    except Exception as err:  # a Playwright timeout or a closed page: report it, go on with the next
        outcome.problems.append(f"{type(err).__name__}: {str(err).splitlines()[0]}")
    finally:
        outcome.seconds = time.monotonic() - started
        if outcome.problems:
            outcome.screenshot = out / (Path(name).stem + "-failed.png")
            page.screenshot(path=str(outcome.screenshot))
        page.close()
        lab.shut_down_kernels()
    return outcome


def errors_shown(page) -> str:
    texts = page.locator(STDERR)
    shown = [t for t in texts.all_inner_texts() if "Traceback" in t or "Error" in t]
    return (":\n" + shown[0][-1200:]) if shown else ""


def inspect(page, outcome: Outcome) -> None:
    """Count what rendered and name what is missing."""
    counts = {
        "banner": page.locator(".course-banner").count(),
        "sliders": page.locator(".jupyter-widgets .widget-slider").count(),
        "figures": page.locator(".course-figure img").count(),
        "tables": page.locator(".jupyter-widgets table").count(),
        "check table": page.locator(".course-check table").count(),
    }
    outcome.found = ", ".join(f"{v} {k}" for k, v in counts.items())
    for what, n in counts.items():
        if n == 0:
            outcome.problems.append(f"no {what} rendered")
    if page.get_by_text("Error displaying widget").count():
        outcome.problems.append('a widget shows "Error displaying widget"')
    failed = errors_shown(page)
    if failed:
        outcome.problems.append("a cell printed an error" + failed)


def move_primary(page, outcome: Outcome) -> None:
    """Press ArrowRight on the primary slider; its panel's figure must change."""
    panel = page.locator(PANEL_OF_PRIMARY).first
    figure = panel.locator(".course-figure img").first
    handle = panel.locator(".course-primary .noUi-handle").first
    panel.scroll_into_view_if_needed()
    before = figure.get_attribute("src")
    handle.focus()
    handle.press("ArrowRight")
    try:
        page.wait_for_function(
            """([selector, before]) => {
                const img = document.querySelector(selector);
                return img !== null && img.getAttribute("src") !== before;
            }""",
            arg=[f"{PANEL_OF_PRIMARY} .course-figure img", before], timeout=60_000)
    except Exception:
        outcome.problems.append("moving the primary slider did not change its figure")
        return
    page.wait_for_selector(IDLE, timeout=60_000)
    page.locator(PANEL_OF_PRIMARY).first.scroll_into_view_if_needed()
    page.wait_for_timeout(500)


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
        lab = Lab(scratch, notebooks)
        lab.wait_ready()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
            context = browser.new_context(viewport={"width": 1280, "height": 2200})
            for nb in notebooks:
                outcome = check_notebook(context, lab, nb.name, out, args.timeout)
                outcomes.append(outcome)
                verdict = "ok" if not outcome.problems else "FAILED"
                print(f"{nb.name}: {verdict} in {outcome.seconds:.1f} s ({outcome.found})", flush=True)
                for problem in outcome.problems:
                    print(f"    {problem}", flush=True)
            browser.close()
    except CannotRun as err:
        print(f"check_notebooks: {err}", file=sys.stderr)
        return 2
    finally:
        if lab is not None:
            lab.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    failed = [o for o in outcomes if o.problems]
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} notebooks passed the browser check in "
          f"{time.monotonic() - started:.1f} s; screenshots in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
