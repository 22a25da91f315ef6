"""The learner's stubs, generated from the reference: ``course/stubs/`` is this module's output.

Markers in ``solutions/tinyllm/<file>.py`` say what the learner writes (whole-line comments, each
closed before the next opens):

``# BEGIN SOLUTION`` ... ``# END SOLUTION``
    The rest of a function's body, after its docstring. The stub keeps the ``def`` line and the
    docstring (one text for both readers) and puts, at the marker's indent, a ``raise
    NotImplementedError`` naming the file, the function, the module, its card and the card section
    (from the last ``# --- <section> <title>`` banner above the marker; the module and card from
    the catalog entry whose ``learner_files`` holds the file).
``# BEGIN SOLUTION NO PROMPT`` ... ``# END SOLUTION``
    Solution-only code, such as a validation helper: dropped from the stub, with the blank lines
    after it.
``# BEGIN PROMPT`` ... ``# END PROMPT``
    Comment lines for the learner only (what is given, what to write first): kept in the stub,
    without the markers.

Everything else is given code and is copied as it is, so the stub's given code is the reference's.
``ol stubs`` (``grader/commands/stubs.py``) writes the files; ``tests/test_stubs.py`` holds
``course/stubs/`` to them byte for byte.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import GraderError
from grader.layout.catalog import Catalog, Module

BEGIN_SOLUTION = "# BEGIN SOLUTION"
BEGIN_NO_PROMPT = "# BEGIN SOLUTION NO PROMPT"
END_SOLUTION = "# END SOLUTION"
BEGIN_PROMPT = "# BEGIN PROMPT"
END_PROMPT = "# END PROMPT"
MARKERS = (BEGIN_SOLUTION, BEGIN_NO_PROMPT, END_SOLUTION, BEGIN_PROMPT, END_PROMPT)
ENDS = {BEGIN_SOLUTION: END_SOLUTION, BEGIN_NO_PROMPT: END_SOLUTION, BEGIN_PROMPT: END_PROMPT}
# A card-section banner: "# --- 2.4 Rollback ------".
BANNER = re.compile(r"#\s*---\s+(\d+(?:\.\d+)*)\s")
RAISE = "raise NotImplementedError("


@dataclass(frozen=True)
class Region:
    """One marked block: ``begin`` and ``end`` are the 0-based indexes of its marker lines."""

    kind: str
    begin: int
    end: int
    indent: str


@dataclass(frozen=True)
class StubTask:
    """One function the learner writes, as its stub's message names it."""

    qualname: str
    section: str


def regions(lines: list[str], where: str) -> list[Region]:
    """The marked blocks of ``lines`` in order; unclosed, nested or stray markers are refused."""
    found: list[Region] = []
    open_at: tuple[str, int, str] | None = None
    for i, line in enumerate(lines):
        marker = line.strip()
        if marker not in MARKERS:
            if marker.startswith("# BEGIN") or marker.startswith("# END"):
                raise GraderError(f"{where}:{i + 1}: unknown marker {marker!r}; the markers are {', '.join(MARKERS)}")
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if marker in ENDS:
            if open_at is not None:
                raise GraderError(f"{where}:{i + 1}: {marker!r} inside the block opened at line {open_at[1] + 1}")
            open_at = (marker, i, indent)
        elif open_at is None or ENDS[open_at[0]] != marker:
            opened = f"the block opened at line {open_at[1] + 1} ({open_at[0]!r})" if open_at else "no open block"
            raise GraderError(f"{where}:{i + 1}: {marker!r} closes {opened}")
        else:
            found.append(Region(open_at[0], open_at[1], i, open_at[2]))
            open_at = None
    if open_at is not None:
        raise GraderError(f"{where}:{open_at[1] + 1}: {open_at[0]!r} is never closed")
    return found


def _functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function with its qualified name (``Class.method``), outermost first."""
    out: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + node.name, node))
                visit(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return out


def _enclosing(functions: list, region: Region, where: str) -> str:
    """The qualified name of the innermost function whose body the region ends."""
    line = region.begin + 1  # 1-based, as ast counts
    inside = [(name, fn) for name, fn in functions if _body_start(fn) <= line <= fn.end_lineno]
    if not inside:
        raise GraderError(f"{where}:{line}: {BEGIN_SOLUTION!r} outside a function body")
    name, fn = inside[-1]
    if region.end + 1 <= fn.end_lineno:
        raise GraderError(f"{where}:{region.end + 1}: the solution block must end {name}'s body "
                          f"(it ends at line {fn.end_lineno})")
    return name


def _body_start(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The first line of ``fn`` a solution block may start at: after the docstring, or after the ``def``."""
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno + 1
    return fn.lineno + 1


def _section(lines: list[str], before: int, where: str) -> str:
    """The card section of the last banner above line ``before``."""
    for line in reversed(lines[:before]):
        match = BANNER.match(line)
        if match:
            return match.group(1)
    raise GraderError(f"{where}:{before + 1}: no numbered '# --- <section> <title>' banner above this solution "
                      "block, so its stub cannot name the card section")


def not_written(indent: str, stem: str, qualname: str, module_id: str, card: str, section: str) -> list[str]:
    """The stub's body: one ``raise NotImplementedError`` over two lines, the second under the first quote."""
    return [f'{indent}{RAISE}"{stem}.{qualname} ({module_id}): not written yet -- "',
            f'{indent}{" " * len(RAISE)}"see {card} section {section}")']


def make_stub(reference: str, file_name: str, module_id: str, card: str,
              card_sections: set[str] | None = None) -> tuple[str, list[StubTask]]:
    """The stub of ``file_name`` made from the reference's text, and the functions it leaves to write.

    ``card_sections``, when given, are the section numbers the card has: a banner naming another
    is refused, so a stub never points at a section that does not exist.
    """
    where = f"solutions/tinyllm/{file_name}"
    lines = reference.splitlines()
    marked = regions(lines, where)
    functions = _functions(ast.parse(reference, filename=where))
    stem = file_name.removesuffix(".py")
    out: list[str] = []
    tasks: list[StubTask] = []
    done = 0
    skip_blank = False
    for region in marked:
        out += lines[done:region.begin] if not skip_blank else _after_blanks(lines[done:region.begin])
        skip_blank = False
        body = lines[region.begin + 1:region.end]
        if region.kind == BEGIN_SOLUTION:
            qualname = _enclosing(functions, region, where)
            section = _section(lines, region.begin, where)
            if card_sections is not None and section not in card_sections:
                raise GraderError(f"{where}: the banner above {qualname} names section {section}, which {card} "
                                  f"does not have (it has {', '.join(sorted(card_sections))})")
            out += not_written(region.indent, stem, qualname, module_id, card, section)
            tasks.append(StubTask(qualname, section))
        elif region.kind == BEGIN_PROMPT:
            stray = [region.begin + 2 + j for j, line in enumerate(body) if not line.strip().startswith("#")]
            if stray:
                raise GraderError(f"{where}:{stray[0]}: a prompt block holds comment lines only")
            out += body
        else:
            skip_blank = True
        done = region.end + 1
    out += lines[done:] if not skip_blank else _after_blanks(lines[done:])
    stub = "\n".join(out) + "\n"
    try:
        ast.parse(stub)
    except SyntaxError as err:
        raise GraderError(f"the stub made from {where} is not valid Python (line {err.lineno}: {err.msg}); "
                          "check its markers") from err
    return stub, tasks


def _after_blanks(lines: list[str]) -> list[str]:
    """``lines`` without their leading blank lines (those that followed a dropped block)."""
    for i, line in enumerate(lines):
        if line.strip():
            return lines[i:]
    return []


def card_sections(card: Path) -> set[str]:
    """The numbered sections of a card: ``2``, ``2.1``, ... from its ``## 2.`` and ``### 2.1`` headings."""
    numbers = set()
    for line in card.read_text().splitlines():
        match = re.match(r"#{2,6}\s+(\d+(?:\.\d+)*)\.?\s", line)
        if match:
            numbers.add(match.group(1))
    return numbers


def written_functions(module: Module) -> dict[str, set[str]]:
    """The functions the learner writes, by bare name (as a stack frame names them), in each file
    of ``module``: its learner files' from the reference's solution blocks, none in its given files."""
    written: dict[str, set[str]] = {name: set() for name in module.given_files}
    for name in module.learner_files:
        _, tasks = make_stub((module.reference / "tinyllm" / name).read_text(), name, module.id, module.card)
        written[name] = {task.qualname.rsplit(".", 1)[-1] for task in tasks}
    return written


def module_stubs(catalog: Catalog, module: Module) -> dict[Path, tuple[str, list[StubTask]]]:
    """Each learner file's stub path in ``course/stubs/`` and what the reference makes of it."""
    sections = card_sections(catalog.root / module.card)
    made = {}
    for name in module.learner_files:
        reference = (catalog.reference / "tinyllm" / name).read_text()
        made[module.stubs / name] = make_stub(reference, name, module.id, module.card, sections)
    return made
