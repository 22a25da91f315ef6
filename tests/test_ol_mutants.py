"""``ol mutants``: every named pitfall of a module is killed by its named test.

L10.1's sixteen pitfalls run in a few seconds; ``tests/test_mutants.py`` gates every module's
pitfalls one by one, so this file tests the command, not the catalog.
"""

from __future__ import annotations

from ol_helpers import ol


def test_every_l10_1_mutant_is_killed_by_its_named_test():
    ran = ol("mutants", "L10.1", "--jobs", "2", limit=600)
    assert ran.code == 0, ran.text
    assert "16 of 16 mutants killed by their named tests" in ran.out
    assert "  reference  passes every test" in ran.out
    for i in range(1, 17):
        assert f"p{i:02d}" in ran.out
    assert "SURVIVED" not in ran.out and "ESCAPES" not in ran.out
