"""What ol and the processes it starts agree on: where the plugin finds its pipe and the run's nonce,
and how a place in the learner's package is named in a message."""

import os

FD_ENV = "OL_REPORT_FD"        # the number of the pipe's write end in the test process
NONCE_ENV = "OL_REPORT_NONCE"  # a random string every record must carry
SUBMISSION_ENV = "OL_SUBMISSION"  # the submission a grading process grades (never on a command line)


def where_in_package(tb) -> str | None:
    """``tinyllm/spec.py, line 70`` for the innermost frame of a traceback in the package under test, if any."""
    where = None
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/tinyllm/" in path:
            where = f"tinyllm/{path.rsplit('/tinyllm/', 1)[1]}, line {tb.tb_lineno}"
        tb = tb.tb_next
    return where
