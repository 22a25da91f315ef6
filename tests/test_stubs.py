"""``course/stubs/`` is generated from the reference's markers (``grader/layout/stubs.py``).

The committed stubs are what ``ol stubs`` writes, byte for byte; each stub's given code and every
docstring are the reference's; each ``NotImplementedError`` names the file, the function, the
module, its card and a section that card has. The marker rules are tested on small sources.
"""

from __future__ import annotations

import ast
import re
import shutil

import pytest
from ol_helpers import ROOT, ol

from grader.core.errors import GraderError
from grader.layout.catalog import load_catalog
from grader.layout.stubs import card_sections, make_stub, module_stubs

CATALOG = load_catalog()
FILES = [(module, name) for module in CATALOG.modules.values() for name in module.learner_files]
IDS = [f"{module.id}/{name}" for module, name in FILES]


def reference_text(name: str) -> str:
    return (CATALOG.reference / "tinyllm" / name).read_text()


def definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """Every class, function and method by qualified name (not the functions inside functions)."""
    found: dict[str, ast.AST] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[prefix + node.name] = node
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


def is_stub_body(fn: ast.AST) -> bool:
    body = fn.body[1:] if ast.get_docstring(fn, clean=False) is not None else fn.body
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and isinstance(body[0].exc, ast.Call)
            and getattr(body[0].exc.func, "id", None) == "NotImplementedError")


def class_without_methods(node: ast.ClassDef) -> str:
    """A class's dump without its methods, which are compared one by one."""
    fields = {f: getattr(node, f) for f in node._fields}
    fields["body"] = [b for b in node.body if not isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return ast.dump(ast.ClassDef(**fields))


@pytest.mark.parametrize("module, name", FILES, ids=IDS)
def test_every_stub_is_what_the_reference_makes(module, name):
    made = module_stubs(CATALOG, module)[module.stubs / name][0]
    committed = (module.stubs / name).read_text()
    assert committed == made, (f"{module.stubs / name} differs from what solutions/tinyllm/{name} makes: "
                               "edit the reference (its markers), then run ol stubs")


@pytest.mark.parametrize("module, name", FILES, ids=IDS)
def test_the_stub_gives_the_reference_code_and_docstrings(module, name):
    ref_tree = ast.parse(reference_text(name))
    stub_tree = ast.parse((module.stubs / name).read_text())
    assert ast.get_docstring(stub_tree, clean=False) == ast.get_docstring(ref_tree, clean=False)
    top = [ast.dump(n) for n in ref_tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert [ast.dump(n) for n in stub_tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))] == top
    ref, stub = definitions(ref_tree), definitions(stub_tree)
    dropped = set(ref) - set(stub)
    assert not set(stub) - set(ref), "the stub defines what the reference does not"
    assert all(q.rsplit(".", 1)[-1].startswith("_") for q in dropped), f"a public name is missing: {dropped}"
    to_write = [q for q, node in stub.items() if not isinstance(node, ast.ClassDef) and is_stub_body(node)]
    assert to_write, f"{name}'s stub leaves nothing to write"
    for qualname, node in stub.items():
        assert ast.get_docstring(node, clean=False) == ast.get_docstring(ref[qualname], clean=False), qualname
        if isinstance(node, ast.ClassDef):
            assert class_without_methods(node) == class_without_methods(ref[qualname]), qualname
        elif qualname not in to_write:
            assert ast.dump(node) == ast.dump(ref[qualname]), f"{qualname} is given but differs from the reference"
        else:
            signature = [node.args, node.returns, *node.decorator_list]
            reference = [ref[qualname].args, ref[qualname].returns, *ref[qualname].decorator_list]
            assert [ast.dump(x) if x else x for x in signature] == [ast.dump(x) if x else x for x in reference], qualname


@pytest.mark.parametrize("module, name", FILES, ids=IDS)
def test_each_stub_names_file_function_module_card_and_section(module, name):
    sections = card_sections(CATALOG.root / module.card)
    tree = ast.parse((module.stubs / name).read_text())
    stem = name.removesuffix(".py")
    pattern = re.compile(rf"{re.escape(stem)}\.(\S+) \({re.escape(module.id)}\): not written yet -- "
                         rf"see {re.escape(module.card)} section (\S+)")
    for qualname, node in definitions(tree).items():
        if isinstance(node, ast.ClassDef) or not is_stub_body(node):
            continue
        message = ast.literal_eval(node.body[-1].exc.args[0])
        match = pattern.fullmatch(message)
        assert match, message
        assert match.group(1) == qualname and match.group(2) in sections, message


@pytest.mark.parametrize("module, name", FILES, ids=IDS)
def test_a_docstring_citing_its_own_section_cites_its_banner_s(module, name):
    """The banner is a function's one home for its section: a "(section 2.4)" in the docstring of a
    function the learner writes must say the same, or the card was renumbered behind it."""
    reference = reference_text(name)
    tasks = {t.qualname: t.section for t in make_stub(reference, name, module.id, module.card)[1]}
    cited = 0
    for qualname, node in definitions(ast.parse(reference)).items():
        for section in re.findall(r"\(section (\d+(?:\.\d+)*)\)", ast.get_docstring(node) or ""):
            if qualname in tasks:
                cited += 1
                assert section == tasks[qualname], f"{qualname}: its docstring cites {section}, its banner {tasks[qualname]}"
    assert cited or module.id == "L10.1", "no docstring cites its section: is the pattern still right?"


def test_ol_stubs_check_names_a_stale_stub_and_ol_stubs_rewrites_it(tmp_path):
    for folder in ("course", "solutions"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    stub = tmp_path / "course" / "stubs" / "L10.8" / "spec.py"
    made = stub.read_text()
    stub.write_text(made.replace("section 2.4", "section 2.3"))
    env = {"OL_COURSE_ROOT": str(tmp_path)}
    stale = ol("stubs", "--check", env=env)
    assert stale.code == 1 and "course/stubs/L10.8/spec.py: not what solutions/tinyllm/spec.py makes" in stale.out
    assert "course/stubs/L10.9/trees.py: up to date (14 functions to write)" in stale.out
    assert stub.read_text() != made, "--check wrote"
    wrote = ol("stubs", "L10.8", env=env)
    assert wrote.code == 0 and "course/stubs/L10.8/spec.py: written (12 functions to write)" in wrote.out
    assert stub.read_text() == made
    assert ol("stubs", "l10.8", "--check", env=env).code == 0


# --- the marker rules on small sources ------------------------------------------------------

SOURCE = '''"""Doc."""

# BEGIN PROMPT
# Yours: f and C.g.
# END PROMPT

import math

# --- 2.3 Things ------

# BEGIN SOLUTION NO PROMPT
def _helper(x):
    return x
# END SOLUTION


def f(x):
    """F's rule."""
    # BEGIN SOLUTION
    def inner(y):
        return y
    return inner(_helper(x))
    # END SOLUTION


class C:
    # BEGIN SOLUTION NO PROMPT
    def _check(self):
        pass
    # END SOLUTION

    def g(self):
        # BEGIN SOLUTION
        return math.pi
        # END SOLUTION

    def given(self):
        return 1
'''

EXPECTED = '''"""Doc."""

# Yours: f and C.g.

import math

# --- 2.3 Things ------

def f(x):
    """F's rule."""
    raise NotImplementedError("things.f (L1.1): not written yet -- "
                              "see course/L1.1.md section 2.3")


class C:
    def g(self):
        raise NotImplementedError("things.C.g (L1.1): not written yet -- "
                                  "see course/L1.1.md section 2.3")

    def given(self):
        return 1
'''


def stub_of(source: str, sections: set[str] | None = None) -> str:
    return make_stub(source, "things.py", "L1.1", "course/L1.1.md", sections)[0]


def test_markers_make_the_expected_stub():
    text, tasks = make_stub(SOURCE, "things.py", "L1.1", "course/L1.1.md", {"2", "2.3"})
    assert text == EXPECTED
    assert [(t.qualname, t.section) for t in tasks] == [("f", "2.3"), ("C.g", "2.3")]


def test_a_solution_block_takes_the_last_banner_above_it():
    source = SOURCE.replace("class C:", "# --- 2.4 More ---\n\nclass C:")
    assert '"see course/L1.1.md section 2.4")' in stub_of(source)
    assert '"see course/L1.1.md section 2.3")' in stub_of(source)


@pytest.mark.parametrize("broken, complaint", [
    (SOURCE.replace("    # END SOLUTION\n\n\nclass C", "\n\nclass C"), "inside the block opened"),
    (SOURCE.replace("# END PROMPT", "# END SOLUTION"), "closes the block opened at line 3"),
    (SOURCE + "# END SOLUTION\n", "closes no open block"),
    (SOURCE + "# BEGIN SOLUTION\n", "is never closed"),
    (SOURCE.replace("# BEGIN PROMPT", "# BEGIN SOLUTIONS"), "unknown marker"),
    (SOURCE.replace("# --- 2.3 Things ------", "# --- Things ------"), "no numbered"),
    (SOURCE.replace("# Yours: f and C.g.", "x = 1"), "comment lines only"),
    (SOURCE.replace("import math\n", "# BEGIN SOLUTION\nimport math\n# END SOLUTION\n"), "outside a function body"),
    (SOURCE.replace("        return math.pi\n        # END SOLUTION\n",
                    "        return math.pi\n        # END SOLUTION\n        return 2\n"), "must end C.g's body"),
])
def test_bad_markers_are_refused_with_the_line(broken, complaint):
    with pytest.raises(GraderError, match=re.escape(complaint)):
        stub_of(broken)


def test_a_banner_naming_a_section_the_card_lacks_is_refused():
    with pytest.raises(GraderError, match="names section 2.3, which course/L1.1.md does not have"):
        stub_of(SOURCE, {"2", "2.1"})


def test_card_sections_reads_numbered_headings(tmp_path):
    card = tmp_path / "card.md"
    card.write_text("# L1.1 Title\n## 2. Principles\n### 2.1 One\n#### 2.1.1 Deep\n## Key takeaways\n"
                    "```python\n# 3.1 in a code block is a comment\n```\n")
    assert card_sections(card) == {"2", "2.1", "2.1.1"}
