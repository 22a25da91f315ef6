"""The module catalog: one TOML file per module under ``course/modules/`` (schema in its README).

Everything ol knows about a module comes from here. Paths in the catalog are relative to the
course root: the repository holding ``course/``, ``fixtures/`` and ``solutions/``, or the folder
named by ``OL_COURSE_ROOT``.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.core.errors import GraderError, UsageError
from grader.core.paths import course_root

REFERENCE_DIR = "solutions"  # under the course root: the reference tinyllm package
KINDS = ("unit", "differential", "boundary", "statistical", "property", "fault", "conformance")


@dataclass(frozen=True)
class Test:
    name: str
    kind: str
    checks: str
    why: str
    diff: str
    points: float = 1.0           # what passing it is worth in a grade (ol grade, the platform exports)
    task_id: int | None = None    # the exercise task it belongs to (exercism's results v3 ``task_id``)

    @property
    def function(self) -> str:
        """The pytest function that implements this test."""
        return f"test_{self.name}"


@dataclass(frozen=True)
class Fixture:
    path: str
    sha256: str
    oracle: str


@dataclass(frozen=True)
class Pitfall:
    id: str
    title: str
    symptom: str
    caught_by: str
    mutant: str


@dataclass(frozen=True)
class Module:
    id: str
    title: str
    card: str
    needs: tuple[str, ...]
    learner_files: tuple[str, ...]
    given_files: tuple[str, ...]
    suite: Path
    stubs: Path
    timeout: float
    tests: tuple[Test, ...]
    fixtures: tuple[Fixture, ...]
    pitfalls: tuple[Pitfall, ...]
    root: Path

    @property
    def reference(self) -> Path:
        """The folder holding the reference ``tinyllm`` package."""
        return self.root / REFERENCE_DIR

    @property
    def test_names(self) -> list[str]:
        return [t.name for t in self.tests]

    def test(self, name: str) -> Test:
        return next(t for t in self.tests if t.name == name)


@dataclass(frozen=True)
class Catalog:
    root: Path
    modules: dict[str, Module]

    @property
    def reference(self) -> Path:
        """The folder holding the reference ``tinyllm`` package."""
        return self.root / REFERENCE_DIR

    def get(self, module_id: str) -> Module:
        """The module named ``module_id`` (any case), or a usage error listing the known ones."""
        for known, module in self.modules.items():
            if known.lower() == module_id.lower():
                return module
        raise UsageError(f"unknown module {module_id!r}; known modules: {', '.join(self.modules) or 'none'}")

    def needs_of(self, module: Module) -> list[Module]:
        """Every module ``module`` needs, directly or through another, dependencies first."""
        order: list[Module] = []

        def visit(m: Module, path: tuple[str, ...]) -> None:
            for need in m.needs:
                if need in path:
                    raise GraderError(f"the catalog's needs form a cycle: {' -> '.join(path + (need,))}")
                dep = self.modules[need]
                visit(dep, path + (need,))
                if dep not in order:
                    order.append(dep)

        visit(module, (module.id,))
        return order

    def owner_of(self, filename: str) -> Module | None:
        """The module whose learner writes ``filename``, if any."""
        return next((m for m in self.modules.values() if filename in m.learner_files), None)


def load_catalog(root: Path | None = None) -> Catalog:
    """Read every ``course/modules/*.toml`` under ``root`` (default: :func:`course_root`)."""
    root = root or course_root()
    modules: dict[str, Module] = {}
    for path in sorted((root / "course" / "modules").glob("*.toml")):
        module = _module_from(path, root)
        if module.id in modules:
            raise GraderError(f"{path}: module {module.id} is described twice")
        modules[module.id] = module
    for module in modules.values():
        for need in module.needs:
            if need not in modules:
                raise GraderError(f"module {module.id} needs {need}, which has no catalog file")
    return Catalog(root, dict(sorted(modules.items(), key=lambda kv: _sort_key(kv[0]))))


def check_fixtures(module: Module) -> None:
    """Raise :class:`GraderError` naming the graded suite if it is missing, or the first fixture
    that is missing or not the catalogued bytes."""
    if not module.suite.is_file():
        raise GraderError(f"the graded suite of {module.id}, {module.suite.relative_to(module.root)}, is missing")
    for fixture in module.fixtures:
        path = module.root / fixture.path
        if not path.is_file():
            raise GraderError(f"fixture {fixture.path} is missing (regenerate it with {fixture.oracle})")
        actual = hashlib.sha256(path.read_bytes()).hexdigest()
        if actual != fixture.sha256:
            raise GraderError(f"fixture {fixture.path} does not match its catalog entry: sha256 {actual}, "
                              f"expected {fixture.sha256} (restore it, or regenerate it with {fixture.oracle})")


def _sort_key(module_id: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in module_id.replace(".", " ").split())


def _module_from(path: Path, root: Path) -> Module:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise GraderError(f"cannot read the catalog file {path}: {err}") from err
    where = str(path.relative_to(root))
    get = _Getter(data, where)
    tests = tuple(_test_from(t, f"{where} [[test]] {i + 1}") for i, t in enumerate(get.tables("test")))
    names = {t.name for t in tests}
    pitfalls = tuple(_pitfall_from(p, f"{where} [[pitfall]] {i + 1}") for i, p in enumerate(get.tables("pitfall")))
    for p in pitfalls:
        if p.caught_by not in names:
            raise GraderError(f"{where}: pitfall {p.id} is caught by {p.caught_by!r}, which is not one of its tests")
    return Module(
        id=get.text("id"), title=get.text("title"), card=get.text("card", ""),
        needs=tuple(get.texts("needs")), learner_files=tuple(get.texts("learner_files")),
        given_files=tuple(get.texts("given_files")), suite=root / get.text("tests"),
        stubs=root / get.text("stubs"), timeout=float(get.number("timeout", 10)), tests=tests,
        fixtures=tuple(_fixture_from(f, f"{where} [[fixture]] {i + 1}") for i, f in enumerate(get.tables("fixture"))),
        pitfalls=pitfalls, root=root,
    )


def _test_from(data: dict, where: str) -> Test:
    get = _Getter(data, where)
    kind = get.text("kind")
    if kind not in KINDS:
        raise GraderError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    points = float(get.number("points", 1))
    if not points >= 0:
        raise GraderError(f"{where}: 'points' must be a number >= 0, got {points:g}")
    task_id = get.number("task_id", None)
    if task_id is not None and (not isinstance(task_id, int) or task_id < 1):
        raise GraderError(f"{where}: 'task_id' must be a whole number >= 1, got {task_id!r}")
    return Test(get.text("name"), kind, get.text("checks", ""), get.text("why", ""), get.text("diff", ""),
                points, task_id)


def _fixture_from(data: dict, where: str) -> Fixture:
    get = _Getter(data, where)
    return Fixture(get.text("path"), get.text("sha256"), get.text("oracle", ""))


def _pitfall_from(data: dict, where: str) -> Pitfall:
    get = _Getter(data, where)
    return Pitfall(get.text("id"), get.text("title"), get.text("symptom", ""), get.text("caught_by"), get.text("mutant", ""))


class _Getter:
    """Typed access to one TOML table; a missing or mistyped key is a GraderError naming it."""

    _MISSING = object()

    def __init__(self, data: dict, where: str) -> None:
        self.data = data
        self.where = where

    def _get(self, key: str, default: Any, types: tuple[type, ...], what: str) -> Any:
        value = self.data.get(key, self._MISSING)
        if value is self._MISSING:
            if default is self._MISSING:
                raise GraderError(f"{self.where}: the key {key!r} is missing")
            return default
        if not isinstance(value, types) or isinstance(value, bool):
            raise GraderError(f"{self.where}: {key!r} must be {what}, got {value!r}")
        return value

    def text(self, key: str, default: Any = _MISSING) -> str:
        return self._get(key, default, (str,), "a string")

    def number(self, key: str, default: Any = _MISSING) -> float:
        return self._get(key, default, (int, float), "a number")

    def texts(self, key: str) -> list[str]:
        values = self._get(key, [], (list,), "a list of strings")
        if not all(isinstance(v, str) for v in values):
            raise GraderError(f"{self.where}: {key!r} must be a list of strings, got {values!r}")
        return values

    def tables(self, key: str) -> list[dict]:
        values = self._get(key, [], (list,), "an array of tables")
        if not all(isinstance(v, dict) for v in values):
            raise GraderError(f"{self.where}: {key!r} must be an array of tables")
        return values
