"""Where code ol does not trust runs: resource limits, and another user when ol runs as root.

A process started with :meth:`Sandbox.preexec` gets limits on its address space, on the size of
the files it writes (a flood of output), on core dumps and, when ol is root, runs as an
unprivileged user of its own (``uid``): it cannot signal, trace or read the memory of ol's
processes, cannot write ol's files, and the limit on processes (a fork bomb) counts only its own.
:meth:`Sandbox.reap` kills whatever that user still runs afterwards (daemons that left the
process group). When the interpreter lives where such a user cannot reach it (``/root`` here),
the user keeps one capability, reading and searching folders (``CAP_DAC_READ_SEARCH``), and still
cannot write anything of ol's or touch its processes.

Where the kernel lets root make namespaces (probed once per run: :func:`claim`), the process also
gets a mount namespace of its own, in which the course (ol's repository, the catalog's root, the
cache of the reference's answers) and the temporary folders (ol's judge files, other
submissions) are covered by empty, small ``tmpfs`` mounts, and only its own folder (its working
directory), the interpreter, numpy, rpyc and the two files of ol that its server imports are
mounted back; and a network namespace of its own, with no interface up: no connection leaves it,
not even to ``127.0.0.1``. The user, without ``CAP_SYS_ADMIN``, cannot undo either.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.errors import GraderError

# Unprivileged users for sandboxed code: each ol run claims its own (one per grading slot), so
# process limits and the final kill never reach another run's processes.
FIRST_UID = 61000
USERS = 512
ADDRESS_SPACE = 4 << 30
FILE_SIZE = 64 << 20
PROCESSES = 64

_PR_SET_KEEPCAPS = 8
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_DUMPABLE = 4
_CAP_DAC_READ_SEARCH = 2
_CAPABILITY_VERSION_3 = 0x20080522
_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18

REPO = Path(__file__).resolve().parents[1]
# What the learner's server (grader/learner_server.py, copied beside the package) imports of ol.
SERVER_NEEDS = ("grader/__init__.py", "grader/protocol.py")
# Each empty tmpfs of a secluded process: room for a few temporary files, not for a flood.
COVER_SIZE = "16m"


@dataclass(frozen=True)
class Sandbox:
    uid: int | None = None          # run as this user (ol is root), or None: ol's own user
    read_capability: bool = False   # keep CAP_DAC_READ_SEARCH (the interpreter is out of the user's reach)
    processes: int = PROCESSES
    reaps: int | None = None        # also kill this user's processes after a run (the judge of an isolated check)
    seclude: bool = False           # mount and network namespaces of its own (root only, where permitted)
    hidden: tuple[str, ...] = ()    # folders a secluded process does not see (see seclusion)
    keep: tuple[str, ...] = ()      # paths inside them it sees all the same

    def to_env(self) -> str:
        """This sandbox as one environment variable's value (for the judge that starts the learner's process)."""
        return "" if self.uid is None else f"{self.uid}:{int(self.read_capability)}:{int(self.seclude)}"

    @classmethod
    def from_env(cls, text: str) -> "Sandbox":
        """The sandbox ``to_env`` wrote; a secluded one also learns here, before any fork, what it hides."""
        if not text:
            return cls()
        uid, capability, *seclude = text.split(":")
        if seclude != ["1"]:
            return cls(int(uid), capability == "1")
        hidden, keep = seclusion()
        return cls(int(uid), capability == "1", seclude=True, hidden=hidden, keep=keep)

    def judge(self) -> "Sandbox":
        """Limits only, for the judge of an isolated check, which then kills what this sandbox's user left."""
        return Sandbox(reaps=self.uid)

    def preexec(self) -> None:
        """Runs in the child between fork and exec: limits first, then the namespaces, then the user."""
        for limit, value in ((resource.RLIMIT_AS, ADDRESS_SPACE), (resource.RLIMIT_FSIZE, FILE_SIZE),
                             (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(limit, (value, value))
        if self.uid is None:
            return
        resource.setrlimit(resource.RLIMIT_NPROC, (self.processes, self.processes))
        libc = ctypes.CDLL(None, use_errno=True)
        if self.seclude:
            _seclude(libc, self.hidden, (os.getcwd(), *self.keep))
        if self.read_capability:
            libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0)
        os.setgroups([])
        os.setgid(self.uid)
        os.setuid(self.uid)
        if self.read_capability:
            _keep_read_capability(libc)

    def share(self, path: Path, writable: bool = False) -> None:
        """Let the sandbox's user read ``path`` (a folder, recursively), and write it if ``writable``."""
        if self.uid is None:
            return
        for root, dirs, files in os.walk(path):
            os.chmod(root, 0o777 if writable else 0o755)
            if writable:
                os.chown(root, self.uid, self.uid)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)

    def traverse(self, path: Path) -> None:
        """Let the sandbox's user pass through ol's temporary folders above ``path`` (not list or
        read them); a folder that is not ol's (``ol-*`` and what it made inside) is left as it is."""
        if self.uid is None:
            return
        for folder in Path(path).resolve().parents:
            mode = folder.stat().st_mode
            if mode & 0o001:
                return
            if not any(part.startswith("ol-") for part in folder.parts):
                return
            os.chmod(folder, mode | 0o001)

    def reap(self) -> None:
        """Kill every process the sandbox's user still runs (daemons that left their process group)."""
        uid = self.uid if self.uid is not None else self.reaps
        if uid is None:
            return
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                try:
                    os.setuid(uid)
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            if not _runs_processes(uid):
                return
            time.sleep(0.05)


def claim() -> Sandbox:
    """A sandbox of this process's own: a user no other ol run holds (a lock held until this
    process exits) when ol is root, else limits only."""
    if os.geteuid() != 0:
        return Sandbox()
    locks = Path(tempfile.gettempdir()) / "ol-sandbox-users"
    locks.mkdir(mode=0o700, exist_ok=True)
    for uid in range(FIRST_UID, FIRST_UID + USERS):
        fd = os.open(locks / str(uid), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _CLAIMED.append(fd)
        box = Sandbox(uid, read_capability=not _interpreter_reachable(uid), seclude=namespaces_permitted())
        box.reap()    # what a run that crashed may have left
        return box
    raise GraderError(f"every sandbox user ({FIRST_UID}-{FIRST_UID + USERS - 1}) is held by another ol run")


_CLAIMED: list[int] = []


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
    for _ in range(20):
        parents = _parents()
        below, frontier = set(), {me}
        while frontier:
            frontier = {pid for pid, ppid in parents.items() if ppid in frontier and pid not in below}
            below |= frontier
        if not below:
            return
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap_children()
        time.sleep(0.02)


def _reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _parents() -> dict[int, int]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        found[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def _runs_processes(uid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    return True
            except OSError:
                continue
    return False


_REACHABLE: dict[int, bool] = {}


def _interpreter_reachable(uid: int) -> bool:
    """Whether ``uid`` can start this Python and import numpy and pytest without extra rights."""
    if uid not in _REACHABLE:
        try:
            done = subprocess.run([sys.executable, "-c", "import numpy, pytest"], preexec_fn=Sandbox(uid).preexec,
                                  capture_output=True, timeout=60, cwd="/")
            _REACHABLE[uid] = done.returncode == 0
        except (OSError, subprocess.SubprocessError):
            _REACHABLE[uid] = False
    return _REACHABLE[uid]


def seclusion() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a secluded process does not see: the course (ol's repository, ``OL_COURSE_ROOT``), the
    reference's and the pitfalls' answers, the temporary folders; and what it sees all the same,
    wherever it is: the interpreter, numpy, rpyc, and the files of ol its server imports."""
    import numpy
    import rpyc

    from grader.catalog import COURSE_ROOT_ENV
    from grader.diagnose import cache_dir

    covered = {REPO, Path(os.environ.get(COURSE_ROOT_ENV) or REPO), cache_dir(), Path(tempfile.gettempdir()),
               Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")}
    found = sorted({str(p.expanduser().resolve()) for p in covered if p.expanduser().is_dir()} - {"/"})
    keep = [sys.prefix, sys.exec_prefix, sys.base_prefix, Path(numpy.__file__).parent, Path(rpyc.__file__).parent,
            *(REPO / name for name in SERVER_NEEDS)]
    hidden = [p for p in found if not any(_inside(p, q) for q in found if q != p)]
    keep = list(dict.fromkeys(str(Path(k).resolve()) for k in keep))
    # A path kept inside another is kept with it; one holding a hidden folder would bring it back.
    keep = [k for k in keep if not any(_inside(k, other) for other in keep if other != k)
            and not any(_inside(folder, k) for folder in hidden)]
    return tuple(hidden), tuple(keep)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


_NAMESPACES: list[bool] = []


def namespaces_permitted() -> bool:
    """Whether this process may give a child mount and network namespaces and mount a tmpfs there."""
    if not _NAMESPACES:
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                ok = libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET) == 0 and \
                    libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) == 0 and \
                    libc.mount(b"ol-probe", tempfile.gettempdir().encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m") == 0
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        _NAMESPACES.append(os.waitstatus_to_exitcode(status) == 0)
    return _NAMESPACES[0]


def _seclude(libc, hidden: tuple[str, ...], keep: tuple[str, ...]) -> None:
    """In the child, as root: new mount and network namespaces; each ``hidden`` folder covered by an
    empty tmpfs; each path of ``keep`` inside one mounted back where it was; the working directory
    (the first of ``keep``) entered again through its new mount, so no path leads from it to what
    is covered."""
    if libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    _mount(libc, "none", "/", None, _MS_REC | _MS_PRIVATE)
    handles = [(path, os.open(path, os.O_PATH)) for path in keep
               if os.path.exists(path) and any(_inside(path, folder) for folder in hidden)]
    for folder in hidden:
        _mount(libc, "ol-cover", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={COVER_SIZE},mode=1777")
    for path, fd in handles:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND)
        os.close(fd)
    os.chdir(keep[0])


def _mount(libc, source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                  data.encode() if data else None) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _keep_read_capability(libc) -> None:
    """After setuid with KEEPCAPS: CAP_DAC_READ_SEARCH only, passed on through exec as an ambient capability."""
    bit = 1 << _CAP_DAC_READ_SEARCH
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)(_CapData(bit, bit, bit), _CapData(0, 0, 0))
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_CAP_AMBIENT_RAISE")
