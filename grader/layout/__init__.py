"""Where things are: the catalog, the learner's workspace, the package a check assembles and the
remembered workspace. Imports only ``grader.core``."""
