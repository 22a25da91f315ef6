"""``ol mutants``: prove that every named pitfall is caught by the test the catalog says catches it.

Each pitfall's mutant is a patch against the reference. It is applied to a fresh copy of
``solutions/`` and the module's graded suite runs against that copy; the unpatched reference runs
too, as the baseline every test must pass. The kill matrix shows which tests fail for which mutant.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import UsageError
from grader.core.patch import apply_patch
from grader.layout.catalog import Catalog, Module, Pitfall, check_fixtures, load_catalog
from grader.running.run import SuiteRun, run_suite, stop_all

BASELINE = "reference"


@dataclass
class MutantResult:
    id: str                      # the pitfall id, or BASELINE
    pitfall: Pitfall | None
    run: SuiteRun | None
    error: str | None = None     # the patch did not apply

    @property
    def killers(self) -> list[str]:
        return self.run.failed if self.run else []

    @property
    def verdict(self) -> str:
        if self.error:
            return f"not run: {self.error}"
        if self.pitfall is None:
            return "passes every test" if self.run.all_passed else f"FAILS {', '.join(self.killers)}"
        if self.pitfall.caught_by in self.killers:
            others = len(self.killers) - 1
            return f"killed by its named test{f' (+{others} other)' if others == 1 else f' (+{others} others)' if others else ''}"
        if self.killers:
            return f"ESCAPES its named test {self.pitfall.caught_by}: killed only by {', '.join(self.killers)}"
        return "SURVIVED: no test fails"

    @property
    def ok(self) -> bool:
        if self.error or self.run is None:
            return False
        if self.pitfall is None:
            return self.run.all_passed
        return self.pitfall.caught_by in self.killers


def mutants(module_id: str, jobs: int = 2) -> int:
    """Run every named mutant of ``module_id`` (or of every module, for ``all``); 0 when all are killed by their named tests."""
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {jobs}")
    catalog = load_catalog()
    modules = list(catalog.modules.values()) if module_id.lower() == "all" else [catalog.get(module_id)]
    ok = True
    for module in modules:
        check_fixtures(module)
        if not module.pitfalls:
            print(f"{module.id} names no pitfalls; nothing to run.\n")
            continue
        ok = _run_module(catalog, module, jobs) and ok
    return 0 if ok else 1


def kill_matrix(module: Module, results: list[MutantResult]) -> str:
    """Mutants down, tests across (numbered, legend below). X: the test fails; [ ]: the named test."""
    names = module.test_names
    width = max(len(r.id) for r in results)
    header = " " * width + " " + "".join(f"{i + 1:>3}" for i in range(len(names)))
    lines = [header]
    for r in results:
        cells = []
        for name in names:
            outcome = r.run.outcomes.get(name) if r.run else None
            mark = "?" if outcome is None else "T" if outcome.timed_out else "X" if outcome.status != "pass" else "."
            named = r.pitfall is not None and r.pitfall.caught_by == name
            cells.append(f"[{mark}]" if named else f" {mark} ")
        lines.append((f"{r.id:<{width}} " + "".join(cells)).rstrip())
    lines.append("")
    lines += [f"{i + 1:>3} {name}" for i, name in enumerate(names)]
    lines.append("X the test fails, T it timed out, . it passes, [ ] the pitfall's named test")
    return "\n".join(lines)


def _run_module(catalog: Catalog, module: Module, jobs: int) -> bool:
    print(f"{module.id}: {len(module.pitfalls)} mutants and the reference, {jobs} at a time", flush=True)
    started = time.monotonic()
    tasks = [(BASELINE, None)] + [(p.id, p) for p in module.pitfalls]
    results: dict[str, MutantResult] = {}
    progress = _Progress(len(tasks))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_run_one, catalog, module, pitfall): ident for ident, pitfall in tasks}
        try:
            for future in as_completed(futures):
                result = future.result()
                results[result.id] = result
                progress.done(result)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            stop_all()
            raise
    progress.close()
    ordered = [results[ident] for ident, _ in tasks]
    print()
    print(kill_matrix(module, ordered))
    print()
    width = max(len(r.id) for r in ordered)
    for r in ordered:
        title = f"{r.pitfall.title}: " if r.pitfall else ""
        print(f"  {r.id:<{width}}  {title}{r.verdict}")
    mutant_results = [r for r in ordered if r.pitfall is not None]
    killed = sum(1 for r in mutant_results if r.ok)
    print(f"\n{killed} of {len(mutant_results)} mutants killed by their named tests "
          f"({time.monotonic() - started:.1f} s).")
    print()
    return all(r.ok for r in ordered)


def _run_one(catalog: Catalog, module: Module, pitfall: Pitfall | None) -> MutantResult:
    ident = pitfall.id if pitfall else BASELINE
    with tempfile.TemporaryDirectory(prefix=f"ol-mutant-{ident}-") as tmp:
        copy = Path(tmp)
        shutil.copytree(catalog.reference, copy / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
        if pitfall is not None:
            error = apply_patch(module.root / pitfall.mutant, copy)
            if error:
                return MutantResult(ident, pitfall, None, error)
        return MutantResult(ident, pitfall, run_suite(module, copy / "solutions"))


class _Progress:
    """One line that counts finished runs on a terminal; one line per finished run otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self.tty = sys.stdout.isatty()

    def done(self, result: MutantResult) -> None:
        self.count += 1
        line = f"  [{self.count}/{self.total}] {result.id}: {result.verdict}"
        if self.tty:
            print(f"\r\033[K{line}", end="", flush=True)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.tty:
            print()
