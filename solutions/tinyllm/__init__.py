"""tinyllm: the course's small inference engine (reference solutions)."""
