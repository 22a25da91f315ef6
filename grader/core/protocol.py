"""What ol and the processes it starts agree on: every ``OL_*`` environment variable, the clock's
bound beside the CPU bound, and how a place in the learner's package is named in a message.

Standard library only: an isolated check copies this file (with ``grader/__init__.py`` and
``grader/core/__init__.py``) beside the learner's server, where nothing else of ol exists.
"""

import os
import re
import signal

# --- between ol and its test process (the judge) --------------------------------------------------
IMPL_ENV = "OL_IMPL"                    # the folder holding the tinyllm/ package under test
FD_ENV = "OL_REPORT_FD"                 # the number of the pipe's write end in the test process
NONCE_ENV = "OL_REPORT_NONCE"           # a random string every record must carry
ANSWERS_ENV = "OL_ANSWERS_DIR"          # where the suite leaves each test's answers for the diagnosis
TEST_TIMEOUT_ENV = "OL_TEST_TIMEOUT"    # CPU seconds a test may take (ol's run sets it)
TEST_TIMEOUTS_ENV = "OL_TEST_TIMEOUTS"  # optional JSON {test name: CPU seconds}, overriding it per test
CHECK_CPU_ENV = "OL_CHECK_CPU"          # optional CPU seconds for the whole check
# A test past its timeout is asked where it is before it is killed: this signal makes the test process
# write its stack (faulthandler) to this file in its working folder.
HANG_SIGNAL = getattr(signal, "SIGUSR1", None)
HANG_DUMP = "hang.txt"

# --- between the judge and the learner's process (an isolated check) ------------------------------
LEARNER_IMPL_ENV = "OL_LEARNER_IMPL"        # the learner's package, laid out for its own process
LEARNER_SANDBOX_ENV = "OL_LEARNER_SANDBOX"  # the sandbox that process runs in
RPC_FD_ENV = "OL_RPC_FD"                    # the learner's end of the judge's socket
LEARNER_SERVER = "ol_learner_server.py"     # grader/child/learner_server.py, copied into the learner's package

# --- between ol and its grading processes ----------------------------------------------------------
SUBMISSION_ENV = "OL_SUBMISSION"        # the submission a grading process grades (never on a command line)
# The seed of the cases a grading draws when it runs (course/tests/graded.py, drawn): no submission
# can know them ahead, so none can pass a test by replaying the public fixtures. ol grade and the
# platform exports set it; the learner's process never sees it (grader.child.judge.learner_env).
DRAWN_SEED_ENV = "OL_DRAWN_SEED"

# --- set by the person running ol --------------------------------------------------------------------
WORKSPACE_ENV = "OL_WORKSPACE"                # the folder holding the learner's tinyllm/
COURSE_ROOT_ENV = "OL_COURSE_ROOT"            # the clone of the course, when ol is installed elsewhere
CACHE_ENV = "OL_CACHE_DIR"                    # where the reference's and the pitfalls' answers are kept
REMEMBER_ENV = "OL_LAST_WORKSPACE_FILE"       # where the last started workspace is remembered (empty: nowhere)
NO_WARM_ENV = "OL_NO_WARM"                    # "1": ol start computes no answers ahead of time
AUTOGRADER_DIR_ENV = "OL_AUTOGRADER_DIR"      # Gradescope's /autograder, moved for a local run
GRADE_DIR_ENV = "OL_GRADE_DIR"                # PrairieLearn's /grade, moved for a local run
PYTHON_ENV = "OL_PYTHON"                      # the interpreter an exported autograder runs

# A test's bound is CPU time of the learner's processes; code that sleeps or waits is also bounded
# on the clock, WALL_FACTOR times longer.
WALL_FACTOR = 2.0

# --- what every process whose answers are compared must share ------------------------------------
# Variables that choose the BLAS's and numpy's kernels (OPENBLAS_CORETYPE, NPY_DISABLE_CPU_FEATURES, ...):
# a sum's last bits follow the kernel, so the learner's process computes with the judge's, and cached
# answers are kept per setting (on an AVX-512 machine with OPENBLAS_CORETYPE=Haswell set, a learner's
# process without it ran another gemm kernel and failed the reference's own serve.py).
KERNEL_ENV_PREFIXES = ("OPENBLAS_", "GOTO_", "MKL_", "NPY_")


def kernel_env() -> dict[str, str]:
    """This process's variables that choose kernels (:data:`KERNEL_ENV_PREFIXES`)."""
    return {name: value for name, value in os.environ.items() if name.startswith(KERNEL_ENV_PREFIXES)}


def check_wall(cpu: float) -> float:
    """The wall-clock bound of a whole check whose learner code may use ``cpu`` seconds of CPU."""
    return WALL_FACTOR * cpu


def where_in_package(tb) -> str | None:
    """``tinyllm/spec.py, line 70`` for the innermost frame of a traceback in the package under test, if any."""
    where = None
    while tb is not None:
        place = _in_package(tb.tb_frame.f_code.co_filename)
        if place:
            where = f"{place}, line {tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _in_package(path: str) -> str | None:
    """``tinyllm/spec.py`` for a file of the package under test, else None."""
    path = path.replace(os.sep, "/")
    return f"tinyllm/{path.rsplit('/tinyllm/', 1)[1]}" if "/tinyllm/" in path else None


_DUMPED_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def where_in_dump(dump: str, written: dict[str, set[str]] | None = None) -> str | None:
    """``tinyllm/serve.py, line 243, in adaptive_ks``: the most recent frame in the package under
    test of a faulthandler dump (it lists the most recent call first), if any.

    ``written``: the functions the learner writes in each file of the module, by file
    (``{"serve.py": {"step", ...}, "model.py": set()}``; a file it does not name is not
    judged). Where the most recent frame is in a function they were given, the place says so and
    names the most recent of theirs below it, or says none of theirs is running: a given loop
    then waits on what their functions return or leave behind."""
    def theirs(place: str, name: str) -> bool | None:
        names = (written or {}).get(place.removeprefix("tinyllm/"))
        return None if names is None else name in names

    frames = [(place, line, name) for path, line, name in _DUMPED_FRAME.findall(dump)
              if (place := _in_package(path))]
    if not frames:
        return None
    place, line, name = frames[0]
    where = f"{place}, line {line}, in {name}"
    if theirs(place, name) is not False:
        return where
    below = [f for f in frames[1:] if theirs(f[0], f[2])]
    if below:
        return f"{where}, given code called from your {below[0][2]} ({below[0][0]}, line {below[0][1]})"
    return (f"{where}, given code, with none of your functions running: it waits on what yours return or "
            "leave behind")
