"""Isolated checks keep each test's time in the judge: a hang ends its own tests and nothing else."""

import json
import re

import pytest

from ol_helpers import edit, ol, put_reference

LOOP = "\n\ndef prompt_lookup(*args, **kwargs):\n    while True:\n        pass\n"
SELECTED = "prompt_lookup or ngram_draft_hand_example or hand_example_greedy_verify"


def test_a_hanging_function_fails_only_its_tests(tmp_path):
    ws = tmp_path / "ws"
    assert ol("start", "L10.8", "--workspace", str(ws)).code == 0
    put_reference(ws, "spec.py")
    with open(ws / "tinyllm" / "spec.py", "a") as f:
        f.write(LOOP)
    report = tmp_path / "check.json"
    ran = ol("check", "L10.8", "--ref-deps", "--isolate", "--timeout", "2", "-k", SELECTED,
             "--json", str(report), workspace=ws)
    assert ran.code == 1, ran.text
    tests = {t["name"]: t for t in json.loads(report.read_text())["tests"]}
    first, later = tests["hand_example_prompt_lookup"], tests["prompt_lookup_matches_python_l8_6"]
    assert first["status"] == later["status"] == "fail", (first, later)
    # 2 s of CPU time, or on a loaded machine the clock's 6 s may come first.
    assert re.match(r"timed out after (2 s of CPU time|4 s on the clock, [\d.]+ s of it computing .*): "
                    r"spec\.prompt_lookup did not return", first["message"]), first["message"]
    # The function that hung is not called again: the later test fails at once, saying why.
    assert re.match(r"timed out earlier: spec\.prompt_lookup did not return in hand_example_prompt_lookup, after .*; "
                    "it is not called again in this check", later["message"]), later["message"]
    for name in ("ngram_draft_hand_example", "hand_example_greedy_verify"):
        assert tests[name]["status"] == "pass", tests[name]
    # One test's 2 s, and no second pytest for the tests after it.
    assert ran.seconds < 60, f"the check took {ran.seconds:.1f} s"     # not every test's bound, even when loaded
    assert "Comparing your answers" not in ran.out, "a timed-out test has no answers to diagnose"


def test_a_hang_at_import_is_bounded_by_the_test_timeout(tmp_path):
    ws = tmp_path / "ws"
    assert ol("start", "L10.8", "--workspace", str(ws)).code == 0
    put_reference(ws, "spec.py")
    spec = ws / "tinyllm" / "spec.py"
    spec.write_text("while True:\n    pass\n" + spec.read_text())
    ran = ol("check", "L10.8", "--ref-deps", "--isolate", "--timeout", "2", workspace=ws)
    assert ran.code == 1, ran.text
    assert "0 of 20 tests passed" in ran.out, ran.out
    assert "importing tinyllm/spec.py took longer than 2 s" in ran.out, ran.out
    assert ran.seconds < 30, f"the check took {ran.seconds:.1f} s"


@pytest.mark.parametrize("module,file,tests", [("L10.9", "trees.py", 17), ("L10.10", "serve.py", 13)])
def test_an_isolated_check_grades_the_module_alone(tmp_path, module, file, tests):
    """A workspace holding every module: the isolated check takes the modules the graded one needs
    from the reference (the given model writes K/V into a KvPool, which must live beside it), says
    so, and passes the reference's file (its pools cross to the learner's process and back)."""
    ws = tmp_path / "ws"
    for started in ("L10.1", "L10.8", module):
        assert ol("start", started, "--workspace", str(ws)).code == 0
    put_reference(ws, "pcg32.py", "sampling.py", "kvpool.py", "spec.py", file)
    ran = ol("check", module, "--isolate", workspace=ws, limit=300)
    assert ran.code == 0, ran.text
    assert f"{tests} of {tests} tests passed" in ran.out, ran.out
    assert f"tinyllm/kvpool.py    reference (L10.1, isolated: {module} alone is graded)" in ran.out, ran.out


# The learner's code shares a process with its end of the judge's socket and can write to it.
SOCKET = '''
import os as _os, struct as _struct, zlib as _zlib


def _socket():
    for f in _os.listdir("/proc/self/fd"):
        try:
            if _os.readlink(f"/proc/self/fd/{f}").startswith("socket:"):
                return int(f)
        except OSError:  # the listing's own descriptor, closed by now
            pass


_fd = _socket()
'''
WRITES = {"junk": '_os.write(_fd, b"junk\\n")\n',
          "a compressed frame that inflates past any message":
              '_z = _zlib.compress(bytes(1 << 29), 9)\n_os.write(_fd, _struct.pack("!LB", len(_z), 1) + _z + b"\\n")\n'}


@pytest.mark.parametrize("write", list(WRITES))
def test_bytes_written_to_the_judges_socket_fail_the_check_at_once(tmp_path, write):
    # Not the watchdog's bound: the judge reads them as not its messages and says so.
    ws = tmp_path / "ws"
    assert ol("start", "L10.8", "--workspace", str(ws)).code == 0
    put_reference(ws, "spec.py")
    with open(ws / "tinyllm" / "spec.py", "a") as f:
        f.write(SOCKET + WRITES[write])
    ran = ol("check", "L10.8", "--ref-deps", "--isolate", "--timeout", "20", workspace=ws)
    assert ran.code == 1, ran.text
    assert "0 of 20 tests passed" in ran.out, ran.out
    assert ("importing tinyllm/spec.py: the process running the code under test wrote something other than "
            "ol's messages to its connection with the judge") in ran.out, ran.out


def test_half_a_message_to_the_judge_is_bounded_by_the_test_timeout(tmp_path):
    # A frame's header and not its body: the judge waits for the rest only as long as the import may
    # take, then says what it waited for.
    ws = tmp_path / "ws"
    assert ol("start", "L10.8", "--workspace", str(ws)).code == 0
    put_reference(ws, "spec.py")
    with open(ws / "tinyllm" / "spec.py", "a") as f:
        f.write(SOCKET + '_os.write(_fd, _struct.pack("!LB", 1 << 20, 0) + b"x" * 10)\n')
    ran = ol("check", "L10.8", "--ref-deps", "--isolate", "--timeout", "2", workspace=ws)
    assert ran.code == 1, ran.text
    assert "0 of 20 tests passed" in ran.out, ran.out
    assert ("importing tinyllm/spec.py: the process running the code under test stopped partway through a "
            "message to the judge") in ran.out, ran.out
    assert ran.seconds < 30, f"the check took {ran.seconds:.1f} s"


# The reference's rollback, but a refused cut drops the table's last block before it raises.
CHANGES_THEN_RAISES = '''

_reference_rollback = rollback


def rollback(pool, table, keep):
    try:
        return _reference_rollback(pool, table, keep)
    except SpecError:
        table.pop()
        raise
'''


def test_what_a_call_changed_before_it_raised_stays_changed(tmp_path):
    """As in process, a list the learner's call changed and then raised over comes back changed:
    isolated, a refused cut that dropped a block first passed the test that it changes nothing."""
    ws = tmp_path / "ws"
    for started in ("L10.1", "L10.8"):
        assert ol("start", started, "--workspace", str(ws)).code == 0
    put_reference(ws, "pcg32.py", "sampling.py", "kvpool.py", "spec.py")
    spec = ws / "tinyllm" / "spec.py"
    spec.write_text(spec.read_text() + CHANGES_THEN_RAISES)
    for isolated in ([], ["--isolate"]):
        ran = ol("check", "L10.8", *isolated, "-k", "rollback_drops_one_reference_only", workspace=ws, limit=300)
        assert ran.code == 1, ran.text
        assert "they part at table unchanged: expected True, yours False" in ran.out, ran.out


def test_a_write_into_a_learner_objects_array_is_made_in_that_object(tmp_path):
    """As in process, ``pool.k[1, 2, 3] = 1.0`` writes into the learner's pool: isolated, the judge
    wrote into its copy alone, and a pool whose ``k`` and ``v`` were one array passed."""
    ws = tmp_path / "ws"
    assert ol("start", "L10.1", "--workspace", str(ws)).code == 0
    put_reference(ws, "pcg32.py", "sampling.py", "kvpool.py")
    edit(ws / "tinyllm" / "kvpool.py", "self.v = np.zeros(shape, dtype=np.float32)", "self.v = self.k")
    for isolated in ([], ["--isolate"]):
        ran = ol("check", "L10.1", *isolated, "-k", "kvpool_kv_storage", workspace=ws, limit=300)
        assert ran.code == 1, ran.text
        assert "kvpool_kv_storage  case 'writing k leaves v zero': 2 of 3 cases fail" in ran.out, ran.out


def test_an_error_a_fake_raised_into_the_code_comes_back_as_itself(tmp_path):
    """A fake target's own error (L10.9's ``KvCorrupt``), raised into the code under test and back out
    of it, is the suite's class in the judge: its message is shown and the hint is the pitfall's, as
    in process (it was refused as a module not of the package's, and the hint lost)."""
    put_reference(tmp_path, "trees.py")
    edit(tmp_path / "tinyllm" / "trees.py", "    return rollback(pool, table, start + len(path))\n",
         "    del table[-(-(start + len(path)) // bt):]\n    return 0\n")
    ran = ol("check", "L10.9", "--ref-deps", "--isolate", workspace=tmp_path, limit=240)
    assert ran.code == 1 and "raises KvCorrupt: " in ran.out and "LearnerGone" not in ran.out, ran.out
    assert 'Hint: pitfall t06, "Dropping the other nodes' in ran.out, ran.out


# L10.10's blocks_conserved_under_load reads the server after every step in one exchange when isolated
# (grader.cases.in_turn: the step, its results' ids, the running requests, the free blocks).
SERVER_BUGS = {"reports one ended request too few": [("report.finished = list(self.results)[ended:]",
                                                      "report.finished = list(self.results)[ended + 1:]")],
               "and keeps an ended request's blocks": [("report.finished = list(self.results)[ended:]",
                                                        "report.finished = list(self.results)[ended + 1:]"),
                                                       ("rollback(self.pool, r.table, 0)",
                                                        "rollback(self.pool, r.table, r.cached)")]}


@pytest.mark.parametrize("bug", list(SERVER_BUGS))
def test_a_server_read_in_one_exchange_a_step_fails_as_in_process(tmp_path, bug):
    """Isolated, a server whose step reports one ended request too few (read against its results'
    ids), and one that also keeps an ended request's blocks (its pool runs dry: a raise in the
    middle of the exchange), fail the load test with the same first case as in process."""
    ws = tmp_path / "ws"
    assert ol("start", "L10.10", "--workspace", str(ws)).code == 0
    put_reference(ws, "serve.py")
    for old, new in SERVER_BUGS[bug]:
        edit(ws / "tinyllm" / "serve.py", old, new)
    said = []
    for isolated in (["--ref-deps"], ["--isolate"]):
        ran = ol("check", "L10.10", *isolated, "-k", "blocks_conserved_under_load", workspace=ws, limit=300)
        assert ran.code == 1, ran.text
        said.append(re.findall(r"^\s*(?:call|expected|yours|they part at):? .*$", ran.out, re.M))
    yours = said[0][2]
    assert ("raises PoolError" if "blocks" in bug else "ended in a step that reports finished") in yours, said
    assert said[0] == said[1], said
