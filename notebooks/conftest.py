"""nbval runs the chapters against the reference, or against ``OL_WORKSPACE`` when it is set: never
against whatever workspace ``ol start`` remembered last (``.ol-workspace``), which is the learner's
or another test's, not this run's."""

import os

from grader.core.protocol import REMEMBER_ENV

os.environ.setdefault(REMEMBER_ENV, "")
