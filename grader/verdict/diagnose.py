"""Name the mistake from behaviour: the learner's answers beside each named pitfall's.

Every named pitfall exists as code: a mutant, a patch on the reference. For each failing test,
the test's cases (``grader.cases``) run on the learner's package, on the reference and on every
mutant. A pitfall *coincides* with the learner on a test when it gives the learner's answer on
every case of it: where the learner parts from the reference and where the learner is right. It
is *silent* there when it gives the reference's answer on every case (the test fails for another
reason), and it *contradicts* the test otherwise: one case where it is wrong and the learner right,
or where both are wrong differently, rules it out. A pitfall is named when it coincides on a
failing test, contradicts none, and the cases it matched part from the reference in more than
true/false values. A hint is never given from which tests fail alone.

The reference's and the mutants' answers are cached on disk, keyed by the reference's files, the
patch and the suite's files. A mutant is run only on the tests whose cases call a function its
patch changes (the reference's run records which functions each test calls); on the others it
answers as the reference does. ``ol start`` fills the cache in the background (:mod:`grader.verdict.warm`);
the learner's answers come from the check itself (``grader.cases.check`` writes them down).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from grader.cases import alike, answer_text, clip, graded_alike, telling
from grader.child.case_worker import STUB
from grader.core.patch import apply_patch
from grader.core.paths import REPO, cache_dir
from grader.core.protocol import DRAWN_SEED_ENV, kernel_env
from grader.layout.catalog import Catalog, Module, Pitfall

WORKER_STARTUP = 15.0
MAX_ANSWERS = 32 << 20
SAME_AS_REFERENCE = "same_as_reference"   # a mutant's answers to a test whose functions its patch leaves alone
EVERYTHING = "*"                           # a patch that changes module-level code: every test may see it


@dataclass
class CaseView:
    label: str
    call: str
    reference: str
    yours: str


@dataclass
class TestDiagnosis:
    test: str
    cases: int = 0
    differing: int = 0
    telling: int = 0                                        # differing cases that part in more than booleans
    pitfalls: list[str] = field(default_factory=list)      # pitfalls giving your answer on every case, catalog order
    silent: list[str] = field(default_factory=list)        # pitfalls giving the reference's answer on every case
    first: CaseView | None = None                           # the first case where the learner parts
    note: str | None = None                                 # why there is no comparison, if there is none

    @property
    def diagnosable(self) -> bool:
        return self.note is None and self.differing > 0

    def summary(self, module: Module, named: list[str]) -> str:
        """This test's diagnosis in a sentence, naming only the pitfalls in ``named``."""
        if self.note:
            return self.note
        if not self.differing:
            return ("your answers equal the reference's on every case of this test; "
                    "the failure message says what else it checks")
        where = _cases_where(self.differing, self.cases)
        pitfalls = [p for p in self.pitfalls if p in named]
        if not pitfalls:
            return (f"your answer differs from the reference's on {where}, and no named pitfall gives your "
                    f"answers on this test (none of {_ids(module)})")
        return (f"{' and '.join(_title(module, p) for p in pitfalls)} "
                f"{'gives' if len(pitfalls) == 1 else 'each give'} your answer on {_all_where(self.differing)} "
                f"where yours differs from the reference's{_right_too(self.cases - self.differing)}")


def _cases_where(differing: int, cases: int) -> str:
    return f"{differing} of its {cases} cases" if cases > 1 else "its one case"


def _right_too(right: int) -> str:
    """The clause on the cases a pitfall answers as the reference does, where there are any."""
    return f", and the reference's on the other {right} (where yours is right too)" if right else ""


def _all_where(differing: int) -> str:
    return "the one case" if differing == 1 else f"all {differing} cases"


@dataclass
class Diagnosis:
    module: Module
    tests: dict[str, TestDiagnosis]
    against: dict[str, list[str]] = field(default_factory=dict)   # pitfall -> other tests where it is wrong

    def ranked(self) -> list[tuple[Pitfall, list[str]]]:
        """The pitfalls named, each with the failing tests it explains.

        A pitfall is named when it coincides with the learner on some failing test, contradicts
        none (on each other one it is silent), answers as the learner or as the reference on every
        other test of the module (``against``), and the cases it matched part from the reference in
        more than true/false values (a test of a few booleans never names a pitfall alone). Those
        explaining more tests come first, then those matching more differing cases, then catalog order.
        """
        tests = [d for d in self.tests.values() if d.diagnosable]
        found = []
        for order, pitfall in enumerate(self.module.pitfalls):
            agree = [d for d in tests if pitfall.id in d.pitfalls]
            contradict = [d for d in tests if pitfall.id not in d.pitfalls and pitfall.id not in d.silent]
            if agree and not contradict and not self.against.get(pitfall.id) and sum(d.telling for d in agree) > 0:
                found.append((-len(agree), -sum(d.differing for d in agree), order, pitfall, [d.test for d in agree]))
        found.sort(key=lambda f: f[:3])
        return [(pitfall, agree) for *_, pitfall, agree in found]

    def as_json(self, test: str) -> dict | None:
        """The ``diagnosis`` field of one test in ``ol check --json``."""
        d = self.tests.get(test)
        if d is None:
            return None
        named = [p.id for p, _ in self.ranked()]
        return {"summary": d.summary(self.module, named), "pitfalls": [p for p in d.pitfalls if p in named],
                "alone": list(d.pitfalls), "differing_cases": d.differing, "cases": d.cases}

    def hint_lines(self, shown: Mapping[str, str] | None = None) -> list[str]:
        """The named pitfalls' hints, then a line for each failing test no pitfall explains, with its
        first differing case, unless ``shown`` (each test's failure message, printed above the
        hints) already shows that case: then it is only named."""
        ranked = self.ranked()
        lines = [self._hint(pitfall, agree) for pitfall, agree in ranked]
        explained = {test for _, agree in ranked for test in agree}
        unnamed = [d for d in self.tests.values() if d.diagnosable and d.test not in explained]
        above = [d for d in unnamed if _shows(shown and shown.get(d.test), d.first, d.test)]
        if len(above) > 1:  # one mistake failing many tests: one line, not one a test
            lines.append(f"Not a named pitfall: in {', '.join(d.test for d in above)} no pitfall of "
                         f"{_ids(self.module)} gives your answers; each test's first differing case is the one "
                         "shown above.")
        for d in unnamed:
            if len(above) > 1 and d in above:
                continue
            head = (f"Not a named pitfall: in {d.test} no pitfall of {_ids(self.module)} gives your answers "
                    f"(yours differs from the reference's on {_cases_where(d.differing, d.cases)}). "
                    f"First differing case {d.first.label!r}")
            if d in above:
                lines.append(f"{head}: the one shown above.")
                continue
            lines.append(f"{head}:")
            lines += [f"    call:      {clip(d.first.call, test=d.test)}", f"    reference: {d.first.reference}",
                      f"    yours:     {d.first.yours}"]
        return lines

    def _hint(self, pitfall: Pitfall, agree: list[str]) -> str:
        tests = [self.tests[t] for t in agree]
        differing = sum(d.differing for d in tests)
        right = sum(d.cases - d.differing for d in tests)
        return (f"Hint: pitfall {pitfall.id}, \"{pitfall.title}\": it gives your answer on {_all_where(differing)} "
                f"where yours differs from the reference's in {', '.join(agree)}{_right_too(right)}. "
                f"Symptom: {pitfall.symptom}.")


def _shows(message: str | None, case: CaseView, test: str) -> bool:
    """Whether ``test``'s failure message (:func:`grader.cases.failure_message`) shows ``case``:
    its headline names the case and the message holds its call."""
    if not message:
        return False
    return repr(case.label) in message.split("\n", 1)[0] and clip(case.call, test=test) in message


def has_cases(module: Module) -> bool:
    return "\ndef cases_" in module.suite.read_text()


def diagnose(catalog: Catalog, module: Module, impl: Path, tests: list[str], timeout: float,
             jobs: int = 2, recorded: dict[str, dict] | None = None, isolated: bool = False) -> Diagnosis | None:
    """Compare the learner's answers on ``tests`` with the reference's and every pitfall's.

    ``recorded`` holds the learner's answers the check itself wrote down. Those missing are computed
    over ``impl`` in a process of their own, except in an ``isolated`` check: there the learner's
    code runs only in its sandbox, and a test without recorded answers is left undiagnosed."""
    if not tests or not has_cases(module):
        return None
    learner = dict(recorded or {})
    missing = [t for t in tests if t not in learner]
    if missing and not isolated:
        learner.update(run_worker(module, impl, missing, timeout * len(missing) + WORKER_STARTUP))
    store = AnswerStore(catalog, module)
    # Statistical tests cost the most: a pitfall another failing test already rules out is not run on them.
    costly = [t for t in tests if module.test(t).kind == "statistical"]
    results: dict[str, TestDiagnosis] = {}
    candidates = list(module.pitfalls)
    for part in ([t for t in tests if t not in costly], costly):
        if not part:
            continue
        found = store.fill(candidates, part, timeout, jobs)
        reference = found.pop(None)
        for t in part:
            results[t] = _compare(t, learner.get(t), reference.get(t),
                                  {p.id: found[p.id].get(t) if p in candidates else None for p in module.pitfalls})
        candidates = [p for p in candidates if not any(_contradicts(results[t], p.id) for t in part)]
    diagnosis = Diagnosis(module, {t: results[t] for t in tests})
    named = [pitfall for pitfall, _ in diagnosis.ranked()]
    if named:
        others = [t for t in module.test_names if t not in tests]
        diagnosis.against = _elsewhere(module, impl, store, named, others, learner, timeout, jobs, isolated)
    return diagnosis


def _elsewhere(module: Module, impl: Path, store: "AnswerStore", pitfalls: list[Pitfall], others: list[str],
               learner: dict[str, dict], timeout: float, jobs: int, isolated: bool) -> dict[str, list[str]]:
    """The tests outside the failing ones where each pitfall answers neither as the learner nor as
    the reference (a passing test where it is wrong and the learner right, a test -k left out).

    Only the tests where a pitfall parts from the reference are looked at; the learner's answers come
    from the check, else from the case worker (never outside the sandbox of an isolated check). A
    test whose answers cannot be had counts against the pitfall: a hint needs the evidence."""
    found = store.fill(pitfalls, others, timeout, jobs)
    reference = found.pop(None)
    wrong = {p.id: [t for t in others if "cases" in found[p.id].get(t, {}) and not _same(found[p.id][t], reference.get(t))]
             for p in pitfalls}
    needed = sorted({t for tests in wrong.values() for t in tests if t not in learner}, key=others.index)
    if needed and not isolated:
        learner = {**learner, **run_worker(module, impl, needed, timeout * len(needed) + WORKER_STARTUP)}
    return {pid: [t for t in tests if _differs(found[pid][t], learner.get(t))] for pid, tests in wrong.items()}


def _differs(mutant: dict, learner: dict | None) -> bool:
    """The learner's answers to a test part from a mutant's; cases (or a test) the learner has not
    written yet are no evidence either way, answers that could not be had are."""
    if learner is None:
        return True
    if "cases" not in learner:
        return not learner.get("error", "").startswith(STUB)
    if len(learner["cases"]) != len(mutant["cases"]):
        return True
    return any(not _is_stub(m["answer"]) and not graded_alike(m["answer"], t["answer"], t["compare"])
               for m, t in zip(learner["cases"], mutant["cases"]))


def _same(a: dict | None, b: dict | None) -> bool:
    """Two packages' answers to a test are alike on every case (False when either is missing)."""
    if a is None or b is None or "cases" not in a or "cases" not in b or len(a["cases"]) != len(b["cases"]):
        return False
    return all(alike(x["answer"], y["answer"], y["compare"]) for x, y in zip(a["cases"], b["cases"]))


def _contradicts(d: TestDiagnosis, pid: str) -> bool:
    return d.diagnosable and pid not in d.pitfalls and pid not in d.silent


def read_recorded(folder: Path, tests: list[str]) -> dict[str, dict]:
    """The answers ``grader.cases.check`` wrote into ``folder`` during the check, by test."""
    found = {}
    for test in tests:
        path = folder / f"{test}.json"
        try:
            if path.is_symlink() or path.stat().st_size > MAX_ANSWERS:
                continue
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(value, dict) and isinstance(value.get("cases"), list):
            found[test] = value
    return found


def _compare(test: str, learner: dict | None, reference: dict | None, mutants: dict[str, dict | None]) -> TestDiagnosis:
    if reference is None or "cases" not in reference:
        why = (reference or {}).get("error", "no answer")
        return TestDiagnosis(test, note=f"no diagnosis: the reference's answers could not be computed ({why})")
    if learner is None:
        return TestDiagnosis(test, note="no diagnosis: your code did not finish computing this test's cases")
    if "cases" not in learner:
        error = learner.get("error", "")
        if error.startswith(STUB):
            return TestDiagnosis(test, note=f"not written yet: {error.removeprefix(STUB + ': ')}")
        return TestDiagnosis(test, note=f"no diagnosis: {error}")
    mine, ref = learner["cases"], reference["cases"]
    if [c.get("label") for c in mine] != [c["label"] for c in ref]:
        return TestDiagnosis(test, note="no diagnosis: your cases are not the reference's (the suite builds them "
                                        "from your code, and it built others)")
    stubs = [c for c in mine if _is_stub(c["answer"])]
    differing = [i for i, (m, r) in enumerate(zip(mine, ref))
                 if not _is_stub(m["answer"]) and not graded_alike(m["answer"], r["answer"], r["compare"])]
    result = TestDiagnosis(test, cases=len(ref), differing=len(differing),
                           telling=sum(telling(ref[i]["answer"], mine[i]["answer"], ref[i]["compare"]) for i in differing))
    if not differing:
        if stubs:
            result.note = f"not written yet: {stubs[0]['answer'][STUB]}"
        return result
    i = differing[0]
    result.first = CaseView(ref[i]["label"], ref[i]["call"], answer_text(ref[i]["answer"], reference=True),
                            answer_text(mine[i]["answer"]))
    if stubs:
        return result   # a stub answers nothing: no pitfall can be told apart on those cases
    for pid, answers in mutants.items():
        if answers is not None and answers.get(SAME_AS_REFERENCE):
            result.silent.append(pid)
            continue
        if answers is None or "cases" not in answers or len(answers["cases"]) != len(ref):
            continue
        theirs = [c["answer"] for c in answers["cases"]]
        if all(graded_alike(m["answer"], t, r["compare"]) for t, m, r in zip(theirs, mine, ref)):
            result.pitfalls.append(pid)
        elif all(alike(t, r["answer"], r["compare"]) for t, r in zip(theirs, ref)):
            result.silent.append(pid)
    return result


def _is_stub(answer) -> bool:
    return isinstance(answer, dict) and STUB in answer



def _title(module: Module, pid: str) -> str:
    pitfall = next(p for p in module.pitfalls if p.id == pid)
    return f"pitfall {pid} \"{pitfall.title}\""


def _ids(module: Module) -> str:
    ids = [p.id for p in module.pitfalls]
    return f"{ids[0]}-{ids[-1]}" if len(ids) > 2 else ", ".join(ids)


class AnswerStore:
    """The reference's and each mutant's answers per test, on disk, computed when missing."""

    def __init__(self, catalog: Catalog, module: Module) -> None:
        self.catalog = catalog
        self.module = module
        self.root = cache_dir() / module.id
        self.reference_key = _tree_digest(catalog.reference / "tinyllm")
        self.suite_key = _suite_digest(module)
        self.drawing = drawing_tests(module)

    def answers(self, pitfall: Pitfall | None, tests: list[str], timeout: float) -> dict:
        """One package's answers to ``tests`` (a mutant's need the reference's first)."""
        if pitfall is None:
            return self.fill([], tests, timeout)[None]
        return self.fill([pitfall], tests, timeout)[pitfall.id]

    def fill(self, pitfalls: list[Pitfall], tests: list[str], timeout: float, jobs: int = 1) -> dict:
        """The reference's answers (key None) and each pitfall's (key its id), computing what is missing.

        The reference comes first: its record of which functions each test calls tells which tests
        a mutant must run. The mutants' missing answers are then computed in ``jobs`` processes,
        each taking several mutants in turn.
        """
        reference = self._cached(None, tests)
        missing = [t for t in tests if t not in reference]
        if missing:
            reference.update(self._compute([(None, missing)], timeout)[0])
        found: dict = {None: reference}
        todo = []
        for pitfall in pitfalls:
            changed = self._changed(pitfall)
            cached = self._cached(pitfall, tests)
            for test in tests:
                if test not in cached and changed is not None and not _touches(changed, reference.get(test)):
                    cached[test] = {SAME_AS_REFERENCE: True}
            found[pitfall.id] = cached
            missing = [t for t in tests if t not in cached]
            if missing and changed is not None:
                todo.append((pitfall, missing))
        shares = [todo[i::jobs] for i in range(max(1, jobs))]
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for share, results in zip(shares, pool.map(lambda s: self._compute(s, timeout), shares)):
                for (pitfall, _), computed in zip(share, results):
                    found[pitfall.id].update(computed)
        return found

    def _folder(self, pitfall: Pitfall | None) -> Path:
        patch = self._patch(pitfall)
        key = _digest([self.reference_key.encode(), patch.read_bytes() if patch and patch.is_file() else b""])
        return self.root / self.suite_key[:16] / (pitfall.id if pitfall else "reference") / key[:16]

    def _patch(self, pitfall: Pitfall | None) -> Path | None:
        return self.module.root / pitfall.mutant if pitfall else None

    def _cached(self, pitfall: Pitfall | None, tests: list[str]) -> dict:
        folder = self._folder(pitfall)
        found = {}
        for test in tests:
            try:
                found[test] = json.loads(self._file(folder, test).read_text())
            except (OSError, ValueError):
                pass
        return found

    def _file(self, folder: Path, test: str) -> Path:
        """Where a test's answers are kept: a test that draws cases when graded keeps those of
        each grading's seed apart."""
        seed = os.environ.get(DRAWN_SEED_ENV)
        return folder / (f"{test}.drawn-{seed}.json" if seed and test in self.drawing else f"{test}.json")

    def _changed(self, pitfall: Pitfall) -> set[str] | None:
        """The reference's functions the pitfall's patch changes; None when it does not apply."""
        record = self._folder(pitfall) / "changed.json"
        try:
            return set(json.loads(record.read_text()))
        except (OSError, ValueError):
            pass
        package = self._package(self._patch(pitfall), self._folder(pitfall).name)
        if package is None:
            return None
        changed = changed_functions(self.catalog.reference, package)
        record.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(record, json.dumps(sorted(changed)))
        return changed

    def _compute(self, work: list[tuple[Pitfall | None, list[str]]], timeout: float) -> list[dict]:
        """Each package's answers to its tests, in one process, written to the cache as they come."""
        if not work:
            return []
        with tempfile.TemporaryDirectory(prefix="ol-answers-") as tmp:
            jobs, kept = [], []
            for n, (pitfall, tests) in enumerate(work):
                package = self._package(self._patch(pitfall), self._folder(pitfall).name)
                if package is not None:
                    out = Path(tmp) / f"{n}.json"
                    jobs.append({"impl": str(package), "out": str(out), "tests": tests, "trace": pitfall is None})
                    kept.append((pitfall, out))
            limit = timeout * sum(len(j["tests"]) for j in jobs) + WORKER_STARTUP
            _run([sys.executable, "-B", "-m", "grader.child.case_worker", str(self.module.suite), _write_jobs(tmp, jobs)],
                 tmp, limit, worker_env())
            results = {}
            for pitfall, out in kept:
                computed = _read_answers(out)
                folder = self._folder(pitfall)
                folder.mkdir(parents=True, exist_ok=True)
                for test, value in computed.items():
                    _write_atomic(self._file(folder, test), json.dumps(value))
                results[pitfall.id if pitfall else None] = computed
        return [results.get(pitfall.id if pitfall else None, {}) for pitfall, _ in work]

    def _package(self, patch: Path | None, key: str) -> Path | None:
        """The reference, patched, as a folder holding ``tinyllm/``; None when the patch does not apply."""
        folder = cache_dir() / "packages" / key
        if (folder / "tinyllm" / "__init__.py").is_file():
            return folder
        with tempfile.TemporaryDirectory(prefix="ol-pkg-", dir=_ensure(cache_dir())) as tmp:
            copy = Path(tmp) / "solutions"
            shutil.copytree(self.catalog.reference, copy, ignore=shutil.ignore_patterns("__pycache__"))
            if patch is not None and apply_patch(patch, Path(tmp)) is not None:
                return None
            folder.parent.mkdir(parents=True, exist_ok=True)
            try:
                copy.replace(folder)
            except OSError:  # another ol built it at the same time
                pass
        return folder


def drawing_tests(module: Module) -> set[str]:
    """The tests whose cases a grading draws (a suite calls ``drawn`` with the test's name)."""
    return set(re.findall(r'\bdrawn\("(\w+)"\)', module.suite.read_text()))


def _touches(changed: set[str], reference: dict | None) -> bool:
    """Whether a test whose reference run is ``reference`` can see a patch changing ``changed``."""
    if EVERYTHING in changed or reference is None or "called" not in reference:
        return True
    return bool(changed & set(reference["called"]))


def changed_functions(reference: Path, mutant: Path) -> set[str]:
    """``file.py:qualname`` of each function whose code differs between two packages' ``tinyllm/``,
    or ``EVERYTHING`` when code outside every function differs (a constant, an import, a class field)."""
    changed: set[str] = set()
    names = {p.name for p in (reference / "tinyllm").glob("*.py")} | {p.name for p in (mutant / "tinyllm").glob("*.py")}
    for name in sorted(names):
        old, new = (_read(folder / "tinyllm" / name) for folder in (reference, mutant))
        if old == new:
            continue
        try:
            (old_functions, old_rest), (new_functions, new_rest) = _split(old), _split(new)
        except SyntaxError:
            return {EVERYTHING}
        if old_rest != new_rest:
            changed.add(EVERYTHING)
        changed |= {f"{name}:{q}" for q in old_functions.keys() | new_functions.keys()
                    if old_functions.get(q) != new_functions.get(q)}
    return changed


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _split(source: str) -> tuple[dict[str, str], list[str]]:
    """Each function's code by qualname, and the code outside every function (its lines, blank
    lines and comments left out)."""
    lines = source.splitlines()
    functions: dict[str, str] = {}
    inside: set[int] = set()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                functions[qualname] = "\n".join(lines[first - 1:child.end_lineno])
                inside.update(range(first, child.end_lineno + 1))
                visit(child, qualname + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    rest = [line.rstrip() for n, line in enumerate(lines, 1)
            if n not in inside and line.strip() and not line.strip().startswith("#")]
    return functions, rest


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_worker(module: Module, impl: Path, tests: list[str], limit: float) -> dict:
    """The case worker over the one package ``impl``; {} if it hangs, crashes or writes nothing."""
    with tempfile.TemporaryDirectory(prefix="ol-cases-") as tmp:
        out = Path(tmp) / "answers.json"
        jobs = _write_jobs(tmp, [{"impl": str(impl), "out": str(out), "tests": tests, "trace": False}])
        _run([sys.executable, "-B", "-m", "grader.child.case_worker", str(module.suite), jobs], tmp, limit, worker_env())
        return _read_answers(out)


def _write_jobs(folder: str, jobs: list[dict]) -> str:
    path = Path(folder) / "jobs.json"
    path.write_text(json.dumps(jobs))
    return str(path)


def _run(command: list[str], cwd: str, limit: float, env: dict[str, str]) -> None:
    """Run a worker in its own process group, killed with everything it started at ``limit`` seconds."""
    child = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        child.wait(limit)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        child.wait()


def _read_answers(out: Path) -> dict:
    try:
        if out.is_symlink() or (out.exists() and out.stat().st_size > MAX_ANSWERS):
            return {}
        found = json.loads(out.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO)})
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    return env


def _tree_digest(folder: Path) -> str:
    return _digest([p.name.encode() + b"\0" + p.read_bytes() for p in sorted(folder.glob("*.py"))])


def _suite_digest(module: Module) -> str:
    """The suite's folder, the case framework and the module's fixtures: what the answers depend on;
    and, for their last bits, numpy's version and the variables that choose kernels."""
    parts = [p.name.encode() + b"\0" + p.read_bytes() for p in sorted(module.suite.parent.glob("*.py"))]
    parts += [(REPO / "grader" / name).read_bytes() for name in ("cases.py", "child/case_worker.py")]
    parts += [f.sha256.encode() for f in module.fixtures]
    parts.append(json.dumps([version("numpy"), sorted(kernel_env().items())]).encode())
    return _digest(parts)


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
