"""``ol start``, ``ol list``, ``ol tests``, usage errors and ``--help``, end to end."""

from __future__ import annotations

import pytest

from ol_helpers import ROOT, ol

VERBS = ("list", "start", "tests", "check", "diff", "mutants")


def test_start_writes_the_stub_and_refuses_a_second_time(tmp_path):
    first = ol("start", "L10.8", workspace=tmp_path)
    assert first.code == 0, first.text
    spec = tmp_path / "tinyllm" / "spec.py"
    assert spec.read_text() == (ROOT / "course" / "stubs" / "L10.8" / "spec.py").read_text()
    assert (tmp_path / "tinyllm" / "__init__.py").is_file()
    assert "ol check L10.8" in first.out and "ol tests L10.8" in first.out
    spec.write_text(spec.read_text() + "\n# my work\n")
    mine = spec.read_bytes()
    again = ol("start", "L10.8", workspace=tmp_path)
    assert again.code == 2
    assert str(spec) in again.err and "--force" in again.err
    assert spec.read_bytes() == mine


def test_force_keeps_a_backup(tmp_path):
    assert ol("start", "L10.8", workspace=tmp_path).code == 0
    spec = tmp_path / "tinyllm" / "spec.py"
    spec.write_text("# my work\n")
    forced = ol("start", "L10.8", "--force", workspace=tmp_path)
    assert forced.code == 0, forced.text
    backups = list((tmp_path / ".ol" / "backups").glob("*/spec.py"))
    assert [b.read_text() for b in backups] == ["# my work\n"]
    assert spec.read_text() == (ROOT / "course" / "stubs" / "L10.8" / "spec.py").read_text()


@pytest.mark.parametrize("verb", ["start", "tests", "check", "diff", "mutants"])
def test_unknown_module_lists_the_known_ones(tmp_path, verb):
    ran = ol(verb, "L99.9", workspace=tmp_path)
    assert ran.code == 2
    assert "unknown module 'L99.9'" in ran.err and "L10.1" in ran.err and "L10.8" in ran.err
    assert "Traceback" not in ran.text


def test_check_before_start_is_a_usage_error(tmp_path):
    ran = ol("check", "L10.8", workspace=tmp_path)
    assert ran.code == 2 and "ol start L10.8" in ran.err


def test_list_shows_modules_needs_and_status(tmp_path):
    ran = ol("list", workspace=tmp_path)
    assert ran.code == 0, ran.text
    lines = {line.split()[0]: line for line in ran.out.splitlines() if line.startswith("L10.")}
    assert "not started" in lines["L10.1"] and "not started" in lines["L10.8"]
    assert " L10.1 " in lines["L10.8"]
    ol("start", "L10.8", workspace=tmp_path)
    assert "started, not checked" in ol("list", workspace=tmp_path).out


def test_tests_table_names_every_test_with_its_kind():
    ran = ol("tests", "L10.8")
    assert ran.code == 0, ran.text
    for name, kind in (("hand_example_prompt_lookup", "unit"), ("sampled_spec_keeps_the_target_distribution", "statistical"),
                       ("runner_target_scores_every_fed_position", "differential")):
        assert any(name in line and kind in line for line in ran.out.splitlines()), name
    assert "s13" in ran.out


def test_tests_table_shows_the_last_check_of_the_workspace(tmp_path):
    assert ol("start", "L10.8", workspace=tmp_path).code == 0
    assert "last check" not in ol("tests", "L10.8", workspace=tmp_path).out  # nothing checked yet
    assert ol("check", "L10.8", "--ref-deps", "-k", "hand_example_prompt_lookup", workspace=tmp_path).code == 1
    shown = ol("tests", "L10.8", "--workspace", str(tmp_path), workspace=ROOT)
    assert shown.code == 0, shown.text
    lines = shown.out.splitlines()
    assert "last check" in lines[2]
    assert any(line.startswith("hand_example_prompt_lookup ") and " fail " in line for line in lines)
    assert any(line.startswith("sampled_spec_keeps_the_target_distribution ") and " not run " in line for line in lines)
    assert "0 of 20 passed, 19 not run" in shown.out and "from the reference" in shown.out


def test_workspace_from_option_and_environment(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    refused = ol("start", "L10.8", "--workspace", str(tmp_path / "file"), workspace=ROOT)
    assert refused.code == 2 and "not a folder" in refused.err
    assert ol("check", "L10.8", "--workspace", str(tmp_path / "nowhere"), workspace=ROOT).code == 2
    assert ol("start", "L10.8", "--workspace", str(tmp_path / "a"), workspace=ROOT).code == 0  # made for you
    (tmp_path / "b").mkdir()
    assert ol("start", "L10.8", workspace=ROOT, env={"OL_WORKSPACE": str(tmp_path / "b")}).code == 0
    assert (tmp_path / "a" / "tinyllm" / "spec.py").is_file() and (tmp_path / "b" / "tinyllm" / "spec.py").is_file()


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(verb):
    ran = ol(verb, "--help")
    assert ran.code == 0 and "usage: ol " + verb in ran.out


def test_python_dash_m_grader_is_the_same_command():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "grader", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and all(verb in done.stdout for verb in VERBS)
