"""The grader's pure cores, on their own: how two answers compare (``alike``, ``same_law``,
``first_difference``), the judge <-> learner codec, and which pitfalls a diagnosis names."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from scipy import stats

from grader.cases import (Case, alike, chi2_quantile, chi2_survival, first_difference, first_parting, in_turn, keys_of,
                          message_shape, same_law, with_place)
from grader.child.judge import MAX_DEPTH, LearnerGone, MirrorObject, _exception, decode, learner_env
from grader.child.learner_server import encode
from grader.core.protocol import where_in_dump
from grader.layout.catalog import Pitfall, load_catalog
from grader.layout.stubs import written_functions
from grader.verdict import diagnose
from grader.verdict.evaluate import CheckResult

# --- first_difference ------------------------------------------------------------------------


def test_first_difference_names_the_path_where_answers_part():
    want = {"tokens": [1, 2, 3], "stats": {"drafted": 4, "accepted": 2}}
    assert first_difference(want, {"tokens": [1, 2, 3], "stats": {"drafted": 4, "accepted": 2}}) is None
    assert first_difference(want, {"tokens": [1, 2, 9], "stats": {"drafted": 4, "accepted": 2}}) == "tokens[2]"
    assert first_difference(want, {"tokens": [1, 2, 3], "stats": {"drafted": 4, "accepted": 3}}) == "stats.accepted"
    assert first_difference(want, {"tokens": [1, 2, 3], "stats": {"drafted": 4}}) == "stats.accepted"
    assert first_difference({"a": 1}, {"a": 1, "b": 2}) == "b"
    assert first_difference({"s": {"a": 1}}, {"s": {"a": 1, "b": 2}}) == "s.b"
    assert first_difference([[1], [2, 3]], [[1], [2, 4]]) == "[1][1]"
    assert first_difference(5, 6) == ""


def test_first_difference_reports_a_shorter_or_longer_list_at_the_first_missing_index():
    assert first_difference([1], [1, 2, 3, 4, 5]) == "[1] (lengths 1 and 5)"
    assert first_difference({"t": [1, 2, 3]}, {"t": [1, 2]}) == "t[2] (lengths 3 and 2)"
    assert first_difference([], []) is None


def test_a_case_says_what_each_side_holds_where_they_part():
    # a long answer is clipped where it is shown: the values at the parting are not
    want = {"tokens": list(range(40)), "free blocks": 60}
    case = Case("c", "f()", lambda: None, want)
    assert case.problem({"tokens": list(range(40)), "free blocks": 58}) == \
        "they part at free blocks: expected 60, yours 58"
    assert case.problem({"tokens": list(range(39))}) == \
        "they part at tokens[39] (lengths 40 and 39): expected 39, yours (missing)"
    assert first_parting([1, [2, 3]], [1, [2, 4]]) == ("[1][1]", 3, 4)
    assert case.problem(want) is None


def test_an_expected_value_is_compared_as_an_answer_arrives():
    """An answer is plain JSON (dict keys strings, tuples lists, numpy unwrapped): an expected value
    written with int keys, tuples or numpy is read the same way, not parted from its own answer."""
    want = {2: (1, np.int64(3)), "a": np.array([0.5, 1.0])}
    case = Case("c", "f()", lambda: want, want)
    assert case.problem(case.answer()) is None
    assert case.problem(Case("c", "f()", lambda: {2: (1, 4), "a": [0.5, 1.0]}).answer()) == \
        "they part at 2[1]: expected 3, yours 4"


def test_a_raised_answer_says_where_the_package_under_test_raised(tmp_path):
    code = compile("def f():\n    raise ValueError('bad k')\n", str(tmp_path / "tinyllm" / "serve.py"), "exec")
    space: dict = {}
    exec(code, space)
    answer = Case("c", "f()", space["f"]).answer()
    assert answer == {"raises": "ValueError", "message": "bad k (tinyllm/serve.py, line 2)"}
    assert message_shape(answer["message"]) == "bad k"     # where it raised is not behaviour
    try:
        raise KeyError("x")
    except KeyError as err:
        assert with_place("x", err) == "x"    # raised outside the package and the suites: nothing added
    # a test's own code raising on what the learner's returned (a tuple where the card says Verified)
    code = compile("def g(v):\n    return v.tokens\n", "/repo/course/tests/test_l10_8.py", "exec")
    exec(code, space)
    answer = Case("c", "g(())", lambda: space["g"](())).answer()
    assert answer["message"] == ("'tuple' object has no attribute 'tokens' (in the test's code, on what yours gave "
                                 "it: course/tests/test_l10_8.py, line 2)")
    assert message_shape(answer["message"]) == "'tuple' object has no attribute 'tokens'"


def dumped(*frames: tuple[str, int, str]) -> str:
    """A faulthandler dump of these frames, the most recent first."""
    return "Current thread 0x00007f (most recent call first):\n" + "".join(
        f'  File "{path}", line {line} in {name}\n' for path, line, name in frames)


def test_a_hang_in_given_code_says_so_and_names_the_learner_s_function_below_it():
    written = written_functions(load_catalog().get("L10.10"))
    assert {"step", "_admit", "_finish", "adaptive_ks"} <= written["serve.py"]
    assert not {"idle", "run", "_explore"} & written["serve.py"] and written["model.py"] == set()
    ws, tests = "/tmp/w/tinyllm", "/c/course/tests/test_l10_10.py"
    mine = dumped((f"{ws}/serve.py", 950, "_admit"), (f"{ws}/serve.py", 940, "step"), (tests, 309, "served"))
    assert where_in_dump(mine, written) == "tinyllm/serve.py, line 950, in _admit"
    idle = dumped((f"{ws}/serve.py", 682, "idle"), (f"{ws}/serve.py", 686, "run"), (tests, 230, "served"))
    assert where_in_dump(idle, written) == ("tinyllm/serve.py, line 682, in idle, given code, with none of your "
                                            "functions running: it waits on what yours return or leave behind")
    forward = dumped((f"{ws}/model.py", 400, "forward"), (f"{ws}/serve.py", 960, "step"), (tests, 230, "served"))
    assert where_in_dump(forward, written) == ("tinyllm/model.py, line 400, in forward, given code called from your "
                                               "step (tinyllm/serve.py, line 960)")
    # a file the module does not name (a dependency's) is not judged, nor is any without ``written``
    spec = dumped((f"{ws}/spec.py", 12, "rollback"), (f"{ws}/serve.py", 960, "step"))
    assert where_in_dump(spec, written) == "tinyllm/spec.py, line 12, in rollback"
    assert where_in_dump(idle) == "tinyllm/serve.py, line 682, in idle"
    assert where_in_dump(dumped((tests, 1, "served"))) is None


def test_messages_show_the_course_and_workspace_relative_only_where_a_path_starts():
    result = CheckResult("L10.10", "error", "in /work/main/solutions/a.py, /check/work/main/b.py and /work/main",
                         paths=("/work/main",))
    assert result.as_json()["message"] == "in solutions/a.py, /check/work/main/b.py and ."


def test_first_difference_floats_within_1e_9_ints_as_floats_and_bools_apart():
    assert first_difference(0.1 + 0.2, 0.3) is None
    assert first_difference(1.0, 1.0 + 5e-10) is None
    assert first_difference(1.0, 1.0 + 2e-9) == ""
    assert first_difference(2, 2.0) is None
    assert first_difference(float("nan"), float("nan")) is None
    assert first_difference(float("nan"), 1.0) == ""
    assert first_difference(True, 1) == "" and first_difference(0, False) == ""
    assert first_difference([True], [True]) is None and first_difference([True], [False]) == "[0]"
    assert first_difference((1, 2), [1, 2]) is None
    assert first_difference("a", "b") == "" and first_difference(None, 0) == ""


# --- alike and same_law ----------------------------------------------------------------------


def raised(name: str, message: str) -> dict:
    return {"raises": name, "message": message}


def test_exceptions_are_alike_by_type_and_message_shape():
    assert alike(raised("SpecError", "keep 9 is outside [0, 8]"), raised("SpecError", "keep 9 is outside [0, 8]"))
    assert not alike(raised("SpecError", "keep 9 is outside [0, 8]"), raised("ValueError", "keep 9 is outside [0, 8]"))
    # counts and positions are behaviour: another number is another answer
    assert not alike(raised("PoolError", "block 3 is free"), raised("PoolError", "block 4 is free"))
    # where it was raised, object addresses, numpy scalar wrappers and float noise are not
    assert alike(raised("SpecError", "row 0 holds nan (spec.py, line 212)"), raised("SpecError", "row 0 holds nan"))
    assert alike(raised("TypeError", "bad <Foo at 0x7f00aa>"), raised("TypeError", "bad <Foo at 0x55bb11>"))
    assert alike(raised("SpecError", "q(3) = np.float64(0.25)"), raised("SpecError", "q(3) = 0.25"))
    assert alike(raised("SpecError", "sums to 0.99999990000001"), raised("SpecError", "sums to 0.9999999"))
    assert not alike(raised("SpecError", "sums to 0.5"), raised("SpecError", "sums to 0.6"))
    assert not alike(raised("SpecError", "x"), {"tokens": []}) and not alike([1], raised("SpecError", "x"))


def test_message_shape_keeps_integers():
    assert message_shape("block 12 of 16 at 0xdeadbeef (kvpool.py, line 40)") == "block 12 of 16 at 0x?"


def test_alike_exact_and_by_law():
    assert alike([0.5, 0.25], [0.5 + 1e-12, 0.25])
    assert not alike([0.5, 0.25], [0.5 + 1e-6, 0.25])
    counts = [4000, 3000, 2000, 1000]
    near = [3950, 3040, 2010, 1000]
    assert not alike(counts, near) and alike(counts, near, "law")


def test_same_law_tells_draws_from_one_law_from_draws_from_another():
    gen = np.random.default_rng(0)
    law = np.array([0.5, 0.3, 0.15, 0.05])
    other = np.array([0.4, 0.4, 0.15, 0.05])
    same = [same_law(gen.multinomial(4000, law).tolist(), gen.multinomial(4000, law).tolist()) for _ in range(50)]
    apart = [same_law(gen.multinomial(4000, law).tolist(), gen.multinomial(4000, other).tolist()) for _ in range(50)]
    assert sum(same) >= 49        # p = 1e-4: a false alarm in 50 tries is rare
    assert sum(apart) <= 1        # a 10-point shift over 4000 draws is plain to see


def test_same_law_matches_scipy_chi2_contingency():
    gen = np.random.default_rng(1)
    for trial in range(200):
        width = int(gen.integers(2, 7))
        a = gen.integers(0, 60, size=width)
        b = np.maximum(a + gen.integers(-25, 25, size=width), 0)
        keep = (a + b) > 0
        if keep.sum() < 2 or (a[keep] == b[keep]).all() or a.sum() == 0 or b.sum() == 0:
            continue
        p = stats.chi2_contingency(np.array([a[keep], b[keep]]))[1]
        if abs(np.log10(p) + 4) < 0.05:
            continue                  # too near the threshold for rounding to decide
        assert same_law(a.tolist(), b.tolist()) == (p > 1e-4), (trial, a.tolist(), b.tolist(), p)


def test_same_law_edge_cases():
    assert same_law([0, 10, 10], [0, 10, 10])
    assert same_law([0, 7], [0, 7]) and not same_law([0, 7], [0, 8])   # one column with mass: exact
    assert not same_law([1, 2], [1, 2, 3])                             # lengths differ: exact compare
    assert not same_law({"a": 1}, {"a": 2}) and same_law({"a": 1}, {"a": 1})
    assert not same_law(["x", 1], ["y", 1])
    # what no draw gives (a side that drew nothing, negative or endless counts) is answered, not a crash
    assert not same_law([0, 0, 0], [5, 3, 2])
    assert same_law([2, -1, 3], [2, -1, 3]) and not same_law([2, -1, 3], [2, 1, 3])
    assert not same_law([float("nan"), 4], [1, 4]) and not same_law([float("inf"), 4], [1, 4])


def test_a_returned_value_is_never_read_as_a_raise():
    """Returning ``{"raises": "SpecError"}`` is not raising it (a red-team submission passed every
    refusal case that way), and a raise's fields are strings (one whose message was a number
    crashed the diagnosis and lost a class member's whole grade)."""
    returned = Case("refused", "blocks_for(3, 0)", lambda: {"raises": "SpecError"}, expected={"raises": "SpecError"})
    answer = returned.answer()
    assert answer == {"returned": {"raises": "SpecError"}}
    assert returned.problem(answer) == "it returned instead of raising SpecError"

    def refuses():
        raise ValueError("no")
    raising = Case("refused", "f()", refuses, expected={"raises": "ValueError"})
    assert raising.problem(raising.answer()) is None
    assert not alike({"raises": "SpecError", "message": 123}, raised("SpecError", "123"))
    assert alike({"raises": 7}, {"raises": 7}) and not alike({"raises": 7}, {"raises": 8})  # values, compared as values


def test_in_turn_in_process_is_the_loop_each_read_taken_when_its_turn_comes():
    """In process (no isolated judge), ``in_turn`` calls and reads in order, each read seeing what the
    calls before it did; ``keys_of`` is the keys of a dict attribute. Isolated, the same in one exchange
    (tests/test_ol_isolation.py)."""
    class Server:
        def __init__(self):
            self.results, self.steps = {}, 0

        def step(self):
            self.steps += 1
            self.results[self.steps] = ["a token"] * self.steps
            return self.steps

    server = Server()
    turn = [(server.step, ()), (keys_of, (server, "results")), (getattr, (server, "steps")), (server.step, ()),
            (getattr, (server, "steps"))]
    assert in_turn(turn) == [1, [1], 1, 2, 2]
    assert in_turn([]) == []
    with pytest.raises(AttributeError):
        in_turn([(server.step, ()), (getattr, (server, "missing")), (server.step, ())])
    assert server.steps == 3, "the call after the one that raised ran"


@pytest.mark.parametrize("dof", [1, 2, 3, 4, 5, 8, 11, 30])
def test_chi2_survival_is_scipy_s(dof):
    for x in (0.0, 0.3, 1.0, float(dof), 2.5 * dof, 40.0, 120.0):
        assert chi2_survival(x, dof) == pytest.approx(stats.chi2.sf(x, dof), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("dof", [1, 2, 3, 5, 15, 30, 120])
def test_chi2_quantile_is_scipy_s(dof):
    for p in (1e-4, 0.05, 0.5, 0.99):
        assert chi2_quantile(dof, p) == pytest.approx(stats.chi2.isf(p, dof), rel=1e-9)


# --- the learner's process ------------------------------------------------------------------


def test_the_learner_process_computes_with_the_judges_kernels_and_sees_nothing_else(monkeypatch):
    # OPENBLAS_CORETYPE=Haswell on an AVX-512 machine: a learner process without it ran another gemm
    # kernel, and the reference's own serve.py failed its isolated check by a float's last bits.
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", "AVX512F")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    monkeypatch.setenv("OL_REPORT_NONCE", "secret")
    env = learner_env("/impl", 7)
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and env["NPY_DISABLE_CPU_FEATURES"] == "AVX512F"
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env["OL_RPC_FD"] == "7" and env["OL_IMPL"] == "/impl"
    assert not {name for name in env if name.startswith("OL_")} - {"OL_IMPL", "OL_RPC_FD"}


def test_cached_answers_are_kept_per_kernel_setting(monkeypatch):
    # The reference's answers computed under one kernel must not stand for another's: their floats'
    # last bits differ, and a hint read against them would say a learner's answer parts from it.
    module = load_catalog().get("L10.10")
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    plain = diagnose._suite_digest(module)
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    haswell = diagnose._suite_digest(module)
    assert haswell != plain
    monkeypatch.setenv("OL_REPORT_NONCE", "another")  # not a kernel's variable: the same answers
    assert diagnose._suite_digest(module) == haswell


# --- the judge <-> learner codec ---------------------------------------------------------------


def over_the_wire(value):
    """What the judge holds after the learner's process encodes ``value`` and sends it as JSON."""
    return decode(json.loads(json.dumps(encode(value))))


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2**64 - 1, 2**70, 0.1, -0.0, float("inf"), "a string", [], [1, 2.5, True, None, "x"],
    [[1, [2, [3]]], ()], (1, (2, 3)), {"a": 1, 2: "b", (3, 4): [5]}, {"nested": {"t": (1,)}},
])
def test_plain_values_cross_unchanged(value):
    back = over_the_wire(value)
    assert back == value and type(back) is type(value)
    assert repr(back) == repr(value)   # tuples stay tuples, bools stay bools, -0.0 stays -0.0, inside too


@pytest.mark.parametrize("array", [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.array([[1.5, -np.inf], [np.nan, 2.0]]),
    np.arange(10, dtype=np.int64)[::3],                    # not contiguous
    np.zeros((0, 5), dtype=np.uint8),
    np.array(3.25, dtype=np.float64),                      # zero-dimensional
    np.array([True, False]),
    np.array([1 + 2j], dtype=np.complex64),
])
def test_arrays_cross_with_dtype_shape_and_bits(array):
    back = over_the_wire(array)
    assert isinstance(back, np.ndarray) and back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == np.ascontiguousarray(array).tobytes()
    assert back.flags.writeable


@pytest.mark.parametrize("scalar", [np.float32(0.1), np.int64(-3), np.uint32(2**32 - 1), np.bool_(True),
                                    np.complex128(1 - 1j)])
def test_numpy_scalars_keep_their_type(scalar):
    back = over_the_wire(scalar)
    assert type(back) is type(scalar) and back == scalar


def test_a_float64_scalar_crosses_as_the_float_it_is():
    back = over_the_wire(np.float64(-2.5))   # np.float64 is a float: it arrives as one, the same bits
    assert type(back) is float and back == -2.5


def test_a_dataclass_crosses_as_a_mirror_with_its_fields():
    @dataclasses.dataclass
    class Verified:
        tokens: list
        logprobs: np.ndarray
        n_accepted: int

    Verified.__module__ = "tinyllm.spec"   # the learner's package's, as every mirror's is
    back = over_the_wire(Verified([3, 4], np.array([-0.5, -1.0]), 1))
    assert isinstance(back, MirrorObject) and type(back).__name__ == "Verified"
    assert back.tokens == [3, 4] and back.n_accepted == 1 and back.logprobs.tolist() == [-0.5, -1.0]
    assert back._ol_path[1].endswith("Verified")


def test_encode_refuses_a_value_nested_too_deeply():
    deep: list = []
    for _ in range(300):
        deep = [deep, {}]   # not all scalars: each level is encoded
    with pytest.raises(ValueError, match="nested too deeply"):
        encode(deep)


@pytest.mark.parametrize("wire, complaint", [
    ({}, "malformed value"),
    ({"$x": 1}, "malformed value"),
    ({"$t": "not a list"}, "malformed value"),
    ({"$a": "|O", "shape": [1], "data": ""}, "not numbers"),
    ({"$a": "<f8", "shape": [2], "data": "AAAAAAAAAAA="}, "malformed array"),     # 8 bytes for 16
    ({"$a": "<f8", "shape": [-1], "data": ""}, "malformed array"),
    ({"$c": ["tinyllm.spec", "C"], "f": [1]}, "malformed value"),
    ({"$c": ["this", "C"], "f": {}}, "not its package's"),
    ({"$c": ["tinyllm.spec", "C"], "f": {"__reduce_ex__": 1}}, "not a plain attribute's"),
    ({"$c": ["tinyllm.spec", "C"], "f": {"__array_interface__": {"$d": []}}}, "not a plain attribute's"),
    ({"$c": ["tinyllm.spec", "Verified\nhand_example: pass"], "f": {}}, "no Python statement gives"),
    ({"$j": 10**9}, "never gave it"),
    ({"$h": "1"}, "malformed value"),
    (("x",), "malformed value"),
])
def test_decode_refuses_what_the_learner_could_forge(wire, complaint):
    with pytest.raises(LearnerGone, match=complaint):
        decode(wire)


def test_an_exception_s_class_name_is_one_a_class_statement_gives():
    """A class named with line breaks and escape codes wrote forged lines into a test's message
    ("raises Oops" / "hand_example_tree_shape: pass"): such a name is refused; local classes are not."""
    with pytest.raises(LearnerGone, match="no Python statement gives"):
        _exception(["tinyllm.trees", "Oops\nhand_example_tree_shape: pass\n\x1b[32mALL PASS", "Exception", "m"])
    local = _exception(["tinyllm.trees", "tree_depths.<locals>.Bad", "ValueError", "no"])
    assert isinstance(local, ValueError) and type(local).__name__ == "Bad" and str(local) == "no"


def test_decode_refuses_a_value_nested_too_deeply():
    wire: object = 1
    for _ in range(MAX_DEPTH + 5):
        wire = {"$t": [wire]}
    with pytest.raises(LearnerGone, match="nested too deeply"):
        decode(wire)


# --- Diagnosis.ranked ------------------------------------------------------------------------

MODULE = load_catalog().get("L10.8")


def pitfall(pid: str) -> Pitfall:
    return Pitfall(pid, f"pitfall {pid}", "", "t1", f"course/mutants/L10.8/{pid}.patch")


def module_with(*ids: str):
    return dataclasses.replace(MODULE, pitfalls=tuple(pitfall(i) for i in ids))


def failing(test: str, pitfalls=(), silent=(), differing: int = 2, telling: int = 2, cases: int = 10) -> diagnose.TestDiagnosis:
    return diagnose.TestDiagnosis(test, cases=cases, differing=differing, telling=telling, pitfalls=list(pitfalls),
                         silent=list(silent))


def named(diagnosis: diagnose.Diagnosis) -> list[tuple[str, list[str]]]:
    return [(p.id, tests) for p, tests in diagnosis.ranked()]


def test_ranked_names_a_pitfall_that_gives_the_learner_s_answers_and_contradicts_nothing():
    d = diagnose.Diagnosis(module_with("a", "b"), {"t1": failing("t1", pitfalls=["a"], silent=["b"]),
                                          "t2": failing("t2", silent=["a", "b"])})
    assert named(d) == [("a", ["t1"])]


def test_ranked_drops_a_pitfall_contradicted_by_another_failing_test():
    d = diagnose.Diagnosis(module_with("a"), {"t1": failing("t1", pitfalls=["a"]), "t2": failing("t2")})
    assert named(d) == []
    # a test with nothing to compare (a stub, a crash) contradicts no one
    stub = diagnose.TestDiagnosis("t2", note="not written yet: spec.propose")
    assert named(diagnose.Diagnosis(module_with("a"), {"t1": failing("t1", pitfalls=["a"]), "t2": stub})) == [("a", ["t1"])]


def test_ranked_drops_a_pitfall_wrong_on_a_passing_test_or_matching_only_booleans():
    tests = {"t1": failing("t1", pitfalls=["a", "b"])}
    d = diagnose.Diagnosis(module_with("a", "b"), tests, against={"a": ["t9"]})
    assert named(d) == [("b", ["t1"])]
    booleans = {"t1": failing("t1", pitfalls=["a"], telling=0)}
    assert named(diagnose.Diagnosis(module_with("a"), booleans)) == []


def test_ranked_orders_by_tests_explained_then_cases_matched_then_catalog_order():
    tests = {"t1": failing("t1", pitfalls=["late", "wide", "deep", "early"], differing=2),
             "t2": failing("t2", pitfalls=["wide"], silent=["late", "deep", "early"], differing=1),
             "t3": failing("t3", pitfalls=["deep"], silent=["late", "wide", "early"], differing=1)}
    d = diagnose.Diagnosis(module_with("late", "early", "wide", "deep"), tests)
    # wide and deep explain two tests each (3 cases both: catalog order), late and early one (catalog order)
    assert named(d) == [("wide", ["t1", "t2"]), ("deep", ["t1", "t3"]), ("late", ["t1"]), ("early", ["t1"])]
    tests["t3"].differing = 5
    assert [p for p, _ in named(diagnose.Diagnosis(module_with("late", "early", "wide", "deep"), tests))][:2] == ["deep", "wide"]


def test_a_diagnosis_that_fails_leaves_the_verdict_and_says_why(monkeypatch, tmp_path):
    """Hints are help: where ol cannot compute one, each failing test says so and the check stands."""
    from grader.running.run import SuiteRun, TestOutcome
    from grader.verdict import evaluate

    def broken(*args, **kwargs):
        raise TypeError("expected string or bytes-like object, got 'int'")
    monkeypatch.setattr(evaluate, "diagnose", broken)
    catalog = load_catalog()
    module = catalog.get("L10.8")
    run = SuiteRun({"rollback_hand_example": TestOutcome("rollback_hand_example", "fail", "2 of 18 cases fail", 0.1)})
    found = evaluate._diagnose(catalog, module, tmp_path, run, None, False, tmp_path)
    assert found.as_json("rollback_hand_example")["summary"] == (
        "no diagnosis: ol could not compare these answers (TypeError: expected string or bytes-like object, got 'int')")
    assert found.ranked() == []
