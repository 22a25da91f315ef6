"""From runs to verdicts: a check's result, the diagnosis (hints), and the processes that produce
verdicts on their own (``python -m grader.verdict.submission``, ``.warm``, ``.platform``)."""
