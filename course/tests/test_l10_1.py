"""Graded tests for L10.1: PCG32, the sampler and KvPool.

Each test is a row of the table in ``course/L10.1.md`` ("What the tests check"); the rules they
hold the code to are ``course/spec/pcg32.md`` and ``course/spec/sampling.md``. Each test checks a
list of cases (``grader.cases``): ``cases_<name>()`` builds them, ``test_<name>()`` checks them.

A case is a piece of Python text, and that text is exactly what runs: paste it into a REPL after
``import numpy as np`` and the imports below and you get the answer the message calls "yours". A
failing case is named with that text, the expected answer, yours, where they part and the rule;
``ol check`` also compares your answers on those cases with each named pitfall's.

The code under test is whatever ``tinyllm`` package ``OL_IMPL`` points at (see ``conftest.py``).
Building the cases runs none of it.
"""

import ast
import math

import numpy as np

from graded import DRAWN_RULE_CASES, drawn, load_fixture, reference
from grader.cases import Case, check, first_difference, is_raise, raises
from tinyllm.kvpool import KvPool, PoolError
from tinyllm.pcg32 import Pcg32
from tinyllm.sampling import (SamplingParams, apply_penalties, argmax, distribution, log_softmax_at,
                              sample, stream, walk)

GOLDEN = "L10.1/sampler_golden.json"
DRAWN_STREAMS = 3  # streams a grading draws for pcg32_matches_golden_streams (graded.drawn)
DRAWN_SAMPLES = 12  # sampler cases a grading draws for sampler_matches_golden

# The first six outputs of the PCG paper's pcg32-demo for seed 42, stream 54.
DEMO = [0xA15C02B7, 0x7B47F409, 0xBA1D3330, 0x83D2F293, 0xBFA4784B, 0xCBED606E]

PARAM_DEFAULTS = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0,
                  "presence_penalty": 0.0, "frequency_penalty": 0.0}


def refused(action) -> str:
    """The name of the exception ``action()`` raised, or "accepted" (a stub's still propagates)."""
    try:
        action()
    except NotImplementedError:
        raise
    except Exception as err:  # any refusal is an answer; the case says which one it expects
        return type(err).__name__
    return "accepted"


# What a case's text can name. Nothing else: the text must run as pasted.
NAMES = {"np": np, "math": math, "Pcg32": Pcg32, "SamplingParams": SamplingParams, "KvPool": KvPool,
         "PoolError": PoolError, "apply_penalties": apply_penalties, "argmax": argmax,
         "distribution": distribution, "log_softmax_at": log_softmax_at, "sample": sample,
         "stream": stream, "walk": walk, "refused": refused}

REFUSED_NOTE = "   # refused(f): the name of the exception f() raises, or 'accepted' (course/tests/test_l10_1.py)"


def run_text(text: str):
    """Run a case's text: its statements, then the value of its last line."""
    tree = ast.parse(text)
    *body, last = tree.body
    names = dict(NAMES)
    exec(compile(ast.Module(body, type_ignores=[]), "<case>", "exec"), names)
    return eval(compile(ast.Expression(last.value), "<case>", "eval"), names)


def case(label: str, text: str, expected, rule: str, **fields) -> Case:
    """A case whose answer is the value of ``text`` run as Python."""
    return Case(label, text, lambda: run_text(text), expected, rule, **fields)


def f32(values) -> str:
    """A float32 logits array as Python text."""
    return f"np.array({[float(v) for v in values]!r}, dtype=np.float32)"


def params(**fields) -> str:
    """``SamplingParams(...)`` as Python text, with only the fields that differ from the defaults."""
    changed = [f"{k}={v!r}" for k, v in fields.items() if v != PARAM_DEFAULTS[k]]
    return f"SamplingParams({', '.join(changed)})"


def softmax(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def spread(support: list[int], probs, vocab: int) -> list[float]:
    """A length-``vocab`` distribution holding ``probs`` on ``support`` and zeros elsewhere."""
    out = np.zeros(vocab)
    out[support] = probs
    return out.tolist()


def logsumexp(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(x.max() + math.log(np.exp(x - x.max()).sum()))


def hexed(answer) -> str:
    """u32 draws in hex, as the spec writes them."""
    if isinstance(answer, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in answer):
        return "[" + ", ".join(f"{v:#010x}" for v in answer) + "]"
    if isinstance(answer, int) and not isinstance(answer, bool):
        return f"{answer:#010x}"
    return repr(answer)


def draws_text(seed: int) -> str:
    """Text that counts the u32 draws ``rng`` took, by finding its next u32 in a fresh stream(seed)."""
    return (f"after = rng.next_u32(); fresh = stream({seed}); ahead = [fresh.next_u32() for _ in range(8)]; "
            "draws = ahead.index(after) if after in ahead else 'not within 7'")


def exact_difference(want, got, path: str = "") -> str | None:
    """Where ``got`` first parts from ``want``, floats compared exactly, or None."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in want:
            where = exact_difference(want[key], got.get(key), f"{path}.{key}" if path else key)
            if where is not None:
                return where
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return f"{path} (lengths {len(want)} and {len(got)})"
        for i, (a, b) in enumerate(zip(want, got)):
            where = exact_difference(a, b, f"{path}[{i}]")
            if where is not None:
                return where
        return None
    return None if type(want) is type(got) and want == got else path or "the whole answer"


def judge_exactly(got, want) -> str | None:
    if is_raise(got):
        return unexpected(got, "the draws")
    where = exact_difference(want, got)
    return None if where is None else f"they part at {where} (compared exactly: floats to the last bit)"


def unexpected(got, shape: str) -> str:
    """What is wrong with an answer that is not the shape a judge reads."""
    if is_raise(got):
        return f"it raised {got['raises']} where {shape} was expected"
    return f"not {shape}"


def judge_raises_naming(word: str):
    """Expected: the call raises ValueError and its message names ``word``."""
    def judge(got, want) -> str | None:
        if not (isinstance(got, dict) and "raises" in got):
            return f"it returned instead of raising {want['raises']}"
        if got["raises"] != want["raises"]:
            return f"it raised {got['raises']}, not {want['raises']}"
        if word not in got.get("message", ""):
            return f"the message does not name {word!r}: a learner reading it cannot tell what was wrong"
        return None
    return judge


# ---------------------------------------------------------------- PCG32

PCG_STEP_RULE = ("spec pcg32.md 'One step' and 'The published vector': the output comes from the state before "
                 "the step (xorshift by 18, shift by 27, rotate right by the old state's top five bits); "
                 "Pcg32(42, 54) starts 0xa15c02b7 0x7b47f409 0xba1d3330 0x83d2f293 0xbfa4784b 0xcbed606e, "
                 "and the default stream is 54")


def cases_pcg32_published_demo_vector():
    return [
        case("seed 42, stream 54: six draws", "rng = Pcg32(42, 54); [rng.next_u32() for _ in range(6)]", DEMO,
             PCG_STEP_RULE, show=hexed),
        case("the default stream is 54", "Pcg32(42).next_u32()", DEMO[0], PCG_STEP_RULE, show=hexed),
    ]


def test_pcg32_published_demo_vector():
    check(cases_pcg32_published_demo_vector())


def cases_pcg32_matches_golden_streams():
    rule = ("spec pcg32.md 'Seeding' and 'A float': inc = (stream << 1) | 1, one step from state 0, add the "
            "seed, one more step; every seed and stream in [0, 2**64) gives the reference's u32s, and the "
            "floats after them")
    def stream_case(label: str, seed: int, stream_id: int, want: dict) -> Case:
        text = (f"rng = Pcg32({seed}, {stream_id}); {{'u32': [rng.next_u32() for _ in range({len(want['u32'])})], "
                f"'f64': [rng.next_f64() for _ in range({len(want['f64'])})]}}")
        return case(label, text, want, rule, judge=judge_exactly)

    golden = load_fixture(GOLDEN)["pcg32"]
    cases = [stream_case(f"seed {c['seed']}, stream {c['stream']}", c["seed"], c["stream"],
                         {"u32": c["u32"], "f64": c["f64"]}) for c in golden]
    draws = drawn("pcg32_matches_golden_streams")
    if draws is not None:  # graded: streams no submission can know ahead, so a replay of the fixture's fails
        u32s, f64s = len(golden[0]["u32"]), len(golden[0]["f64"])
        reference_pcg32 = reference("pcg32").Pcg32
        for _ in range(DRAWN_STREAMS):
            seed, stream_id = draws.getrandbits(64), draws.getrandbits(64)
            rng = reference_pcg32(seed, stream_id)
            want = {"u32": [rng.next_u32() for _ in range(u32s)], "f64": [rng.next_f64() for _ in range(f64s)]}
            cases.append(stream_case(f"seed {seed}, stream {stream_id} (drawn when graded)", seed, stream_id, want))
    return cases


def test_pcg32_matches_golden_streams():
    check(cases_pcg32_matches_golden_streams(), "stream")


def cases_pcg32_rejects_bad_seeds():
    rule = ("spec pcg32.md 'Seeding': seed and stream are integers in [0, 2**64); anything else (negative, too "
            "large, a float, even 42.0, a bool) raises ValueError")
    good = [case(f"Pcg32({s}, {t}) is accepted", f"refused(lambda: Pcg32({s}, {t}))" + REFUSED_NOTE, "accepted", rule)
            for s, t in (("0", "0"), ("2**64 - 1", "2**64 - 1"))]
    bad = [case(f"Pcg32({s}, {t}) is refused", f"Pcg32({s}, {t})", raises("ValueError"), rule)
           for s, t in (("-1", "54"), ("2**64", "54"), ("1.5", "54"), ("42.0", "54"), ("True", "54"), ("1", "-1"),
                        ("1", "2**64"))]
    return good + bad


def test_pcg32_rejects_bad_seeds():
    check(cases_pcg32_rejects_bad_seeds())


F64_RULE = ("card 2.1 and spec pcg32.md 'A float': next_f64 draws a, then b, and returns "
            "((a >> 5) * 2**26 + (b >> 6)) / 2**53, in [0, 1), using exactly two next_u32 draws")


def formula(a: int, b: int) -> float:
    return ((a >> 5) * 2**26 + (b >> 6)) / 2**53


def judge_floats(got, _want) -> str | None:
    """The answer holds a twin's u32s and the floats; each float must be the formula on its pair."""
    if not (isinstance(got, dict) and isinstance(got.get("f64"), list) and isinstance(got.get("twin u32"), list)):
        return unexpected(got, "the floats and the twin's u32s")
    u32, floats = got["twin u32"], got["f64"]
    for i, f in enumerate(floats):
        a, b = u32[2 * i], u32[2 * i + 1]
        want = formula(a, b)
        if f != want:
            return (f"they part at f64[{i}]: the twin's draws {2 * i} and {2 * i + 1} are a = {a:#010x}, "
                    f"b = {b:#010x}, so next_f64 must be {want!r}; yours is {f!r}")
        if not 0.0 <= f < 1.0:
            return f"f64[{i}] = {f!r} is outside [0, 1)"
    return None


def cases_next_f64_from_two_draws():
    def floats(seed, stream_id, n):
        return (f"rng, twin = Pcg32({seed}, {stream_id}), Pcg32({seed}, {stream_id}); "
                f"{{'f64': [rng.next_f64() for _ in range({n})], 'twin u32': [twin.next_u32() for _ in range({2 * n})]}}")

    return [
        case("the card's example: Pcg32(42, 54)'s first float", floats(42, 54, 1),
             "0.6303102186438938 when the u32s are 0xa15c02b7, 0x7b47f409 (card section 3)", F64_RULE,
             judge=judge_floats),
        case("200 floats of Pcg32(7, 3)", floats(7, 3, 200),
             "f64[i] = ((a >> 5) * 2**26 + (b >> 6)) / 2**53 for the twin's draws a = 2i, b = 2i + 1", F64_RULE,
             judge=judge_floats),
        case("one next_f64 takes two u32 draws",
             "rng = Pcg32(7, 3); rng.next_f64(); after = rng.next_u32(); fresh = Pcg32(7, 3); "
             "ahead = [fresh.next_u32() for _ in range(8)]; ahead.index(after) if after in ahead else 'not within 7'",
             2, F64_RULE),
        case("the 201st u32 after 200 floats is the twin's 401st",
             "rng, twin = Pcg32(7, 3), Pcg32(7, 3); [rng.next_f64() for _ in range(200)]; "
             "[twin.next_u32() for _ in range(400)]; rng.next_u32() == twin.next_u32()", True, F64_RULE),
    ]


def test_next_f64_from_two_draws():
    check(cases_next_f64_from_two_draws())


# ---------------------------------------------------------------- SamplingParams


def cases_sampling_params_reject_bad_values():
    rule = ("spec sampling.md 'SamplingParams': a value outside its field's range (a negative temperature, "
            "NaN or infinity anywhere, a negative or float top_k, top_p outside (0, 1], min_p outside [0, 1], "
            "a repetition penalty <= 0, a bool in any field) raises ValueError naming the field; edge values are "
            "accepted")
    bad = [("temperature", "-0.1"), ("temperature", "float('nan')"), ("temperature", "float('inf')"),
           ("top_k", "-1"), ("top_k", "2.5"), ("top_p", "0.0"), ("top_p", "1.5"), ("top_p", "float('nan')"),
           ("min_p", "-0.01"), ("min_p", "1.01"), ("repetition_penalty", "0.0"), ("repetition_penalty", "-1.0"),
           ("presence_penalty", "float('nan')"), ("frequency_penalty", "float('inf')"),
           ("temperature", "True"), ("top_k", "True"), ("top_p", "True"), ("min_p", "True"),
           ("presence_penalty", "True"), ("frequency_penalty", "True"), ("repetition_penalty", "True"),
           ("repetition_penalty", "float('inf')"), ("repetition_penalty", "float('nan')"), ("top_k", "2.0")]
    cases = [case(f"{field}={value}", f"SamplingParams({field}={value})", raises("ValueError"), rule,
                  judge=judge_raises_naming(field)) for field, value in bad]
    edges = [{"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
             {"temperature": 2.0, "top_k": 50, "top_p": 0.01, "min_p": 1.0, "repetition_penalty": 0.5,
              "presence_penalty": -1.0, "frequency_penalty": -0.5},
             {"temperature": 1, "top_p": 1, "min_p": 0, "repetition_penalty": 2}]  # ints are floats' values
    for fields in edges:
        text = "vars(SamplingParams(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + "))"
        cases.append(case(f"edge values {', '.join(f'{k}={v!r}' for k, v in fields.items())}", text,
                          {**PARAM_DEFAULTS, **fields}, rule))
    return cases


def test_sampling_params_reject_bad_values():
    check(cases_sampling_params_reject_bad_values())


# ---------------------------------------------------------------- penalties

def drawn_grid(draws, most: int = 12) -> list[float]:
    """Logits on a half-unit grid, positive, zero and negative alike: ties are common."""
    return [draws.randint(-8, 8) / 2 for _ in range(draws.randint(2, most))]


def drawn_penalty_cases(draws, knobs: tuple[str, ...], rule: str) -> list[Case]:
    """``apply_penalties`` of drawn logits, ids and values of ``knobs``, the answer the reference's."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        logits = drawn_grid(draws)
        prompt, output = ([draws.randrange(len(logits)) for _ in range(draws.randint(0, 8))] for _ in range(2))
        values = {"repetition_penalty": draws.choice((0.5, 0.8, 1.3, 2.0, 3.0)),
                  "presence_penalty": draws.choice((-0.5, 0.25, 0.5, 1.0)),
                  "frequency_penalty": draws.choice((-0.25, 0.2, 0.5, 0.75))}
        fields = {k: values[k] for k in knobs}
        sampling = reference("sampling")
        want = sampling.apply_penalties(np.array(logits, dtype=np.float32), sampling.SamplingParams(**fields),
                                        prompt, output).tolist()
        cases.append(case(f"drawn-{i} (drawn when graded)",
                          f"apply_penalties({f32(logits)}, {params(**{**PARAM_DEFAULTS, **fields})}, {prompt}, "
                          f"{output}).tolist()", want, rule))
    return cases


REPETITION_RULE = ("card 2.2 step 1 (worked in section 3): once per distinct id seen in prompt or output, a "
                   "positive logit is divided by the repetition penalty and any other multiplied by it; the "
                   "result is a new float64 array and the input is untouched")


def cases_repetition_penalty_on_negative_logits():
    logits = f32([2.0, -2.0, 0.0, 1.0, -1.0])
    return [
        case("card 3: penalty 2, prompt [0, 1], output [2, 1, 1]",
             f"apply_penalties({logits}, {params(repetition_penalty=2.0)}, [0, 1], [2, 1, 1])",
             [1.0, -4.0, 0.0, 1.0, -1.0], REPETITION_RULE),
        case("penalty 0.5 raises seen ids", f"apply_penalties({logits}, {params(repetition_penalty=0.5)}, [], [0, 1])",
             [4.0, -1.0, 0.0, 1.0, -1.0], REPETITION_RULE),
        case("a float64 copy; the input untouched",
             f"logits = {logits}; before = logits.copy(); "
             f"out = apply_penalties(logits, {params(repetition_penalty=2.0)}, [0, 1], [2, 1, 1]); "
             "{'dtype': str(out.dtype), 'input unchanged': bool(np.array_equal(logits, before))}",
             {"dtype": "float64", "input unchanged": True}, REPETITION_RULE),
        case("a float64 input is untouched too",
             f"logits = np.array([2.0, -2.0]); apply_penalties(logits, {params(repetition_penalty=2.0)}, [0, 1], []); "
             "logits.tolist()", [2.0, -2.0], REPETITION_RULE),
    ] + drawn_penalty_cases(drawn("repetition_penalty_on_negative_logits"), ("repetition_penalty",), REPETITION_RULE)


def test_repetition_penalty_on_negative_logits():
    check(cases_repetition_penalty_on_negative_logits())


def cases_presence_and_frequency_count_output_only():
    rule = ("card 2.2 step 1 (worked in section 3): after the repetition penalty, each id in the output (the "
            "prompt does not count) loses presence + frequency * its count in the output")
    return [
        case("card 3: presence 0.5, frequency 0.25, prompt [0, 0, 3], output [1, 2, 2, 2]",
             f"apply_penalties({f32([1.0, 1.0, 1.0, 1.0])}, {params(presence_penalty=0.5, frequency_penalty=0.25)}, "
             "[0, 0, 3], [1, 2, 2, 2])", [1.0, 0.25, -0.25, 1.0], rule),
        case("repetition first, then presence",
             f"apply_penalties({f32([2.0, 2.0, -1.0])}, {params(repetition_penalty=2.0, presence_penalty=1.0)}, [], [0, 2])",
             [0.0, 2.0, -3.0], rule),
    ] + drawn_penalty_cases(drawn("presence_and_frequency_count_output_only"),
                            ("repetition_penalty", "presence_penalty", "frequency_penalty"), rule)


def test_presence_and_frequency_count_output_only():
    check(cases_presence_and_frequency_count_output_only())


# ---------------------------------------------------------------- greedy and ties

TIE_RULE = "spec sampling.md 'Ties': argmax, greedy sample and the greedy distribution take the lowest id among the largest"


def cases_argmax_ties_to_lowest_id():
    greedy = f32([0.5, 2.0, 2.0])
    return [case(f"argmax of {values}", f"argmax({f32(values)})", want, TIE_RULE)
            for values, want in (([1.0, 3.0, 3.0, 2.0], 1), ([-2.0, -2.0, -5.0], 0), ([0.0, 0.0, 0.0, 0.0], 0),
                                 ([-1.0, 4.0], 1))] + [
        case("greedy sample", f"sample({greedy}, SamplingParams(), [], [], stream(1))[0]", 1, TIE_RULE),
        case("greedy distribution", f"distribution({greedy}, SamplingParams(), [], [])", [0.0, 1.0, 0.0], TIE_RULE),
    ] + drawn_tie_cases(drawn("argmax_ties_to_lowest_id"))


def drawn_tie_cases(draws) -> list[Case]:
    """argmax of drawn logits on a grid, each holding a tie at its top; the answer the reference's."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        values = drawn_grid(draws)
        values[draws.randrange(len(values))] = max(values)  # a second id at the top (or the same one)
        want = reference("sampling").argmax(np.array(values, dtype=np.float32))
        cases.append(case(f"drawn-{i} (drawn when graded)", f"argmax({f32(values)})", want, TIE_RULE))
    return cases


def test_argmax_ties_to_lowest_id():
    check(cases_argmax_ties_to_lowest_id())


def cases_greedy_draws_nothing():
    rule = ("card 2.2 step 2 and spec sampling.md 'Draws': temperature 0 takes the argmax of the penalized "
            "logits, ignores top-k, top-p and min-p, returns the penalized log-softmax, a one-hot "
            "distribution, and draws nothing")
    logits = f32([1.0, 3.0, 2.9, -1.0])
    prm = params(repetition_penalty=2.0, top_k=1, top_p=0.1, min_p=0.5)
    penalized = [1.0, 1.5, float(np.float32(2.9)), -1.0]   # the penalty halves id 1
    return [
        case("penalty 2 on id 1, filters set", f"rng = stream(5); token, logprob = sample({logits}, {prm}, [1], [], rng); "
             f"{draws_text(5)}; {{'token': token, 'logprob': logprob, 'u32 draws': draws}}",
             {"token": 2, "logprob": penalized[2] - logsumexp(penalized), "u32 draws": 0}, rule),
        case("its distribution", f"distribution({logits}, {prm}, [1], [])", [0.0, 0.0, 1.0, 0.0], rule),
    ] + drawn_greedy_cases(drawn("greedy_draws_nothing"), rule)


def test_greedy_draws_nothing():
    check(cases_greedy_draws_nothing())


# ---------------------------------------------------------------- the filters


def dist_case(label, logits, prm: str, want, rule, prompt="[]", output="[]") -> Case:
    return case(label, f"distribution({f32(logits)}, {prm}, {prompt}, {output})", want, rule)


def cases_temperature_scales_before_filters():
    rule = ("card 2.2 step 3: the penalized logits are divided by the temperature before top-k, top-p and "
            "min-p, so the distribution is softmax(x / T) and the ids the filters keep change with T")
    x = [2.0, 1.0, 0.0, -1.0]
    cases = [dist_case(f"T = {t}", x, params(temperature=t), softmax(np.array(x) / t).tolist(), rule)
             for t in (0.5, 1.0, 2.0)]
    big = [1000.0, 999.0, 0.0, -1.0]  # exp(1000) overflows: the softmax subtracts the largest logit first
    cases.append(dist_case("logits near 1000 at T = 1", big, params(temperature=1.0), softmax(big).tolist(), rule))
    # top-p 0.8 keeps one id at T = 0.5, two at T = 1 and three at T = 2
    for t, support in ((0.5, [0]), (1.0, [0, 1]), (2.0, [0, 1, 2])):
        cases.append(dist_case(f"top_p 0.8 at T = {t} keeps {len(support)}", x, params(temperature=t, top_p=0.8),
                               spread(support, softmax(np.array(x)[support] / t), 4), rule))
    # min-p 0.1 drops id 3 at T = 1 (ratio e^-3) but keeps it at T = 2 (ratio e^-1.5)
    cases.append(dist_case("min_p 0.1 at T = 1 drops id 3", x, params(temperature=1.0, min_p=0.1),
                           spread([0, 1, 2], softmax(x[:3]), 4), rule))
    cases.append(dist_case("min_p 0.1 at T = 2 keeps id 3", x, params(temperature=2.0, min_p=0.1),
                           softmax(np.array(x) / 2).tolist(), rule))
    cases.append(dist_case("a tiny temperature is not greedy", [1.0, 1.0], params(temperature=1e-6), [0.5, 0.5],
                           rule + "; greedy is temperature 0 exactly"))
    untouched = ("card 2.2: distribution returns a new array, and it and sample leave the logits, prompt and output "
                 "they are given as they were")
    for dtype in ("np.float32", "np.float64"):
        for knobs in (params(temperature=0.5), params(temperature=0.5, repetition_penalty=2.0, top_k=2)):
            text = (f"logits = np.array({x!r}, dtype={dtype}); prompt, output = [0, 1], [2]; "
                    f"distribution(logits, {knobs}, prompt, output); "
                    f"sample(logits, {knobs}, prompt, output, stream(1)); "
                    "{'logits': logits.tolist(), 'prompt': prompt, 'output': output}")
            cases.append(case(f"{dtype[3:]} logits, {knobs}: the arguments as given", text,
                              {"logits": x, "prompt": [0, 1], "output": [2]}, untouched))
    return cases + drawn_distribution_cases(drawn("temperature_scales_before_filters"), "temperature", rule)


def test_temperature_scales_before_filters():
    check(cases_temperature_scales_before_filters())


def cases_top_k_keeps_the_k_highest():
    rule = ("card 2.2 step 4: keep the k highest logits, equal logits ranked by id (lowest first); k = 0 or "
            "k >= V keeps every id")
    return [
        dist_case("top_k 2", [1.0, 3.0, 2.0, 3.0, 0.5], params(temperature=1.0, top_k=2), [0, 0.5, 0, 0.5, 0], rule),
        dist_case("a tie at the cut keeps the lowest ids", [1.0, 2.0, 2.0, 2.0, 0.0], params(temperature=1.0, top_k=2),
                  [0, 0.5, 0.5, 0, 0], rule),
        dist_case("top_k 1 with a tie", [1.0, 2.0, 2.0], params(temperature=0.7, top_k=1), [0, 1, 0], rule),
    ] + [dist_case(f"top_k {k} keeps all", [1.0, 3.0, 2.0], params(temperature=1.0, top_k=k),
                   softmax([1.0, 3.0, 2.0]).tolist(), rule) for k in (0, 3, 10)] + \
        drawn_distribution_cases(drawn("top_k_keeps_the_k_highest"), "top_k", rule)


def test_top_k_keeps_the_k_highest():
    check(cases_top_k_keeps_the_k_highest())


def cases_top_p_keeps_the_token_that_crosses():
    rule = ("card 2.2 step 5: in rank order keep the shortest prefix whose probability sum reaches top_p "
            "(reaching it exactly counts), the id that crosses the threshold included")
    flat = [0.0, 0.0, 0.0, 0.0]   # each id holds exactly 0.25
    cases = [dist_case(f"four ids of 0.25, top_p {top_p}", flat, params(temperature=1.0, top_p=top_p),
                       spread(support, 1.0 / len(support), 4), rule)
             for top_p, support in ((0.25, [0]), (0.5, [0, 1]), (0.6, [0, 1, 2]), (0.76, [0, 1, 2, 3]),
                                    (1.0, [0, 1, 2, 3]))]
    # probabilities 0.644, 0.087, 0.237, 0.032: id 0 alone is short of 0.7, id 2 crosses it
    cases.append(dist_case("id 2 crosses 0.7 and stays", [3.0, 1.0, 2.0, 0.0], params(temperature=1.0, top_p=0.7),
                           spread([0, 2], softmax([3.0, 2.0]), 4), rule))
    # ten ids of 0.1: numpy.cumsum's eighth sum is 0.7999999999999999, short of 0.8, so the ninth crosses
    sums = np.cumsum(np.full(10, 0.1))
    kept = int(np.searchsorted(sums, 0.8, side="left")) + 1
    cases.append(dist_case(f"ten ids of 0.1, top_p 0.8: the running sum as numpy.cumsum gives it keeps {kept}",
                           [0.0] * 10, params(temperature=1.0, top_p=0.8), spread(list(range(kept)), 1.0 / kept, 10),
                           rule + "; spec sampling.md: the sums are plain left-to-right float64 sums (numpy.cumsum), "
                           "compared with no epsilon"))
    sums = np.cumsum(np.full(5, 0.2))
    kept = int(np.searchsorted(sums, 0.8, side="left")) + 1
    cases.append(dist_case(f"five ids of 0.2, top_p 0.8: the fourth sum reaches it, {kept} kept", [0.0] * 5,
                           params(temperature=1.0, top_p=0.8), spread(list(range(kept)), 1.0 / kept, 5),
                           rule + "; the running sum from the top, not the mass left in the tail"))
    return cases + drawn_distribution_cases(drawn("top_p_keeps_the_token_that_crosses"), "top_p", rule)


def test_top_p_keeps_the_token_that_crosses():
    check(cases_top_p_keeps_the_token_that_crosses())


def cases_min_p_relative_to_the_top_probability():
    rule = ("card 2.2 step 6: drop the ids whose probability is below min_p times the top probability; an id "
            "exactly at the threshold stays")
    x = [0.0, -1.0, -2.0, -3.0]   # probabilities proportional to 1, e^-1, e^-2, e^-3 (the top is 0.644)
    return [
        dist_case("min_p 0.1", x, params(temperature=1.0, min_p=0.1), spread([0, 1, 2], softmax(x[:3]), 4), rule),
        dist_case("min_p 0.4", x, params(temperature=1.0, min_p=0.4), [1, 0, 0, 0], rule),
        dist_case("min_p 1 keeps the ids tied with the top", [1.0, 1.0, 0.0], params(temperature=1.0, min_p=1.0),
                  [0.5, 0.5, 0], rule),
    ] + drawn_distribution_cases(drawn("min_p_relative_to_the_top_probability"), "min_p", rule)


def test_min_p_relative_to_the_top_probability():
    check(cases_min_p_relative_to_the_top_probability())


def cases_filters_apply_in_order():
    rule = ("card 2.2 (worked in section 3): penalties, temperature, top-k, then top-p over the softmax of "
            "top-k's survivors, then min-p")
    x = [2.0, 1.0, 1.0, 0.0, -3.0]
    return [
        # top-k leaves ids 0 and 1 at 0.5 each; top-p 0.5 over those survivors keeps id 0 alone
        dist_case("top-p 0.5 over top-k 2's survivors", [0.0, 0.0, 0.0, 0.0], params(temperature=1.0, top_k=2, top_p=0.5),
                  [1, 0, 0, 0], rule),
        dist_case("card 3: top-k 4, top-p 0.9, min-p 0.3", x, params(temperature=1.0, top_k=4, top_p=0.9, min_p=0.3),
                  spread([0, 1, 2], softmax([2.0, 1.0, 1.0]), 5), rule),
        dist_case("card 3 with min-p 0.4", x, params(temperature=1.0, top_k=4, top_p=0.9, min_p=0.4),
                  [1, 0, 0, 0, 0], rule),
        # the repetition penalty moves id 0 out of the top 2
        dist_case("penalties before top-k", x, params(temperature=1.0, top_k=2, repetition_penalty=4.0),
                  spread([1, 2], [0.5, 0.5], 5), rule, prompt="[0]"),
    ] + drawn_distribution_cases(drawn("filters_apply_in_order"), "everything", rule, penalties=True)


def test_filters_apply_in_order():
    check(cases_filters_apply_in_order())


# ---------------------------------------------------------------- the draw and the logprob

WALK_RULE = ("card 2.3 (worked in section 3): walk returns the first id whose running sum, in id order, exceeds "
             "u strictly; an id with no mass is never chosen; past the total, the last id with mass")


def judge_one_float_walk(got, want) -> str | None:
    if not (isinstance(got, dict) and "token" in got):
        return unexpected(got, "a draw")
    if got["token"] != got.get("int(8 * u)"):
        return (f"sample gave {got['token']!r}; the u it should have drawn, stream's first next_f64, walks eight "
                f"ids of 1/8 to {got.get('int(8 * u)')!r}")
    if got.get("u32 draws") != 2:
        return f"sample took {got.get('u32 draws')!r} u32 draws; one next_f64 is 2"
    return None


def cases_sample_walks_the_running_sum():
    p = "np.array([0.25, 0.0, 0.5, 0.25])"
    cases = [case(f"walk(p, {u})", f"walk({p}, {u})", token, WALK_RULE)
             for u, token in ((0.0, 0), (0.2499, 0), (0.25, 2), (0.5, 2), (0.75, 3), (0.9999, 3))]
    cases += [
        case("an id with no mass is never chosen", "walk(np.array([0.0, 0.5, 0.5]), 0.0)", 1, WALK_RULE),
        case("past the total: the last id with mass", "walk(np.array([0.3, 0.3, 0.3, 0.0]), 0.95)", 2, WALK_RULE),
        case("the running sum of p as given, not rescaled", "walk(np.array([0.1, 0.1]), 0.15)", 1, WALK_RULE),
    ]
    draw_rule = ("card 2.3 and spec sampling.md 'Draws': sample draws one u = rng.next_f64() (two u32 draws) and "
                 "returns walk(distribution, u)")
    flat = f32([0.0] * 8)
    for seed in range(20):
        text = (f"rng = stream({seed}); token, _ = sample({flat}, SamplingParams(temperature=1.0), [], [], rng); "
                f"u = stream({seed}).next_f64(); {draws_text(seed)}; "
                "{'token': token, 'int(8 * u)': int(8 * u), 'u32 draws': draws}")
        cases.append(case(f"seed {seed}: eight equal logits", text,
                          {"token": "int(8 * stream(seed).next_f64())", "u32 draws": 2}, draw_rule,
                          judge=judge_one_float_walk))
    return cases + drawn_walk_cases(drawn("sample_walks_the_running_sum"))


def test_sample_walks_the_running_sum():
    check(cases_sample_walks_the_running_sum())


LOGPROB_RULE = ("card 2.3 (worked in section 3): the logprob is log_softmax_at(penalized, token) = "
                "penalized[token] - logsumexp(penalized): after the penalties, before temperature and the filters")


def logprob_judge(want: dict[int, float]):
    """A (token, logprob) pair whose token is one of ``want``'s and whose logprob is ``want[token]``."""
    def judge(got, _want) -> str | None:
        if not (isinstance(got, list) and len(got) == 2):
            return unexpected(got, "a (token, logprob) pair")
        token, logprob = got
        if token not in want:
            return f"the filters keep ids {sorted(want)}; sample gave {token!r}"
        if not (isinstance(logprob, float) and math.isclose(logprob, want[token], rel_tol=0, abs_tol=1e-12)):
            return (f"the logprob of id {token} is penalized[{token}] - logsumexp(penalized) = {want[token]!r} "
                    "whatever the temperature and filters")
        return None
    return judge


def cases_logprob_is_log_softmax_of_penalized_logits():
    penalized = [2.0 / 1.5, 1.0, 0.0, -1.0]
    want = {f"logprob if token {t}": penalized[t] - logsumexp(penalized) for t in (0, 1)}
    judge = logprob_judge({t: penalized[t] - logsumexp(penalized) for t in (0, 1)})
    prm = params(temperature=0.5, top_k=2, repetition_penalty=1.5)
    return [
        case("card 3: [0, 1, 3, 0.5] at id 2", "log_softmax_at(np.array([0.0, 1.0, 3.0, 0.5]), 2)",
             3.0 - math.log(1 + math.e + math.e**3 + math.e**0.5), LOGPROB_RULE),
        case("logits near 1000 do not overflow", "log_softmax_at(np.array([1000.0, 999.0, 0.0]), 1)",
             -1.0 - math.log1p(math.exp(-1.0) + math.exp(-1000.0)), LOGPROB_RULE),
    ] + [case(f"seed {seed}: T 0.5, top_k 2, penalty 1.5 on id 0",
              f"sample({f32([2.0, 1.0, 0.0, -1.0])}, {prm}, [0], [], stream({seed}))", want, LOGPROB_RULE, judge=judge)
         for seed in range(10)] + drawn_logprob_cases(drawn("logprob_is_log_softmax_of_penalized_logits"))


def test_logprob_is_log_softmax_of_penalized_logits():
    check(cases_logprob_is_log_softmax_of_penalized_logits())


def cases_stream_is_pcg32_stream_54():
    rule = ("card 2.1 and spec pcg32.md 'A request's generator': stream(seed) is Pcg32(seed, 54); a seed outside "
            "[0, 2**64) raises ValueError")

    def same(got, _want) -> str | None:
        if not (isinstance(got, dict) and "stream(seed)" in got):
            return unexpected(got, "two lists of draws")
        where = first_difference(got["Pcg32(seed, 54)"], got["stream(seed)"])
        return None if where is None else f"stream(seed) parts from Pcg32(seed, 54) at draw {where}"

    cases = [case(f"seed {seed}", f"a, b = stream({seed}), Pcg32({seed}, 54); "
                  "{'stream(seed)': [a.next_u32() for _ in range(4)], 'Pcg32(seed, 54)': [b.next_u32() for _ in range(4)]}",
                  {"stream(seed)": "the same four draws as Pcg32(seed, 54)"}, rule, judge=same)
             for seed in ("0", "42", "2**63 + 5", "2**64 - 1")]
    cases.append(case("stream(42) starts the published vector", "stream(42).next_u32()", DEMO[0], rule, show=hexed))
    cases += [case(f"stream({seed}) is refused", f"stream({seed})", raises("ValueError"), rule) for seed in ("-1", "2**64")]
    return cases


def test_stream_is_pcg32_stream_54():
    check(cases_stream_is_pcg32_stream_54())


def cases_sampler_rejects_bad_inputs():
    rule = ("card 4 and spec sampling.md 'Inputs': NaN, +inf, no finite value, empty or 2-D logits and ids "
            "outside [0, V) raise ValueError naming the value; a -inf logit is an id that can never be chosen")
    t1 = params(temperature=1.0)
    bad = [("NaN logit", f"distribution(np.array([0.0, float('nan')], dtype=np.float32), {t1}, [], [])", None),
           ("+inf logit", f"distribution(np.array([0.0, float('inf')], dtype=np.float32), {t1}, [], [])", None),
           ("no finite logit", f"distribution(np.array([-float('inf'), -float('inf')], dtype=np.float32), {t1}, [], [])", None),
           ("empty logits", f"distribution(np.zeros(0, dtype=np.float32), {t1}, [], [])", None),
           ("2-D logits", f"distribution(np.zeros((2, 3), dtype=np.float32), {t1}, [], [])", None),
           ("prompt id 3 of 3", f"apply_penalties({f32([0.0, 1.0, 2.0])}, {params(repetition_penalty=1.2)}, [3], [])", "3"),
           ("output id -1", f"sample({f32([0.0, 1.0, 2.0])}, {t1}, [], [-1], stream(0))", "-1"),
           ("prompt id 7 with no penalty", f"distribution({f32([0.0, 0.0, 0.0])}, {t1}, [7], [])", "7"),
           ("NaN logit to argmax", "argmax(np.array([float('nan'), 0.0], dtype=np.float32))", None)]
    cases = [case(label, text, raises("ValueError"), rule, **({"judge": judge_raises_naming(word)} if word else {}))
             for label, text, word in bad]
    masked = "np.array([0.0, -float('inf'), 0.0], dtype=np.float32)"
    cases += [
        case("a -inf logit is masked", f"distribution({masked}, {t1}, [1], [1])", [0.5, 0.0, 0.5], rule),
        case("greedy over a masked id", f"sample({masked}, {params(repetition_penalty=1.5)}, [1], [], stream(0))",
             [0, -math.log(2)], rule),
    ]
    return cases


def test_sampler_rejects_bad_inputs():
    check(cases_sampler_rejects_bad_inputs())


PROPERTY_RULE = ("card 2.2 and 2.3: distribution is float64 of length V, non-negative, sums to 1 and keeps at "
                 "most top_k ids; sample draws one next_f64 u (two u32 draws) and returns walk(distribution, u), "
                 "an id with mass, with a logprob <= 0")


def judge_property(got, want) -> str | None:
    if not (isinstance(got, dict) and isinstance(got.get("distribution"), list)):
        return unexpected(got, "a distribution and a draw")
    d = got["distribution"]
    if got["dtype"] != "float64" or len(d) != want["length"]:
        return f"distribution is {got['dtype']} of length {len(d)}, not float64 of length {want['length']}"
    if min(d) < 0 or not math.isclose(sum(d), 1.0, rel_tol=0, abs_tol=1e-12):
        return f"distribution has a negative entry or sums to {sum(d)!r}, not 1"
    kept = sum(1 for v in d if v > 0)
    if kept > want["ids kept, at most"]:
        return f"distribution keeps {kept} ids; top_k allows {want['ids kept, at most']}"
    if got["token"] != got["walk(d, u)"]:
        return (f"sample gave {got['token']!r}; walk(distribution, u) with u = stream(seed)'s first next_f64 "
                f"gives {got['walk(d, u)']!r}")
    if not (isinstance(got["token"], int) and 0 <= got["token"] < len(d) and d[got["token"]] > 0):
        return f"sample gave {got['token']!r}, an id with no mass"
    if not got["logprob"] <= 0.0:
        return f"the logprob {got['logprob']!r} is above 0"
    if got["u32 draws"] != 2:
        return f"sample took {got['u32 draws']!r} u32 draws; one next_f64 is 2"
    return None


def cases_sample_draws_from_its_distribution():
    gen = np.random.default_rng(99)
    cases = []
    for n in range(300):
        vocab = 2 + int(gen.integers(40))
        logits = (gen.integers(97, size=vocab) / 8.0 - 6.0).tolist()
        prompt = gen.integers(vocab, size=int(gen.integers(5))).tolist()
        output = gen.integers(vocab, size=int(gen.integers(8))).tolist()
        fields = {"temperature": 0.25 + int(gen.integers(8)) / 4, "top_k": int(gen.integers(6)),
                  "top_p": 1.0 - int(gen.integers(4)) / 5, "min_p": int(gen.integers(3)) / 10,
                  "repetition_penalty": 1.0 + int(gen.integers(3)) / 4,
                  "presence_penalty": int(gen.integers(3)) / 4, "frequency_penalty": int(gen.integers(3)) / 8}
        text = (f"logits = {f32(logits)}; prm = {params(**fields)}; d = distribution(logits, prm, {prompt}, {output}); "
                f"rng = stream({n}); token, logprob = sample(logits, prm, {prompt}, {output}, rng); "
                f"{draws_text(n)}; {{'distribution': d.tolist(), 'dtype': str(d.dtype), 'token': token, "
                f"'walk(d, u)': walk(d, stream({n}).next_f64()), 'logprob': logprob, 'u32 draws': draws}}")
        want = {"length": vocab, "dtype": "float64", "sum": 1.0, "ids kept, at most": fields["top_k"] or vocab,
                "token": "walk(distribution, u)", "u32 draws": 2}
        cases.append(case(f"#{n}", text, want, PROPERTY_RULE,
                          judge=judge_property))
    return cases


def test_sample_draws_from_its_distribution():
    check(cases_sample_draws_from_its_distribution(), "seeded case")


GOLDEN_RULE = ("card 2.2 and 2.3, spec sampling.md: the reference's distribution, token, logprob and the "
               "generator's next u32; surviving ids, token and next u32 exactly, probabilities and the logprob "
               "to a relative 1e-9")


def judge_golden(got, want) -> str | None:
    if not (isinstance(got, dict) and isinstance(got.get("distribution"), list)):
        return unexpected(got, "a distribution and a draw")
    if got["kept"] != want["kept"]:
        return f"which ids survive the filters: they part at {first_difference(want['kept'], got['kept'])}"
    if len(got["distribution"]) != len(want["distribution"]):
        return f"distribution has {len(got['distribution'])} entries for {len(want['distribution'])} logits"
    for i, (a, b) in enumerate(zip(want["distribution"], got["distribution"])):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15):
            return f"they part at distribution[{i}]: {a!r} and yours {b!r}"
    if got["token"] != want["token"]:
        return "they part at token: the distribution agrees, the draw does not"
    if not (isinstance(got["logprob"], float) and math.isclose(got["logprob"], want["logprob"], rel_tol=1e-9, abs_tol=1e-12)):
        return "they part at logprob"
    if got["next_u32"] != want["next_u32"]:
        return "they part at next_u32: the generator drew a different number of times"
    return None


def golden_sampling_case(label: str, c: dict) -> Case:
    """A sampler case from a record shaped as the fixture's (``oracle/L10.1/sampler_golden.py``)."""
    prm = params(**{**PARAM_DEFAULTS, **c["params"]})
    skip = f"[rng.next_u32() for _ in range({c['skip']})]; " if c["skip"] else ""
    text = (f"logits = {f32(c['logits'])}; prm = {prm}; d = distribution(logits, prm, {c['prompt']}, {c['output']}); "
            f"rng = stream({c['seed']}); {skip}token, logprob = sample(logits, prm, {c['prompt']}, {c['output']}, rng); "
            "{'kept': np.flatnonzero(d > 0).tolist(), 'distribution': d.tolist(), 'token': token, "
            "'logprob': logprob, 'next_u32': rng.next_u32()}")
    want = {"kept": [i for i, p in enumerate(c["distribution"]) if p > 0], "distribution": c["distribution"],
            "token": c["token"], "logprob": c["logprob"], "next_u32": c["next_u32"]}
    return case(label, text, want, GOLDEN_RULE, judge=judge_golden)


# A sampler case a grading draws (graded.drawn), drawn as the oracle draws the fixture's and answered by
# the reference in the judge: the fixture is public, and a table of it has no answer for these.
GOLDEN_KINDS = ("greedy", "temperature", "top_k", "top_p", "min_p", "everything")


def drawn_sampling_record(draws, kind: str) -> dict:
    vocab = draws.randint(2, 48)
    style = draws.randrange(3)
    if style == 0:
        scale = draws.choice((1.0, 3.0, 8.0))
        raw = [scale * (sum(draws.random() for _ in range(4)) - 2.0) for _ in range(vocab)]
    elif style == 1:  # a half-unit grid: ties are common
        raw = [draws.randint(-8, 8) / 2 for _ in range(vocab)]
    else:  # all negative, where a wrong repetition penalty shows
        raw = [-0.25 - 6.0 * draws.random() for _ in range(vocab)]
    logits = np.array(raw, dtype=np.float32)
    top = [int(t) for t in np.argsort(-logits, kind="stable")[:3]]
    prompt, output = ([draws.choice(top) if draws.randrange(2) else draws.randrange(vocab)
                       for _ in range(draws.randint(0, most))] for most in (12, 16))
    knobs = {"repetition_penalty": draws.choice((1.0, 1.1, 1.3, 0.8, 2.0)),
             "presence_penalty": draws.choice((0.0, 0.5, -0.3, 1.0)),
             "frequency_penalty": draws.choice((0.0, 0.2, 0.7, -0.1))}
    if kind != "greedy":
        knobs["temperature"] = draws.choice((0.3, 0.7, 1.0, 1.3, 2.0))
    if kind in ("top_k", "everything"):
        knobs["top_k"] = draws.choice((1, 2, 3, 5, 10, vocab, vocab + 5))
    if kind in ("top_p", "everything"):
        knobs["top_p"] = draws.choice((0.3, 0.5, 0.8, 0.9, 0.95))
    if kind in ("min_p", "everything"):
        knobs["min_p"] = draws.choice((0.02, 0.05, 0.1, 0.3, 0.6))
    seed, skip = draws.getrandbits(64) if draws.randrange(4) else draws.randrange(1000), draws.randrange(4)
    sampling = reference("sampling")
    prm = sampling.SamplingParams(**knobs)
    rng = sampling.stream(seed)
    for _ in range(skip):
        rng.next_u32()
    token, logprob = sampling.sample(logits, prm, prompt, output, rng)
    return {"kind": kind, "logits": [float(v) for v in logits], "prompt": prompt, "output": output, "params": knobs,
            "seed": seed, "skip": skip, "distribution": sampling.distribution(logits, prm, prompt, output).tolist(),
            "token": token, "logprob": logprob, "next_u32": rng.next_u32()}


def drawn_distribution_cases(draws, kind: str, rule: str, penalties: bool = False) -> list[Case]:
    """``distribution`` of logits and filters of ``kind`` drawn as the fixture's are (and its penalties,
    where ``penalties``), the answer the reference's: a test's own rule over cases no table holds."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        c = drawn_sampling_record(draws, kind)
        knobs = c["params"] if penalties else {k: v for k, v in c["params"].items() if not k.endswith("penalty")}
        prompt, output = (c["prompt"], c["output"]) if penalties else ([], [])
        sampling = reference("sampling")
        want = sampling.distribution(np.array(c["logits"], dtype=np.float32), sampling.SamplingParams(**knobs),
                                     prompt, output).tolist()
        cases.append(dist_case(f"drawn-{i} (drawn when graded)", c["logits"], params(**{**PARAM_DEFAULTS, **knobs}),
                               want, rule, prompt=str(prompt), output=str(output)))
    return cases


def drawn_greedy_cases(draws, rule: str) -> list[Case]:
    """Greedy ``sample`` as the fixture's greedy cases draw it: the reference's token and logprob, no draw."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        c = drawn_sampling_record(draws, "greedy")
        text = (f"rng = stream({c['seed']}); token, logprob = sample({f32(c['logits'])}, "
                f"{params(**{**PARAM_DEFAULTS, **c['params']})}, {c['prompt']}, {c['output']}, rng); "
                f"{draws_text(c['seed'])}; {{'token': token, 'logprob': logprob, 'u32 draws': draws}}")
        cases.append(case(f"drawn-{i} (drawn when graded)", text,
                          {"token": c["token"], "logprob": c["logprob"], "u32 draws": 0}, rule))
    return cases


def drawn_logprob_cases(draws) -> list[Case]:
    """``sample`` of fixture-like cases with every knob set: whichever id it draws from the support, its
    logprob is the reference's log-softmax of the penalized logits there."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        c = drawn_sampling_record(draws, "everything")
        sampling = reference("sampling")
        logits, prm = np.array(c["logits"], dtype=np.float32), sampling.SamplingParams(**c["params"])
        penalized = sampling.apply_penalties(logits, prm, c["prompt"], c["output"])
        support = np.flatnonzero(sampling.distribution(logits, prm, c["prompt"], c["output"]) > 0).tolist()
        want = {t: sampling.log_softmax_at(penalized, t) for t in support}
        text = (f"token, logprob = sample({f32(c['logits'])}, {params(**{**PARAM_DEFAULTS, **c['params']})}, "
                f"{c['prompt']}, {c['output']}, stream({c['seed']})); [token, logprob]")
        cases.append(case(f"drawn-{i} (drawn when graded)", text, {f"logprob if token {t}": v for t, v in want.items()},
                          LOGPROB_RULE, judge=logprob_judge(want)))
    return cases


def drawn_walk_cases(draws) -> list[Case]:
    """``walk`` of drawn probabilities (some ids with no mass, sums short of 1 or past it) and u."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        p = [0.0 if draws.random() < 0.3 else round(draws.random(), 3) for _ in range(draws.randint(2, 10))]
        p[draws.randrange(len(p))] = round(draws.uniform(0.05, 1.0), 3)
        u = round(draws.random(), 4)
        cases.append(case(f"drawn-{i} (drawn when graded)", f"walk(np.array({p!r}), {u!r})",
                          reference("sampling").walk(np.array(p), u), WALK_RULE))
    return cases


def cases_sampler_matches_golden():
    cases = [golden_sampling_case(f"#{c['id']} {c['kind']}", c) for c in load_fixture(GOLDEN)["sampling"]]
    draws = drawn("sampler_matches_golden")
    for i in range(DRAWN_SAMPLES if draws is not None else 0):
        c = drawn_sampling_record(draws, GOLDEN_KINDS[i % len(GOLDEN_KINDS)])
        cases.append(golden_sampling_case(f"drawn-{i} {c['kind']} (drawn when graded)", c))
    return cases


def test_sampler_matches_golden():
    cases = cases_sampler_matches_golden()
    assert len(cases) >= 100, f"fixtures/{GOLDEN} holds only {len(cases)} sampler cases; it should hold 120"
    check(cases, "recorded case")


# ---------------------------------------------------------------- KvPool

POOL_RULE = ("card 2.4: allocate takes a free block (refcount 1, fill 0) and raises PoolError when none is left; "
             "retain adds an owner; release removes one and at 0 the block is free again")


def cases_kvpool_allocate_and_release():
    four = "pool = KvPool(4, 16); blocks = [pool.allocate() for _ in range(4)]"
    return [
        case("a new pool", "pool = KvPool(4, 16); [pool.num_blocks, pool.block_tokens, pool.num_free()]",
             [4, 16, 4], POOL_RULE),
        case("four allocations", f"{four}; {{'sorted': sorted(blocks), 'refcounts': [pool.refcount(b) for b in blocks], "
             "'fills': [pool.fill(b) for b in blocks], 'num_free': pool.num_free()}",
             {"sorted": [0, 1, 2, 3], "refcounts": [1, 1, 1, 1], "fills": [0, 0, 0, 0], "num_free": 0}, POOL_RULE),
        case("release frees; the block comes back empty",
             f"{four}; pool.set_fill(blocks[1], 9); pool.release(blocks[1]); "
             "freed = {'refcount': pool.refcount(blocks[1]), 'num_free': pool.num_free()}; again = pool.allocate(); "
             "{'after release': freed, 'allocate gives it back': again == blocks[1], "
             "'its fill and refcount': [pool.fill(again), pool.refcount(again)]}",
             {"after release": {"refcount": 0, "num_free": 1}, "allocate gives it back": True,
              "its fill and refcount": [0, 1]}, POOL_RULE),
    ]


def test_kvpool_allocate_and_release():
    check(cases_kvpool_allocate_and_release())


def cases_kvpool_retain_shares_a_block():
    shared = "pool = KvPool(3, 4); b = pool.allocate(); pool.set_fill(b, 4); pool.retain(b)"
    return [
        case("retain adds an owner", f"{shared}; pool.refcount(b)", 2, POOL_RULE),
        case("one release of a shared block", f"{shared}; pool.release(b); "
             "{'refcount': pool.refcount(b), 'num_free': pool.num_free(), 'fill': pool.fill(b)}",
             {"refcount": 1, "num_free": 2, "fill": 4}, POOL_RULE + "; a shared block survives one release, full"),
        case("the last release frees it", f"{shared}; pool.release(b); pool.release(b); "
             "{'refcount': pool.refcount(b), 'num_free': pool.num_free()}", {"refcount": 0, "num_free": 3}, POOL_RULE),
    ]


def test_kvpool_retain_shares_a_block():
    check(cases_kvpool_retain_shares_a_block())


def cases_kvpool_fill_and_set_fill():
    rule = ("card 2.4: set_fill(b, n) accepts an integer 0 <= n <= block_tokens; any other n (a bool too) raises "
            "PoolError and changes nothing")
    block = "pool = KvPool(2, 8); b = pool.allocate()"
    return [case(f"set_fill(b, {n})", f"{block}; pool.set_fill(b, {n}); pool.fill(b)", n, rule) for n in (0, 1, 8, 3)] + [
        case(f"set_fill(b, {n}) is refused", f"{block}; pool.set_fill(b, {n})", raises("PoolError"), rule)
        for n in (9, -1, True, 1.5)
    ] + [case("a fill goes down as well as up", f"{block}; pool.set_fill(b, 5); pool.set_fill(b, 2); pool.fill(b)", 2, rule),
         case("a refused set_fill changes nothing",
              f"{block}; pool.set_fill(b, 3); [refused(lambda: pool.set_fill(b, 9)), refused(lambda: pool.set_fill(b, -1)), "
              "pool.fill(b)]" + REFUSED_NOTE, ["PoolError", "PoolError", 3], rule)]


def test_kvpool_fill_and_set_fill():
    check(cases_kvpool_fill_and_set_fill())


def cases_kvpool_prefix_index():
    rule = ("card 2.4: the prefix index maps a whole token prefix, a whole number of blocks long, to a full "
            "block; register returns the block now indexed (an earlier registration wins); lookup gives the "
            "block or None; partial blocks and ragged prefixes raise PoolError")
    setup = ("pool = KvPool(6, 2); first, second, twin, partial = (pool.allocate() for _ in range(4)); "
             "[pool.set_fill(b, 2) for b in (first, second, twin)]; pool.set_fill(partial, 1); "
             "name = {first: 'first', second: 'second', twin: 'twin', partial: 'partial'}.get")
    registered = f"{setup}; pool.register([5, 6], first); pool.register([5, 6, 7, 8], second)"
    return [
        case("an empty index", f"{setup}; pool.lookup([5, 6])", None, rule),
        case("register returns the block", f"{setup}; [name(pool.register([5, 6], first)), "
             "name(pool.register([5, 6, 7, 8], second))]", ["first", "second"], rule),
        case("lookup by the whole prefix", f"{registered}; "
             "[name(pool.lookup(t)) for t in ([5, 6], [5, 6, 7, 8], [5], [6, 5], [7, 8])]",
             ["first", "second", None, None, None], rule),
        case("an earlier registration wins", f"{registered}; {{'register([5, 6], twin)': name(pool.register([5, 6], twin)), "
             "'is_registered': [pool.is_registered(b) for b in (first, second, twin, partial)]}",
             {"register([5, 6], twin)": "first", "is_registered": [True, True, False, False]}, rule),
        case("a partial block is refused", f"{registered}; pool.register([1, 2], partial)", raises("PoolError"), rule),
        case("a ragged prefix is refused", f"{registered}; pool.register([1, 2, 3], twin)", raises("PoolError"), rule),
        case("an empty prefix is refused", f"{registered}; pool.register([], twin)", raises("PoolError"), rule),
        case("an indexed block under a second prefix is refused", f"{registered}; pool.register([7, 7], first)",
             raises("PoolError"), rule + "; a block is indexed under one prefix at most"),
        case("a free block is refused", f"{registered}; pool.register([7, 7], 5)", raises("PoolError"), rule),
        case("set_fill leaves the index as it is", f"{registered}; pool.set_fill(first, 1); "
             "[name(pool.lookup([5, 6])), pool.is_registered(first), pool.fill(first)]", ["first", True, 1],
             rule + "; set_fill never touches the index"),
        case("a bool block id is refused", "pool = KvPool(2, 2); a, b = pool.allocate(), pool.allocate(); "
             "pool.set_fill(b, 2); pool.register([1, 2], True)", raises("PoolError"), rule),
        case("a block that does not exist is refused", f"{registered}; pool.register([7, 7], 99)", raises("PoolError"),
             rule),
        case("a partial block is refused under an indexed prefix too", f"{registered}; pool.register([5, 6], partial)",
             raises("PoolError"), rule + "; b must be full whether or not the prefix is indexed"),
    ]


def test_kvpool_prefix_index():
    check(cases_kvpool_prefix_index())


def cases_kvpool_freed_block_leaves_prefix_index():
    rule = ("card 2.4 (worked in section 3): a block stays in the prefix index while any owner holds it and "
            "leaves it when its last release frees it, so a reused block never answers for its old prefix")
    held = "pool = KvPool(2, 2); b = pool.allocate(); pool.set_fill(b, 2); pool.register([3, 4], b); pool.retain(b); pool.release(b)"
    return [
        case("still held by its other owner", f"{held}; [pool.lookup([3, 4]) == b, pool.is_registered(b)]", [True, True], rule),
        case("freed by the last release", f"{held}; pool.release(b); [pool.lookup([3, 4]), pool.is_registered(b)]",
             [None, False], rule),
        case("reused blocks do not answer for the old prefix",
             f"{held}; pool.release(b); blocks = [pool.allocate(), pool.allocate()]; [pool.set_fill(c, 2) for c in blocks]; "
             "{'lookup([3, 4])': pool.lookup([3, 4]), 'register([9, 9], blocks[0])': pool.register([9, 9], blocks[0]) == blocks[0], "
             "'register([3, 4], blocks[1])': pool.register([3, 4], blocks[1]) == blocks[1]}",
             {"lookup([3, 4])": None, "register([9, 9], blocks[0])": True, "register([3, 4], blocks[1])": True}, rule),
    ]


def test_kvpool_freed_block_leaves_prefix_index():
    check(cases_kvpool_freed_block_leaves_prefix_index())


def cases_kvpool_exhaustion_raises_pool_error():
    rule = ("card 2.4: allocate raises PoolError when every block is in use, and the pool works on after a "
            "release; a pool with no blocks or no slots per block, or sized with a bool, is refused with PoolError")
    full = "pool = KvPool(3, 4); held = [pool.allocate() for _ in range(3)]"
    return [
        case("the fourth allocate of three blocks", f"{full}; pool.allocate()", raises("PoolError"), rule),
        case("the pool works on after it", f"{full}; fourth = refused(pool.allocate); free = pool.num_free(); "
             "pool.release(held[0]); {'fourth allocate': fourth, 'num_free after it': free, "
             "'allocate after a release': pool.allocate() == held[0]}" + REFUSED_NOTE,
             {"fourth allocate": "PoolError", "num_free after it": 0, "allocate after a release": True}, rule),
        case("KvPool(0, 4) is refused", "KvPool(0, 4)", raises("PoolError"), rule),
        case("KvPool(4, 0) is refused", "KvPool(4, 0)", raises("PoolError"), rule),
        case("KvPool(True, 4) is refused", "KvPool(True, 4)", raises("PoolError"), rule),
        case("KvPool(4, True) is refused", "KvPool(4, True)", raises("PoolError"), rule),
        case("KvPool(-1, 4) is refused", "KvPool(-1, 4)", raises("PoolError"), rule),
        case("KvPool(4, 2.5) is refused", "KvPool(4, 2.5)", raises("PoolError"), rule),
    ]


def test_kvpool_exhaustion_raises_pool_error():
    check(cases_kvpool_exhaustion_raises_pool_error())


def cases_kvpool_double_release_raises_pool_error():
    rule = ("card 2.4: releasing, retaining or filling a free block, or touching a block that does not exist "
            "(a bool is not a block id), raises PoolError and leaves the pool as it was")
    freed = "pool = KvPool(3, 4); b = pool.allocate(); pool.release(b)"
    touches = [("release", "pool.release(b)"), ("retain", "pool.retain(b)"), ("fill", "pool.fill(b)"),
               ("set_fill", "pool.set_fill(b, 1)")]
    cases = [case(f"{what} of a freed block", f"{freed}; {text}", raises("PoolError"), rule) for what, text in touches]
    cases.append(case("the refused release changes nothing",
                      f"{freed}; again = refused(lambda: pool.release(b)); "
                      "{'second release': again, 'num_free': pool.num_free(), 'refcount': pool.refcount(b)}" + REFUSED_NOTE,
                      {"second release": "PoolError", "num_free": 3, "refcount": 0}, rule))
    cases += [case(f"release({b}) of a block that does not exist", f"pool = KvPool(3, 4); pool.release({b})",
                   raises("PoolError"), rule) for b in (-1, 3, 99)]
    held = "pool = KvPool(3, 4); a, b = pool.allocate(), pool.allocate()"
    cases += [case(f"{what}(True) while block 1 is in use: True is not a block id", f"{held}; pool.{what}(True)",
                   raises("PoolError"), rule) for what in ("release", "retain", "fill", "refcount")]
    whole = "pool = KvPool(1, 4); b = pool.allocate()"
    cases += [case(f"{what}(-1) while block 0, the last, is in use: -1 is not a block id", f"{whole}; pool.{what}(-1)",
                   raises("PoolError"), rule) for what in ("release", "refcount")]
    cases.append(case("a refused release(-1) leaves the block in use", f"{whole}; again = refused(lambda: pool.release(-1)); "
                      "{'release(-1)': again, 'num_free': pool.num_free(), 'refcount': pool.refcount(b)}" + REFUSED_NOTE,
                      {"release(-1)": "PoolError", "num_free": 0, "refcount": 1}, rule))
    attempts = ", ".join(f"lambda: {text}" for _, text in touches) + ", lambda: pool.release(-1), lambda: pool.release(3)"
    cases.append(case("the pool is whole after every refusal",
                      f"{freed}; refusals = [refused(f) for f in ({attempts})]; "
                      "{'refusals': refusals, 'three allocations': sorted(pool.allocate() for _ in range(3))}" + REFUSED_NOTE,
                      {"refusals": ["PoolError"] * 6, "three allocations": [0, 1, 2]}, rule))
    return cases


def test_kvpool_double_release_raises_pool_error():
    check(cases_kvpool_double_release_raises_pool_error())


def cases_kvpool_kv_storage():
    rule = ("card 2.4: k and v are separate zeroed float32 arrays of shape "
            "(layers, num_blocks, block_tokens, kv_heads, head_dim)")
    pool = "pool = KvPool(3, 4, layers=2, kv_heads=2, head_dim=8)"
    return [
        case("KvPool(3, 4, layers=2, kv_heads=2, head_dim=8)",
             f"{pool}; {{name: [list(a.shape), str(a.dtype), bool(a.any())] for name, a in (('k', pool.k), ('v', pool.v))}}",
             {"k": [[2, 3, 4, 2, 8], "float32", False], "v": [[2, 3, 4, 2, 8], "float32", False]}, rule),
        case("writing k leaves v zero", f"{pool}; pool.k[1, 2, 3] = 1.0; bool(pool.v.any())", False, rule),
        case("what is written stays, each array its own",
             f"{pool}; pool.k[1, 2, 3] = 1.0; pool.v[0, 1, 2] = -2.0; "
             "{'k': float(pool.k.sum()), 'v': float(pool.v.sum())}", {"k": 16.0, "v": -32.0},
             rule + ", which keep what is written into them"),
    ]


def test_kvpool_kv_storage():
    check(cases_kvpool_kv_storage())


CONSERVE_STEPS = 600


def pool_steps(ops: list[tuple[str, int]]):
    """Run allocate/retain/release steps on KvPool(8, 4) beside a model of the refcounts.

    ``("allocate", _)`` allocates when fewer than 8 blocks are held; ``("retain", i)`` and
    ``("release", i)`` act on the i-th held block (in id order, i modulo how many are held). The
    answer is "all agree" or the first step where the pool and the model part.
    """
    pool = KvPool(8, 4)
    refs: dict[int, int] = {}
    done: list[str] = []
    for step, (op, pick) in enumerate(ops):
        if op != "allocate" and not refs or op == "allocate" and len(refs) == 8:
            continue
        b = None if op == "allocate" else sorted(refs)[pick % len(refs)]
        done.append(f"{op}({'' if b is None else b})")
        try:
            if op == "allocate":
                b = pool.allocate()
                if b in refs or not 0 <= b < 8:
                    return {"step": step, "last steps": done[-5:], "allocate gave": b,
                            "held before": sorted(refs), "problem": "handed out a held or nonexistent block"}
                refs[b] = 1
            else:
                getattr(pool, op)(b)
                refs[b] += 1 if op == "retain" else -1
                if refs[b] == 0:
                    del refs[b]
            seen = {"num_free": pool.num_free(), "refcounts": {blk: pool.refcount(blk) for blk in sorted(refs)}}
        except NotImplementedError:
            raise
        except Exception as err:  # the pool refusing a legal step is the answer
            return {"step": step, "last steps": done[-5:], "raised": f"{type(err).__name__}: {err}"}
        model = {"num_free": 8 - len(refs), "refcounts": {blk: n for blk, n in sorted(refs.items())}}
        if seen != model:
            return {"step": step, "last steps": done[-5:], "pool": seen, "model": model}
    return "all agree"


def judge_steps(got, want) -> str | None:
    """Name the step and the first count where the pool leaves its model."""
    if got == want:
        return None
    if not isinstance(got, dict) or "step" not in got:
        return unexpected(got, "'all agree' or a step")
    if "pool" in got:
        return f"after step {got['step']} ({got['last steps'][-1]}) they part at {first_difference(got['model'], got['pool'])}"
    return f"at step {got['step']} ({got['last steps'][-1]}) " + (got.get("problem") or f"it raised {got['raised']}")


def seeded_ops(seed: int) -> list[tuple[str, int]]:
    """600 (operation, pick) steps drawn from ``np.random.default_rng(seed)``, for ``pool_steps``."""
    gen = np.random.default_rng(seed)
    return [(("allocate", "retain", "release")[int(gen.integers(3))], int(gen.integers(8)))
            for _ in range(CONSERVE_STEPS)]


def cases_kvpool_conserves_blocks():
    rule = ("card 2.4: after every allocate, retain and release, num_free is num_blocks minus the held blocks, "
            "each refcount is its number of owners, and no held block is handed out again")
    note = "   # both in course/tests/test_l10_1.py: KvPool(8, 4) beside a model of its refcounts, checked after every step"
    seeds = [(11, "")]
    draws = drawn("kvpool_conserves_blocks")
    if draws is not None:  # graded: steps no submission can know ahead
        seeds.append((draws.randrange(2**32), " (drawn when graded)"))
    return [Case(f"{CONSERVE_STEPS} seeded steps{label}", f"pool_steps(seeded_ops({seed})){note}",
                 lambda s=seed: pool_steps(seeded_ops(s)), "all agree", rule, judge=judge_steps)
            for seed, label in seeds]


def test_kvpool_conserves_blocks():
    check(cases_kvpool_conserves_blocks())
