"""notebooks/course/: which tinyllm a notebook runs, the short messages, the ol check table."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from grader.core.protocol import REMEMBER_ENV

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_SPEC = ROOT / "solutions" / "tinyllm" / "spec.py"
STUB_SPEC = ROOT / "course" / "stubs" / "L10.8" / "spec.py"


def _load_course():
    """The notebooks' ``course`` package, imported as the notebooks import it (their folder on the path)."""
    sys.path.insert(0, str(ROOT / "notebooks"))
    try:
        import course
    finally:
        sys.path.remove(str(ROOT / "notebooks"))
    assert Path(course.__file__).parent == ROOT / "notebooks" / "course", course.__file__
    return course


course = _load_course()


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """Each test may import a scratch tinyllm; put the reference the other tests use back after."""
    saved_modules = {n: m for n, m in sys.modules.items() if n == "tinyllm" or n.startswith("tinyllm.")}
    saved_path = list(sys.path)
    monkeypatch.delenv("OL_WORKSPACE", raising=False)
    monkeypatch.delenv("JPY_PARENT_PID", raising=False)
    monkeypatch.setenv(REMEMBER_ENV, "")  # the developer's own last workspace stays out of it
    yield
    for name in [n for n in sys.modules if n == "tinyllm" or n.startswith("tinyllm.")]:
        del sys.modules[name]
    sys.modules.update(saved_modules)
    sys.path[:] = saved_path
    course.reset()


def make_workspace(tmp_path: Path, spec_text: str) -> Path:
    (tmp_path / "tinyllm").mkdir(parents=True)
    (tmp_path / "tinyllm" / "spec.py").write_text(spec_text)
    return tmp_path


def on_stubs(tmp_path: Path, monkeypatch, prompt_lookup: str | None = None) -> Path:
    """A workspace on spec.py's stubs that OL_WORKSPACE names; ``prompt_lookup`` written if given."""
    ws = make_workspace(tmp_path, STUB_SPEC.read_text())
    if prompt_lookup is not None:
        write_function(ws / "tinyllm" / "spec.py", "prompt_lookup", prompt_lookup)
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    return ws


def test_reference_runs_when_no_module_is_started(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    tl = course.use()
    assert tl.running.source == "reference"
    assert "ol start L10.8" in capsys.readouterr().out
    assert Path(tl.spec.__file__).read_text() == REFERENCE_SPEC.read_text()
    assert tl.spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1) == [7, 8, 5]


def test_a_started_workspace_runs_the_learners_spec_and_reference_dependencies(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, REFERENCE_SPEC.read_text() + '\nWHOSE = "learner"\n')
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    tl = course.use()
    assert tl.running.learner and tl.running.learner_file == ws / "tinyllm" / "spec.py"
    assert tl.spec.WHOSE == "learner"
    assert Path(tl.sampling.__file__).read_text() == (ROOT / "solutions/tinyllm/sampling.py").read_text()
    assert sys.modules["tinyllm.spec"] is tl.spec


def test_the_switch_in_the_first_cell_chooses_the_reference(tmp_path, monkeypatch, capsys):
    ws = make_workspace(tmp_path, REFERENCE_SPEC.read_text() + '\nWHOSE = "learner"\n')
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    tl = course.use(reference=True)
    assert tl.running.source == "reference" and not hasattr(tl.spec, "WHOSE")
    assert "you chose it in the first cell" in capsys.readouterr().out


def test_rerunning_use_imports_an_edited_file_afresh(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, REFERENCE_SPEC.read_text() + "\nVERSION = 1\n")
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    assert course.use().spec.VERSION == 1
    (ws / "tinyllm" / "spec.py").write_text(REFERENCE_SPEC.read_text() + "\nVERSION = 2\n")
    assert course.use().spec.VERSION == 2
    assert sum("tinyllm-notebook-" in p for p in sys.path) == 1


def test_a_spec_that_does_not_import_falls_back_to_the_reference_and_says_where(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, "def prompt_lookup(ctx:\n")
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    tl = course.use()
    assert tl.running.source == "reference"
    assert "does not import (line 1)" in tl.running.why and "SyntaxError" in tl.running.why


def test_an_unwritten_function_shows_one_line_naming_it(tmp_path, monkeypatch, capsys):
    ws = on_stubs(tmp_path, monkeypatch)
    tl = course.use()
    capsys.readouterr()
    with course.learner_code():
        tl.spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1)
        raise AssertionError("not reached: the stub raises first")
    shown = capsys.readouterr().out.strip()
    assert shown.startswith("`prompt_lookup` is not written yet")
    assert "section 2.1" in shown and str(ws / "tinyllm" / "spec.py") in shown
    assert "Traceback" not in shown and len(shown.splitlines()) == 1
    with course.learner_code():
        tl.spec.SpecConfig.parse("ngram", 4)
    assert capsys.readouterr().out.startswith("`SpecConfig.parse` is not written yet. Write it in ")


def test_a_learner_exception_names_the_function_and_line(tmp_path, monkeypatch, capsys):
    broken = REFERENCE_SPEC.read_text() + "\n\ndef blocks_for(tokens, block_tokens):\n    return tokens // 0\n"
    ws = make_workspace(tmp_path, broken)
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    tl = course.use()
    capsys.readouterr()

    @course.learner_code()
    def draw():
        tl.spec.blocks_for(5, 4)

    assert draw() is None
    line = len(broken.splitlines())
    assert capsys.readouterr().out.strip() == (
        f"your `blocks_for` raised ZeroDivisionError: integer division or modulo by zero "
        f"({ws / 'tinyllm' / 'spec.py'}, line {line})")


def test_with_the_reference_running_errors_propagate(tmp_path, monkeypatch):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    tl = course.use()
    with pytest.raises(tl.spec.SpecError):
        with course.learner_code():
            tl.spec.blocks_for(3, 0)


def test_expect_marks_a_mismatch_and_fails_only_for_the_reference(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    course.use()
    assert course.expect([7, 8, 5], [7, 8, 5], "draft")
    with pytest.raises(AssertionError, match="the reference disagrees with the card on draft"):
        course.expect([7, 8], [7, 8, 5], "draft")
    ws = make_workspace(tmp_path / "ws", REFERENCE_SPEC.read_text())
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    course.use()
    capsys.readouterr()
    assert not course.expect([7, 8], [7, 8, 5], "draft")
    assert capsys.readouterr().out.strip() == "✘ draft: [7, 8] (the card says [7, 8, 5])"


def test_check_says_when_ol_is_not_available(tmp_path, monkeypatch):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    course.use()
    monkeypatch.setattr(course.checkcell, "grader_available", lambda: False)
    report = course.check("hand_example_prompt_lookup", "rollback_hand_example")
    assert report.status == course.NOT_RUN
    assert [t.name for t in report.tests] == ["hand_example_prompt_lookup", "rollback_hand_example"]
    assert "not available" in report.note and "not run" in report._repr_html_()


def fake_ol(results: dict, code: int = 1, output: str = ""):
    """A runner standing in for `python -m grader check`: writes results to the --json file."""
    seen = {}

    def run(command, cwd):
        seen["command"] = command
        if results is not None:
            Path(command[command.index("--json") + 1]).write_text(json.dumps(results))
        return subprocess.CompletedProcess(command, code, output, "")

    return run, seen


def test_check_reads_the_json_results_into_a_table(tmp_path, monkeypatch):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    course.use()
    runner, seen = fake_ol({"version": 3, "status": "fail", "message": "", "module": "L10.8", "tests": [
        {"name": "test_hand_example_prompt_lookup", "status": "pass", "message": "", "duration": 0.01},
        {"name": "ngram_draft_hand_example", "status": "fail",
         "message": "assert [4] == [3]\nmore detail", "duration": 0.02},
    ]})
    report = course.check("hand_example_prompt_lookup", "ngram_draft_hand_example",
                          "config_parses_runtime_values", runner=runner)
    command = seen["command"]
    assert command[1:6] == ["-m", "grader", "check", "L10.8", "--ref-deps"]
    assert command[-2:] == ["-k", "hand_example_prompt_lookup or ngram_draft_hand_example or "
                                  "config_parses_runtime_values"]
    checked = Path(command[command.index("--workspace") + 1])
    assert (checked / "tinyllm" / "spec.py").read_text() == REFERENCE_SPEC.read_text()
    assert report.status == course.FAIL and report.passed == 1
    assert [(t.name, t.status) for t in report.tests] == [
        ("hand_example_prompt_lookup", "pass"), ("ngram_draft_hand_example", "fail"),
        ("config_parses_runtime_values", "error")]
    page = report._repr_html_()
    assert "1 of 3 tests passed" in page and "assert [4] == [3]" in page
    assert "<details>" in page and "more detail" in page.split("<details>", 1)[1]
    assert "not in the module&#x27;s suite" in page


def test_check_without_results_shows_what_ol_said(tmp_path, monkeypatch):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    course.use()
    runner, _ = fake_ol(None, code=2, output="L10.8 is not started: run ol start L10.8\n")
    report = course.check("rollback_hand_example", runner=runner)
    assert report.status == course.ERROR
    assert "exited with code 2" in report.note and "ol start L10.8" in report.note


def test_check_runs_the_real_grader_on_the_learners_workspace(tmp_path, monkeypatch):
    on_stubs(tmp_path, monkeypatch)
    course.use()
    report = course.check("hand_example_prompt_lookup", "rollback_hand_example")
    assert report.status == course.FAIL, report.note
    assert [(t.name, t.status) for t in report.tests] == [
        ("hand_example_prompt_lookup", "fail"), ("rollback_hand_example", "fail")]
    assert "not written yet" in report.tests[0].message


# --- Which workspace: OL_WORKSPACE, the remembered one, the notebook's folder, the repository ----

def remember(tmp_path: Path, monkeypatch, workspace: Path) -> None:
    memo = tmp_path / "remembered"
    memo.write_text(f"{workspace}\n")
    monkeypatch.setenv(REMEMBER_ENV, str(memo))


def test_the_remembered_workspace_comes_before_the_notebooks_folder(tmp_path, monkeypatch):
    started = make_workspace(tmp_path / "work", STUB_SPEC.read_text())
    here = make_workspace(tmp_path / "notebooks", STUB_SPEC.read_text())
    monkeypatch.chdir(here)
    assert course.workspace_candidates() == [here, course.ROOT]
    remember(tmp_path, monkeypatch, started)
    assert course.workspace_candidates() == [started, here, course.ROOT]
    tl = course.use()
    assert tl.running.learner and tl.running.workspace == started
    assert "remembered" in tl.running.found_by and "remembered" in course.banner_html(tl.running)


def test_a_remembered_workspace_that_is_gone_is_skipped(tmp_path, monkeypatch):
    remember(tmp_path, monkeypatch, tmp_path / "deleted")
    monkeypatch.chdir(tmp_path)
    assert course.workspace_candidates() == [tmp_path, course.ROOT]


def test_ol_workspace_wins_and_a_relative_one_is_relative_to_where_it_was_set(tmp_path, monkeypatch):
    remember(tmp_path, monkeypatch, make_workspace(tmp_path / "other", STUB_SPEC.read_text()))
    typed_in = tmp_path / "shell"
    ws = make_workspace(typed_in / "work", STUB_SPEC.read_text())
    monkeypatch.chdir(typed_in)
    monkeypatch.setenv("OL_WORKSPACE", "work")
    assert course.workspace_candidates() == [ws]
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    assert course.workspace_candidates() == [ws]


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="reads /proc/<pid>/cwd (Linux)")
def test_in_a_kernel_a_relative_ol_workspace_is_relative_to_the_jupyter_servers_folder(tmp_path, monkeypatch):
    typed_in = tmp_path / "shell"
    ws = make_workspace(typed_in / "work", STUB_SPEC.read_text())
    notebook_folder = tmp_path / "notebooks"
    notebook_folder.mkdir()
    monkeypatch.chdir(notebook_folder)  # a kernel runs in the notebook's folder
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=typed_in)
    try:
        monkeypatch.setenv("JPY_PARENT_PID", str(server.pid))
        monkeypatch.setenv("OL_WORKSPACE", "work")
        tl = course.use()
        assert tl.running.learner and tl.running.workspace == ws
        assert str(typed_in) in tl.running.found_by
    finally:
        server.kill()
        server.wait()


# --- Edits are seen: the file is reloaded in the same module ------------------------------------

def reference_function(name: str) -> str:
    """The source of one of the reference's top-level functions."""
    import ast

    text = REFERENCE_SPEC.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(text, node)


def write_function(spec_file: Path, name: str, source: str) -> None:
    """Replace the function ``name`` in ``spec_file`` with ``source``, as a learner saving it would."""
    import ast

    text = spec_file.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines(keepends=True)
    start = node.lineno - 1 - len(node.decorator_list)
    spec_file.write_text("".join(lines[:start]) + source + "\n" + "".join(lines[node.end_lineno:]))


def test_an_edit_is_seen_by_the_next_cell_without_rerunning_the_first(tmp_path, monkeypatch, capsys):
    ws = on_stubs(tmp_path, monkeypatch)
    tl = course.use()
    spec = tl.spec  # what the first cell keeps
    capsys.readouterr()
    with course.learner_code():
        spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1)
    assert "`prompt_lookup` is not written yet" in capsys.readouterr().out
    write_function(ws / "tinyllm" / "spec.py", "prompt_lookup", reference_function("prompt_lookup"))
    with course.learner_code():  # the same cell, rerun
        assert spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1) == [7, 8, 5]
    assert spec is sys.modules["tinyllm.spec"] and capsys.readouterr().out == ""


def test_values_made_before_an_edit_work_with_the_new_code(tmp_path, monkeypatch):
    ws = on_stubs(tmp_path, monkeypatch)
    tl = course.use()
    spec = tl.spec
    SpecConfig, Draft, SpecError = spec.SpecConfig, spec.Draft, spec.SpecError
    cfg = spec.SpecConfig(spec.Draft.PROMPT_LOOKUP, 3)
    rollback_seen_by_runner = tl.runner.rollback
    spec_file = ws / "tinyllm" / "spec.py"
    for name in ("prompt_lookup", "propose", "blocks_for", "rollback"):
        write_function(spec_file, name, reference_function(name))
    spec_file.write_text(spec_file.read_text().replace(
        'raise NotImplementedError("spec.SpecConfig.parse (L10.8): not written yet -- "\n'
        '                                  "see course/L10.8.md section 2.1")',
        "return SpecConfig(Draft(draft), k)"))
    assert course.refresh()
    assert (spec.SpecConfig, spec.Draft, spec.SpecError) == (SpecConfig, Draft, SpecError)
    assert spec.propose(cfg, [5, 6, 7, 8, 5, 6], 3) == [7, 8, 5]
    assert spec.SpecConfig.parse("ngram", 2) == SpecConfig(Draft.NGRAM, 2)
    assert isinstance(spec.SpecConfig.parse("none", 1), SpecConfig)
    assert tl.runner.rollback is rollback_seen_by_runner is spec.rollback
    pool = tl.kvpool.KvPool(4, 2)
    table = [pool.allocate(), pool.allocate()]
    assert tl.runner.rollback(pool, table, 1) == 1  # the runner calls the new rollback
    assert not course.refresh(), "nothing changed since"


def test_a_save_that_does_not_import_is_named_until_fixed(tmp_path, monkeypatch, capsys):
    ws = make_workspace(tmp_path, REFERENCE_SPEC.read_text())
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    spec = course.use().spec
    spec_file = ws / "tinyllm" / "spec.py"
    good = spec_file.read_text()
    spec_file.write_text(good + "\ndef broken(:\n")
    capsys.readouterr()
    with course.learner_code():
        spec.prompt_lookup([1, 2, 1], 2, 2, 1)
    shown = capsys.readouterr().out.strip()
    assert "does not import (line" in shown and "SyntaxError" in shown and len(shown.splitlines()) == 1
    spec_file.write_text(good)
    with course.learner_code():
        assert spec.prompt_lookup([1, 2, 1], 2, 2, 1) == [2, 1]
    assert capsys.readouterr().out == ""


def test_a_file_that_did_not_import_at_first_runs_once_fixed(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, "def prompt_lookup(ctx:\n")
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    tl = course.use()
    assert tl.running.source == "reference"
    (ws / "tinyllm" / "spec.py").write_text(REFERENCE_SPEC.read_text() + '\nWHOSE = "learner"\n')
    assert course.refresh()
    assert tl.running.learner and tl.spec.WHOSE == "learner"
    assert tl.running.learner_file == ws / "tinyllm" / "spec.py"
    assert str(ws / "tinyllm" / "spec.py") in course.banner_text(tl.running)


# --- Pictures before code: a stub draws with the reference, labelled ------------------------------

def test_in_a_panel_a_stub_draws_with_the_reference_and_says_so(tmp_path, monkeypatch):
    on_stubs(tmp_path, monkeypatch)
    spec = course.use().spec
    with course.drawing() as record:
        assert spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1) == [7, 8, 5]
    assert record.substituted == ["prompt_lookup"] and record.used == []
    markup, text = course.draw_label(record)
    assert text == "drawn with the reference: `prompt_lookup` is not written yet (card section 2.1)"
    assert "<code>prompt_lookup</code>" in markup and "course-label" in markup
    with pytest.raises(NotImplementedError):  # outside a panel, the stub is the stub
        spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1)


def test_a_written_function_draws_with_yours_beside_a_stub(tmp_path, monkeypatch):
    """Chapter 1's strip: prompt_lookup written, ngram_draft still a stub."""
    mine = reference_function("prompt_lookup").replace('"""Copy', '"""Mine. Copy')
    on_stubs(tmp_path, monkeypatch, mine)
    spec = course.use().spec
    with course.drawing() as record:
        assert spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1) == [7, 8, 5]
        assert spec.ngram_draft([1, 2, 3, 1, 2, 4, 1, 2], 4, 3) == [3, 1, 2, 3]
    assert record.used == ["prompt_lookup"] and record.substituted == ["ngram_draft"]
    assert record.difference == ""
    assert course.draw_label(record)[1] == ("drawn with your `prompt_lookup`; drawn with the reference: "
                                            "`ngram_draft` is not written yet (card section 2.1)")


def test_a_panel_names_where_yours_and_the_reference_differ(tmp_path, monkeypatch):
    on_stubs(tmp_path, monkeypatch, "def prompt_lookup(ctx, k, max_ngram, min_ngram):\n    return list(ctx[:1])\n")
    spec = course.use().spec
    cfg = spec.SpecConfig(spec.Draft.PROMPT_LOOKUP, 3)
    with course.drawing() as record:
        assert spec.propose(cfg, [5, 6, 7, 8, 5, 6], 3) == [5]  # the reference's propose, your lookup
    assert record.substituted == ["propose"] and record.used == ["prompt_lookup"]
    assert record.difference == ("your `prompt_lookup` and the reference's differ on this panel's inputs: "
                                 "prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1) gives [5] with yours, "
                                 "[7, 8, 5] with the reference's")
    assert len(course.draw_label(record)[1].splitlines()) == 2


def test_with_the_reference_running_a_panel_has_no_label(tmp_path, monkeypatch):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    spec = course.use().spec
    with course.drawing() as record:
        spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1)
    assert course.draw_label(record) == ("", "")


def test_the_stub_functions_and_their_sections_are_read_from_the_stub():
    sections = course.chapter("L10.8").sections
    assert "SpecConfig.parse" in sections and "prompt_lookup" in sections and "generate_stream" in sections
    assert "generate" not in sections and all(sections.values()), sections
    assert sections["prompt_lookup"] == "2.1" and sections["blocks_for"] == "2.4"
    assert course.chapter("L10.9").learner_file == "trees.py" and "verify_tree" in course.chapter("L10.9").sections


# --- The check table: headline, the failing case, the diagnosis ----------------------------------

def test_the_check_table_shows_the_failing_case_and_the_diagnosis(tmp_path, monkeypatch):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    course.use()
    message = ("prompt_lookup copied after the first occurrence\n"
               "inputs: prompt_lookup([1, 2, 9, 1, 2, 7, 1, 2], 2, 3, 1)\nexpected: [7, 1]\nyours: [9, 1]\n"
               "they part at draft position 0 (card section 2.1)")
    runner, _ = fake_ol({"version": 3, "status": "fail", "message": "", "module": "L10.8", "tests": [
        {"name": "hand_example_prompt_lookup", "status": "fail", "message": message, "duration": 0.01,
         "diagnosis": {"summary": "Your draft copies after the first earlier occurrence <not the last>.",
                       "pitfalls": ["s01"]}},
        {"name": "ngram_draft_hand_example", "status": "pass", "message": "", "duration": 0.01,
         "diagnosis": None},
    ]})
    report = course.check("hand_example_prompt_lookup", "ngram_draft_hand_example", runner=runner)
    first = report.tests[0]
    assert first.headline == "prompt_lookup copied after the first occurrence"
    assert first.details.splitlines()[0] == "inputs: prompt_lookup([1, 2, 9, 1, 2, 7, 1, 2], 2, 3, 1)"
    assert first.diagnosis == {"summary": "Your draft copies after the first earlier occurrence <not the last>.",
                               "pitfalls": ["s01"]}
    page = report._repr_html_()
    row, more = page.split('class="course-check-more"')[0], page.split('class="course-check-more"')[1]
    assert "prompt_lookup copied after the first occurrence" in row and "expected: [7, 1]" not in row
    details = more.split("<details>")[1].split("</details>")[0]
    assert "expected: [7, 1]" in details and "yours: [9, 1]" in details
    after = more.split("</details>")[1]
    assert "&lt;not the last&gt;" in after and "s01" in after
    assert page.count("course-check-more") == 1  # the passing test has no second row


# --- Colours that read in light and dark themes -----------------------------------------------------

def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours."""
    def luminance(colour: str) -> float:
        channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("kind", sorted(course.CHIP_COLOURS))
def test_every_chip_sets_both_colours_with_contrast_above_4_5(kind):
    background, colour, _ = course.CHIP_COLOURS[kind]
    assert contrast(background, colour) >= 4.5
    markup = course.chip("<eos>", kind)
    assert f"background:{background}" in markup and f"color:{colour}" in markup
    assert "&lt;eos&gt;" in markup and f"course-chip-{kind}" in markup


def test_an_unknown_chip_kind_is_named():
    with pytest.raises(ValueError, match="unknown chip kind 'acepted'"):
        course.chip("x", "acepted")


def test_boxes_take_their_colours_from_the_theme(tmp_path, monkeypatch):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    tl = course.use()
    banner = course.banner_html(tl.running)
    assert "background:var(--jp-layout-color2" in banner and "color:var(--jp-ui-font-color0" in banner
    assert "ol lab --workspace" in banner


def test_code_version_changes_with_an_edit(tmp_path, monkeypatch):
    ws = on_stubs(tmp_path, monkeypatch)
    course.use()
    before = course.code_version()
    assert before[0] == "learner"
    write_function(ws / "tinyllm" / "spec.py", "prompt_lookup", reference_function("prompt_lookup"))
    assert course.code_version() != before
    assert course.use(reference=True) and course.code_version() == ("reference", "")


def test_timed_runs_can_skip_the_comparison(tmp_path, monkeypatch):
    on_stubs(tmp_path, monkeypatch, "def prompt_lookup(ctx, k, max_ngram, min_ngram):\n    return []\n")
    spec = course.use().spec
    with course.drawing() as record, course.no_comparison():
        assert spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1) == []
        assert spec.ngram_draft([1, 2, 3, 1, 2, 4, 1, 2], 4, 3) == [3, 1, 2, 3]  # still drawn
    assert record.difference == "" and record.compared == {} and record.substituted == ["ngram_draft"]
    with course.drawing() as record:
        spec.prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1)
    assert record.compared == {"prompt_lookup": 1} and "[7, 8, 5] with the reference's" in record.difference


def test_the_package_keeps_no_mutable_state_but_the_one_state_object():
    """Everything that changes while a notebook runs is in ``course.STATE``: no ``global`` statement,
    and every other module-level name holds a value that cannot change."""
    import ast
    import re
    import types
    from importlib import import_module

    frozen = (str, int, float, bytes, tuple, frozenset, types.MappingProxyType, re.Pattern, Path, type(None))
    for path in sorted((ROOT / "notebooks" / "course").glob("*.py")):
        tree = ast.parse(path.read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Global)], f"{path.name} rebinds a global"
        module = import_module(f"course.{path.stem}") if path.stem != "__init__" else course
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for name in (t.id for t in targets if isinstance(t, ast.Name)):
                value = getattr(module, name)
                if name == "__all__":
                    continue
                assert value is course.STATE or isinstance(value, frozen) or callable(value), (path.name, name)


def test_every_graded_test_of_a_chaptered_module_is_in_a_check_cell():
    """A learner who checks from the chapters sees every graded test of their module, as ``ol check``
    does: a test no check cell names would fail only outside the notebooks."""
    named = set()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for call in re.findall(r"course\.check\(([^)]*)\)", "".join(cell["source"])):
                named |= set(re.findall(r'"(\w+)"', call))
    for path in sorted((ROOT / "course" / "modules").glob("*.toml")):
        module = tomllib.loads(path.read_text())
        tests = {t["name"] for t in module["test"]}
        if tests & named:
            assert tests <= named, f"{module['id']}: no chapter's check cell runs {sorted(tests - named)}"


def test_a_killed_kernels_scratch_folders_are_removed_by_the_next_and_a_live_ones_kept(tmp_path):
    """nbval kills its kernels (no exit handler runs): their folders must not pile up in the
    temporary folder, and a kernel still running must keep its own."""
    make = ("import os, signal, sys; sys.path.insert(0, {notebooks!r}); from course.state import scratch_dir; "
            "print(scratch_dir('tinyllm-notebook-'), flush=True); {then}")
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    notebooks = str(ROOT / "notebooks")

    def kernel(then: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", make.format(notebooks=notebooks, then=then)],
                                stdout=subprocess.PIPE, text=True, env=env)

    killed = kernel("os.kill(os.getpid(), signal.SIGKILL)")
    killed_dir = Path(killed.stdout.readline().strip())
    killed.wait(timeout=60)
    assert killed_dir.is_dir()
    alive = kernel("import time; time.sleep(120)")
    try:
        alive_dir = Path(alive.stdout.readline().strip())
        assert not killed_dir.exists(), "a killed kernel's folder was left behind"
        done = kernel("")
        done_dir = Path(done.stdout.readline().strip())
        done.wait(timeout=60)
        assert alive_dir.is_dir(), "a live kernel's folder was removed"
        assert not done_dir.exists(), "a kernel that exits removes its own folder"
        locks = [p.name for p in tmp_path.glob("tinyllm-kernel-*.lock")]
        assert locks == [f"tinyllm-kernel-{alive_dir.name.split('-')[2]}.lock"], locks
    finally:
        alive.kill()
        alive.wait(timeout=60)
