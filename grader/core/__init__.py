"""The grader's floor: errors, what ol and its processes agree on (every ``OL_*`` name), paths,
patches, the sandbox and text made safe to print. Standard library only; imports nothing above it."""
