"""Name the mistake from behaviour: the learner's answers beside each named pitfall's.

Every named pitfall exists as code: a mutant, a patch on the reference. For each failing test,
the test's cases (``grader.cases``) run on the learner's package, on the reference and on every
mutant; a pitfall *coincides* with the learner on that test when its answers equal the learner's
on every case where the learner's part from the reference's. The reference's and the mutants'
answers are cached on disk, keyed by the reference's files, the patch and the suite's files, so
after the first time only the learner's answers are computed (``ol start`` fills the cache in the
background: :mod:`grader.warm`).

How sure a hint is: a coinciding pitfall gives exactly the learner's answers on every differing
case of the tests named (statistical tests: counts a chi-square test of homogeneity cannot tell
apart). A hint is never given from which tests fail alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from grader.cases import alike, brief, clip
from grader.case_worker import STUB
from grader.catalog import Catalog, Module, Pitfall
from grader.mutants import apply_patch
from grader.sandbox import Sandbox, limit_process

CACHE_ENV = "OL_CACHE_DIR"
WORKER_STARTUP = 15.0
MAX_ANSWERS = 32 << 20
REPO = Path(__file__).resolve().parents[1]


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
    pitfalls: list[str] = field(default_factory=list)      # coinciding pitfall ids, most specific first
    silent: list[str] = field(default_factory=list)        # pitfalls that answer as the reference does here
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
        where = f"{self.differing} of {self.cases} cases" if self.cases > 1 else "its one case"
        pitfalls = [p for p in self.pitfalls if p in named]
        if not pitfalls:
            return (f"your answers part from the reference's on {where}, and no named pitfall gives "
                    f"your answers: not one of {_ids(module)}")
        return (f"on {where} where your answers part from the reference's, they coincide with "
                + "; ".join(_title(module, p) for p in pitfalls))


@dataclass
class Diagnosis:
    module: Module
    tests: dict[str, TestDiagnosis]

    def ranked(self) -> list[tuple[Pitfall, list[str]]]:
        """Pitfalls that coincide with the learner on some failing test and contradict none.

        A pitfall contradicts a test when it answers differently from the learner there and also
        differently from the reference (a second, independent mistake explains a test where the
        pitfall answers as the reference does). Those explaining more tests come first; ties keep
        the order each test ranked them in (the one that also passes the most other cases first).
        """
        tests = [d for d in self.tests.values() if d.diagnosable]
        found = []
        for pitfall in self.module.pitfalls:
            agree = [d.test for d in tests if pitfall.id in d.pitfalls]
            contradict = [d.test for d in tests if pitfall.id not in d.pitfalls and pitfall.id not in d.silent]
            if agree and not contradict:
                rank = sum(d.pitfalls.index(pitfall.id) for d in tests if pitfall.id in d.pitfalls)
                found.append((-len(agree), rank, pitfall, agree))
        found.sort(key=lambda f: f[:2])
        return [(pitfall, agree) for *_, pitfall, agree in found]

    def as_json(self, test: str) -> dict | None:
        """The ``diagnosis`` field of one test in ``ol check --json``."""
        d = self.tests.get(test)
        if d is None:
            return None
        named = [p.id for p, _ in self.ranked()]
        return {"summary": d.summary(self.module, named), "pitfalls": [p for p in d.pitfalls if p in named],
                "differing_cases": d.differing, "cases": d.cases}

    def hint_lines(self) -> list[str]:
        ranked = self.ranked()
        lines = [f"Hint: pitfall {pitfall.id}, \"{pitfall.title}\": your answers coincide with it on every case "
                 f"where they part from the reference's in {', '.join(agree)}. Symptom: {pitfall.symptom}."
                 for pitfall, agree in ranked]
        explained = {test for _, agree in ranked for test in agree}
        for d in self.tests.values():
            if d.diagnosable and d.test not in explained:
                lines.append(f"Not a named pitfall: in {d.test} no pitfall of {_ids(self.module)} gives your answers. "
                             f"First differing case {d.first.label!r}:")
                lines += [f"    call:      {clip(d.first.call)}", f"    reference: {d.first.reference}",
                          f"    yours:     {d.first.yours}"]
        return lines


def has_cases(module: Module) -> bool:
    return "\ndef cases_" in module.suite.read_text()


def diagnose(catalog: Catalog, module: Module, impl: Path, tests: list[str], timeout: float,
             jobs: int = 2, sandbox: Sandbox | None = None, env: dict[str, str] | None = None) -> Diagnosis | None:
    """Compare the learner's answers on ``tests`` with the reference's and every pitfall's
    (the learner's computed inside ``sandbox``, when given)."""
    if not tests or not has_cases(module):
        return None
    learner = run_worker(module, impl, tests, timeout * len(tests) + WORKER_STARTUP, sandbox, env)
    store = AnswerStore(catalog, module)
    packages: list[Pitfall | None] = [None, *module.pitfalls]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        found = dict(zip([p.id if p else None for p in packages],
                         pool.map(lambda p: store.answers(p, tests, timeout), packages)))
    reference = found.pop(None)
    return Diagnosis(module, {t: _compare(module, t, learner.get(t), reference.get(t),
                                          {pid: answers.get(t) for pid, answers in found.items()})
                              for t in tests})


def _compare(module: Module, test: str, learner: dict | None, reference: dict | None,
             mutants: dict[str, dict | None]) -> TestDiagnosis:
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
    if [c["label"] for c in mine] != [c["label"] for c in ref]:
        return TestDiagnosis(test, note="no diagnosis: your cases are not the reference's (the suite builds them "
                                        "from your code, and it built others)")
    stubs = [c for c in mine if isinstance(c["answer"], dict) and STUB in c["answer"]]
    differing = [i for i, (m, r) in enumerate(zip(mine, ref))
                 if not (isinstance(m["answer"], dict) and STUB in m["answer"])
                 and not alike(m["answer"], r["answer"], r["compare"])]
    result = TestDiagnosis(test, cases=len(ref), differing=len(differing))
    if not differing:
        if stubs:
            result.note = f"not written yet: {stubs[0]['answer'][STUB]}"
        return result
    i = differing[0]
    result.first = CaseView(ref[i]["label"], ref[i]["call"], _shown(ref[i]["answer"]), _shown(mine[i]["answer"]))
    scored = []
    for pid, answers in mutants.items():
        if answers is None or "cases" not in answers or len(answers["cases"]) != len(ref):
            continue
        theirs = answers["cases"]
        if all(alike(theirs[j]["answer"], ref[j]["answer"], ref[j]["compare"]) for j in differing):
            result.silent.append(pid)
        elif all(alike(mine[j]["answer"], theirs[j]["answer"], ref[j]["compare"]) for j in differing):
            extra = sum(1 for j in range(len(ref)) if j not in differing
                        and not alike(theirs[j]["answer"], ref[j]["answer"], ref[j]["compare"]))
            scored.append((extra, pid))
    result.pitfalls = [pid for _, pid in sorted(scored, key=lambda s: s[0])]
    return result


def _shown(answer) -> str:
    if isinstance(answer, dict) and set(answer) <= {"raises", "message"} and "raises" in answer:
        return f"raises {answer['raises']}: {answer.get('message', '')}"
    return brief(answer)


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

    def answers(self, pitfall: Pitfall | None, tests: list[str], timeout: float) -> dict:
        patch = self.module.root / pitfall.mutant if pitfall else None
        key = _digest([self.reference_key.encode(), patch.read_bytes() if patch and patch.is_file() else b""])
        folder = self.root / self.suite_key[:16] / (pitfall.id if pitfall else "reference") / key[:16]
        found = {}
        for test in tests:
            try:
                found[test] = json.loads((folder / f"{test}.json").read_text())
            except (OSError, ValueError):
                pass
        missing = [t for t in tests if t not in found]
        if not missing:
            return found
        package = self._package(patch, key)
        if package is None:
            return found
        computed = run_worker(self.module, package, missing, timeout * len(missing) + WORKER_STARTUP)
        folder.mkdir(parents=True, exist_ok=True)
        for test, value in computed.items():
            _write_atomic(folder / f"{test}.json", json.dumps(value))
        return {**found, **computed}

    def _package(self, patch: Path | None, key: str) -> Path | None:
        """The reference, patched, as a folder holding ``tinyllm/``; None when the patch does not apply."""
        folder = cache_dir() / "packages" / key[:16]
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


def cache_dir() -> Path:
    """Where answers are kept: ``OL_CACHE_DIR``, else the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tinyllm-course" / "answers"


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_worker(module: Module, impl: Path, tests: list[str], limit: float, sandbox: Sandbox | None = None,
               env: dict[str, str] | None = None) -> dict:
    """The case worker over ``impl`` in its own process group; {} if it hangs, crashes or writes nothing."""
    with tempfile.TemporaryDirectory(prefix="ol-cases-") as tmp:
        out = Path(tmp) / "answers.json"
        command = [sys.executable, "-B", "-m", "grader.case_worker", str(module.suite), str(impl), str(out), *tests]
        child = subprocess.Popen(command, cwd=tmp, env={**worker_env(), **(env or {})}, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=limit_process if sandbox is not None else None)
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
    """The suite's folder, the case framework and the module's fixtures: what the answers depend on."""
    parts = [p.name.encode() + b"\0" + p.read_bytes() for p in sorted(module.suite.parent.glob("*.py"))]
    parts += [Path(__file__).with_name(name).read_bytes() for name in ("cases.py", "case_worker.py")]
    parts += [f.sha256.encode() for f in module.fixtures]
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
