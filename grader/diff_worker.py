"""``python -m grader.diff_worker``: compute one differential test's answers in a process of their own.

Arguments: MODULE TEST IMPL SUITE_DIR COURSE_ROOT OUT. The ``tinyllm`` in IMPL comes first on
``sys.path`` (then the suite's folder, for its fakes); the answers, one per case, go to OUT as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    module_id, test, impl, suite_dir, root, out = argv
    sys.path[:0] = [impl, suite_dir]
    from grader.diff_adapters import differs_for

    differ = differs_for(module_id)[test]
    answers = []
    for case in differ.cases(Path(root)):
        try:
            answers.append({"answer": differ.answer(case.payload)})
        except Exception as exc:  # the learner's error is this case's answer
            answers.append({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")})
    Path(out).write_text(json.dumps(answers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
