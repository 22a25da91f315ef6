"""The project's own tests always exercise the reference package, ``solutions/tinyllm``.

The graded tests in ``course/tests`` bind through ``OL_IMPL`` instead; these do not, so a learner's
package can never make the reference look broken.
"""

import sys
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
sys.path.insert(0, str(SOLUTIONS))

_loaded = sys.modules.get("tinyllm")
if _loaded is not None and SOLUTIONS not in Path(_loaded.__file__).resolve().parents:
    raise ImportError(
        f"tinyllm was already imported from {_loaded.__file__}; the project tests need the "
        f"reference in {SOLUTIONS} (run them in a separate pytest process from OL_IMPL runs)"
    )
