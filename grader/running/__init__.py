"""Starting and watching those processes: a suite's run, an isolated check's two packages, a
submission's grading process. Imports ``grader.core`` and ``grader.layout``."""
