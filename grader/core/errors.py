"""The two ways ol stops short of a verdict, each with its exit code."""


class OlError(Exception):
    """A message for the person at the keyboard; ``exit_code`` is what ``ol`` exits with."""

    exit_code = 2


class UsageError(OlError):
    """The command cannot run as asked: unknown module, module not started, needs not met."""

    exit_code = 2


class GraderError(OlError):
    """The grader itself cannot run: a fixture that does not match its catalog entry, a broken catalog."""

    exit_code = 3
