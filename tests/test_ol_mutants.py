"""``ol mutants``: every named pitfall of L10.8 is killed by its named test.

The slowest of the ol tests (about half a minute on two cores); select or skip it by file.
"""

from __future__ import annotations

from ol_helpers import ol


def test_every_l10_8_mutant_is_killed_by_its_named_test():
    ran = ol("mutants", "L10.8", "--jobs", "2", limit=600)
    assert ran.code == 0, ran.text
    assert "17 of 17 mutants killed by their named tests" in ran.out
    assert "reference  passes every test" in ran.out
    for i in range(1, 18):
        assert f"s{i:02d}" in ran.out
    assert "SURVIVED" not in ran.out and "ESCAPES" not in ran.out
