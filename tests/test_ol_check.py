"""``ol check`` end to end: verdicts, exit codes, needs, and a verdict the code under test cannot fake."""

from __future__ import annotations

import json
import re

import pytest

from ol_helpers import ROOT, edit, ol, put_reference

L10_1_FILES = ("pcg32.py", "sampling.py", "kvpool.py")


def test_started_module_fails_with_the_stub_message(tmp_path):
    assert ol("start", "L10.8", workspace=tmp_path).code == 0
    ran = ol("check", "L10.8", "--ref-deps", workspace=tmp_path)
    assert ran.code == 1, ran.text
    assert "NotImplementedError" in ran.out and "(L10.8)" in ran.out
    assert "0 of 20 tests passed" in ran.out


def test_reference_spec_passes_with_ref_deps_and_writes_results(tmp_path):
    put_reference(tmp_path, "spec.py")
    results = tmp_path / "results.json"
    ran = ol("check", "L10.8", "--ref-deps", "--json", str(results), workspace=tmp_path)
    assert ran.code == 0, ran.text
    assert "20 of 20 tests passed" in ran.out
    assert "tinyllm/spec.py" in ran.out and "your workspace (L10.8)" in ran.out
    assert "reference (L10.1, --ref-deps)" in ran.out and "reference (given)" in ran.out
    data = json.loads(results.read_text())
    assert (data["version"], data["status"], data["module"], data["message"]) == (3, "pass", "L10.8", None)
    assert len(data["tests"]) == 20 and {t["status"] for t in data["tests"]} == {"pass"}
    assert all(set(t) == {"name", "status", "message", "duration", "test_code", "diagnosis"} for t in data["tests"])
    assert all(f"def test_{t['name']}(" in t["test_code"] for t in data["tests"])
    assert all(t["diagnosis"] is None for t in data["tests"])
    listing = ol("list", workspace=tmp_path)
    assert "passing (with --ref-deps)" in listing.out, listing.text
    assert not (tmp_path / "tinyllm" / "__pycache__").exists(), "check wrote into the learner's package"


def test_keyword_selects_tests_and_json_keeps_the_format(tmp_path):
    put_reference(tmp_path, "spec.py")
    results = tmp_path / "r.json"
    ran = ol("check", "L10.8", "--ref-deps", "-k", "rollback", "--json", str(results), workspace=tmp_path)
    assert ran.code == 0, ran.text
    names = [t["name"] for t in json.loads(results.read_text())["tests"]]
    assert names == ["rollback_hand_example", "rollback_drops_one_reference_only", "blocks_conserved_across_rollbacks"]
    assert ol("check", "L10.8", "--ref-deps", "-k", "no_such_test", workspace=tmp_path).code == 2


def test_a_buggy_needed_module_is_named_and_ref_deps_bypasses_it(tmp_path):
    put_reference(tmp_path, "spec.py", *L10_1_FILES)
    # Argmax ties to the highest id instead of the lowest.
    edit(tmp_path / "tinyllm" / "sampling.py", "    return int(np.argmax(_check_logits(logits)))\n",
         "    x = _check_logits(logits)\n    return int(len(x) - 1 - np.argmax(x[::-1]))\n")
    ran = ol("check", "L10.8", workspace=tmp_path)
    assert ran.code == 2, ran.text
    assert "needs L10.1" in ran.err and "your L10.1 fails" in ran.err and "--ref-deps" in ran.err
    assert "argmax_ties_to_lowest_id" in ran.err
    passed = ol("check", "L10.8", "--ref-deps", workspace=tmp_path)
    assert passed.code == 0, passed.text


HANGS = {
    "python loop": "        while True:\n            pass\n",
    # Blocked inside C, deaf to the signals a timeout within the test process would rely on.
    "C call, signals ignored": ("        import ctypes, signal\n"
                                "        for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):\n"
                                "            signal.signal(sig, signal.SIG_IGN)\n"
                                "        ctypes.CDLL(None).sleep(3600)\n"),
}


@pytest.mark.parametrize("hang", HANGS.values(), ids=HANGS.keys())
def test_a_hanging_function_times_out_within_the_bound(tmp_path, hang):
    put_reference(tmp_path, "spec.py")
    edit(tmp_path / "tinyllm" / "spec.py", '        names = [d.value for d in Draft]\n',
         hang + '        names = [d.value for d in Draft]\n')
    ran = ol("check", "L10.8", "--ref-deps", "--timeout", "2", workspace=tmp_path, limit=90)
    assert ran.code == 1, ran.text
    assert "TIMEOUT  config_parses_runtime_values  timed out after 2 s" in ran.out
    # where it hung, from the stack ol asks the test process for before it kills it
    assert re.search(r"timed out after 2 s, in tinyllm/spec\.py, line \d+, in parse\b", ran.out), ran.out
    assert "19 of 20 tests passed" in ran.out
    assert ran.seconds < 40


@pytest.mark.parametrize("exit_at_import,said", [("import os\nos._exit(0)\n", "exited with status 0 while importing"),
                                                  ("import sys\nsys.exit(0)\n", "SystemExit")],
                         ids=["os._exit", "sys.exit"])
def test_an_exit_at_import_fails(exit_at_import, said, tmp_path):
    put_reference(tmp_path, "spec.py")
    spec = tmp_path / "tinyllm" / "spec.py"
    spec.write_text(exit_at_import + spec.read_text())
    ran = ol("check", "L10.8", "--ref-deps", workspace=tmp_path)
    assert ran.code == 1, ran.text
    assert "0 of 20 tests passed" in ran.out and said in ran.out


def test_os_exit_inside_a_test_fails_that_test_and_the_rest_still_run(tmp_path):
    put_reference(tmp_path, "spec.py")
    edit(tmp_path / "tinyllm" / "spec.py", '        names = [d.value for d in Draft]\n',
         '        import os\n        os._exit(0)\n')
    ran = ol("check", "L10.8", "--ref-deps", workspace=tmp_path)
    assert ran.code == 1, ran.text
    assert "config_parses_runtime_values  the test process exited with status 0 during this test" in ran.out
    assert "19 of 20 tests passed" in ran.out


def test_patching_pytest_or_numpy_assertions_fails(tmp_path):
    put_reference(tmp_path, "spec.py")
    spec = tmp_path / "tinyllm" / "spec.py"
    original = spec.read_text()
    for patch, changed in (("import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n",
                            "_pytest.python.Function.runtest was replaced"),
                           ("import numpy.testing\nnumpy.testing.assert_array_equal = lambda *a, **k: None\n",
                            "numpy.testing.assert_array_equal was replaced")):
        spec.write_text(patch + original)
        ran = ol("check", "L10.8", "--ref-deps", workspace=tmp_path)
        assert ran.code == 1, ran.text
        assert "0 of 20 tests passed" in ran.out and changed in ran.out


def test_a_pitfall_gets_its_hint(tmp_path):
    put_reference(tmp_path, "spec.py")
    edit(tmp_path / "tinyllm" / "spec.py", "begin = int(hits[-1]) + n", "begin = int(hits[0]) + n")
    ran = ol("check", "L10.8", "--ref-deps", workspace=tmp_path)
    assert ran.code == 1, ran.text
    hints = [line for line in ran.out.splitlines() if line.startswith("Hint")]
    assert len(hints) == 1 and "pitfall s01" in hints[0] and "stale drafts" in hints[0], ran.out
    matched = re.search(r"it gives your answer on all (\d+) cases where yours differs from the reference's in "
                        r"([\w, ]+), and the reference's on the other (\d+) \(where yours is right too\)", hints[0])
    assert matched and "prompt_lookup_matches_python_l8_6" in matched.group(2), hints[0]
    assert "call:     prompt_lookup([" in ran.out and "rule:     card 2.1" in ran.out
    diff = ol("diff", "L10.8", "--ref-deps", workspace=tmp_path)
    assert diff.code == 1, diff.text
    assert "prompt_lookup_matches_python_l8_6:" in diff.out and "they part at [" in diff.out
    narrow = ol("diff", "L10.8", "--ref-deps", "-k", "prompt_lookup and not hand", workspace=tmp_path)
    assert narrow.code == 1 and narrow.out.startswith("prompt_lookup_matches_python_l8_6:"), narrow.text
    assert "verify" not in narrow.out
    assert "verify_matches_python_l8_6: all 142 cases agree" in diff.out


def test_a_hint_on_one_case_says_nothing_of_other_cases(tmp_path):
    put_reference(tmp_path, "spec.py")
    edit(tmp_path / "tinyllm" / "spec.py", "return sample_dense(residual(p, q), u_resample), False",
         "return sample_dense(p, u_resample), False")
    ran = ol("check", "L10.8", "--ref-deps", "-k", "sampled_spec_keeps_the_target_distribution", workspace=tmp_path)
    assert ran.code == 1, ran.text
    hints = [line for line in ran.out.splitlines() if line.startswith("Hint")]
    assert hints == ["Hint: pitfall s12, \"Resampling from p instead of the residual\": it gives your answer on the "
                     "one case where yours differs from the reference's in sampled_spec_keeps_the_target_distribution. "
                     "Symptom: the drafted token is over-represented."], ran.out


def test_diff_says_an_unwritten_function_in_one_line(tmp_path):
    assert ol("start", "L10.8", workspace=tmp_path).code == 0
    ran = ol("diff", "L10.8", "--ref-deps", "-k", "prompt_lookup_matches", workspace=tmp_path)
    assert ran.code == 1, ran.text
    assert ran.out.strip() == ("prompt_lookup_matches_python_l8_6: spec.prompt_lookup (L10.8): not written yet -- "
                               "see course/L10.8.md section 2.1"), ran.out


def test_diff_accepts_an_exception_in_other_words_as_check_does(tmp_path):
    """The graded tests check a refusal's exception type, not its words: ol diff says the words
    differ, and agrees with ol check that nothing is wrong (exit 0)."""
    put_reference(tmp_path, "spec.py")
    edit(tmp_path / "tinyllm" / "spec.py", 'raise SpecError(f"block_tokens must be >= 1, got {block_tokens!r}")',
         'raise SpecError("a block holds at least one token")')
    assert ol("check", "L10.8", "--ref-deps", "-k", "rollback_hand", workspace=tmp_path).code == 0
    ran = ol("diff", "L10.8", "--ref-deps", "-k", "rollback_hand", workspace=tmp_path)
    assert ran.code == 0, ran.text
    assert "rollback_hand_example: all" in ran.out and "cases agree with the reference; 1 of them raises " \
        "the reference's SpecError in other words, which the tests accept" in ran.out, ran.out
    assert "'a block holds at least one token'" in ran.out


def test_the_diagnosis_counts_the_failing_cases_check_counts(tmp_path):
    """A refusal in other words is no failing case for the diagnosis either: with a real bug beside
    it, the diagnosis's count of differing cases is check's count of failing ones."""
    put_reference(tmp_path, "spec.py")
    edit(tmp_path / "tinyllm" / "spec.py", 'raise SpecError(f"block_tokens must be >= 1, got {block_tokens!r}")',
         'raise SpecError("a block holds at least one token")')
    edit(tmp_path / "tinyllm" / "spec.py", "return -(-tokens // block_tokens)", "return tokens // block_tokens")
    results = tmp_path / "r.json"
    ran = ol("check", "L10.8", "--ref-deps", "-k", "rollback_hand", "--json", str(results), workspace=tmp_path)
    assert ran.code == 1, ran.text
    failing = re.search(r"(\d+) of (\d+) cases fail", ran.out)
    assert failing, ran.out
    summary = json.loads(results.read_text())["tests"][0]["diagnosis"]["summary"]
    assert f"{failing[1]} of its {failing[2]} cases" in summary, (ran.out, summary)


def test_a_bug_that_is_no_named_pitfall_is_said_to_be_none(tmp_path):
    put_reference(tmp_path, "spec.py")
    # Accepting while u_a <= p/q would be s15; this one compares with 2 * p / q, a bug of no pitfall.
    edit(tmp_path / "tinyllm" / "spec.py", "if u_accept < p[x] / q[x]:", "if u_accept < 2 * p[x] / q[x]:")
    results = tmp_path / "r.json"
    ran = ol("check", "L10.8", "--ref-deps", "-k", "hand_example_sampled_step", "--json", str(results),
             workspace=tmp_path)
    assert ran.code == 1, ran.text
    assert "Hint" not in ran.out and "Not a named pitfall: in hand_example_sampled_step" in ran.out, ran.out
    hint = next(line for line in ran.out.splitlines() if line.startswith("Not a named pitfall"))
    assert hint.endswith(": the one shown above.") and ran.out.count("call:") == 1, ran.out  # named, not repeated
    diagnosis = json.loads(results.read_text())["tests"][0]["diagnosis"]
    assert diagnosis["pitfalls"] == [] and "no named pitfall gives your answers" in diagnosis["summary"]


def test_check_never_touches_the_learners_files(tmp_path):
    put_reference(tmp_path, "spec.py")
    before = {p: p.read_bytes() for p in (tmp_path / "tinyllm").iterdir()}
    ol("check", "L10.8", "--ref-deps", "-k", "hand_example", workspace=tmp_path)
    after = {p: p.read_bytes() for p in (tmp_path / "tinyllm").iterdir()}
    assert before == after
    assert (tmp_path / ".ol" / "last_check.json").is_file()
    assert str(ROOT) not in (tmp_path / ".ol" / "last_check.json").read_text()


def test_shell_runs_the_calls_ol_prints(tmp_path):
    put_reference(tmp_path, "spec.py")
    ran = ol("shell", "L10.8", "--ref-deps", "-c",
             "print(prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1)); print(shared_prompt_block()['free at the end']); "
             "print(TableTarget(12, seed=1).cached())", workspace=tmp_path)
    assert ran.code == 0, ran.text
    assert ran.out.split() == ["[7,", "8,", "5]", "8", "0"]
    assert ol("shell", "L10.8", "-c", "pass", workspace=tmp_path).code == 2
