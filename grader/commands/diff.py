"""``ol diff``: the first cases where the learner's answers part from the reference's, test by test.

The cases are the graded tests' own (``grader.cases``): the same inputs, the same answers. The
learner's answers are computed in a process of their own (the code could hang or exit); the
reference's come from the answer cache :mod:`grader.verdict.diagnose` keeps.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from grader.cases import RAISES, alike, answer_text, brief, first_parting, graded_alike, is_raise, without_place
from grader.child.case_worker import STUB
from grader.core.errors import UsageError
from grader.layout import assemble
from grader.layout.catalog import Module, check_fixtures, load_catalog
from grader.layout.workspace import resolve_workspace
from grader.verdict.diagnose import WORKER_STARTUP, AnswerStore, has_cases, run_worker


def diff(module_id: str, workspace: str | None = None, ref_deps: bool = False, shown: int = 3,
         keyword: str | None = None) -> int:
    """Print the first ``shown`` differing cases of each selected test; 0 when nothing differs (an
    exception of the reference's type in other words is said, not counted: the tests check types)."""
    if shown < 1:
        raise UsageError(f"--cases must be at least 1, got {shown}")
    catalog = load_catalog()
    module = catalog.get(module_id)
    ws = resolve_workspace(workspace)
    assemble.require_files(catalog, module, ws, ref_deps, "diff")
    check_fixtures(module)
    if not has_cases(module):
        print(f"{module.id}'s tests have no cases to compare; ol check's messages are the detail.")
        return 0
    tests = selected(module, keyword)
    if not tests:
        raise UsageError(f"no test of {module.id} matches -k {keyword!r}; see: ol tests {module.id}")
    with tempfile.TemporaryDirectory(prefix="ol-diff-") as tmp:
        impl = assemble.build(assemble.plan(catalog, module, ws, ref_deps), Path(tmp))
        yours = run_worker(module, impl, tests, module.timeout * len(tests) + WORKER_STARTUP)
    reference = AnswerStore(catalog, module).answers(None, tests, module.timeout)
    differ = [_show(test, reference.get(test), yours.get(test), shown) for test in tests]
    return 1 if any(differ) else 0


def selected(module: Module, keyword: str | None) -> list[str]:
    """The module's tests whose names match a ``-k`` expression as pytest reads one (all without one).

    Words match as case-insensitive substrings of the name, joined by ``and``, ``or``, ``not`` and
    parentheses.
    """
    if not keyword:
        return module.test_names
    tokens = re.findall(r"\(|\)|[^\s()]+", keyword)
    names = []
    for name in module.test_names:
        words = [t if t in ("and", "or", "not", "(", ")") else str(t.lower() in name.lower()) for t in tokens]
        try:
            matched = eval(" ".join(words), {"__builtins__": {}}, {})  # only True, False, and/or/not, ( )
        except SyntaxError as err:
            raise UsageError(f"-k {keyword!r} is not an expression of words with and, or, not and ( )") from err
        if matched:
            names.append(name)
    return names


def _show(test: str, reference: dict | None, yours: dict | None, shown: int) -> bool:
    """Print one test's differing cases; True when there are any."""
    if yours is None:
        print(f"{test}: your code did not finish computing its cases (it hung or exited); ol check says more.\n")
        return True
    if "cases" not in yours:
        error = yours.get("error", "no answers")
        print(f"{test}: {error.removeprefix(STUB + ': ')}\n")
        return True
    if reference is None or "cases" not in reference:
        print(f"{test}: the reference's answers could not be computed ({(reference or {}).get('error', 'no answer')})\n")
        return True
    stubs = [c["answer"][STUB] for c in yours["cases"] if isinstance(c["answer"], dict) and STUB in c["answer"]]
    pairs = list(zip(reference["cases"], yours["cases"]))
    unlike = [(r, y) for r, y in pairs if not (isinstance(y["answer"], dict) and STUB in y["answer"])
              and not alike(r["answer"], y["answer"], r["compare"])]
    worded = [(r, y) for r, y in unlike if graded_alike(y["answer"], r["answer"], r["compare"])]
    differing = [(r, y) for r, y in unlike if not graded_alike(y["answer"], r["answer"], r["compare"])]
    if not differing:
        if stubs:
            print(f"{test}: {stubs[0]}\n")
            return True
        agree = f"all {len(pairs)} cases agree with the reference"
        print(f"{test}: {agree}; {_worded_note(worded, 'of them')}\n" if worded else f"{test}: {agree}.\n")
        return False
    print(f"{test}: {len(differing)} of {len(pairs)} cases differ; the first {min(shown, len(differing))}:")
    for ref, mine in differing[:shown]:
        print(f"  case {ref['label']}")
        print(f"    call:      {ref['call']}")
        print(f"    reference: {answer_text(ref['answer'], 24, reference=True)}")
        print(f"    yours:     {answer_text(mine['answer'], 24)}")
        parting = None if ref["compare"] != "exact" or is_raise(mine["answer"]) else first_parting(ref["answer"], mine["answer"])
        if parting and parting[0]:
            where, theirs, yours = parting
            print(f"    they part at {where}: the reference {brief(theirs)}, yours {brief(yours)}")
    print(f"  Besides, {_worded_note(worded, 'cases' if len(worded) > 1 else 'case')}\n" if worded else "")
    return True


def _worded_note(worded: list[tuple[dict, dict]], which: str) -> str:
    """Cases that raise the reference's exception in other words, which the tests accept."""
    ref, mine = worded[0]
    return (f"{len(worded)} {which} raise{'s' if len(worded) == 1 else ''} the reference's {ref['answer'][RAISES]} "
            f"in other words, which the tests accept (case {ref['label']}: the reference says "
            f"{without_place(ref['answer'].get('message', ''))!r}, yours {without_place(mine['answer'].get('message', ''))!r}).")

