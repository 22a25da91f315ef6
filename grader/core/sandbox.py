"""Where code ol does not trust runs: bubblewrap, cgroups and resource limits.

The learner's process of an isolated check is started by :meth:`Sandbox.learner_process` inside
bubblewrap (``bwrap``, the sandbox Flatpak runs apps in; Debian and Ubuntu package it as
``bubblewrap``). Its root is an allow-list, read-only but for a small private scratch: the
interpreter, the standard library, numpy and rpyc, and the learner's own folder; nothing else of
the machine exists there (not the course, not the answer cache, not other submissions, not the
temporary folders, not ``/run`` or ``/home``). It gets fresh user, PID, IPC, network, UTS and
cgroup namespaces, no capabilities, no-new-privs, a session of its own, and dies with the process
that started it. ol passes bwrap its arguments through a pipe (``--args``), so no path of a
submission is on any command line.

Where the machine lets ol make cgroups (root, with cgroup v2's ``memory`` and ``pids``
controllers, or v1's ``memory`` and ``pids`` hierarchies), every learner process of one
submission shares a cgroup that bounds their memory and their number together, and the
submission's whole tree (the judge, the case workers, the learner's processes) shares another, so
that :meth:`Cgroup.close` ends every process of it. Where the ``cpu`` controller is there too, the
submissions graded side by side share the CPU by submission, not by process or session: a
submission that forks spinners, each in a session of its own, slows itself, not its neighbour's
judge and learner (measured: before, 61 such spinners made a correct neighbour time out in six
tests). Elsewhere the per-process limits below apply and :func:`kill_descendants` ends the tree.

Every process ol starts for a submission also has limits of its own (:func:`limit_process`):
address space, the size of a file it writes (a flood of output), no core dumps.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import glob
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from grader.core.errors import GraderError

ADDRESS_SPACE = 4 << 30          # each process
FILE_SIZE = 64 << 20             # each file a process writes
LEARNER_MEMORY = 3 << 30         # all of one submission's learner processes together (cgroups)
LEARNER_PROCESSES = 64           # likewise
SCRATCH = 64 << 20               # the learner's writable /tmp, and /dev/shm
INSTALL_HINT = ("install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
                "or pass --unsandboxed to grade without it (the results say so)")

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_DUMPABLE = 4
# Where the learner's folder is inside the sandbox.
INSIDE = "/submission"
# What the learner's server imports besides the standard library (numpy's own libraries and rpyc's
# dependency included).
PACKAGES = ("numpy", "rpyc", "plumbum")


def limit_process() -> None:
    """Between fork and exec of any process ol starts for untrusted code: per-process limits."""
    for limit, value in ((resource.RLIMIT_AS, ADDRESS_SPACE), (resource.RLIMIT_FSIZE, FILE_SIZE),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))


@dataclass(frozen=True)
class Sandbox:
    """How the learner's processes of one check are held: ``contained`` in bubblewrap (False only
    when the instructor asked for ``--unsandboxed``), and the submission's cgroup, if any."""

    contained: bool = True
    cgroup: str = ""

    def to_env(self) -> str:
        """This sandbox as one environment variable's value (for the judge that starts the learner's process)."""
        return f"{int(self.contained)}:{self.cgroup}"

    @classmethod
    def from_env(cls, text: str) -> "Sandbox":
        contained, _, group = (text or "1:").partition(":")
        return cls(contained == "1", group)

    @property
    def group(self) -> "Cgroup | None":
        return Cgroup(self.cgroup) if self.cgroup else None

    def learner_process(self, argv: list[str], folder: Path, env: dict[str, str], keep_fd: int,
                        cpu_seconds: float | None = None) -> subprocess.Popen:
        """Start ``argv`` (an interpreter and a script in ``folder``) as the learner's process: in
        bubblewrap with ``folder`` as its working directory, or, unsandboxed, with limits only (as
        ``nobody`` when ol is root and that user can start the interpreter).
        ``keep_fd`` (the judge's socket) is the one descriptor it inherits; ``cpu_seconds``, if
        given, is each of its processes' CPU time before the kernel kills it (a backstop: the
        judge keeps the bounds that count)."""
        group = self.group

        def preexec() -> None:
            limit_process()
            if cpu_seconds is not None:
                resource.setrlimit(resource.RLIMIT_CPU, (math.ceil(cpu_seconds), math.ceil(cpu_seconds) + 1))
            if group is not None:
                group.join("learner")

        options = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not self.contained:
            user = _unprivileged_user()
            if user is not None:
                _open_to_others(folder)

            def as_user() -> None:
                preexec()
                if user is not None:
                    os.setgroups([])
                    os.setgid(user)
                    os.setuid(user)

            return subprocess.Popen(argv, cwd=folder, env=env, pass_fds=(keep_fd,), preexec_fn=as_user, **options)
        env = {**env, **{k: v.replace(str(folder), INSIDE) for k, v in env.items() if str(folder) in v}}
        argv = [a.replace(str(folder), INSIDE) for a in argv]
        words = [*_bwrap_options(), "--ro-bind", str(folder), INSIDE, "--remount-ro", "/", "--chdir", INSIDE,
                 *(w for k, v in env.items() for w in ("--setenv", k, v))]
        read, write = os.pipe()
        try:
            os.write(write, b"".join(w.encode() + b"\0" for w in words))
        finally:
            os.close(write)
        try:
            # Only the command (paths inside the sandbox) is on bwrap's command line.
            return subprocess.Popen([bwrap(), "--args", str(read), "--", *argv], env={}, pass_fds=(keep_fd, read),
                                    preexec_fn=preexec, **options)
        finally:
            os.close(read)


NOBODY = 65534


@functools.cache
def _unprivileged_user() -> int | None:
    """Unsandboxed, as root: the user the learner's process runs as (``nobody``), if that user can
    start this interpreter with numpy and rpyc; else None (it runs as ol's user)."""
    if os.geteuid() != 0:
        return None

    def become() -> None:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    try:
        done = subprocess.run([sys.executable, "-c", "import numpy, rpyc"], preexec_fn=become, capture_output=True,
                              timeout=60, cwd="/")
    except (OSError, subprocess.SubprocessError):
        return None
    return NOBODY if done.returncode == 0 else None


def _open_to_others(folder: Path) -> None:
    """Let other users read ``folder`` and pass through ol's temporary folders above it."""
    for root, _, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    for parent in folder.resolve().parents:
        if not any(part.startswith("ol-") for part in parent.parts):
            break
        os.chmod(parent, parent.stat().st_mode | 0o001)


@functools.cache
def bwrap() -> str:
    found = shutil.which("bwrap") or ""
    if not found:
        raise GraderError(f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}")
    return found


@functools.cache
def why_not_contained() -> str | None:
    """Why learner code cannot run in bubblewrap here (None: it can), tried once per process."""
    if not shutil.which("bwrap"):
        return "bubblewrap (bwrap) is not installed"
    words = [*_bwrap_options(), "--remount-ro", "/", "--", sys.executable, "-c", "import numpy, rpyc"]
    try:
        done = subprocess.run([bwrap(), *words], capture_output=True, text=True, timeout=60, env={})
    except (OSError, subprocess.SubprocessError) as err:
        return f"bwrap could not start: {err}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bwrap failed here ({last})"
    return None


def claim(unsandboxed: bool = False, required: bool = True) -> Sandbox:
    """The sandbox for one check: in bubblewrap unless ``unsandboxed``. Where bubblewrap cannot run,
    ``required`` (grading) refuses, saying how to install it; otherwise (a learner's own
    ``ol check --isolate``) the check runs unsandboxed."""
    if unsandboxed:
        return Sandbox(contained=False)
    why = why_not_contained()
    if why is None:
        return Sandbox()
    if required:
        raise GraderError(f"{why}; learner code is graded only inside it: {INSTALL_HINT}")
    return Sandbox(contained=False)


@contextlib.contextmanager
def held(box: Sandbox, whole_tree: bool = False) -> Iterator[Sandbox]:
    """``box`` (from :func:`claim`) with a cgroup of its own for one check where the machine allows
    (:func:`cgroup_name`); ``whole_tree``: this process and all it starts join the cgroup too.
    On leaving, every process of the cgroup but this one is killed and the cgroup removed."""
    group = Cgroup.create(cgroup_name(os.getpid()))
    if group is not None and whole_tree:
        group.join("judge")
    try:
        yield dataclasses.replace(box, cgroup=group.name if group is not None else "")
    finally:
        if group is not None:
            group.close()


def cgroup_name(pid: int) -> str:
    """The cgroup of the check that process ``pid`` holds (so that its parent can end it too)."""
    return f"ol-check-{pid}"


@functools.cache
def _bwrap_options() -> tuple[str, ...]:
    """bwrap's options for every learner process: namespaces, no capabilities, the allow-list root
    (made read-only by a last ``--remount-ro /`` once the learner's folder is in it)."""
    words = ["--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534",
             "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
             "--proc", "/proc", "--dev", "/dev", "--size", str(SCRATCH), "--tmpfs", "/dev/shm",
             "--size", str(SCRATCH), "--tmpfs", "/tmp"]
    for source, dest in _system_binds():
        if dest.count("/") == 1 and os.path.islink(dest):    # /lib -> usr/lib: the same link inside
            words += ["--symlink", os.readlink(dest), dest]
        else:
            words += ["--ro-bind", source, dest]
    covers = _site_folders()
    for folder in covers:
        words += ["--tmpfs", folder]
    for package in _package_folders():
        words += ["--ro-bind", package, package]
    for folder in covers:
        words += ["--remount-ro", folder]
    return tuple(words)


def _system_binds() -> list[tuple[str, str]]:
    """The shared libraries, the interpreter and the standard library, each where it is."""
    paths = ["/usr", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache"]
    executable = sys.executable
    paths += [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    library = sysconfig.get_config_var("INSTSONAME") if sysconfig.get_config_var("Py_ENABLE_SHARED") else None
    if library:
        paths.append(os.path.join(sysconfig.get_config_var("LIBDIR"), library))
    venv = Path(sys.prefix) / "pyvenv.cfg"
    if venv.exists():
        paths.append(str(venv))
    binds = [(os.path.realpath(p), p) for p in dict.fromkeys(paths) if os.path.lexists(p)]
    binds.append((os.path.realpath(executable), executable))
    # A folder's own bind comes after its parent's, so it lands inside it.
    return sorted(binds, key=lambda b: b[1].count("/"))


def _site_folders() -> list[str]:
    """The folders of installed packages inside what is bound: this environment's, its base
    interpreter's (a pyenv or a python.org build keeps them inside its standard library's folder)
    and the system's (Debian's ``dist-packages`` under ``/usr``), covered so that only
    :data:`PACKAGES` show."""
    import site

    prefixes = sorted({sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix})
    candidates = set(site.getsitepackages(prefixes))
    for base in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=base)
        candidates |= {paths["purelib"], paths["platlib"]}
    for root in ("/usr", "/usr/local", *prefixes):
        candidates |= set(glob.glob(f"{root}/lib/python3*/*-packages"))
    bound = [dest for _, dest in _system_binds()]
    return sorted(p for p in candidates if os.path.isdir(p) and any(_inside(p, b) for b in bound))


def _package_folders() -> list[str]:
    """Where the learner's server's packages are (numpy's bundled libraries beside numpy)."""
    import importlib.util

    found = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise GraderError(f"the sandbox needs the package {name}, which is not installed")
        folder = list(spec.submodule_search_locations)[0]
        found.append(folder)
        libs = folder + ".libs"
        if os.path.isdir(libs):
            found.append(libs)
    return found


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


# --- cgroups: one submission's processes, bounded together and ended together ------------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")


class Cgroup:
    """A submission's cgroup, ``<name>/judge`` (ol's processes for it) and ``<name>/learner`` (the
    learner's processes, with bounds on their memory and number), in each hierarchy it needs."""

    LEAVES = ("judge", "learner")

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    def create(cls, name: str) -> "Cgroup | None":
        """Make the cgroup (None where this machine does not let ol: not root, or no hierarchies)."""
        roots = _hierarchies()
        if not roots:
            return None
        group = cls(name)
        try:
            for root in roots:
                for leaf in cls.LEAVES:
                    (root / name / leaf).mkdir(parents=True, exist_ok=True)
                if (root / "cgroup.controllers").exists():
                    (root / name / "cgroup.subtree_control").write_text(_v2_controllers(root / name))
            group._limit()
        except OSError:
            group.close()
            return None
        return group

    def _limit(self) -> None:
        for root in _hierarchies():
            learner = root / self.name / "learner"
            for file, value in (("memory.max", LEARNER_MEMORY), ("memory.swap.max", 0),
                                ("memory.limit_in_bytes", LEARNER_MEMORY),
                                ("memory.memsw.limit_in_bytes", LEARNER_MEMORY), ("pids.max", LEARNER_PROCESSES)):
                if (learner / file).exists():
                    (learner / file).write_text(str(value))

    def join(self, leaf: str) -> None:
        """Move the calling process into ``leaf`` (between fork and exec, or for ol itself)."""
        for root in _hierarchies():
            fd = os.open(root / self.name / leaf / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    def pids(self) -> set[int]:
        found = set()
        for root in _hierarchies():
            for leaf in self.LEAVES:
                try:
                    found |= {int(p) for p in (root / self.name / leaf / "cgroup.procs").read_text().split()}
                except OSError:
                    continue
        return found

    def close(self) -> None:
        """Kill every process in the cgroup (but the caller, which moves back out) and remove it."""
        me = os.getpid()
        kill_until_none(lambda: self.pids() - {me})
        for root in _hierarchies():
            if me in self.pids():
                try:
                    (root / "cgroup.procs").write_text(str(me))
                except OSError:
                    pass
            for leaf in self.LEAVES:
                _rmdir(root / self.name / leaf)
            _rmdir(root / self.name)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


@functools.cache
def _hierarchies() -> tuple[Path, ...]:
    """The cgroup folders ol uses: v2's root when it offers memory and pids, else v1's memory and
    pids hierarchies, with v1's cpu hierarchy where there is one; none when ol cannot write there
    (not root)."""
    if os.geteuid() != 0:
        return ()
    v2 = CGROUP_ROOT / "cgroup.controllers"
    if v2.exists() and {"memory", "pids"} <= set(v2.read_text().split()):
        return (CGROUP_ROOT,)
    v1 = (CGROUP_ROOT / "memory", CGROUP_ROOT / "pids")
    if all((p / "cgroup.procs").exists() for p in v1):
        return v1 + tuple(p for p in (CGROUP_ROOT / "cpu",) if (p / "cgroup.procs").exists())
    return ()


def _v2_controllers(group: Path) -> str:
    """What a submission's cgroup enables for its leaves under cgroup v2: memory and pids, and cpu
    where its parent hands it down."""
    offered = set((group / "cgroup.controllers").read_text().split())
    return " ".join(f"+{c}" for c in ("memory", "pids", "cpu") if c in offered)


def shares_cpu_by_submission() -> bool:
    """Whether a submission's processes share the CPU as one against its neighbours here (the
    cgroups' ``cpu`` controller)."""
    roots = _hierarchies()
    if roots == (CGROUP_ROOT,):  # a submission's cgroup gets what the root hands down
        return "cpu" in (CGROUP_ROOT / "cgroup.subtree_control").read_text().split()
    return CGROUP_ROOT / "cpu" in roots


def bounds_whole_tree() -> bool:
    """Whether a submission's learner processes are bounded together here (cgroups)."""
    return bool(_hierarchies())


def cgroups_note() -> str:
    """How the learner's memory and processes are bounded here, for the grader's report."""
    roots = _hierarchies()
    if not roots:
        return "no cgroups here (ol is not root, or the machine offers none): memory and processes bounded per process"
    kind = "v2" if roots == (CGROUP_ROOT,) else "v1"
    return (f"cgroups {kind}: a submission's learner processes share {LEARNER_MEMORY >> 30} GiB "
            f"and {LEARNER_PROCESSES} processes")


# --- ending processes ------------------------------------------------------------------------------

def become_subreaper() -> None:
    """Orphaned descendants (a daemon that double-forked) become this process's children, so
    :func:`kill_descendants` finds them."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def hide_memory() -> None:
    """Other processes of this user may not read this one's memory, environment or descriptors."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def kill_descendants() -> None:
    """SIGKILL every process below this one (found through /proc), until none is left."""
    me = os.getpid()
    kill_until_none(lambda: descendants(me))


def kill_until_none(find: Callable[[], set[int]], tries: int = 50) -> None:
    """SIGKILL the processes ``find`` names, again until it names none (forks race the first kill)."""
    for _ in range(tries):
        found = find()
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``. A zombie is left for its parent to wait for: reaping it
    here would take its exit status from a ``Popen`` that waits for it."""
    stats = _stats()
    return {p for p in _below(pid, stats) - {pid} if stats[p][2] not in "ZX"}


_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU time used so far by ``pid`` and every process below it (those that ended and were waited
    for included, through their parents' counts)."""
    stats = _stats()
    return sum(stats[p][1] for p in _below(pid, stats) if p in stats) / _TICKS


def _below(pid: int, stats: dict[int, tuple[int, int, str]]) -> set[int]:
    found, frontier = {pid}, {pid}
    while frontier:
        frontier = {p for p, (parent, _, _) in stats.items() if parent in frontier and p not in found}
        found |= frontier
    return found


def _stats() -> dict[int, tuple[int, int, str]]:
    """Each process: its parent, its user + system ticks with those of its waited-for children, and
    its state (``Z``: a zombie)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]), fields[0])
    return found
