"""What every chapter notebook shares: which ``tinyllm`` runs, the banner that says so, your edits
picked up as you save them, panels that draw before you have written the code, short messages for
functions you have not written yet, the ``ol`` check table, and theme-safe token chips.

Which code runs: your ``tinyllm/spec.py`` once you have started the module (``ol start L10.8``),
with everything else (the sampler, the pool, the tiny llama, the runner) taken from the reference,
as ``ol check --ref-deps`` does. Until then, or when the first cell asks for it
(``REFERENCE = True``), the reference solution runs and the banner says so.

Where your workspace is found, first match wins:

1. ``OL_WORKSPACE``, which ``ol lab`` sets to the workspace's absolute path. Set by hand to a
   relative path, it is relative to the folder where it was set: the Jupyter server's current
   folder (the shell you typed ``jupyter lab`` in) when this runs in a kernel the server started,
   else this process's current folder. When set, it is the only place looked at, as for ``ol``.
2. The workspace ``ol start`` last started, remembered in ``<repo>/.ol-workspace``.
3. The notebook's folder, then the repository root.

Edits are seen: before every cell runs (and before a panel redraws) your ``spec.py`` is compared
with the version in use (size, modification time, then content); when it changed, it is executed
again *in the same module object*, so ``spec`` from the first cell, ``tl.spec`` and the runner's
imports of your functions all see the new code. Classes whose source did not change stay the
very same objects, so a ``SpecConfig`` or ``Draft`` made before the edit still works with the new
functions; a changed class is updated in place (its instances get the new methods), except an
``Enum``, which is replaced: rerun the cells that made values of it. A file that no longer imports
leaves the last good version in the module, and every call of your functions says why it cannot run
until you fix it.

Chapters 6 and 7 (module L10.9) call ``use(module="L10.9")``: everything above then holds for your
``tinyllm/trees.py`` (``ol start L10.9``), with L10.8's ``spec.py`` taken from the reference.

Pictures before code: inside :func:`panel`, a function of yours that raises
``NotImplementedError`` (a stub) is replaced, call by call, by the reference's, and the panel says
so; a function you have written draws with yours, and when yours and the reference's give
different answers on the panel's inputs the panel names the first difference. Outside panels
(worked examples, checks), your code runs alone and a stub shows one line naming it.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import copy
import hashlib
import html
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field, fields, is_dataclass
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
STUB = ROOT / "course" / "stubs" / MODULE / "spec.py"
LEARNER_FILES = ("spec.py",)
PACKAGE_MODULES = ("pcg32", "sampling", "kvpool", "spec", "model", "runner")
LEARNER_MODULE = "tinyllm.spec"
# As in grader/lab.py: where ol start remembers the last workspace; empty turns it off.
REMEMBER_ENV = "OL_LAST_WORKSPACE_FILE"
REMEMBER_NAME = ".ol-workspace"

# Where the card states the rule behind each function you write.
CARD_SECTIONS = {
    "SpecConfig.parse": "2.1", "SpecConfig.__post_init__": "4", "prompt_lookup": "2.1", "ngram_draft": "2.1", "propose": "2.1",
    "residual": "2.2", "sample_dense": "2.2", "speculative_step": "2.2 and 2.3",
    "dense_distribution": "2.2", "verify_draft": "2.2", "blocks_for": "2.4", "rollback": "2.4",
    "generate_stream": "2.5", "generate": "2.5",
}
# Functions without side effects on their arguments: a panel may run the reference's beside yours
# on copies of the same inputs and say when the answers differ. At most COMPARE_CALLS calls of each
# per redraw are compared, so a Monte Carlo panel does not take twice as long.
COMPARED = frozenset({"SpecConfig.parse", "prompt_lookup", "ngram_draft", "propose", "residual",
                      "sample_dense", "speculative_step", "dense_distribution", "verify_draft",
                      "blocks_for"})
COMPARE_CALLS = 30

PASS, FAIL, ERROR, NOT_RUN = "pass", "fail", "error", "not run"


@dataclass(frozen=True)
class ChapterModule:
    """What a chapter's module changes in the above: chapters 1 to 5 run L10.8's ``spec.py``,
    chapters 6 and 7 run L10.9's ``trees.py`` (``course.use(module="L10.9")``)."""

    id: str
    learner_file: str
    package_modules: tuple[str, ...]
    card_sections: dict
    compared: frozenset
    from_reference: str  # the banner's "... come from the reference"


MODULES = {
    "L10.8": ChapterModule("L10.8", "spec.py", PACKAGE_MODULES, CARD_SECTIONS, COMPARED,
                           "the sampler, pool, model and runner come from the reference"),
    "L10.9": ChapterModule(
        "L10.9", "trees.py", PACKAGE_MODULES + ("trees",),
        {"tree_depths": "2.1", "tree_mask": "2.1", "tree_positions": "2.1", "tree_paths": "2.1",
         "chain_tree": "2.2", "PromptLookupDrafter.propose": "2.2", "trie_tree": "2.2",
         "SuffixTreeDrafter.propose": "2.2", "ModelDrafter._draw": "2.2", "ModelDrafter.propose": "2.2",
         "draft_q": "2.3", "verify_tree": "2.3", "compact": "2.4", "generate_tree": "2.5"},
        # Deterministic given copies of their inputs (verify_tree gets a copy of the generator).
        frozenset({"tree_depths", "tree_mask", "tree_positions", "tree_paths", "chain_tree",
                   "PromptLookupDrafter.propose", "trie_tree", "SuffixTreeDrafter.propose", "draft_q",
                   "verify_tree"}),
        "L10.8's spec.py (as with ol check --ref-deps), the sampler, pool, model and runner come from "
        "the reference"),
    "L10.10": ChapterModule(
        "L10.10", "serve.py", PACKAGE_MODULES + ("serve",),
        {"observe": "2.1", "survival": "2.1", "expected_tokens": "2.1", "gemm_blocks": "2.2",
         "goodput": "2.3", "adaptive_ks": "2.3", "choose_ks": "2.3", "Server._admit": "2.4",
         "Server.step": "2.4", "Server._verify": "2.4", "Server._finish": "2.4"},
        frozenset({"observe", "survival", "expected_tokens", "gemm_blocks", "goodput", "adaptive_ks",
                   "choose_ks"}),
        "L10.8's spec.py (as with ol check --ref-deps), the sampler, pool, model and runner come from "
        "the reference"),
}


def select_module(module_id: str) -> ChapterModule:
    """Make ``module_id``'s learner file the one this notebook runs, watches and checks."""
    global MODULE, STUB, LEARNER_FILES, LEARNER_MODULE, CARD_SECTIONS, COMPARED
    if module_id not in MODULES:
        raise ValueError(f"no chapters for module {module_id!r}; expected one of {', '.join(MODULES)}")
    chosen = MODULES[module_id]
    MODULE, LEARNER_FILES = chosen.id, (chosen.learner_file,)
    STUB = ROOT / "course" / "stubs" / MODULE / chosen.learner_file
    LEARNER_MODULE = "tinyllm." + chosen.learner_file.removesuffix(".py")
    CARD_SECTIONS, COMPARED = chosen.card_sections, chosen.compared
    return chosen


def _learner_stem() -> str:
    return LEARNER_FILES[0].removesuffix(".py")


@dataclass
class Running:
    """Which code the notebook runs and why."""

    source: str  # "learner" or "reference"
    why: str
    package_dir: Path  # the folder on sys.path holding the assembled tinyllm/
    learner_file: Path | None = None  # your spec.py, when it is the one running
    workspace: Path | None = None
    found_by: str = ""  # how the workspace was found, for the banner

    @property
    def learner(self) -> bool:
        return self.source == "learner"


_current: Running | None = None
_session: "_Session | None" = None
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


# --- Which workspace -------------------------------------------------------------------------

def launch_dir() -> Path:
    """The folder a relative ``OL_WORKSPACE`` is relative to: the current folder of the Jupyter
    server that started this kernel (it inherited the variable from the shell it was typed in),
    else this process's current folder."""
    parent = os.environ.get("JPY_PARENT_PID", "")
    if parent.isdigit():
        try:
            return Path(os.readlink(f"/proc/{parent}/cwd"))
        except OSError:  # not Linux, or the server is gone
            pass
    return Path.cwd()


def remembered_file() -> Path | None:
    named = os.environ.get(REMEMBER_ENV)
    if named is not None:
        return Path(named).expanduser() if named else None
    return ROOT / REMEMBER_NAME


def remembered_workspace() -> Path | None:
    """The workspace ``ol start`` (or ``ol lab``) used last, if it still is a folder."""
    where = remembered_file()
    try:
        text = where.read_text().strip() if where is not None else ""
    except OSError:
        return None
    return Path(text) if text and Path(text).is_dir() else None


def workspace_search() -> list[tuple[Path, str]]:
    """The folders searched for a started module, in order, each with how it came to be searched."""
    named = os.environ.get("OL_WORKSPACE")
    if named:
        path = Path(named).expanduser()
        if path.is_absolute():
            return [(path.resolve(), "OL_WORKSPACE")]
        base = launch_dir()
        return [((base / path).resolve(), f"OL_WORKSPACE={named}, relative to {base}")]
    found: list[tuple[Path, str]] = []
    remembered = remembered_workspace()
    for folder, how in ((remembered, "the workspace ol start remembered"),
                        (Path.cwd().resolve(), "the notebook's folder"), (ROOT, "the repository root")):
        if folder is not None and folder.resolve() not in [f for f, _ in found]:
            found.append((folder.resolve(), how))
    return found


def workspace_candidates() -> list[Path]:
    """The folders searched for a started module, in order."""
    return [folder for folder, _ in workspace_search()]


def _started(folder: Path) -> bool:
    return all((Path(folder) / "tinyllm" / name).is_file() for name in LEARNER_FILES)


def find_workspace(candidates: Sequence[Path] | None = None) -> Path | None:
    """The first candidate whose ``tinyllm/`` holds every learner file of the module."""
    for folder in workspace_candidates() if candidates is None else candidates:
        if _started(folder):
            return Path(folder)
    return None


# --- Importing: the reference's package with your spec.py ---------------------------------------

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


def _import_package(base: Path, after_spec: Callable[[object], None] | None = None) -> SimpleNamespace:
    """Import the assembled package; ``after_spec`` sees the spec module before the modules that
    import names from it (the runner) do."""
    _forget_tinyllm()
    sys.path.insert(0, str(base))
    _on_path.append(str(base))
    importlib.invalidate_caches()
    modules = {}
    for name in MODULES[MODULE].package_modules:
        if (base / "tinyllm" / f"{name}.py").is_file():
            modules[name] = importlib.import_module(f"tinyllm.{name}")
            if name == _learner_stem() and after_spec is not None:
                after_spec(modules[name])
    return SimpleNamespace(**modules)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _error_line(err: BaseException) -> int | None:
    if isinstance(err, SyntaxError):
        return err.lineno
    tb, line = err.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(LEARNER_FILES[0]):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def stub_functions() -> tuple[str, ...]:
    """The functions you write: those whose body raises NotImplementedError in the module's stub,
    as ``name`` or ``Class.name``."""
    tree = ast.parse(STUB.read_text())
    found: list[str] = []

    def raises(fn: ast.AST) -> bool:
        return any(isinstance(n, ast.Raise) and n.exc is not None and "NotImplementedError" in ast.dump(n.exc)
                   for n in ast.walk(fn))

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and raises(node):
            found.append(node.name)
        elif isinstance(node, ast.ClassDef):
            found += [f"{node.name}.{item.name}" for item in node.body
                      if isinstance(item, ast.FunctionDef) and raises(item)]
    return tuple(found)


class LearnerFileError(Exception):
    """Your spec.py changed and no longer imports: your functions cannot run until it does."""


@dataclass
class Draw:
    """What one panel redraw ran: your functions, the stubs drawn with the reference, differences."""

    used: list[str] = field(default_factory=list)
    substituted: list[str] = field(default_factory=list)
    difference: str = ""
    compared: dict[str, int] = field(default_factory=dict)


_drawing: Draw | None = None
_in_reference = 0  # > 0 while a reference function runs to compare with yours
_comparing = True


@contextlib.contextmanager
def no_comparison():
    """Inside a panel, run your functions without the reference beside them: for timed runs, whose
    wall-clock a comparison would inflate. Stubs are still drawn with the reference."""
    global _comparing
    outer, _comparing = _comparing, False
    try:
        yield
    finally:
        _comparing = outer


@contextlib.contextmanager
def drawing():
    """Record, for one redraw, whose functions drew it (:func:`panel` uses this)."""
    global _drawing
    outer, _drawing = _drawing, Draw()
    try:
        yield _drawing
    finally:
        _drawing = outer


class _Session:
    """Your spec.py as the module ``tinyllm.spec``: reloaded in place when the file changes, each of
    your functions behind a wrapper that stays the same object across reloads."""

    def __init__(self, running: Running, watched: Path) -> None:
        self.running = running
        self.watched = watched  # your spec.py in the workspace
        self.copy = running.package_dir / "tinyllm" / LEARNER_FILES[0]  # the copy the module runs
        self.names = stub_functions()
        self.module = None
        self.text = ""
        self.stamp: tuple[int, int] | None = None
        self.digest = ""
        self.load_error: BaseException | None = None
        self.impl: dict[str, Callable] = {}
        self.wrappers: dict[str, Callable] = {}
        self.reference_globals: dict = {}
        self.reference_impl: dict[str, Callable] = {}

    # -- loading --
    def _read(self) -> tuple[tuple[int, int], str, str]:
        st = self.watched.stat()
        data = self.watched.read_bytes()
        return (st.st_mtime_ns, st.st_size), hashlib.sha256(data).hexdigest(), data.decode("utf-8")

    def adopt(self, module) -> None:
        """Take over the freshly imported spec module: note its source, wrap your functions."""
        self.module = module
        self.stamp, self.digest, self.text = self._read()
        self._load_reference()
        self._wrap()

    def _load_reference(self) -> None:
        """The reference's spec.py executed on its own, its globals pointing at your types and
        functions, so a reference function run in place of a stub works on your values."""
        source = REFERENCE / LEARNER_FILES[0]
        module = types.ModuleType(f"tinyllm._reference_{_learner_stem()}")
        module.__package__, module.__file__ = "tinyllm", str(source)
        sys.modules[module.__name__] = module  # dataclasses look their module up by name
        scope = module.__dict__
        exec(compile(source.read_text(), str(source), "exec"), scope)
        self.reference_globals = scope
        for name in self.names:
            owner, _, attr = name.rpartition(".")
            found = getattr(scope.get(owner), "__dict__", {}).get(attr) if owner else scope.get(attr)
            if isinstance(found, staticmethod):
                found = found.__func__
            if callable(found):
                self.reference_impl[name] = found

    def changed(self) -> bool:
        try:
            st = self.watched.stat()
        except OSError:
            return self.load_error is None
        return (st.st_mtime_ns, st.st_size) != self.stamp

    def refresh(self) -> bool:
        """Reload your spec.py if it changed since it was loaded; True when a new version runs."""
        if not self.changed():
            return False
        try:
            stamp, digest, text = self._read()
        except (OSError, UnicodeDecodeError) as err:
            self.stamp, self.load_error = None, err
            return False
        self.stamp = stamp
        if digest == self.digest:
            return False
        self.digest = digest
        return self._reload(text)

    def _reload(self, text: str) -> bool:
        module = self.module
        before = dict(module.__dict__)
        self.copy.write_text(text)  # tracebacks and line numbers read this copy
        try:
            exec(compile(text, str(self.copy), "exec"), module.__dict__)
        except Exception as err:
            module.__dict__.clear()
            module.__dict__.update(before)
            self.load_error = err
            return False
        self._keep_classes(before, self.text, text)
        self.text, self.load_error = text, None
        self._wrap()
        self._rebind(before)
        return True

    def _rebind(self, before: dict) -> None:
        """Names other modules imported from the old version (the runner's ``from .spec import
        rollback``) now name the wrappers, when they did not already."""
        for module_name, other in list(sys.modules.items()):
            if not module_name.startswith("tinyllm.") or other is self.module or other is None:
                continue
            for name, wrapper in self.wrappers.items():
                attr = name.rpartition(".")[2]
                if "." not in name and attr in before and getattr(other, attr, None) is before[attr]:
                    setattr(other, attr, wrapper)

    def _keep_classes(self, before: dict, old_text: str, new_text: str) -> None:
        """Keep each class's identity across the reload (see the module docstring)."""
        import enum

        old_defs, new_defs = _class_defs(old_text), _class_defs(new_text)
        namespace = self.module.__dict__
        for name, node in new_defs.items():
            old, new = before.get(name), namespace.get(name)
            if not isinstance(old, type) or not isinstance(new, type) or old is new:
                continue
            if old_defs.get(name) == node:
                namespace[name] = old
            elif not issubclass(old, enum.Enum) and not issubclass(new, enum.Enum):
                for attr, value in new.__dict__.items():
                    if attr not in ("__dict__", "__weakref__"):
                        with contextlib.suppress(AttributeError, TypeError):
                            setattr(old, attr, value)
                namespace[name] = old

    def _wrap(self) -> None:
        namespace = self.module.__dict__
        for name in self.names:
            owner, _, attr = name.rpartition(".")
            holder = namespace.get(owner) if owner else None
            if owner and not isinstance(holder, type):
                continue
            raw = holder.__dict__.get(attr) if owner else namespace.get(attr)
            is_static = isinstance(raw, staticmethod)
            raw = raw.__func__ if is_static else raw
            if not callable(raw) or getattr(raw, "_course_wrapper", False):
                continue
            self.impl[name] = raw
            wrapper = self.wrappers.setdefault(name, self._wrapper(name))
            wrapper.__doc__, wrapper.__wrapped__ = raw.__doc__, raw
            if owner:
                setattr(holder, attr, staticmethod(wrapper) if is_static else wrapper)
            else:
                namespace[attr] = wrapper
        # The reference's functions see your types, and your functions where you wrote them.
        for key, value in namespace.items():
            if getattr(value, "_course_wrapper", False) or (
                    isinstance(value, type) and value.__module__ == LEARNER_MODULE):
                self.reference_globals[key] = value

    def _wrapper(self, name: str) -> Callable:
        def call(*args, **kwargs):
            return self.call(name, args, kwargs)

        call.__name__ = call.__qualname__ = name
        call._course_wrapper = True
        return call

    # -- calling --
    def call(self, name: str, args: tuple, kwargs: dict):
        if self.load_error is not None:
            raise LearnerFileError(load_error_text(self.load_error, self.watched))
        impl = self.impl[name]
        draw = _drawing
        if draw is None:
            return impl(*args, **kwargs)
        if _in_reference:
            try:
                return impl(*args, **kwargs)
            except NotImplementedError:
                return self.reference_impl[name](*args, **kwargs)
        compare = (_comparing and name in COMPARED and name in self.reference_impl and not draw.difference
                   and draw.compared.get(name, 0) < COMPARE_CALLS)
        inputs = None
        if compare:
            try:
                inputs = copy.deepcopy((args, kwargs))
            except Exception:  # an argument that cannot be copied: nothing to compare with
                inputs = None
        try:
            result = impl(*args, **kwargs)
        except NotImplementedError:
            if name not in self.reference_impl:
                raise
            if name not in draw.substituted:
                draw.substituted.append(name)
            return self.reference_impl[name](*args, **kwargs)
        if name not in draw.used:
            draw.used.append(name)
        if inputs is not None:
            draw.compared[name] = draw.compared.get(name, 0) + 1
            self._compare(draw, name, inputs, result)
        return result

    def _compare(self, draw: Draw, name: str, inputs: tuple, mine) -> None:
        global _in_reference
        shown_args = ", ".join([_short(a, 60) for a in inputs[0]]
                               + [f"{k}={_short(v, 60)}" for k, v in inputs[1].items()])
        _in_reference += 1
        try:
            theirs = self.reference_impl[name](*inputs[0], **inputs[1])
        except Exception as err:
            draw.difference = (f"your `{name}` and the reference's differ on this panel's inputs: "
                               f"{name}({shown_args}) gives {_short(mine, 80)} with yours; the reference "
                               f"raises {_first_line(err)}")
            return
        finally:
            _in_reference -= 1
        if not same_value(mine, theirs):
            draw.difference = (f"your `{name}` and the reference's differ on this panel's inputs: "
                               f"{name}({shown_args}) gives {_short(mine, 80)} with yours, "
                               f"{_short(theirs, 80)} with the reference's")


def _class_defs(text: str) -> dict[str, str]:
    """Each top-level class's syntax tree (as text, without positions), by name."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    return {node.name: ast.dump(node) for node in tree.body if isinstance(node, ast.ClassDef)}


def same_value(a, b) -> bool:
    """Equal as the card means it: numbers to 1e-9, sequences and dataclasses element by element."""
    import numpy as np

    if is_dataclass(a) and is_dataclass(b) and not isinstance(a, type):
        return type(a).__name__ == type(b).__name__ and all(
            same_value(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        try:
            x, y = np.asarray(a), np.asarray(b)
        except (TypeError, ValueError):
            return False
        if x.shape != y.shape:
            return False
        if x.dtype.kind in "biuf" and y.dtype.kind in "biuf":
            return bool(np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True))
        return all(same_value(p, q) for p, q in zip(list(a), list(b)))
    if isinstance(a, (int, float, np.number)) and isinstance(b, (int, float, np.number)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return bool(np.isclose(float(a), float(b), rtol=1e-9, atol=1e-12, equal_nan=True))
    try:
        return bool(a == b)
    except Exception:
        return False


def load_error_text(err: BaseException, path: Path) -> str:
    line = _error_line(err)
    at = f" (line {line})" if line else ""
    return (f"your {path} does not import{at}: {_first_line(err)}; fix it, save, and rerun this cell "
            "(nothing of yours runs until it imports)")


def refresh() -> bool:
    """Pick up your saved spec.py if it changed; True when a new version now runs.

    Called before every cell (an IPython hook :func:`use` installs), before each panel redraw and
    on entering :class:`learner_code`; call it yourself outside a notebook.
    """
    session = _session
    if session is None:
        return False
    was_learner = session.running.learner
    if not session.refresh():
        return False
    if not was_learner:  # the file did not import when the notebook started; now it does
        session.running.source, session.running.why = "learner", ""
        session.running.learner_file = session.watched
    return True


def code_version() -> tuple[str, str]:
    """Which code runs now: ("learner", the sha256 of the spec.py in use) or ("reference", "").
    A panel that caches results across redraws keys its cache on this, so an edit is not hidden
    behind results computed with the old code (or with the reference, before you wrote yours)."""
    refresh()
    session, running = _session, current()
    return (running.source, session.digest if session is not None and running.learner else "")


def _pre_run_cell(*_args) -> None:
    session = _session
    if session is None:
        return
    was_learner = session.running.learner
    try:
        fresh = refresh()
    except Exception as err:  # a hook must never break the cell; the next call says why
        session.load_error = err
        return
    if fresh:
        if not was_learner:
            show_banner(session.running)
        else:
            when = time.strftime("%H:%M:%S", time.localtime(session.watched.stat().st_mtime))
            _display(f'<div class="course-reloaded" style="{_NOTE}">↻ picked up your '
                     f"<code>{html.escape(str(session.watched))}</code> as saved at {when}</div>",
                     f"picked up your {session.watched} as saved at {when}")


def _watch_cells(on: bool) -> None:
    """Run :func:`refresh` before every cell of this kernel (once, however often use() runs)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    callbacks = shell.events.callbacks.get("pre_run_cell", [])
    for callback in [c for c in callbacks if getattr(c, "__name__", "") == "_pre_run_cell"]:
        shell.events.unregister("pre_run_cell", callback)
    if on:
        shell.events.register("pre_run_cell", _pre_run_cell)


def use(reference: bool = False, workspace: str | os.PathLike | None = None,
        module: str = "L10.8") -> SimpleNamespace:
    """Import ``tinyllm`` for this notebook and show a banner naming the code that runs.

    ``reference=True`` runs the reference solution even when your module is started. Your saved
    edits to ``spec.py`` are picked up before every cell runs; rerunning this cell starts afresh.
    Returns a namespace with the package's modules (``spec``, ``sampling``, ``kvpool``, ...) and
    ``running``, a :class:`Running`. ``module="L10.9"`` runs your ``trees.py`` instead (chapters 6
    and 7), everything else from the reference.
    """
    global _current, _session
    select_module(module)
    _session = None
    search = ([(Path(workspace).expanduser().resolve(), "use(workspace=...)")] if workspace is not None
              else workspace_search())
    found = None if reference else next(((f, how) for f, how in search if _started(f)), None)
    if reference:
        why = "you chose it in the first cell (REFERENCE = True)"
    elif found is None:
        looked = ", ".join(str(p) for p, _ in search)
        why = (f"no started module found (looked for tinyllm/{LEARNER_FILES[0]} in {looked}); "
               f"start one with <code>ol start {MODULE} --workspace work</code>, then open the chapters "
               f"with <code>ol lab --workspace work</code> (or rerun this cell)")
    else:
        why = ""
    running, modules, watched = None, None, None
    if found is not None:
        folder, how = found
        watched = folder / "tinyllm" / LEARNER_FILES[0]
        base = _assemble(folder / "tinyllm")
        running = Running("learner", "", base, watched, folder, how)
        session = _Session(running, watched)
        try:
            _current = running
            modules = _import_package(base, after_spec=session.adopt)
            _session = session
        except Exception as err:  # a learner file that does not import: show it, run the reference
            why = load_error_text(err, watched).replace("rerun this cell", "rerun any cell")
            why = html.escape(why)
            running = None
    if running is None:
        base = _assemble(None)
        running = Running("reference", why, base)
        _current = running
        modules = _import_package(base)
        if watched is not None:  # watch the broken file: once it imports, it runs
            running.workspace, running.found_by = found
            _session = _Session(running, watched)
            _session.module = getattr(modules, _learner_stem())
            _session.text = (REFERENCE / LEARNER_FILES[0]).read_text()
            with contextlib.suppress(OSError):
                _session.stamp = (watched.stat().st_mtime_ns, watched.stat().st_size)
            _session._load_reference()
    _watch_cells(_session is not None)
    modules.running = running
    show_banner(running)
    return modules


def current() -> Running:
    if _current is None:
        raise RuntimeError("call course.use() first (the notebook's first code cell does)")
    return _current


# --- Theme-safe colours ------------------------------------------------------------------------
# Text on JupyterLab's own backgrounds uses its theme variables (light and dark); anything with a
# coloured background sets the text colour too. The fallbacks after the comma are for renderers
# without JupyterLab's variables.

_BOX = ("padding:8px 12px;border:2px solid;border-radius:6px;font-size:14px;"
        "background:var(--jp-layout-color2,#f3f3f3);color:var(--jp-ui-font-color0,#111);")
_NOTE = "font-size:13px;padding:2px 0;color:var(--jp-ui-font-color1,inherit);"

# kind: (background, text, border); text on background has WCAG contrast >= 4.5 (tested).
CHIP_COLOURS = {
    "plain": ("#f5f5f5", "#212121", "1px solid #9e9e9e"),
    "suffix": ("#bbdefb", "#0d3c78", "2px solid #1565c0"),
    "match": ("#fff59d", "#3e2723", "1px solid #f9a825"),
    "copy": ("#c8e6c9", "#1b4d1f", "1px solid #2e7d32"),
    "draft": ("#e8f5e9", "#1b4d1f", "2px dashed #2e7d32"),
    "accepted": ("#c8e6c9", "#1b4d1f", "1px solid #2e7d32"),
    "corrected": ("#ffe0b2", "#4e2600", "1px solid #ef6c00"),
    "bonus": ("#bbdefb", "#0d3c78", "1px solid #1565c0"),
    "rejected": ("#ffcdd2", "#7f0000", "1px solid #c62828"),
    "pass": ("#c8e6c9", "#1b4d1f", "1px solid #2e7d32"),
    "fail": ("#ffcdd2", "#7f0000", "1px solid #c62828"),
    "note": ("#eeeeee", "#303030", "1px solid #9e9e9e"),
}


def chip(text, kind: str = "plain", title: str | None = None) -> str:
    """One token (or a short label) as a coloured box that reads in light and dark themes.

    ``kind`` is one of :data:`CHIP_COLOURS`: ``plain`` (a context token), ``suffix``, ``match``
    (the earlier occurrence), ``copy`` (the copied continuation), ``draft``, ``accepted``,
    ``corrected``, ``bonus``, ``rejected`` (struck through), ``pass``, ``fail``, ``note``.
    """
    if kind not in CHIP_COLOURS:
        raise ValueError(f"unknown chip kind {kind!r}; expected one of {', '.join(CHIP_COLOURS)}")
    background, colour, border = CHIP_COLOURS[kind]
    strike = "text-decoration:line-through;" if kind == "rejected" else ""
    hover = f' title="{html.escape(title, quote=True)}"' if title else ""
    return (f'<span class="course-chip course-chip-{kind}"{hover} style="display:inline-block;'
            f"min-width:1.6em;margin:2px;padding:1px 4px;text-align:center;font-family:monospace;white-space:pre;"
            f'border-radius:3px;background:{background};color:{colour};border:{border};{strike}">'
            f"{html.escape(str(text))}</span>")


def strip(parts: Sequence[str], note: str = "") -> str:
    """Chips (HTML from :func:`chip`) in one wrapping line, the container the browser check reads."""
    tail = f'<span style="{_NOTE}margin-left:8px">{note}</span>' if note else ""
    return ('<div class="course-strip" style="line-height:2.4em;color:var(--jp-ui-font-color1,inherit)">'
            + "".join(parts) + tail + "</div>")


def token_label(token: int) -> str:
    """A byte token as strips and figures show it: its character, a visible mark for a space (·),
    a newline (↵) or a tab (→), and the hex value of anything else unprintable."""
    token = int(token)
    return {10: "↵", 32: "·", 9: "→"}.get(token, chr(token) if 33 <= token < 127 else f"x{token:02x}")


def bench_workloads() -> dict[str, list[str]]:
    """The benchmark's prompts, ``WORKLOADS`` of ``bench/speculation.py``, read from its source
    (importing the script would put the reference package on ``sys.path``)."""
    tree = ast.parse((ROOT / "bench" / "speculation.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "WORKLOADS")


# --- The banner --------------------------------------------------------------------------------

def banner_html(running: Running) -> str:
    if running.learner:
        found = f" (found: {html.escape(running.found_by)})" if running.found_by else ""
        return (f'<div class="course-banner course-learner" style="{_BOX}border-color:#2e7d32">'
                f"Running <b>your code</b>: <code>{html.escape(str(running.learner_file))}</code>{found}; "
                f"{MODULES[MODULE].from_reference}. Save your edits and rerun "
                "any cell: it uses the saved file. To run the reference instead, set "
                "<code>REFERENCE = True</code> in this cell and rerun it; for another workspace, "
                "<code>ol lab --workspace DIR</code>.</div>")
    switch = ("set <code>REFERENCE = False</code> in this cell and rerun it"
              if running.why.startswith("you chose") else
              "<code>ol lab --workspace DIR</code> opens the chapters on your workspace")
    return (f'<div class="course-banner course-reference" style="{_BOX}border-color:#ef6c00">'
            f"<b>Running the reference solution, not your code</b>: {running.why}. To run yours: "
            f"{switch}.</div>")


def banner_text(running: Running) -> str:
    if running.learner:
        return f"Running your code: {running.learner_file}"
    return "Running the reference solution, not your code: " + _strip_tags(running.why)


def _strip_tags(text: str) -> str:
    return html.unescape(text.replace("<code>", "`").replace("</code>", "`"))


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


def _section(name: str) -> str:
    section = CARD_SECTIONS.get(name)
    return f"card section {section}" if section else "the card"


def message_for(err: BaseException, running: Running) -> tuple[str, str]:
    """(html, text) of the short message shown for an error raised while running your code."""
    if isinstance(err, LearnerFileError):
        return (f'<div class="course-raised" style="{_BOX}border-color:#c62828">✘ '
                f"{html.escape(str(err))}</div>"), str(err)
    where = _learner_frame(err, running)
    path = running.learner_file
    if isinstance(err, NotImplementedError) and where is not None:
        name = where[0]
        section = CARD_SECTIONS.get(name)
        see = f" (the card, section {section})" if section else ""
        text = (f"`{name}` is not written yet. Write it in {path}{see}, then rerun this cell.")
        return (f'<div class="course-missing" style="{_BOX}border-color:#1565c0">'
                f"✎ <code>{html.escape(name)}</code> is not written yet. Write it in "
                f"<code>{html.escape(str(path))}</code>{see}, then rerun this cell.</div>"), text
    if where is not None:
        name, line = where
        text = f"your `{name}` raised {_first_line(err)} ({path}, line {line})"
    else:
        text = (f"this cell failed on what your code returned: {_first_line(err)}; "
                "the check cell below names the failing test")
    return (f'<div class="course-raised" style="{_BOX}border-color:#c62828">'
            f"✘ {html.escape(text)}</div>"), text


class learner_code(contextlib.ContextDecorator):
    """Run a block (or a function) that calls your code; show a short message if it fails.

    With your code running, an exception becomes one line naming your function, and the block
    is skipped from that point. With the reference running, exceptions propagate: a failure there
    is a bug in the notebook or the reference, and the notebook checks in CI must see it.
    """

    def __enter__(self) -> "learner_code":
        refresh()
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
    mark = "✔" if same else "✘"
    shown_actual = _short(actual)
    said = f"{what}: {shown_actual}" + ("" if same else f" (the card says {_short(expected)})")
    text = f"{mark} {said}"
    _display(f'<div class="course-expect" style="font-family:monospace;color:var(--jp-ui-font-color1,inherit)">'
             f'{chip(mark, "pass" if same else "fail")} {html.escape(said)}</div>', text)
    if not same and not current().learner:
        raise AssertionError(f"the reference disagrees with the card on {what}: "
                             f"{shown_actual} != {_short(expected)}")
    return same


def _short(value, limit: int | None = None) -> str:
    import numpy as np

    if isinstance(value, np.ndarray):
        text = np.array2string(value, precision=4, separator=", ")
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = repr(value)
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + "…"
    return text


# --- The check cell: graded tests through ol ---------------------------------------------------

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
    refresh()
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
        checked = f"a scratch workspace holding the reference {LEARNER_FILES[0]}"
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


def _diagnosis(value) -> dict | None:
    if not isinstance(value, dict) or not str(value.get("summary") or "").strip():
        return None
    pitfalls = value.get("pitfalls")
    return {"summary": str(value["summary"]).strip(),
            "pitfalls": [str(p) for p in pitfalls] if isinstance(pitfalls, list) else []}


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
    return CheckReport(status, results, note=note, checked=checked)


_LEFT = ' style="text-align:left;vertical-align:top"'
_STATUS = {PASS: ("✔ pass", "pass"), FAIL: ("✘ fail", "fail"), ERROR: ("✘ error", "fail"),
           NOT_RUN: ("· not run", "note")}


def report_html(report: CheckReport) -> str:
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
            more += (f'<div class="course-diagnosis" style="{_NOTE}"><b>Likely cause:</b> '
                     f"{html.escape(t.diagnosis['summary'])}"
                     + (f" (pitfall {html.escape(pitfalls)}; <code>ol tests {MODULE}</code> lists it)"
                        if pitfalls else "") + "</div>")
        if more:
            rows.append(f'<tr class="course-check-more"><td></td><td colspan="3"{_LEFT}>{more}</td></tr>')
    head = f"<b>ol check {MODULE}</b>: {report.passed} of {len(report.tests)} tests passed"
    if report.checked:
        head += f" (checked: {html.escape(report.checked)})"
    note = f"<div>{report.note}</div>" if report.note else ""
    return (f'<div class="course-check" style="color:var(--jp-ui-font-color1,inherit)">{head}{note}'
            '<table class="course-check-table">'
            f"<tr><th{_LEFT}>test</th><th{_LEFT}>status</th><th{_LEFT}>message</th><th>time</th></tr>"
            + "".join(rows) + "</table></div>")


# --- Figure panels -----------------------------------------------------------------------------

def draw_label(record: Draw) -> tuple[str, str]:
    """(html, text): one line saying whose code drew a panel, and the first difference found."""
    if _current is None or not _current.learner:
        return "", ""
    parts, text_parts = [], []
    if record.used:
        names = ", ".join(f"`{n}`" for n in record.used)
        text_parts.append(f"drawn with your {names}")
    if record.substituted:
        missing = "; ".join(f"`{n}` is not written yet ({_section(n)})" for n in record.substituted)
        text_parts.append(f"drawn with the reference: {missing}")
    text = "; ".join(text_parts)
    if text:
        kind = "note" if record.substituted else "pass"
        mark = "reference" if record.substituted else "your code"
        parts.append(f'<div class="course-label" style="{_NOTE}">{chip(mark, kind)} '
                     f"{_code_spans(text)}</div>")
    if record.difference:
        parts.append(f'<div class="course-label course-differs" style="{_NOTE}">{chip("differs", "fail")} '
                     f"{_code_spans(record.difference)}</div>")
        text = "\n".join(filter(None, [text, record.difference]))
    return "".join(parts), text


def _code_spans(text: str) -> str:
    """Escape ``text``, turning `name` into <code>name</code>."""
    pieces = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def panel(draw: Callable[..., None], controls: dict, primary: str | None = None,
          columns: int = 3, slow: bool = False):
    """Controls above an output that ``draw(**values)`` fills; redrawn whenever a control moves.

    ``draw`` runs under :class:`learner_code` and :func:`drawing`: a stub of yours is replaced by
    the reference's function and a line above the figure says so (or that yours drew it, or where
    yours and the reference's differ). While it draws, that line says "computing…". With ``slow``,
    sliders redraw when released rather than while dragged. The control named ``primary`` carries
    the CSS class the browser check moves; the output carries ``course-figure``.
    """
    import ipywidgets as widgets

    status = widgets.HTML(value="")
    status.add_class("course-panel-status")

    def redraw(**values) -> None:
        status.value = f'<div class="course-computing" style="{_NOTE}">⏳ computing…</div>'
        with drawing() as record:
            learner_code()(draw)(**values)
        status.value = draw_label(record)[0]

    if slow:
        for control in controls.values():
            if hasattr(control, "continuous_update"):
                control.continuous_update = False
    out = widgets.interactive_output(redraw, controls)
    out.add_class("course-figure")
    if primary is not None:
        controls[primary].add_class("course-primary")
    boxes = list(controls.values())
    rows = [widgets.HBox(boxes[i:i + columns]) for i in range(0, len(boxes), columns)]
    return widgets.VBox(rows + [status, out])
