"""notebooks/course.py: which tinyllm a notebook runs, the short messages, the ol check table."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_SPEC = ROOT / "solutions" / "tinyllm" / "spec.py"
STUB_SPEC = ROOT / "course" / "stubs" / "L10.8" / "spec.py"


def _load_course():
    spec = importlib.util.spec_from_file_location("notebook_course", ROOT / "notebooks" / "course.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


course = _load_course()


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """Each test may import a scratch tinyllm; put the reference the other tests use back after."""
    saved_modules = {n: m for n, m in sys.modules.items() if n == "tinyllm" or n.startswith("tinyllm.")}
    saved_path = list(sys.path)
    monkeypatch.delenv("OL_WORKSPACE", raising=False)
    yield
    for name in [n for n in sys.modules if n == "tinyllm" or n.startswith("tinyllm.")]:
        del sys.modules[name]
    sys.modules.update(saved_modules)
    sys.path[:] = saved_path
    course._current = None
    course._on_path.clear()


def make_workspace(tmp_path: Path, spec_text: str) -> Path:
    (tmp_path / "tinyllm").mkdir(parents=True)
    (tmp_path / "tinyllm" / "spec.py").write_text(spec_text)
    return tmp_path


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
    ws = make_workspace(tmp_path, STUB_SPEC.read_text())
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
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
    monkeypatch.setattr(course, "grader_available", lambda: False)
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
    assert "1 of 3 tests passed" in page and "assert [4] == [3]" in page and "more detail" not in page


def test_check_without_results_shows_what_ol_said(tmp_path, monkeypatch):
    monkeypatch.setenv("OL_WORKSPACE", str(tmp_path))
    course.use()
    runner, _ = fake_ol(None, code=2, output="L10.8 is not started: run ol start L10.8\n")
    report = course.check("rollback_hand_example", runner=runner)
    assert report.status == course.ERROR
    assert "exited with code 2" in report.note and "ol start L10.8" in report.note


def test_check_runs_the_real_grader_on_the_learners_workspace(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, STUB_SPEC.read_text())
    monkeypatch.setenv("OL_WORKSPACE", str(ws))
    course.use()
    report = course.check("hand_example_prompt_lookup", "rollback_hand_example")
    assert report.status == course.FAIL, report.note
    assert [(t.name, t.status) for t in report.tests] == [
        ("hand_example_prompt_lookup", "fail"), ("rollback_hand_example", "fail")]
    assert "not written yet" in report.tests[0].message
