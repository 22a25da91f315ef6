"""tinyllm: the course's small inference engine, one module per idea. `ol start` copies this file
into a workspace's `tinyllm/`, beside the learner's files; in `solutions/` it sits beside the reference
solution."""
