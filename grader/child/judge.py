"""Entry point of an isolated check's judge, loaded as ``-p grader.child.judge`` (and by each stand-in
module): the learner's code never shares a process with what decides pass or fail.

In an isolated check the graded suite runs in the *judge* (the pytest process with ol's recorder,
as in any check), but ``tinyllm.<file>`` for each file the learner wrote is a stand-in: every
call into it goes over RPyC to the *learner process* (:mod:`grader.child.learner_server`), which alone
imports the learner's package, runs inside a :class:`~grader.core.sandbox.Sandbox` (bubblewrap, a
cgroup where the machine has them), and sends back only data. The cases, their expected answers and the judging stay in
the judge, built from the suite, the fixtures and the reference's given files; the learner's
process sees the arguments of each call and nothing else of the suite, and has no way to the
recorder's pipe, ol's processes or their files.

What stands in for the learner's names in the judge:

- a function: a :class:`RemoteFunction` (the call runs there, its result comes back as data);
- an enum: a local ``Enum`` with the same members (members travel by name);
- an exception class: a local class of the same name deriving from the same builtin;
- a dataclass: construction runs there; instances come back as a local dataclass with the
  same fields (``dataclasses.fields`` and attribute access work; methods run there);
- any other class: construction runs there; the judge holds a :class:`Handle` to the instance,
  and its attributes and methods run there;
- a constant: its value.

Results come back as JSON and are decoded here into plain data, so nothing the learner's code
returns can run code in the judge (an object whose ``__eq__`` says True stays a handle, never a
value compared as equal).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import io
import json
import os
import pickle
import socket
import subprocess
import sys
import time
import types
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import rpyc
from rpyc.core.channel import Channel
from rpyc.core.stream import SocketStream

from grader.cases import keys_of
from grader.child.learner_server import NUMERIC_KINDS, RPC_CONFIG, SCALARS, Objects, builtin_base, kept, rebuild, resolve
from grader.core.protocol import (CHECK_CPU_ENV, IMPL_ENV, LEARNER_IMPL_ENV, LEARNER_SANDBOX_ENV, LEARNER_SERVER, RPC_FD_ENV,
                                  TEST_TIMEOUT_ENV, TEST_TIMEOUTS_ENV, WALL_FACTOR, kernel_env)
from grader.core.sandbox import Sandbox, hide_memory, tree_cpu_seconds

MAX_DEPTH = 200
MAX_DATA_DEPTH = 8    # the suite's module-level data: a golden case's prompt sits at 4 (_golden[file][section][i]["prompt"])
MAX_FRAME = 1 << 28   # bytes: no message of ol's comes near it; a frame read as longer is not one


class LearnerGone(RuntimeError):
    """The learner's process ended (it exited, crashed or was killed) while the judge needed it."""


class LearnerTimedOut(BaseException):
    """The code under test did not answer within its test's time. A BaseException, so no case takes
    it for an answer: the test ends there, and the next starts with a fresh learner's process."""

    says_it_all = True


# --- the judge's side -------------------------------------------------------------------------------

class _Guarded(Channel):
    """rpyc's channel to the learner's process, whose code can write to the socket too. A frame
    read as longer than ``MAX_FRAME`` (junk read as a length), before or after decompression,
    ends the session at once; and while the judge waits for the rest of a frame, ``watch`` (the
    running clock's check) has its turn every ``SLICE`` seconds, so half a frame cannot hold the
    judge past the test's time, and is named as what stopped it."""

    def __init__(self, stream: SocketStream) -> None:
        super().__init__(stream)
        self.watch: Callable[[], None] = _unwatched

    def recv(self) -> bytes:
        length, compressed = self.FRAME_HEADER.unpack(self._read(self.FRAME_HEADER.size))
        if length > MAX_FRAME:
            raise _garbled()
        data = self._read(length + len(self.FLUSHER), partway=True)[:-len(self.FLUSHER)]
        if not compressed:
            return data
        inflate = zlib.decompressobj()
        data = inflate.decompress(data, MAX_FRAME)
        if inflate.unconsumed_tail:
            raise _garbled()
        return data

    def _read(self, count: int, partway: bool = False) -> bytes:
        chunks = []
        while count > 0:
            if not self.stream.poll(SLICE):
                self._wait(partway or bool(chunks))
                continue
            chunk = self.stream.sock.recv(min(count, SocketStream.MAX_IO_CHUNK))
            if not chunk:
                raise EOFError("connection closed by peer")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def _wait(self, partway: bool) -> None:
        try:
            self.watch()
        except LearnerTimedOut:
            if not partway:
                raise
            # rpyc writes a frame whole: one stopped halfway was written by the learner's code.
            raise LearnerGone("the process running the code under test stopped partway through a message "
                              "to the judge") from None


def _unwatched() -> None:
    """No clock runs: the learner's process is starting, or the judge is not waiting for it."""


def _garbled() -> LearnerGone:
    return LearnerGone("the process running the code under test wrote something other than ol's messages "
                       "to its connection with the judge")


def learner_env(impl: str, rpc_fd: int) -> dict[str, str]:
    """The learner process's whole environment: the judge's kernel choices and nothing else of it
    (the recorder's nonce and pipe stay here), one BLAS thread, the package and the socket."""
    env = kernel_env()
    env.update({"PATH": "/usr/bin:/bin", "HOME": impl, IMPL_ENV: impl, RPC_FD_ENV: str(rpc_fd),
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
                "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return env


class _Session:
    """One learner process and the connection to it."""

    generation = 0

    def __init__(self) -> None:
        # Before the learner's process exists: even as the same user it may not read this one's
        # memory, environment (the recorder's nonce) or descriptors (the recorder's pipe).
        hide_memory()
        impl = os.environ[LEARNER_IMPL_ENV]
        box = Sandbox.from_env(os.environ.get(LEARNER_SANDBOX_ENV, ""))
        mine, theirs = socket.socketpair()
        env = learner_env(impl, theirs.fileno())
        check_cpu = os.environ.get(CHECK_CPU_ENV)
        self.process = box.learner_process([sys.executable, "-B", "-s", str(Path(impl) / LEARNER_SERVER)], Path(impl), env,
                                           theirs.fileno(), float(check_cpu) + STARTUP if check_cpu else None)
        theirs.close()
        self.channel = _Guarded(SocketStream(mine))
        self.conn = rpyc.connect_channel(self.channel, service=JudgeService, config=dict(RPC_CONFIG))
        _Session.generation += 1
        self.generation = _Session.generation
        self._root = None

    def request(self, name: str, argument):
        """Send one request to the learner's service (``describe`` or ``invoke``); its answer is
        awaited by :func:`_reply`."""
        return self.started()._calls[name](argument)

    def started(self) -> "_Session":
        """This session, once the learner's process answers."""
        if self._root is None:
            # The learner's process starting (the interpreter, numpy, rpyc): no learner code runs yet.
            self.conn._config["sync_request_timeout"] = STARTUP
            self._root = self.conn.root
            self._calls = {n: rpyc.async_(getattr(self._root, n)) for n in ("describe", "invoke")}
        return self

    def cpu(self) -> float:
        """CPU seconds the learner's processes of this session have used so far."""
        try:
            return tree_cpu_seconds(self.process.pid)
        except OSError:
            return 0.0

    def kill(self) -> None:
        global _RETIRED_CPU
        if self.process.poll() is None:
            _RETIRED_CPU += self.cpu()
        try:
            self.process.kill()
        except OSError:
            pass
        self.process.wait()

    def gone(self, err: BaseException) -> LearnerGone:
        status = self.process.poll()
        if status is None:
            try:
                status = self.process.wait(1)
            except subprocess.TimeoutExpired:
                status = None
        how = ("stopped answering" if status is None else f"was killed by signal {-status}" if status < 0
               else f"exited with status {status}")
        return LearnerGone(f"the process running the code under test {how} (did the code call os._exit, crash, "
                           "or go past its memory or process bounds?)")


_SESSION: _Session | None = None


def _session() -> _Session:
    global _SESSION
    if _SESSION is None or _SESSION.process.poll() is not None:
        _SESSION = _Session()
    return _SESSION


# --- time: each test's bounds, the judge's to keep ------------------------------------------------
#
# A test is bounded by the CPU time the learner's processes use in it (what a busy machine does
# not stretch), and by a wall-clock bound WALL_FACTOR times longer for code that sleeps or waits.
# The whole check is bounded by the CPU time they use in all.

STARTUP = 60.0                            # seconds for the learner's process to start (no learner code yet)
SLICE = 0.25                              # how often a wait looks at the clocks
CHECK_SPENT = "timed out: the whole check used its {seconds:g} s of CPU time"
_CLOCK: "_Clock | None" = None            # the running test's
_TIMED_OUT: str | None = None             # why the running test ended, once it has timed out
_TEST: str = ""                           # the running test's name
_RETIRED_CPU = 0.0                        # CPU seconds of the learner's processes that have ended
_CHECK_OVER: str | None = None            # why the code under test is called no more, once the check's CPU is spent
# The learner's functions that did not return in time, and why: a later call to one fails at once
# instead of costing its test's whole time again (the check of a submission that hangs in one
# function stays short; the function must be fixed anyway).
_HUNG: dict[str, str] = {}


def test_timeout(name: str | None = None) -> float | None:
    """The CPU seconds test ``name`` may take (``None``: no bound set)."""
    per_test = json.loads(os.environ.get(TEST_TIMEOUTS_ENV) or "{}")
    if name is not None and isinstance(per_test.get(name), (int, float)):
        return float(per_test[name])
    text = os.environ.get(TEST_TIMEOUT_ENV)
    return float(text) if text else None


def import_timeout() -> float | None:
    """The CPU seconds importing a learner's module may take: the quickest test's bound when bounds
    are given per test (``ol grade``: importing is far quicker than any test), else a test's."""
    per_test = [float(s) for s in json.loads(os.environ.get(TEST_TIMEOUTS_ENV) or "{}").values()
                if isinstance(s, (int, float))]
    return min(per_test) if per_test else test_timeout()


class _Clock:
    """One test's time (or an import's): the learner's CPU seconds against ``cpu``, the wall clock
    against ``WALL_FACTOR * cpu``, the whole check's CPU against ``OL_CHECK_CPU``."""

    def __init__(self, cpu: float | None) -> None:
        self.cpu = cpu
        self.wall = None if cpu is None else WALL_FACTOR * cpu
        self.started = time.monotonic()
        self.base: tuple[int, float] | None = None     # (session, its CPU seconds when this clock began)
        self.looked = 0.0
        text = os.environ.get(CHECK_CPU_ENV)
        self.check_cpu = float(text) if text else None

    def used(self, session: "_Session") -> float:
        """The learner's CPU seconds under this clock (a session started since counts from zero)."""
        now = session.cpu()
        if self.base is None:
            self.base = (session.generation, now)
        return now - self.base[1] if self.base[0] == session.generation else now

    def overrun(self, session: "_Session") -> str | None:
        """Why time is up (None: it is not); the CPU is looked at every ``SLICE`` seconds."""
        now = time.monotonic()
        if self.wall is not None and now - self.started > self.wall:
            return (f"timed out after {self.wall:g} s on the clock, {self.used(session):.1f} s of it computing "
                    "(a busy machine, or code that sleeps or waits?)")
        if now - self.looked < SLICE and self.base is not None:
            return None
        self.looked = now
        used = self.used(session)
        if self.cpu is not None and used > self.cpu:
            return f"timed out after {self.cpu:g} s of CPU time"
        if self.check_cpu is not None and _RETIRED_CPU + session.cpu() > self.check_cpu:
            return CHECK_SPENT.format(seconds=self.check_cpu)
        return None


def start_clock(seconds: float | None) -> None:
    """A test starts: the learner's processes may use ``seconds`` of CPU (None: no bound) in it."""
    global _CLOCK, _TIMED_OUT
    _CLOCK, _TIMED_OUT = _Clock(seconds), None
    _CLOCK.used(_session())


def _timed_out(session: "_Session", why: str, function: str | None) -> LearnerTimedOut:
    global _TIMED_OUT, _CHECK_OVER
    session.kill()
    if why.startswith(CHECK_SPENT.split("{")[0]):
        _CHECK_OVER = f"{why}, so the code under test is not called again in this check"
    if _TIMED_OUT is None:
        what = f"{function} did not return" if function else "the code under test did not answer"
        _TIMED_OUT = f"{why}: {what} (an endless loop, or far slower than the reference?)"
        if function:
            _HUNG.setdefault(function, f"timed out earlier: {function} did not return in {_TEST}, "
                                       f"{why.removeprefix('timed out ')}; it is not called again in this check")
    return LearnerTimedOut(_TIMED_OUT)


def pytest_configure(config) -> None:
    """Start the learner's process while pytest collects (``-p grader.child.judge`` in an isolated check)."""
    if LEARNER_IMPL_ENV in os.environ:
        _session()


def pytest_unconfigure(config) -> None:
    """The suite is over: the learner's process ends with it."""
    if _SESSION is not None:
        _SESSION.conn.close()
        try:
            _SESSION.process.wait(1)
        except subprocess.TimeoutExpired:
            _SESSION.kill()


def pytest_runtest_setup(item) -> None:
    global _TEST
    _TEST = getattr(item, "originalname", item.name).removeprefix("test_")
    # A learner's process killed by the last test starts again before this test's time runs.
    _session().started()
    start_clock(test_timeout(_TEST))


def _reply(name: str, argument, function: str | None = None) -> dict:
    """The learner's process's answer to one request (``function``: the learner's function it calls)."""
    if _TIMED_OUT is not None:
        raise LearnerTimedOut(_TIMED_OUT)
    if _CHECK_OVER is not None:
        raise LearnerTimedOut(_CHECK_OVER)
    if function in _HUNG:
        raise LearnerTimedOut(_HUNG[function])
    session = _session()
    # Outside a test (importing the learner's modules while pytest collects) each request gets the
    # time an import may take.
    clock = _CLOCK if _CLOCK is not None else _Clock(import_timeout())

    def watch() -> None:
        why = clock.overrun(session)
        if why is not None:
            raise _timed_out(session, why, function)

    outer = session.channel.watch    # a request the learner's process made while the judge waits
    try:
        # Also between waits: a learner's thread may keep computing after its call returned.
        watch()
        session.channel.watch = watch
        answer = session.request(name, argument)
        while not answer.ready:
            _serve(session)
            watch()
        text = answer.value
    except (EOFError, OSError) as err:
        if _TIMED_OUT is not None:
            raise LearnerTimedOut(_TIMED_OUT) from None
        raise session.gone(err) from None
    except LearnerGone:
        session.kill()      # a garbled connection: the next test starts a fresh process
        raise
    except Exception:
        raise
    except BaseException as err:  # sent by the learner's process (KeyboardInterrupt): not the judge's to obey
        if isinstance(err, LearnerTimedOut):
            raise
        raise LearnerGone(f"the process running the code under test sent {type(err).__name__}") from None
    finally:
        session.channel.watch = outer
    if type(text) is not str:
        raise LearnerGone("the process running the code under test answered with something other than data")
    data = json.loads(text)
    if type(data) is not dict:
        raise LearnerGone("the process running the code under test answered with something other than data")
    return data


def _serve(session: "_Session") -> None:
    """One turn of the connection. rpyc failing to read what came (a message type or a value it
    does not know) means the bytes were not its own: the code under test wrote them."""
    try:
        session.conn.serve(SLICE)
    except (EOFError, OSError, LearnerGone):
        raise
    except Exception:
        raise _garbled() from None


def invoke(op: str, spec: tuple, args=(), kwargs=None):
    """Run ``op`` (call, getattr, ...) on ``spec`` in the learner's process; the result, decoded."""
    args, kwargs = list(args), dict(kwargs or {})
    payload = _dumps((op, spec, args, kwargs))
    data = _reply("invoke", payload, function=_function_of(op, spec))
    for key, state in data.get("after") or []:  # a call that raised may have changed its arguments first
        _copy_back(args[key] if type(key) is int and 0 <= key < len(args) else kwargs.get(key), state)
    if "raise" in data:
        raise _exception(data["raise"])
    return decode(data.get("ok"))


def _function_of(op: str, spec: tuple) -> str | None:
    """The learner's function a request calls, by name (``spec.generate``), when it names one."""
    if op == "call" and spec[0] == "path":
        return f"{spec[1].rsplit('.', 1)[-1]}.{spec[2]}"
    return None


def invoke_in_turn(requests: list[tuple[str, tuple, list]]) -> list:
    """Run each ``(op, spec, args)`` of ``requests`` in the learner's process, in order and in one
    exchange, as :func:`invoke` would one by one; their results, decoded. The first that raises
    ends the turn, and its exception is raised here."""
    sent = [(op, spec, list(args), {}) for op, spec, args in requests]
    named = {_function_of(op, spec) for op, spec, _ in requests}
    data = _reply("invoke", _dumps(("in_turn", None, sent, {})), function=named.pop() if len(named) == 1 else None)
    for item in data.get("after") or []:
        if type(item) is list and len(item) == 2 and type(item[0]) is int and 0 <= item[0] < len(sent):
            args = sent[item[0]][2]
            for key, state in item[1] if type(item[1]) is list else []:
                _copy_back(args[key] if type(key) is int and 0 <= key < len(args) else None, state)
    if "raise" in data:
        raise _exception(data["raise"])
    results = data.get("ok")
    if type(results) is not list or len(results) != len(sent):
        raise LearnerGone("the process running the code under test answered with something other than data")
    return [decode(r) for r in results]


def _in_turn(calls: list[tuple]) -> list:
    """What :func:`grader.cases.in_turn` asks of an isolated check: each ``(function, args)``, a
    function or method of the code under test, or ``getattr`` or ``keys_of`` of one of its objects,
    in one exchange."""
    requests = []
    for function, args in calls:
        if function is getattr or function is keys_of:
            owner, name = args
            if not isinstance(owner, Handle):
                raise TypeError("in_turn reads attributes of the code under test's objects only")
            requests.append(("getattr" if function is getattr else "keys", owner._ol_spec(), [Handle._ol_name(name)]))
        elif isinstance(function, _RemoteMeta):     # a class of theirs: constructing one
            requests.append(("call", ("path", *function._ol_path), list(args)))
        else:
            requests.append(("call", function._ol_call_spec(), list(args)))
    results = invoke_in_turn(requests)
    return [args[0]._ol_read(args[1], value) if function is getattr else value
            for (function, args), value in zip(calls, results)]


def bind_module(name: str, namespace: dict) -> None:
    """Fill a stand-in module's namespace from the learner's module of the same name."""
    for key, value in _described(name).items():
        namespace[key] = value


_DESCRIBED: dict[str, dict] = {}
_ENUMS: dict[tuple[str, str], type] = {}
_ERRORS: dict[tuple[str, str], type] = {}
_CLASSES: dict[tuple[str, str], type] = {}
_DATACLASSES: dict[tuple[str, str, tuple], type] = {}


def _described(name: str) -> dict:
    if name not in _DESCRIBED:
        try:
            data = _reply("describe", name)
        except LearnerTimedOut:
            raise ImportError(f"importing tinyllm/{name.rsplit('.', 1)[-1]}.py took longer than {import_timeout():g} s; "
                              "is there a loop at import time?") from None
        except LearnerGone as err:
            raise ImportError(f"importing tinyllm/{name.rsplit('.', 1)[-1]}.py: {err}") from None
        if "raise" in data:
            module, qualname, _, message = _strings(data["raise"], 4)
            raise ImportError(f"{qualname}: {message}" if message else qualname)
        _DESCRIBED[name] = {e["name"]: _stand_in(e) for e in data["ok"]}
    return _DESCRIBED[name]


def _stand_in(entry: dict):
    kind = entry["kind"]
    if kind == "value":
        return decode(entry["value"])
    module, qualname = _path(*_strings(entry["path"], 2))
    short = qualname.rsplit(".", 1)[-1]
    if kind == "function":
        return RemoteFunction(module, qualname)
    if kind == "enum":
        key = (module, qualname)
        if key not in _ENUMS:
            members = [(str(m), decode(v)) for m, v in entry["members"]]
            if any(not name.isidentifier() or name.startswith("_") for name, _ in members):
                raise LearnerGone(f"the code under test sent an enum {qualname} with a member name that is not public")
            _ENUMS[key] = enum.Enum(short, members, module=module, qualname=qualname)
        return _ENUMS[key]
    if kind == "exception":
        return _error_class(module, qualname, str(entry.get("base", "Exception")))
    if kind not in ("class", "dataclass"):
        raise ImportError(f"unknown kind of name {kind!r}")
    key = (module, qualname)
    if key not in _CLASSES:
        _CLASSES[key] = _RemoteMeta(short, (Handle,), {"__module__": module, "__qualname__": qualname,
                                                        "_ol_path": (module, qualname)})
    return _CLASSES[key]


def _error_class(module: str, qualname: str, base: str) -> type:
    key = (module, qualname)
    if key not in _ERRORS:
        builtin = getattr(__import__("builtins"), base, Exception)
        if not (isinstance(builtin, type) and issubclass(builtin, Exception)):
            builtin = Exception
        _ERRORS[key] = type(qualname.rsplit(".", 1)[-1], (builtin,), {"__module__": module, "__qualname__": qualname})
    return _ERRORS[key]


def _exception(raised) -> BaseException:
    module, qualname, base, message = _strings(raised, 4)
    own = _suite_error(module, qualname)
    if own is not None:
        return own(message)
    module, qualname = _path(module, qualname, error=True)
    if module == "builtins" and base == qualname:
        cls = getattr(__import__("builtins"), qualname, Exception)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls(message)
    return _error_class(module, qualname, base)(message)


def _suite_error(module: str, qualname: str) -> type | None:
    """The suite's own exception class, where one the judge raised into the code under test (a fake
    target's ``KvCorrupt``) comes back: a module the judge has loaded from the suites' folder, found
    in ``sys.modules`` and never imported by name."""
    graded, loaded = sys.modules.get("graded"), sys.modules.get(module)
    if graded is None or loaded is None or loaded is graded or not qualname.isidentifier():
        return None  # graded's errors (a fixture's) are the judge's alone
    here = getattr(loaded, "__file__", None)
    if not here or Path(here).resolve().parent != Path(graded.__file__).resolve().parent:
        return None
    cls = loaded.__dict__.get(qualname)
    return cls if isinstance(cls, type) and issubclass(cls, Exception) else None


def _strings(value, n: int) -> list[str]:
    if type(value) is not list or len(value) != n or not all(type(v) is str for v in value):
        raise LearnerGone("the process running the code under test sent a malformed reply")
    return value


def _path(module: str, qualname: str, error: bool = False) -> tuple[str, str]:
    """A name the learner's process sent for one of its package's objects, its module checked: a
    module of the package (``tinyllm`` or ``tinyllm.<identifier>``; for an exception's class,
    ``builtins`` or numpy's too). The judge's stand-ins carry these names, and pickling a stand-in
    imports its module by name: a module name of the learner's choosing would have the judge
    import, and run, whatever file answers to it."""
    parts = module.split(".")
    in_package = parts[0] == "tinyllm" and len(parts) <= 2
    if not all(p.isidentifier() for p in parts) or not (
            in_package or (error and (module == "builtins" or parts[0] == "numpy"))):
        raise LearnerGone(f"the code under test sent an object whose name is not its package's: {module[:80]!r}.{qualname[:80]!r}")
    # a name a class or def statement could give: it is shown in messages ("raises ..."), where a
    # name holding line breaks or escape codes would write lines of its own
    if not all(p.isidentifier() or p in ("<locals>", "<lambda>") for p in qualname.split(".")):
        raise LearnerGone(f"the code under test sent an object whose name no Python statement gives: {qualname[:80]!r}")
    return module, qualname


class RemoteFunction:
    """A function of the learner's package: calling it runs it in the learner's process."""

    def __init__(self, module: str, qualname: str) -> None:
        self._ol_path = (module, qualname)
        self.__name__ = qualname.rsplit(".", 1)[-1]
        self.__qualname__ = qualname
        self.__module__ = module

    def __call__(self, *args, **kwargs):
        return invoke("call", self._ol_call_spec(), args, kwargs)

    _ol_in_turn = staticmethod(_in_turn)

    def _ol_call_spec(self) -> tuple:
        return ("path", *self._ol_path)

    def __reduce__(self):
        return resolve, self._ol_path

    def __repr__(self) -> str:
        return f"<{self._ol_path[0]}.{self._ol_path[1]} (in the learner's process)>"


class Handle:
    """An object that lives in the learner's process; its attributes and methods run there."""

    def __getattr__(self, name: str):
        return self._ol_read(name, invoke("getattr", self._ol_spec(), [self._ol_name(name)]))

    @staticmethod
    def _ol_name(name: str) -> str:
        """An attribute name the judge may read through a handle: none of Python's or ol's own."""
        if name.startswith("__") or name.startswith("_ol_"):
            raise AttributeError(name)
        return name

    def _ol_read(self, name: str, value):
        """``value``, read as attribute ``name``: an array keeps its way back here (:class:`AttributeArray`)."""
        if type(value) is np.ndarray:
            value = value.view(AttributeArray)
            value._ol_owner = (self, name)
        return value

    def _ol_spec(self) -> tuple:
        if self._ol_generation != _session().generation:
            raise LearnerGone("this object belonged to a process of the code under test that has ended")
        return ("kept", self._ol_number)

    _ol_call_spec = _ol_spec
    _ol_in_turn = staticmethod(_in_turn)

    def __call__(self, *args, **kwargs):
        return invoke("call", self._ol_spec(), args, kwargs)

    def __len__(self) -> int:
        return _int(invoke("len", self._ol_spec()))

    def __iter__(self):
        return iter(invoke("iter", self._ol_spec()))

    def __getitem__(self, key):
        return invoke("getitem", self._ol_spec(), [key])

    def __contains__(self, item) -> bool:
        return invoke("contains", self._ol_spec(), [item]) is True

    def __bool__(self) -> bool:
        return invoke("bool", self._ol_spec()) is True

    def __repr__(self) -> str:
        text = invoke("repr", self._ol_spec())
        return text if type(text) is str else "<object of the code under test>"

    def __reduce__(self):
        return kept, (self._ol_number,)


class AttributeArray(np.ndarray):
    """An array attribute of an object in the learner's process, as read from there: a write into it by
    index (``pool.k[1, 2, 3] = 1.0``) is made there too, as it would be in process, so a pool whose
    ``k`` and ``v`` are one array, or whose storage forgets a write, shows it when read again. A view
    of it or a result computed from it is the judge's alone."""

    _ol_owner: tuple[Handle, str] | None = None

    def __array_finalize__(self, obj) -> None:
        self._ol_owner = None

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        if self._ol_owner is not None:
            owner, name = self._ol_owner
            invoke("setitem", owner._ol_spec(), [name, _plain_arrays(key), _plain_arrays(value)])

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))

    def __reduce__(self):
        return self.view(np.ndarray).__reduce__()     # sent to the learner's process as numpy's own


def _plain_arrays(value):
    """``value`` with its arrays as numpy's own class, which the learner's process can rebuild."""
    if isinstance(value, np.ndarray):
        return np.array(value.view(np.ndarray))
    if type(value) is tuple:
        return tuple(_plain_arrays(v) for v in value)
    return value


def _int(value) -> int:
    if type(value) is not int:
        raise TypeError("the code under test's __len__ did not give an int")
    return value


class _RemoteMeta(type):
    """A class of the learner's package: constructing it, and its class attributes, run there."""

    def __call__(cls, *args, **kwargs):
        return invoke("call", ("path", *cls._ol_path), args, kwargs)

    def __getattr__(cls, name: str):
        if name.startswith("__") or name.startswith("_ol_"):
            raise AttributeError(name)
        return invoke("getattr", ("path", *cls._ol_path), [name])

    def __reduce__(cls):
        return resolve, cls._ol_path


_HANDLES: dict[tuple[int, int], Handle] = {}


def _handle(number: int, kind) -> Handle:
    generation = _session().generation
    key = (generation, number)
    if key not in _HANDLES:
        module, qualname = _strings(kind, 2)
        cls = _CLASSES.get((module, qualname), Handle)  # a stand-in made from a checked name, or none
        handle = object.__new__(cls)
        object.__setattr__(handle, "_ol_number", number)
        object.__setattr__(handle, "_ol_generation", generation)
        _HANDLES[key] = handle
    return _HANDLES[key]


class MirrorObject:
    """A copy, as data, of a dataclass instance of the learner's package; methods run there on a copy."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return invoke("getattr", ("value", self), [name])

    def __reduce__(self):
        path = type(self)._ol_path
        return rebuild, (path[0], path[1], {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


def _mirror(module: str, qualname: str, fields: dict):
    key = (module, qualname, tuple(fields))
    if key not in _DATACLASSES:
        cls = dataclasses.make_dataclass(qualname.rsplit(".", 1)[-1], list(fields), bases=(MirrorObject,), init=False,
                                         unsafe_hash=True, namespace={"_ol_path": (module, qualname)})
        cls.__module__ = module
        _DATACLASSES[key] = cls
    obj = object.__new__(_DATACLASSES[key])
    obj.__dict__.update(fields)
    return obj


def _field_name(name) -> bool:
    """A mirror's field goes into its instance's ``__dict__``, where pickle and numpy look up their
    hooks (``__reduce_ex__``, ``__array_interface__``): only plain names, none of ol's own."""
    return (type(name) is str and name.isidentifier() and not (name.startswith("__") and name.endswith("__"))
            and not name.startswith("_ol"))


def _enum_member(module: str, qualname: str, name: str):
    key = (module, qualname)
    if key not in _ENUMS:
        _described(module)
    cls = _ENUMS.get(key)
    if cls is None or name not in cls.__members__:
        raise LearnerGone(f"the code under test sent an unknown enum member {qualname}.{name}")
    return cls[name]


def decode(value, depth: int = 0):
    """The learner's JSON made Python data again: only lists, dicts, tuples, numbers, strings,
    numeric arrays, the judge's own objects, mirrors and handles."""
    if depth > MAX_DEPTH:
        raise LearnerGone("the code under test sent a value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        if SCALARS.issuperset(map(type, value)):
            return list(value)
        return [decode(v, depth + 1) for v in value]
    if kind is not dict or len(value) == 0:
        raise LearnerGone("the code under test sent a malformed value")
    if "$t" in value:
        return tuple(decode(v, depth + 1) for v in _list(value["$t"]))
    if "$d" in value:
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in (_list(p) for p in _list(value["$d"]))}
    if "$a" in value:
        return _array(value)
    if "$s" in value:
        dtype = _dtype(value["$s"])
        item = value["v"]
        return dtype.type(complex(*item) if dtype.kind == "c" else item)
    if "$e" in value:
        module, qualname, name = _strings(value["$e"], 3)
        return _enum_member(*_path(module, qualname), name)
    if "$c" in value:
        module, qualname = _path(*_strings(value["$c"], 2))
        fields = value.get("f")
        if type(fields) is not dict:
            raise LearnerGone("the code under test sent a malformed value")
        if not all(_field_name(k) for k in fields):
            raise LearnerGone("the code under test sent a dataclass field whose name is not a plain attribute's")
        return _mirror(module, qualname, {str(k): decode(v, depth + 1) for k, v in fields.items()})
    if "$j" in value:
        number = value["$j"]
        if type(number) is not int or number not in JUDGE_OBJECTS.by_number:
            raise LearnerGone("the code under test named an object the judge never gave it")
        return JUDGE_OBJECTS.by_number[number]
    if "$h" in value:
        if type(value["$h"]) is not int:
            raise LearnerGone("the code under test sent a malformed value")
        return _handle(value["$h"], value.get("type"))
    raise LearnerGone("the code under test sent a malformed value")


def _list(value) -> list:
    if type(value) is not list:
        raise LearnerGone("the code under test sent a malformed value")
    return value


def _dtype(text) -> np.dtype:
    if type(text) is not str:
        raise LearnerGone("the code under test sent a malformed array")
    dtype = np.dtype(text)
    if dtype.kind not in NUMERIC_KINDS or dtype.hasobject:
        raise LearnerGone("the code under test sent an array that is not numbers")
    return dtype


def _array(value: dict) -> np.ndarray:
    import base64

    dtype = _dtype(value["$a"])
    shape = _list(value.get("shape"))
    if not all(type(n) is int and n >= 0 for n in shape):
        raise LearnerGone("the code under test sent a malformed array")
    data = base64.b64decode(value.get("data", ""), validate=True)
    if len(data) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise LearnerGone("the code under test sent a malformed array")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _copy_back(target, state) -> None:
    """Give an argument the learner's call changed its final contents (a list rolled back, an rng drawn)."""
    if target is None or isinstance(target, (Handle, MirrorObject)) or not _by_value(target):
        return     # it lives in the learner's process (a handle), is a copy the learner never changes, or
        #            it is the judge's own object, which the learner's code may only call
    if id(target) in _suite_data():
        return     # the suite's own prompts and tables: later tests build their cases from them
    if type(state) is dict and "$state" in state:
        new = decode(state["$state"])
        # The same attributes, holding data: nothing whose use would ask the learner's process again.
        if (type(new) is dict and hasattr(target, "__dict__") and not dataclasses.is_dataclass(target)
                and set(new) == set(vars(target)) and _plain(new)):
            target.__dict__.update(new)
        return
    new = decode(state)
    if not _plain(new):
        return
    if isinstance(target, list) and type(new) is list:
        target[:] = new
    elif isinstance(target, dict) and type(new) is dict:
        target.clear()
        target.update(new)
    elif isinstance(target, np.ndarray) and isinstance(new, np.ndarray) and new.shape == target.shape \
            and target.flags.writeable:
        target[...] = new


_SUITE: dict = {}  # the suite's modules, and the data they held when _suite_data last looked


def _suite_data() -> dict[int, object]:
    """The ids of the data the suite's modules hold at module level, and of the lists, dicts and
    arrays inside it (the test files and their helpers, found by their folder). A learner's call
    that changed one (a prompt changed in place) changes its own copy only: copied back into the
    suite's, it would change the cases every later test builds from it. Looked at again whenever
    a module-level name is bound anew or a module-level list or dict grows (a fixture cache
    filled at a test's first use)."""
    if "modules" not in _SUITE:
        folders = {Path(m.__file__).parent for name, m in list(sys.modules.items())
                   if name.rsplit(".", 1)[-1].startswith("test_") and getattr(m, "__file__", None)}
        _SUITE["modules"] = [m for m in list(sys.modules.values())
                             if getattr(m, "__file__", None) and Path(m.__file__).parent in folders]
    values = [v for module in _SUITE["modules"] for v in list(vars(module).values())]
    key = tuple((id(v), len(v) if isinstance(v, (list, dict)) else 0) for v in values)
    if _SUITE.get("key") != key:
        found: dict[int, object] = {}  # the objects too: none is freed while its id is listed, so no new one takes it
        for value in values:
            _collect_data(value, found, 0)
        _SUITE["key"], _SUITE["data"] = key, found
    return _SUITE["data"]


def _collect_data(value, found: dict[int, object], depth: int) -> None:
    if (depth > MAX_DATA_DEPTH or id(value) in found
            or isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType))):
        return
    found[id(value)] = value
    if isinstance(value, (list, tuple)):
        for item in value:
            _collect_data(item, found, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_data(item, found, depth + 1)


def _plain(value, depth: int = 0) -> bool:
    """Whether ``value`` is data all the way down (or the judge's own objects): no handle or mirror
    of the learner's, whose length, items or attributes the learner's process would answer."""
    if depth > MAX_DEPTH:
        return False
    if value is None or type(value) in (bool, int, float, str) or isinstance(value, (np.ndarray, np.generic, enum.Enum)):
        return True
    if type(value) in (list, tuple):
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return id(value) in JUDGE_OBJECTS.numbers and JUDGE_OBJECTS.by_number[JUDGE_OBJECTS.numbers[id(value)]] is value


# --- judge -> learner: pickles; the judge's own objects go by reference ------------------------------

JUDGE_OBJECTS = Objects()
_VALUES = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset, range, slice)


# Functions the learner's process can import by name (what numpy's and ol's own pickles refer to).
_IMPORTABLE = ("numpy", "copyreg", "builtins", "tinyllm", "grader")


def _by_value(obj) -> bool:
    """Whether ``obj`` is pickled as itself; anything else stays in the judge, passed by reference.

    A ``tinyllm`` object goes by value (a pool, a generator, a config: the learner's code reads
    and changes it, and the changes come back), except a target: the engine the learner's loop
    drives (``RunnerTarget``) stays in the judge with its model and pool, as the suite's fakes do.
    """
    kind = type(obj)
    if kind in _VALUES or isinstance(obj, (np.ndarray, np.generic, np.dtype, type, types.BuiltinFunctionType)):
        return True
    if isinstance(obj, (Handle, MirrorObject, RemoteFunction)):
        return True
    if isinstance(obj, types.FunctionType):
        return (obj.__module__ or "").split(".")[0] in _IMPORTABLE and "<" not in obj.__qualname__
    return (getattr(kind, "__module__", "") or "").startswith("tinyllm") and not _is_target(obj)


def _is_target(obj) -> bool:
    """Whether ``obj`` is a target (L10.8 section 2.5's protocol: cached, extend, truncate)."""
    return all(callable(getattr(type(obj), name, None)) for name in ("cached", "extend", "truncate"))


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        """A mirror and a handle pickle by their class's own reduction, whatever their instance holds."""
        if isinstance(obj, (MirrorObject, Handle)) and not isinstance(obj, type):
            return type(obj).__reduce__(obj)
        return NotImplemented

    def persistent_id(self, obj):
        if _by_value(obj):
            return None
        if type(obj).__name__ == "module":
            raise pickle.PicklingError("a module cannot be handed to the code under test")
        kind = type(obj)
        return ("j", JUDGE_OBJECTS.number(obj), f"{kind.__module__}.{kind.__qualname__}")


def _dumps(value) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=4).dump(value)
    return buffer.getvalue()


class JudgeService(rpyc.Service):
    """What the learner's process may ask of the judge: use the objects the judge handed it."""

    def exposed_callback(self, ref, op, payload) -> bytes:
        try:
            if type(ref) is not int or type(op) is not str or type(payload) is not str:
                raise TypeError("malformed callback")
            target = JUDGE_OBJECTS.by_number.get(ref)
            if target is None:
                raise LookupError("no such object")
            args = decode(json.loads(payload))
            return _dumps(("ok", *_callback(target, op, args)) if op != "getattr" else _getattr(target, args))
        except Exception as err:  # the judge's object raised (a fake refusing an id): the learner hears it
            cls = type(err)
            return _dumps(("raise", cls.__module__, cls.__qualname__, builtin_base(cls), str(err)[:2000]))


def _public(name) -> str:
    if type(name) is not str or name.startswith("_"):
        raise AttributeError(f"{name!r} is not for the code under test")
    return name


def _getattr(target, args: list) -> tuple:
    """Only the public methods of a judge's object are reachable from the learner's side (a target's
    ``cached``, ``extend``, ...); its data, the suite's record of what the code did, is not, but for
    the attributes its class names in ``OFFERED_VALUES`` (a wrapped model's ``config``), sent as values."""
    if type(args[0]) is str and args[0] in getattr(type(target), "OFFERED_VALUES", ()):
        return ("ok", getattr(target, args[0]))
    name = _method(target, args[0])
    return ("method", defined_by_class(target, name))


def _method(target, name) -> str:
    """``name`` when it is a public method of ``target`` (its class's, or one the suite set on it),
    looked up without running any code of the object's: a wrapper whose ``__getattr__`` hands on
    whatever it wraps (a model's ``save``, which writes a file where the judge runs) offers only
    what its class defines."""
    value = inspect.getattr_static(target, _public(name), None)
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if not callable(value) or isinstance(value, type) or type(value).__name__ == "module":
        raise AttributeError(f"{name!r} is not for the code under test")
    return name


def defined_by_class(target, name: str) -> bool:
    """Whether ``name`` is a method ``target``'s class defines (not set on the object itself)."""
    return name not in getattr(target, "__dict__", {}) and callable(getattr(type(target), name, None))


def _callback(target, op: str, args: list) -> tuple:
    if op == "call":
        name, positional, named = args
        function = target if name is None else getattr(target, _method(target, name))
        if type(named) is not dict or type(positional) is not list:
            raise TypeError("malformed call")
        return (function(*positional, **{_public(k): v for k, v in named.items()}),)
    if op == "repr":
        return (repr(target)[:2000],)
    raise ValueError(f"unknown operation {op!r}")
