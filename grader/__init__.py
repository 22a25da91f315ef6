"""ol: the course's grader. Learners start, check and diff modules; instructors prove the tests
catch every named pitfall. ``grader.cli`` only parses arguments; each verb is a function in ``grader.commands``
(grader/README.md draws the layers)."""
