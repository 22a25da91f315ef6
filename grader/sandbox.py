"""Where code ol does not trust runs: resource limits, and another user when ol runs as root.

A process started with :meth:`Sandbox.preexec` gets limits on its address space, on the size of
the files it writes (a flood of output), on core dumps and, when ol is root, runs as an
unprivileged user of its own (``uid``): it cannot signal, trace or read the memory of ol's
processes, cannot write ol's files, and the limit on processes (a fork bomb) counts only its own.
:meth:`Sandbox.reap` kills whatever that user still runs afterwards (daemons that left the
process group). When the interpreter lives where such a user cannot reach it (``/root`` here),
the user keeps one capability, reading and searching folders (``CAP_DAC_READ_SEARCH``), and still
cannot write anything of ol's or touch its processes.
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


@dataclass(frozen=True)
class Sandbox:
    uid: int | None = None          # run as this user (ol is root), or None: ol's own user
    read_capability: bool = False   # keep CAP_DAC_READ_SEARCH (the interpreter is out of the user's reach)
    processes: int = PROCESSES
    reaps: int | None = None        # also kill this user's processes after a run (the judge of an isolated check)

    def to_env(self) -> str:
        """This sandbox as one environment variable's value (for the judge that starts the learner's process)."""
        return "" if self.uid is None else f"{self.uid}:{int(self.read_capability)}"

    @classmethod
    def from_env(cls, text: str) -> "Sandbox":
        if not text:
            return cls()
        uid, capability = text.split(":")
        return cls(int(uid), capability == "1")

    def judge(self) -> "Sandbox":
        """Limits only, for the judge of an isolated check, which then kills what this sandbox's user left."""
        return Sandbox(reaps=self.uid)

    def preexec(self) -> None:
        """Runs in the child between fork and exec: limits first, then the user."""
        for limit, value in ((resource.RLIMIT_AS, ADDRESS_SPACE), (resource.RLIMIT_FSIZE, FILE_SIZE),
                             (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(limit, (value, value))
        if self.uid is None:
            return
        resource.setrlimit(resource.RLIMIT_NPROC, (self.processes, self.processes))
        libc = ctypes.CDLL(None, use_errno=True)
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
        box = Sandbox(uid, read_capability=not _interpreter_reachable(uid))
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
