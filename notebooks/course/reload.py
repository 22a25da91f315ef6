"""Your edits, picked up as you save them.

Before every cell runs (and before a panel redraws) your learner file is compared with the version
in use (size, modification time, then content); when it changed, it is executed again *in the same
module object*, so ``spec`` from the first cell, ``tl.spec`` and the runner's imports of your
functions all see the new code. Classes whose source did not change stay the very same objects,
so a ``SpecConfig`` or ``Draft`` made before the edit still works with the new functions; a
changed class is updated in place (its instances get the new methods), except an ``Enum``, which
is replaced: rerun the cells that made values of it. A file that no longer imports leaves the last
good version in the module, and every call of your functions says why it cannot run until you fix it.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import html
import sys
import time
import types
from pathlib import Path
from typing import Callable

from course.chapters import REFERENCE, Chapter
from course.compare import COMPARE_CALLS, compare
from course.display import NOTE, display, first_line, show_banner
from course.state import STATE, Running, current


class LearnerFileError(Exception):
    """Your learner file changed and no longer imports: your functions cannot run until it does."""


class Session:
    """Your learner file as its module (``tinyllm.spec``, ``tinyllm.trees``, ...): reloaded in place when
    the file changes, each of your functions behind a wrapper that stays the same object across reloads."""

    def __init__(self, running: Running, watched: Path, chapter: Chapter) -> None:
        self.running = running
        self.chapter = chapter
        self.watched = watched  # your learner file in the workspace
        self.copy = running.package_dir / "tinyllm" / chapter.learner_file  # the copy the module runs
        self.names = tuple(chapter.sections)
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
        """Take over the freshly imported learner module: note its source, wrap your functions."""
        self.module = module
        self.stamp, self.digest, self.text = self._read()
        self._load_reference()
        self._wrap()

    def _load_reference(self) -> None:
        """The reference's learner file executed on its own, its globals pointing at your types and
        functions, so a reference function run in place of a stub works on your values."""
        source = REFERENCE / self.chapter.learner_file
        module = types.ModuleType(f"tinyllm._reference_{self.chapter.stem}")
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
        """Reload your learner file if it changed since it was loaded; True when a new version runs."""
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

        old_defs, new_defs = class_defs(old_text), class_defs(new_text)
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
                    isinstance(value, type) and value.__module__ == self.chapter.learner_module):
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
            raise LearnerFileError(load_error_text(self.load_error, self.watched, self.chapter.learner_file))
        impl = self.impl[name]
        draw = STATE.drawing
        if draw is None:
            return impl(*args, **kwargs)
        if STATE.in_reference:
            try:
                return impl(*args, **kwargs)
            except NotImplementedError:
                return self.reference_impl[name](*args, **kwargs)
        compare_now = (STATE.comparing and name in self.chapter.compared and name in self.reference_impl and not draw.difference
                   and draw.compared.get(name, 0) < COMPARE_CALLS)
        inputs = None
        if compare_now:
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
            compare(draw, name, inputs, result, self.reference_impl[name])
        return result


def class_defs(text: str) -> dict[str, str]:
    """Each top-level class's syntax tree (as text, without positions), by name."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    return {node.name: ast.dump(node) for node in tree.body if isinstance(node, ast.ClassDef)}


def error_line(err: BaseException, file_name: str) -> int | None:
    if isinstance(err, SyntaxError):
        return err.lineno
    tb, line = err.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(file_name):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def load_error_text(err: BaseException, path: Path, file_name: str) -> str:
    """The message for a learner file that does not import."""
    line = error_line(err, file_name)
    at = f" (line {line})" if line else ""
    return (f"your {path} does not import{at}: {first_line(err)}; fix it, save, and rerun this cell "
            "(nothing of yours runs until it imports)")


def refresh() -> bool:
    """Pick up your saved learner file if it changed; True when a new version now runs.

    Called before every cell (an IPython hook :func:`use` installs), before each panel redraw and
    on entering :class:`learner_code`; call it yourself outside a notebook.
    """
    session = STATE.session
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
    """Which code runs now: ("learner", the sha256 of the learner file in use) or ("reference", "").
    A panel that caches results across redraws keys its cache on this, so an edit is not hidden
    behind results computed with the old code (or with the reference, before you wrote yours)."""
    refresh()
    session, running = STATE.session, current()
    return (running.source, session.digest if session is not None and running.learner else "")


def _pre_run_cell(*_args) -> None:
    session = STATE.session
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
            display(f'<div class="course-reloaded" style="{NOTE}">↻ picked up your '
                     f"<code>{html.escape(str(session.watched))}</code> as saved at {when}</div>",
                     f"picked up your {session.watched} as saved at {when}")


def watch_cells(on: bool) -> None:
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
