"""Entry point of ol itself: ``python -m grader``, the same as the ``ol`` command."""

import sys

from grader.cli import main

sys.exit(main())
