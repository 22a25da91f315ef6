"""The learner's process of a verdict that counts is in bubblewrap: what it cannot reach, hold or leave.

Each probe is the reference's ``spec.py`` with code added at its top that raises ``ImportError``
naming what it reached: isolated, the check passes 20 of 20 only if the probe reached nothing; the
same file in a plain ``ol check`` (the learner's process is the test process, as root) fails,
which shows that each probe does reach what it looks for when nothing stops it.
"""

from __future__ import annotations

import csv
import ctypes
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ol_helpers import REFERENCE, ROOT, ol

from grader.child import judge
from grader.core import sandbox
from grader.running import isolate

pytestmark = pytest.mark.usefixtures("sandboxed")

REFERENCE_SPEC = (REFERENCE / "spec.py").read_text()
STUB = (ROOT / "course" / "stubs" / "L10.8" / "spec.py").read_text()
SHM_KEY = 0x0C0FFEE5
HOST_MARKER = "ol-sandbox-test-host-file"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the host's secrets here are root's")

# What a learner's process must not reach. Every attempt that succeeds is named in the ImportError
# and, where the process may write it, in the file {report} (an ImportError's message is clipped to
# its first 400 characters, and the list with the clone's paths in it runs longer).
PROBE = '''
import ctypes as _ct, errno as _errno, glob as _glob, os as _os, socket as _socket, struct as _struct
_reached = []

def _try(what, action):
    try:
        if action():
            _reached.append(what)
    except OSError:
        pass

def _reads(path):
    with open(path, "rb") as f:
        f.read(1)
    return True

_libc = _ct.CDLL(None, use_errno=True)
_try("reached the host's System V memory", lambda: _libc.shmget({key}, 0, 0) >= 0)
def _commands():
    for p in [p for p in _os.listdir("/proc") if p.isdigit()]:
        try:
            yield open(f"/proc/{{p}}/cmdline", "rb").read()
        except OSError:
            pass
_try("saw ol's processes", lambda: any(b"pytest" in c or b"grader" in c for c in _commands()))
_status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
if any(int(_status[f], 16) for f in ("CapEff", "CapPrm", "CapBnd", "CapAmb")):
    _reached.append("holds capabilities")
if _status["NoNewPrivs"].strip() != "1":
    _reached.append("may gain privileges")
# open_by_handle_at: a handle made for a file it can name, opened through the root's mount.
_handle = _ct.create_string_buffer(8 + 128)
_struct.pack_into("I", _handle, 0, 128)
_mount_id = _ct.c_int()
if _libc.name_to_handle_at(-100, b"/usr/bin/env", _handle, _ct.byref(_mount_id), 0) == 0:
    if _libc.open_by_handle_at(_os.open("/usr", _os.O_RDONLY), _handle, 0) >= 0:
        _reached.append("opened a file by its handle")
for _path in [{secrets}, "/etc/shadow", "/root/.ssh"]:
    _try("read " + _path, lambda p=_path: _os.listdir(p) if _os.path.isdir(p) else _reads(p))
_try("saw /dev/shm/{marker}", lambda: _os.path.exists("/dev/shm/{marker}"))
_try("saw /run/lock", lambda: _os.path.isdir("/run/lock"))
for _address in (("127.0.0.1", {port}), ("1.1.1.1", 53)):
    _s = _socket.socket()
    _s.settimeout(2)
    _try(f"connected to {{_address}}", lambda: _s.connect(_address) is None)
    _s.close()
_try("read ol's temporary folders", lambda: bool(_glob.glob("/tmp/ol-*/**/*.py", recursive=True)))
# Installed packages, wherever an interpreter keeps them: only the learner server's own show.
import sys as _sys
_seen = [f for r in sorted({{"/usr", "/usr/local", _sys.prefix, _sys.base_prefix}})
         for f in _glob.glob(r + "/lib/python3*/*-packages")
         if set(_os.listdir(f)) - {{"numpy", "numpy.libs", "rpyc", "plumbum"}}]
if _seen:
    _reached.insert(0, f"saw the packages in {{len(_seen)}} folders")
if _reached:
    try:
        open({report!r}, "w").write("; ".join(_reached))
    except OSError:
        pass
    raise ImportError("the learner's process " + "; ".join(_reached))
'''


def workspace(root: Path, name: str, text: str) -> Path:
    (root / name / "tinyllm").mkdir(parents=True)
    (root / name / "tinyllm" / "spec.py").write_text(text)
    return root / name


@as_root
def test_the_learner_process_reaches_nothing_of_the_machine(tmp_path):
    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(SHM_KEY, 4096, 0o1600)     # IPC_CREAT | 0600: the host's own segment
    marker = Path("/dev/shm") / HOST_MARKER
    marker.write_text("host")
    try:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            secrets = ", ".join(repr(str(ROOT / p)) for p in ("solutions/tinyllm/spec.py", "course/tests/test_l10_8.py"))
            report = tmp_path / "reached.txt"
            probe = PROBE.format(secrets=secrets, marker=HOST_MARKER, key=SHM_KEY, port=listener.getsockname()[1],
                                 report=str(report))
            ws = workspace(tmp_path, "prober", probe + REFERENCE_SPEC)
            ran = ol("check", "L10.8", "--ref-deps", workspace=ws)
            assert "the suite could not be imported: ImportError: the learner's process" in ran.out, ran.out
            found = report.read_text()
            for reached in ("read " + str(ROOT / "solutions/tinyllm/spec.py"), "saw /dev/shm/" + HOST_MARKER,
                            "System V memory", "holds capabilities", "opened a file by its handle",
                            "connected to ('127.0.0.1'", "saw the packages in"):
                assert reached in found, f"the probe does not find what it looks for ({reached}):\n{found}"
            report.unlink()
            ran = ol("check", "L10.8", "--ref-deps", "--isolate", workspace=ws, limit=180)
            assert ran.code == 0 and "20 of 20 tests passed" in ran.out, ran.out
            assert not report.exists()
    finally:
        marker.unlink()
        libc.shmctl(segment, 0, None)     # IPC_RMID


# The learner's imports spawn children that each hold memory, or many processes: the whole tree is
# bounded together (cgroups), so the probe never sees them all succeed.
MEMORY_PROBE = '''
import os as _os
# Children stay until the parent closes the release pipe: none leaves early, none sleeps longer
# than the probe needs (fixed sleeps made the probe slow enough on a busy machine to trip the
# import bound, which is not what this test is about).
_release_r, _release_w = _os.pipe()


def _stay_then_exit():
    try:
        _os.close(_release_w)
        _os.read(_release_r, 1)
    finally:
        _os._exit(0)


_holders = []
for _ in range(4):  # one GiB each, one after the other (touching pages in parallel only costs time)
    _r, _w = _os.pipe()
    _pid = _os.fork()
    if _pid == 0:
        try:
            _block = bytearray(1 << 30)
            for _i in range(0, len(_block), 4096):
                _block[_i] = 1
            _os.write(_w, b"1")
        finally:
            _stay_then_exit()
    _os.close(_w)
    if _os.read(_r, 1):  # empty: the child was stopped before it held its GiB
        _holders.append(_pid)
# held at once: the holders still alive now (the kernel may stop an earlier one to make room)
_held = sum(1 for _pid in _holders if _os.waitpid(_pid, _os.WNOHANG) == (0, 0))
_forked = 0
try:
    for _ in range(100):
        if _os.fork() == 0:
            _stay_then_exit()
        _forked += 1
except OSError:
    pass
_os.close(_release_w)
while True:
    try:
        _os.wait()
    except ChildProcessError:
        break
if _held == 4 or _forked == 100:
    raise ImportError(f"the learner's processes held {_held} GiB at once and ran {_forked} processes")
'''


@pytest.mark.skipif(not sandbox.bounds_whole_tree(), reason="no cgroups here to bound a whole tree")
def test_memory_and_processes_are_bounded_for_the_whole_tree(tmp_path):
    ws = workspace(tmp_path, "hoarder", MEMORY_PROBE + REFERENCE_SPEC)
    # Touching 3 GiB under the limit, and the kernel's reclaim there, took over the default 10 s
    # import bound on a busy CI machine: this test is about memory and processes, not that bound.
    ran = ol("check", "L10.8", "--ref-deps", "--isolate", "--timeout", "60", workspace=ws, limit=300)
    assert ran.code == 0 and "20 of 20 tests passed" in ran.out, ran.out


# A classmate's submission: found from the command lines of ol's processes, or in the temporary
# folders, then run in place of the stub. It scores only if it reaches another submission.
CLASSMATE = '''
import glob as _glob, os as _os
_found = []
for _pid in [p for p in _os.listdir("/proc") if p.isdigit()]:
    try:
        _words = open(f"/proc/{_pid}/cmdline", "rb").read().decode(errors="replace").split("\\0")
    except OSError:
        continue
    _found += [w for w in _words if _os.path.isdir(w)]
_found += _glob.glob("/tmp/**/tinyllm", recursive=True) + _glob.glob("/work/**/tinyllm", recursive=True)
for _folder in _found:
    for _path in _glob.glob(_os.path.join(_folder, "**", "spec.py"), recursive=True):
        try:
            _text = open(_path).read()
        except OSError:
            continue
        if "def prompt_lookup" in _text and "NotImplementedError" not in _text.split("def prompt_lookup")[1][:2000]:
            exec(compile(_text, _path, "exec"), globals())
            break
'''

# Changing the judge's objects: every attribute write to a target, and a forged reply that would
# overwrite the fake target's record of what it was fed.
JUDGE_WRITES = '''
import sys as _sys
_server = _sys.modules.get("grader.child.learner_server") or _sys.modules.get("__main__")
if _server is not None and hasattr(_server, "_after"):
    _real_after = _server._after
    def _forged_after(args, kwargs, before):
        out = _real_after(args, kwargs, before)
        for _i, _a in enumerate(args):
            if type(_a).__name__ == "JudgeRef":
                out.append([_i, {"$state": {"$d": [["fed_positions", []], ["fed", []]]}}])
        return out
    _server._after = _forged_after
'''
JUDGE_WRITES_SUFFIX = '''

def generate_stream(target, *args, **kwargs):
    for _name in ("fed_positions", "fed", "cached", "extend", "truncate"):
        try:
            setattr(target, _name, None)
        except Exception:
            pass
    return []
'''


# Collusion: one submission (correct) leaves its source where a later one could find it, in System V
# shared memory and in shared folders; the later one (the stub) runs whatever it finds.
COLLUDE_KEY = 0x0C011DE5
COLLUDE_WRITE = f"""
import ctypes as _ct, os as _os
_source = open(__file__, "rb").read()
_libc = _ct.CDLL(None, use_errno=True)
_libc.shmat.restype = _ct.c_void_p
_id = _libc.shmget({COLLUDE_KEY}, len(_source) + 8, 0o1666)
if _id >= 0:
    _at = _libc.shmat(_id, None, 0)
    _ct.memmove(_at, len(_source).to_bytes(8, "little") + _source, len(_source) + 8)
for _folder in ("/dev/shm", "/tmp", "/run/lock", "/var/tmp"):
    try:
        with open(_os.path.join(_folder, "ol-collude.py"), "wb") as _f:
            _f.write(_source)
    except OSError:
        pass
"""
COLLUDE_READ = f"""
import ctypes as _ct, os as _os
_libc = _ct.CDLL(None, use_errno=True)
_libc.shmat.restype = _ct.c_void_p
_found = None
_id = _libc.shmget({COLLUDE_KEY}, 0, 0)
if _id >= 0:
    _at = _libc.shmat(_id, None, 0)
    _size = int.from_bytes(_ct.string_at(_at, 8), "little")
    _found = _ct.string_at(_at + 8, _size)
for _folder in ("/dev/shm", "/tmp", "/run/lock", "/var/tmp"):
    try:
        _found = _found or open(_os.path.join(_folder, "ol-collude.py"), "rb").read()
    except OSError:
        pass
if _found:
    exec(compile(_found, "found", "exec"), globals())
"""


def test_a_hostile_class_scores_nothing_and_leaves_nothing(tmp_path):
    """One ol grade run: attacks beside correct controls. Attacks score 0; controls, 20 of 20;
    no process, temporary folder or cgroup of the run is left."""
    subs_dir = tmp_path / "subs"
    subs = [workspace(subs_dir, "collude-write", COLLUDE_WRITE + REFERENCE_SPEC),
            workspace(subs_dir, "control-first", REFERENCE_SPEC),
            workspace(subs_dir, "classmate", CLASSMATE + STUB),
            workspace(subs_dir, "judge-writes", JUDGE_WRITES + STUB + JUDGE_WRITES_SUFFIX),
            workspace(subs_dir, "collude-read", COLLUDE_READ + STUB),
            workspace(subs_dir, "control-last", REFERENCE_SPEC)]
    segments = Path("/proc/sysvipc/shm").read_text()
    shared = sorted(os.listdir("/dev/shm"))
    scratch = tmp_path / "tmp"     # ol's temporary folders: nothing may stay there
    scratch.mkdir()
    out = tmp_path / "out"
    ran = ol("grade", "L10.8", *map(str, subs), "--jobs", "2", "--out", str(out), env={"TMPDIR": str(scratch)},
             limit=600)
    assert ran.code == 0, ran.text
    rows = {r["submission"]: r for r in csv.DictReader((out / "grades.csv").open())}
    for control in ("control-first", "control-last", "collude-write"):
        assert rows[control]["score"] == "20", rows[control]
    for attack in ("classmate", "judge-writes", "collude-read"):
        assert rows[attack]["score"] == "0", rows[attack]
    assert not list(scratch.iterdir()), f"left behind: {sorted(p.name for p in scratch.iterdir())}"
    assert not _ol_cgroups(), f"cgroups left: {_ol_cgroups()}"
    assert Path("/proc/sysvipc/shm").read_text() == segments and sorted(os.listdir("/dev/shm")) == shared


# At import, a process of its own forks sixty spinners, each in a session (a scheduler autogroup)
# of its own; the learner's process answers the judge at once.
HOG = """
import os as _os, time as _time
def _spin_many():
    if _os.fork() != 0:
        return
    _os.setsid()
    _time.sleep(0.5)
    for _ in range(60):
        try:
            pid = _os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                _os.setsid()
            except OSError:
                pass
            break
    while True:
        pass
_spin_many()
"""


@pytest.mark.skipif(not sandbox.shares_cpu_by_submission(), reason="no cpu cgroup controller here")
def test_a_submission_that_forks_spinners_does_not_fail_its_neighbours(tmp_path):
    """A submission whose processes fork spinners in sessions of their own, graded beside correct
    ones two at a time, slows itself, not them (before a submission's processes shared the CPU as
    one group, such a class failed its first control in six tests, on the clock)."""
    subs_dir = tmp_path / "subs"
    subs = [workspace(subs_dir, "control-a", REFERENCE_SPEC), workspace(subs_dir, "hog", STUB + HOG),
            workspace(subs_dir, "control-b", REFERENCE_SPEC), workspace(subs_dir, "control-c", REFERENCE_SPEC)]
    out = tmp_path / "out"
    ran = ol("grade", "L10.8", *map(str, subs), "--jobs", "2", "--out", str(out), limit=600)
    assert ran.code == 0, ran.text
    rows = {r["submission"]: r for r in csv.DictReader((out / "grades.csv").open())}
    assert [rows[f"control-{c}"]["score"] for c in "abc"] == ["20"] * 3, (rows, ran.out)
    assert rows["hog"]["score"] == "0", rows["hog"]
    assert not _ol_cgroups(), f"cgroups left: {_ol_cgroups()}"


def test_names_and_links_that_lead_elsewhere_are_refused(tmp_path):
    """A file whose name is code (the judge once wrote names into the source of its stand-ins), and
    a nested tinyllm/ that is a link to the reference or a classmate: each submission is refused,
    naming what is wrong, and scores nothing; a classmate beside them passes."""
    subs_dir = tmp_path / "subs"
    control = workspace(subs_dir, "control", REFERENCE_SPEC)
    injected = workspace(subs_dir, "injected", REFERENCE_SPEC)
    (injected / "tinyllm" / 'x""";import os;os._exit(0);""".py').write_text("from .spec import Draft\n")
    linked = []
    for name, target in (("to-reference", REFERENCE), ("to-classmate", control / "tinyllm")):
        (subs_dir / name / "x").mkdir(parents=True)
        (subs_dir / name / "x" / "tinyllm").symlink_to(target)
        linked.append(subs_dir / name)
    out = tmp_path / "out"
    ran = ol("grade", "L10.8", str(control), str(injected), *map(str, linked), "--out", str(out), limit=300)
    assert ran.code == 0, ran.text
    rows = {r["submission"]: r for r in csv.DictReader((out / "grades.csv").open())}
    assert rows["control"]["score"] == "20", rows["control"]
    assert rows["injected"]["score"] == "0" and "not a module's file name" in rows["injected"]["hint"], rows["injected"]
    for name in ("to-reference", "to-classmate"):
        assert rows[name]["score"] == "0" and "x/tinyllm is a symbolic link" in rows[name]["hint"], rows[name]


def test_the_judge_imports_no_module_a_learner_names():
    """The judge's stand-ins carry the names the learner's process sends, and pickling one imports
    its module by name: only the package's modules (and, for an exception, builtins and numpy's)
    are taken."""
    assert judge._path("tinyllm.spec", "Draft") == ("tinyllm.spec", "Draft")
    assert judge._path("builtins", "ValueError", error=True) == ("builtins", "ValueError")
    for module in ('tinyllm.x""";import os;"""', "os", "antigravity", "tinyllm.a.b", "builtins", "numpy"):
        with pytest.raises(judge.LearnerGone, match="not its package's"):
            judge._path(module, "Draft")
    assert "{" not in isolate.PROXY, "a stand-in's source holds no name of the learner's"


def test_honest_code_in_unusual_shapes_passes_isolated(tmp_path):
    """A function wrapped in a decorator without functools.wraps, one bound to a lambda, one a
    functools.partial: found by the module's attribute, not by their __qualname__."""
    text = REFERENCE_SPEC + '''

def _traced(function):
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper


prompt_lookup = _traced(prompt_lookup)
_ngram_draft = ngram_draft
ngram_draft = lambda *args, **kwargs: _ngram_draft(*args, **kwargs)  # noqa: E731
import functools as _functools
rollback = _functools.partial(rollback)
'''
    ws = workspace(tmp_path, "shapes", text)
    ran = ol("check", "L10.8", "--ref-deps", "--isolate", workspace=ws, limit=180)
    assert ran.code == 0 and "20 of 20 tests passed" in ran.out, ran.out


def test_a_busy_machine_does_not_fail_correct_code(tmp_path):
    """Bounds are CPU time: four CPU-bound loops beside ol grade do not make the reference refuse
    to pass, nor a correct submission fail."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        subs = [workspace(tmp_path / "subs", f"correct-{i}", REFERENCE_SPEC) for i in range(2)]
        out = tmp_path / "out"
        ran = ol("grade", "L10.8", *map(str, subs), "--jobs", "2", "--out", str(out), limit=900)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert ran.code == 0, ran.text
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert [r["score"] for r in rows] == ["20", "20"], (rows, ran.out)


SUITE_PROMPTS = [[1, 2, 3]]  # module-level data of a test file, as a graded suite's prompts are
NO_NAMED = {"$d": []}  # a call's named arguments, none, as the learner's side encodes a dict


def test_the_judge_changes_no_object_of_its_own_for_the_learner():
    """The judge's side of the protocol: only a judge object's class methods are reachable (not what
    a wrapper's ``__getattr__`` hands on), no attribute can be set, and a reply's state is copied
    only into objects sent by value, never into the suite's module-level data."""

    class Fake:
        def __init__(self) -> None:
            self.fed_positions = [1, 2, 3]

        def cached(self) -> int:
            return 3

    fake = Fake()
    number = judge.JUDGE_OBJECTS.number(fake)
    service = judge.JudgeService()
    refused = [judge.pickle.loads(service.exposed_callback(number, op, json.dumps(args)))
               for op, args in (("getattr", ["fed_positions"]), ("setattr", ["fed_positions", []]),
                                ("call", ["__init__", [], NO_NAMED]), ("call", ["fed_positions", [], NO_NAMED]))]
    assert all(reply[0] == "raise" for reply in refused), refused
    assert [reply[2] for reply in refused[2:]] == ["AttributeError"] * 2, refused
    assert judge.pickle.loads(service.exposed_callback(number, "getattr", json.dumps(["cached"]))) == ("method", True)
    judge._copy_back(fake, {"$state": {"$d": [["fed_positions", []]]}})
    assert fake.fed_positions == [1, 2, 3]
    sent = [1, 2]
    judge._copy_back(sent, [3])
    assert sent == [3]
    judge._copy_back(SUITE_PROMPTS[0], [9, 9])
    assert SUITE_PROMPTS == [[1, 2, 3]]

    class Saves:
        def save(self, path) -> None:
            raise AssertionError(f"the learner's side reached save({path!r}) through a wrapper")

    class Wrapper:  # a suite's model wrapper: what it does not define, it hands on
        def __init__(self, inner) -> None:
            self.inner = inner

        def forward(self) -> int:
            return 1

        def __getattr__(self, name: str):
            return getattr(self.inner, name)

    wrapped = judge.JUDGE_OBJECTS.number(Wrapper(Saves()))
    replies = [judge.pickle.loads(service.exposed_callback(wrapped, op, json.dumps(args)))
               for op, args in (("getattr", ["save"]), ("call", ["save", ["/tmp/x"], NO_NAMED]), ("call", ["forward", [], NO_NAMED]))]
    assert [reply[:3] for reply in replies[:2]] == [("raise", "builtins", "AttributeError")] * 2, replies
    assert replies[2] == ("ok", 1), replies
    # An object of the learner's would answer its own length and items: not copied into the judge's list.
    handle = object.__new__(judge.Handle)
    assert not judge._plain([handle]) and judge._plain([1, (2.0, "x"), {"k": None}])


def _ol_cgroups() -> list[str]:
    """ol's cgroups whose check has ended (those of checks still running elsewhere are theirs)."""
    found = [*Path("/sys/fs/cgroup").glob("*/ol-check-*"), *Path("/sys/fs/cgroup").glob("ol-check-*")]
    return [str(p) for p in found if not Path(f"/proc/{p.name.removeprefix('ol-check-').split('-')[0]}").exists()]


@pytest.mark.skipif(not sandbox.bounds_whole_tree(), reason="no cgroups here")
def test_closing_a_cgroup_ends_every_process_in_it():
    """What ol grade does after each submission: a process tree that left its session (a case
    worker, a daemon) is ended with the cgroup, and the cgroup is gone. The exit status of a
    process outside it (another submission's worker) is left for its own ``wait``."""
    group = sandbox.Cgroup.create(sandbox.cgroup_name(os.getpid()) + "-test")
    assert group is not None
    bystander = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    while Path(f"/proc/{bystander.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    tree = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, "
                             "'-c', 'import time; time.sleep(600)'], start_new_session=True); time.sleep(600)"],
                            preexec_fn=lambda: group.join("judge"))
    try:
        for _ in range(100):
            if len(group.pids()) == 2:
                break
            time.sleep(0.05)
        assert len(group.pids()) == 2, group.pids()
    finally:
        group.close()
    assert tree.wait(5) == -9 and bystander.wait(5) == 7
    assert not group.pids() and not list(Path("/sys/fs/cgroup").glob(f"*/{group.name}"))


def test_grading_refuses_without_bubblewrap_unless_told(tmp_path):
    """Where bwrap cannot be found, ol grade says how to install it and grades nothing; with
    --unsandboxed it grades, and each submission's results say so."""
    sub = workspace(tmp_path / "subs", "correct", REFERENCE_SPEC)
    env = {**os.environ, "PATH": str(tmp_path / "empty"), "PYTHONPATH": str(ROOT), "OL_NO_WARM": "1"}

    def grade(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "grader", "grade", "L10.8", str(sub), "--out",
                               str(tmp_path / "out"), *extra], env=env, capture_output=True, text=True, timeout=600)

    refused = grade()
    assert refused.returncode == 3 and "apt-get install bubblewrap" in refused.stderr, refused
    assert "--unsandboxed" in refused.stderr and not (tmp_path / "out" / "grades.csv").exists()
    done = grade("--unsandboxed")
    assert done.returncode == 0 and "UNSANDBOXED" in done.stdout, done
    results = json.loads(next((tmp_path / "out").glob("001-*.json")).read_text())
    assert results["score"] == 20 and results["sandbox"] == "none: graded with --unsandboxed", results
