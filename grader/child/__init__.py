"""Code loaded into the processes ol starts: the judge's pytest plugins (``-p grader.child.recorder``,
``-p grader.child.judge``), the learner's server (a copied script) and the case worker
(``python -m grader.child.case_worker``). Imports only ``grader.core`` and ``grader.cases``."""
