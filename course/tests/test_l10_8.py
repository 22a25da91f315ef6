"""Graded tests for L10.8, speculative decoding in the engine (card: course/L10.8.md, section 4).

Each test is named after a row of the card's table and checks a list of cases (``grader.cases``):
``cases_<name>()`` builds them, ``test_<name>()`` checks them. A failing case is named in the
message with the call that reproduces it, the expected answer, yours, where they part and the
card's rule; ``ol check`` also compares your answers on those cases with each named pitfall's.

The code under test is reached only through ``tinyllm.*``, which the conftest binds to the package
``OL_IMPL`` names; ``fakes`` holds the fake targets of the generation tests.
"""

import math
from typing import Callable, NamedTuple

import numpy as np

from graded import DRAWN_RULE_CASES, drawn, load_fixture, reference
from fakes import CycleTarget, TableTarget
from grader.cases import Case, chi2_quantile, call, check, each, plain, raises
from tinyllm.kvpool import KvPool
from tinyllm.sampling import SamplingParams, sample, stream
from tinyllm.spec import (Draft, SpecConfig, blocks_for, dense_distribution, generate, generate_stream,
                          ngram_draft, prompt_lookup, propose, residual, rollback, sample_dense,
                          speculative_step, verify_draft)

GOLDEN = "L10.8/spec_golden.json"
GREEDY = SamplingParams()

# The cycle 0 -> 1 -> ... -> 5 -> 0; ids 6 and 7 lead back into it.
CYCLE = [1, 2, 3, 4, 5, 0, 0, 0]
CYCLE_PROMPT = [0, 1, 2, 3, 4, 5, 0, 1]

_golden = None


def golden(section: str) -> list[dict]:
    """A list of recorded cases from the golden fixture (read once per process)."""
    global _golden
    if _golden is None:
        _golden = load_fixture(GOLDEN)
    if section not in _golden:
        raise AssertionError(f"fixtures/{GOLDEN} has no {section!r} cases; regenerate it with "
                             "python oracle/L10.8/spec_golden.py --out fixtures/L10.8/spec_golden.json")
    return _golden[section]


def f32_row(hexed: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hexed), dtype="<f4").copy()


def f64_row(hexed: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hexed), dtype="<f8").copy()


def rows_text(rows) -> str:
    return "[" + ", ".join(f"np.array({np.asarray(r).tolist()!r}, dtype=np.float32)" for r in rows) + "]"


def params_text(prm: SamplingParams) -> str:
    changed = [f"{k}={v!r}" for k, v in vars(prm).items() if v != getattr(GREEDY, k)]
    return f"SamplingParams({', '.join(changed)})"


def plain_greedy(target, prompt, params, max_new):
    """Greedy decoding with one target pass per token, no speculation."""
    out: list[int] = []
    rows = target.extend(prompt)
    while len(out) < max_new:
        token, _ = sample(rows[-1], params, prompt, out, stream(0))
        out.append(token)
        if len(out) < max_new:
            rows = target.extend([token])
    return out


# --- 2.1 Drafts --------------------------------------------------------------------------------

LOOKUP_RULE = ("card 2.1: for n from max_ngram down to min_ngram, copy up to k tokens after the latest "
               "earlier occurrence of the last n tokens (a start i < t - n; it may overlap the suffix); the "
               "copy may run on into the suffix and stops only at the end of the context; no occurrence for "
               "any n gives []")


def cases_hand_example_prompt_lookup():
    def lookup(label, ctx, k, max_ngram, min_ngram, want):
        return call(label, prompt_lookup, ctx, k, max_ngram, min_ngram, expected=want, rule=LOOKUP_RULE)

    return [
        # Section 3: [8 5 6] never occurred; [5 6] did, at 0, and [7 8 5] followed it.
        lookup("section 3", [5, 6, 7, 8, 5, 6], 3, 3, 1, [7, 8, 5]),
        lookup("a copy that runs into the suffix", [1, 2, 3, 1, 2], 4, 3, 1, [3, 1, 2]),
        lookup("a constant run", [4, 4, 4], 3, 2, 1, [4]),
        lookup("no earlier occurrence", [1, 2, 3, 4], 3, 3, 1, []),
        lookup("one token", [9], 3, 3, 1, []),
        lookup("empty context", [], 3, 3, 1, []),
        lookup("min_ngram 2 refuses a one-token match", [1, 2, 3, 4, 2], 3, 3, 2, []),
        lookup("exactly n + 1 tokens", [7, 7, 7], 2, 2, 2, [7]),
        lookup("k = 0 drafts nothing", [5, 6, 7, 8, 5, 6], 0, 3, 1, []),
        lookup("k < 0 drafts nothing", [5, 6, 7, 8, 5, 6], -1, 3, 1, []),
    ] + drawn_edge_cases(drawn("hand_example_prompt_lookup"), "prompt_lookup")


def test_hand_example_prompt_lookup():
    check(cases_hand_example_prompt_lookup())


# Cases a recorded test draws when graded (graded.drawn), their answers the reference's: every
# recorded case is public, and a table of them has no answer for these.
DRAWN_CASES = 8
DRAWN_GREEDY = 2  # requests greedy_spec_equals_greedy_without_spec draws, each under every draft


def drawn_edge_cases(draws, name: str) -> list[Case]:
    """``prompt_lookup`` or ``ngram_draft`` where the hand examples sit: contexts of 0 to 8 tokens
    over three ids, k from -1 to 5, the n-grams from 1 to 3; the answers the reference's."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        ctx, k, top = [draws.randrange(3) for _ in range(draws.randint(0, 8))], draws.randint(-1, 5), draws.randint(1, 3)
        fn, args, rule = ((prompt_lookup, (ctx, k, top, draws.randint(1, top)), LOOKUP_RULE) if name == "prompt_lookup"
                          else (ngram_draft, (ctx, k, top), NGRAM_RULE))
        cases.append(call(f"drawn-{i} (drawn when graded)", fn, *args,
                          expected=getattr(reference("spec"), name)(*args), rule=rule))
    return cases


def drawn_context(draws, vocab: int) -> list[int]:
    """Text to draft from, as the fixture's oracle draws it: periodic, repetitive or phrases in noise."""
    kind = draws.randrange(3)
    if kind == 0:
        period = [draws.randrange(vocab) for _ in range(draws.randint(1, 7))]
        return ([draws.randrange(vocab) for _ in range(draws.randint(0, 3))] + period * 12)[:draws.randint(3, 40)]
    if kind == 1:
        small = draws.randint(2, 4)
        return [draws.randrange(small) for _ in range(draws.randint(6, 120))]
    phrases = [[draws.randrange(vocab) for _ in range(draws.randint(2, 5))] for _ in range(3)]
    ctx: list[int] = []
    while len(ctx) < 40:
        ctx += draws.choice(phrases) if draws.random() < 0.6 else [draws.randrange(vocab) for _ in range(2)]
    return ctx


def cases_prompt_lookup_matches_python_l8_6():
    cases = [call(c["name"], prompt_lookup, c["ctx"], c["k"], c["max_ngram"], c["min_ngram"],
                  expected=c["draft"], rule=LOOKUP_RULE) for c in golden("prompt_lookup")]
    draws = drawn("prompt_lookup_matches_python_l8_6")
    for i in range(DRAWN_CASES if draws is not None else 0):
        ctx, max_ngram = drawn_context(draws, 20), draws.randint(1, 5)
        min_ngram, k = draws.randint(1, max_ngram) if i % 3 == 0 else 1, draws.randint(1, 10)
        cases.append(call(f"drawn-{i} (drawn when graded)", prompt_lookup, ctx, k, max_ngram, min_ngram,
                          expected=reference("spec").prompt_lookup(ctx, k, max_ngram, min_ngram), rule=LOOKUP_RULE))
    return cases


def test_prompt_lookup_matches_python_l8_6():
    check(cases_prompt_lookup_matches_python_l8_6(), "recorded context")


NGRAM_RULE = ("card 2.1: for each drafted token, for m from n - 1 down to 1 count the tokens that followed "
              "every earlier occurrence of the last m tokens (drafted tokens included); the most frequent "
              "wins, ties to the lowest id; stop when no m matches or at k tokens")


def cases_ngram_draft_hand_example():
    def ngram(label, ctx, k, n, want):
        return call(label, ngram_draft, ctx, k, n, expected=want, rule=NGRAM_RULE)

    return [
        ngram("the most frequent follower wins", [7, 1, 7, 2, 7, 2, 7], 1, 2, [2]),
        ngram("ties to the lowest id; drafted tokens join the context", [1, 2, 3, 1, 2, 4, 1, 2], 5, 3,
              [3, 1, 2, 3, 1]),
        ngram("the longest context first", [1, 5, 3, 2, 5, 2, 9, 5, 2, 1, 5], 1, 3, [3]),
        ngram("back-off to a shorter context", [4, 6, 9, 6], 1, 3, [9]),
        ngram("nothing matches", [1, 2, 3], 4, 3, []),
        ngram("n = 1: no context length to try", [3, 3, 3], 4, 1, []),
    ] + drawn_edge_cases(drawn("ngram_draft_hand_example"), "ngram_draft")


def test_ngram_draft_hand_example():
    check(cases_ngram_draft_hand_example())


def cases_ngram_draft_matches_python_l8_6():
    cases = [call(c["name"], ngram_draft, c["ctx"], c["k"], c["n"], expected=c["draft"], rule=NGRAM_RULE)
             for c in golden("ngram")]
    draws = drawn("ngram_draft_matches_python_l8_6")
    for i in range(DRAWN_CASES if draws is not None else 0):
        ctx, n, k = drawn_context(draws, 12), draws.randint(2, 5), draws.randint(1, 8)
        cases.append(call(f"drawn-{i} (drawn when graded)", ngram_draft, ctx, k, n,
                          expected=reference("spec").ngram_draft(ctx, k, n), rule=NGRAM_RULE))
    return cases


def test_ngram_draft_matches_python_l8_6():
    check(cases_ngram_draft_matches_python_l8_6(), "recorded context")


def cases_config_parses_runtime_values():
    rule = ('card 2.1: SpecConfig.parse takes "none" | "ngram" | "prompt_lookup" (exactly) and an '
            "int k in [1, 16]; anything else raises SpecError")
    parse = SpecConfig.parse

    def parsed(label, draft, k, want):
        return call(label, parse, draft, k, expected=want, rule=rule, name="SpecConfig.parse")

    def typed(draft, k):
        # its fields alone would let a plain dict with the same keys pass
        config = parse(draft, k)
        return {"class": type(config).__name__, **plain(config)}

    good = [call(f"{d} k={k}", typed, d, k, name="SpecConfig.parse",
                 expected={"class": "SpecConfig", "draft": d, "k": k, "max_ngram": 3, "min_ngram": 1}, rule=rule)
            for d, k in (("none", 4), ("ngram", 1), ("prompt_lookup", 16))]
    bad = [parsed(f"refuse {d!r} k={k!r}", d, k, raises("SpecError"))
           for d, k in (("prompt_lookup", 0), ("ngram", 17), ("none", -1), ("prompt-lookup", 4),
                        ("Prompt_Lookup", 4), (" ngram", 4), ("", 4), ("ngram", True), ("ngram", 2.0))]
    configured = [
        call("propose: prompt lookup from cfg.max_ngram down to cfg.min_ngram", propose,
             SpecConfig(Draft.PROMPT_LOOKUP, 4, 3, 2), [1, 2, 3, 4, 2], 4, expected=[],
             rule="card 2.1: propose runs prompt_lookup(ctx, k, cfg.max_ngram, cfg.min_ngram)"),
        call("propose: the n-gram draft takes n = cfg.max_ngram", propose, SpecConfig(Draft.NGRAM, 4),
             [1, 2, 3, 9, 5, 2, 3, 7, 1, 2, 3], 1, expected=[7], rule="card 2.1: propose runs ngram_draft(ctx, k, cfg.max_ngram)"),
    ]
    return good + bad + configured


def test_config_parses_runtime_values():
    check(cases_config_parses_runtime_values())


# --- 2.2 Verification ----------------------------------------------------------------------------

GREEDY_RULE = ("card 2.2: keep d_i while it is the argmax of its row with L10.1's penalties applied, the tokens "
               "accepted so far in this round counting as output (ties to the lowest id); at the first mismatch "
               "emit that argmax and stop; after a full acceptance emit row m's argmax (the bonus); greedy draws "
               "nothing")
SAMPLED_RULE = ("card 2.2: at each position draw u_a then u_r (both, always); accept d_i when "
                "u_a < p(d_i)/q(d_i), else emit the residual's walk at u_r and stop; the bonus is L10.1's "
                "sample of row m (one draw); logprob = log-softmax of the penalized row")


VERIFY_KEYS = ("tokens", "n_accepted", "logprobs", "next_u32")


def verify_round(rows, draft, probs, params, prompt, output, seed):
    """verify_draft's answer and the generator's next u32 afterwards (how many draws it took)."""
    rng = stream(seed)
    v = verify_draft(rows, draft, probs, params, prompt, output, rng)
    return {"tokens": [int(t) for t in v.tokens], "n_accepted": int(v.n_accepted),
            "logprobs": [float(x) for x in v.logprobs], "next_u32": int(rng.next_u32())}


def verify_case(label, rows, draft, probs, params, prompt, output, seed, expected, rule) -> Case:
    probs_text = "None" if probs is None else "[" + ", ".join(
        f"np.array({np.asarray(q).tolist()!r})" for q in probs) + "]"
    text = (f"rng = stream({seed}); v = verify_draft({rows_text(rows)}, {draft!r}, {probs_text}, "
            f"{params_text(params)}, {list(prompt)!r}, {list(output)!r}, rng); "
            "(v.tokens, v.n_accepted, v.logprobs, rng.next_u32())")
    return Case(label, text, lambda: verify_round(rows, draft, probs, params, prompt, output, seed),
                expected, rule)


def lse(*xs: float) -> float:
    return math.log(sum(math.exp(x) for x in xs))


HAND_ROWS = [np.array([0, 1, 3, 0.5], dtype=np.float32),
             np.array([0, 1, 0.5, 2], dtype=np.float32),
             np.array([5, 0, 0, 0], dtype=np.float32)]


def cases_hand_example_greedy_verify():
    draws = drawn("hand_example_greedy_verify")
    undrawn = stream(7).next_u32()   # greedy draws nothing: the next u32 is the stream's first
    lp0 = 3 - lse(0, 1, 3, 0.5)
    lp1 = 2 - lse(0, 1, 0.5, 2)
    lp2 = 5 - lse(5, 0, 0, 0)
    return [
        verify_case("section 3: draft [2 1]", HAND_ROWS, [2, 1], None, GREEDY, [0], [], 7,
                    {"tokens": [2, 3], "n_accepted": 1, "logprobs": [lp0, lp1], "next_u32": undrawn}, GREEDY_RULE),
        verify_case("section 3: draft [2 3], the bonus", HAND_ROWS, [2, 3], None, GREEDY, [0], [], 7,
                    {"tokens": [2, 3, 0], "n_accepted": 2, "logprobs": [lp0, lp1, lp2], "next_u32": undrawn},
                    GREEDY_RULE),
        verify_case("an empty draft: only the bonus", HAND_ROWS[2:], [], None, GREEDY, [0], [], 7,
                    {"tokens": [0], "n_accepted": 0, "logprobs": [lp2], "next_u32": undrawn}, GREEDY_RULE),
        verify_case("a masked logit (-inf) is a logit like any other", [np.array([0, 1, -np.inf, 2], dtype=np.float32)],
                    [], None, GREEDY, [0], [], 7,
                    {"tokens": [3], "n_accepted": 0, "logprobs": [2 - lse(0, 1, 2)], "next_u32": undrawn},
                    GREEDY_RULE + "; a row may hold -inf (a masked id), not NaN or +inf, and needs one finite value"),
    ] + [drawn_greedy_case(draws, i, ties=False) for i in range(DRAWN_RULE_CASES if draws is not None else 0)]


def test_hand_example_greedy_verify():
    check(cases_hand_example_greedy_verify())


def cases_greedy_verify_ties_go_to_the_lowest_id():
    tie = np.array([0.5, 3.0, 3.0, 1.0], dtype=np.float32)   # ids 1 and 2 tie for the max
    after = np.array([0.0, 0.0, 2.0, 0.0], dtype=np.float32)
    undrawn = stream(3).next_u32()
    hand = [
        verify_case("a draft token that only ties the max is rejected", [tie, after], [2], None, GREEDY,
                    [0], [], 3, {"tokens": [1], "n_accepted": 0, "logprobs": [3 - lse(0.5, 3, 3, 1)],
                                 "next_u32": undrawn}, GREEDY_RULE),
        verify_case("the lowest tied id is accepted", [tie, after], [1], None, GREEDY, [0], [], 3,
                    {"tokens": [1, 2], "n_accepted": 1,
                     "logprobs": [3 - lse(0.5, 3, 3, 1), 2 - lse(0, 0, 2, 0)], "next_u32": undrawn}, GREEDY_RULE),
        verify_case("a bonus row with a tie", [after, tie], [2], None, GREEDY, [0], [], 3,
                    {"tokens": [2, 1], "n_accepted": 1,
                     "logprobs": [2 - lse(0, 0, 2, 0), 3 - lse(0.5, 3, 3, 1)], "next_u32": undrawn}, GREEDY_RULE),
    ]
    recorded = [recorded_verify_case(c) for c in golden("verify") if c["name"].startswith("tie-")]
    draws = drawn("greedy_verify_ties_go_to_the_lowest_id")
    return hand + recorded + [drawn_greedy_case(draws, i, ties=True)
                              for i in range(DRAWN_RULE_CASES if draws is not None else 0)]


def drawn_greedy_case(draws, i: int, ties: bool) -> Case:
    """A greedy round on rows of half-unit logits; with ``ties`` each row has a tie at its top and the
    draft takes one of the tied ids (the lowest or another), else the draft takes each row's argmax
    for a while, then any id. The reference verifies it in the judge."""
    ref_spec, ref_sampling = reference("spec"), reference("sampling")
    vocab, m = draws.randint(3, 10), draws.randint(1 if ties else 0, 4)
    rows = []
    for _ in range(m + 1):
        row = [draws.randint(-6, 6) / 2 for _ in range(vocab)]
        if ties:
            row[draws.randrange(vocab)] = max(row)
        rows.append(np.array(row, dtype=np.float32))
    if ties:
        draft = [draws.choice([j for j, x in enumerate(row) if x == row.max()]) for row in rows[:m]]
    else:
        agree = draws.randint(0, m)
        draft = [int(np.argmax(row)) if j < agree else draws.randrange(vocab) for j, row in enumerate(rows[:m])]
    prompt, seed = [draws.randrange(vocab) for _ in range(draws.randint(1, 4))], draws.randrange(1000)
    rng = ref_sampling.stream(seed)
    v = ref_spec.verify_draft(rows, draft, None, ref_sampling.SamplingParams(), prompt, [], rng)
    expected = {"tokens": [int(t) for t in v.tokens], "n_accepted": int(v.n_accepted),
                "logprobs": [float(x) for x in v.logprobs], "next_u32": int(rng.next_u32())}
    return verify_case(f"drawn-{i} (drawn when graded)", rows, draft, None, GREEDY, prompt, [], seed, expected,
                       GREEDY_RULE)


def test_greedy_verify_ties_go_to_the_lowest_id():
    check(cases_greedy_verify_ties_go_to_the_lowest_id())


def cases_hand_example_sampled_step():
    p = np.array([0.2, 0.5, 0.3])
    q = np.array([0.6, 0.2, 0.2])
    r = np.array([0.0, 0.75, 0.25])
    step_rule = ("card 2.2 and 2.3: keep x when u_a < p(x)/q(x); otherwise walk "
                 "normalize(max(0, p - q)) at u_r; a q with q(x) = 0 raises SpecError")
    return [
        call("u_a = 0.3 < 1/3: kept", speculative_step, p, q, 0, 0.3, 0.8, expected=[0, True], rule=step_rule),
        call("u_a = 0.5: rejected, u_r = 0.8 walks to 2", speculative_step, p, q, 0, 0.5, 0.8,
             expected=[2, False], rule=step_rule),
        call("u_a = 0.5: rejected, u_r = 0.7 walks to 1", speculative_step, p, q, 0, 0.5, 0.7,
             expected=[1, False], rule=step_rule),
        call("the residual", residual, p, q, expected=[0.0, 0.75, 0.25],
             rule="card 2.3: residual = normalize(max(0, p - q))"),
        call("the walk at 0.8", sample_dense, r, 0.8, expected=2,
             rule="card 2.2: the first id whose running sum exceeds u"),
        call("the walk at 0.0", sample_dense, r, 0.0, expected=1,
             rule="card 2.2: the first id whose running sum exceeds u (ids with no mass are skipped)"),
        call("p == q: the residual has no mass, so it is p", residual, np.array([0.5, 0.5]), np.array([0.5, 0.5]),
             expected=[0.5, 0.5], rule="card 2.2: when max(0, p - q) sums to exactly 0, the residual is p / sum(p)"),
        call("p == q, not uniform: still p", residual, np.array([0.625, 0.25, 0.125]), np.array([0.625, 0.25, 0.125]),
             expected=[0.625, 0.25, 0.125],
             rule="card 2.2: when max(0, p - q) sums to exactly 0, the residual is p / sum(p)"),
        call("a residual of 2.2e-16 is normalised like any other", residual, np.array([0.5 + 2.0 ** -52, 0.5 - 2.0 ** -52]),
             np.array([0.5, 0.5]), expected=[1.0, 0.0],
             rule="card 2.2: there is no epsilon: only a sum of exactly 0.0 falls back to p / sum(p)"),
        call("p(x) > q(x): always kept", speculative_step, p, q, 1, 0.999, 0.0, expected=[1, True], rule=step_rule),
        call("q(x) = 0 could not have proposed x", speculative_step, p, np.array([0.0, 0.5, 0.5]), 0, 0.1, 0.1,
             expected=raises("SpecError"), rule=step_rule),
        call("the target's law at temperature 0", dense_distribution, HAND_ROWS[0], GREEDY, [0], [],
             expected=[0.0, 0.0, 1.0, 0.0], rule="card 2.2: at temperature 0 it is the one-hot at the penalized argmax"),
    ] + drawn_step_cases(drawn("hand_example_sampled_step"), step_rule)


def test_hand_example_sampled_step():
    check(cases_hand_example_sampled_step())


P3, Q3 = np.array([0.25, 0.5, 0.25]), np.array([0.5, 0.25, 0.25])


def drawn_step_cases(draws, rule: str) -> list[Case]:
    """speculative_step of drawn p, q (x one q proposes), u_a and u_r, and the residual of drawn p, q;
    the reference answers them in the judge."""
    ref_spec = reference("spec")
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        gen = np.random.default_rng(draws.getrandbits(64))
        vocab = draws.randint(2, 12)
        p, q = gen.dirichlet(np.ones(vocab)), gen.dirichlet(np.ones(vocab))
        x, u_a, u_r = draws.randrange(vocab), draws.random(), draws.random()
        token, kept = ref_spec.speculative_step(p, q, x, u_a, u_r)
        cases.append(call(f"drawn-{i}: a step (drawn when graded)", speculative_step, p, q, x, u_a, u_r,
                          expected=[int(token), bool(kept)], rule=rule))
        cases.append(call(f"drawn-{i}: a residual (drawn when graded)", residual, p, q,
                          expected=ref_spec.residual(p, q).tolist(), rule="card 2.3: residual = normalize(max(0, p - q))"))
    return cases


def cases_accept_needs_u_below_p_over_q():
    rule = ("card 2.2: accept when u_a < p(x)/q(x), strictly: u_a = p/q rejects, and a token with "
            "p(x) = 0 is never accepted")
    walk_rule = ("card 2.2 and L10.1's walk: when rounding leaves u at or past the running sum's end, "
                 "the last id with mass is taken")
    tail = np.array([0.1] * 10 + [0.0])
    at_ten = np.eye(11)[10]
    return [
        call("u_a equal to p/q = 0.5 rejects", speculative_step, np.array([0.25, 0.5, 0.25]),
             np.array([0.5, 0.25, 0.25]), 0, 0.5, 0.3, expected=[1, False], rule=rule),
        call("p(x) = 0 with u_a = 0 rejects", speculative_step, np.array([0.0, 0.6, 0.4]),
             np.array([0.5, 0.25, 0.25]), 0, 0.0, 0.5, expected=[1, False], rule=rule),
        call("a one-hot draft of a filtered token rejects", speculative_step, np.array([0.0, 0.6, 0.4]),
             np.eye(3)[0], 0, 0.0, 0.99, expected=[2, False], rule=rule),
        call("the residual's walk past its rounded end", speculative_step, tail, at_ten, 10, 0.5,
             float(np.nextafter(1.0, 0.0)), expected=[9, False], rule=walk_rule),
        call("the walk past the running sum's end", sample_dense, tail, float(np.nextafter(1.0, 0.0)),
             expected=9, rule=walk_rule),
    ] + [
        call(f"speculative_step refuses {what}", speculative_step, *args, expected=raises("SpecError"),
             rule="card 2.2: speculative_step raises SpecError for p and q not 1-D of one length, x not an int in "
                  "[0, V) (a bool too), u_a or u_r outside [0, 1)")
        for what, args in {"u_a = 1.0": (P3, Q3, 0, 1.0, 0.5), "u_a = -0.1": (P3, Q3, 0, -0.1, 0.5),
                           "u_r = NaN": (P3, Q3, 0, 0.5, float("nan")), "x = 3 past the vocabulary": (P3, Q3, 3, 0.5, 0.5),
                           "x = True": (P3, Q3, True, 0.5, 0.5), "p and q of two lengths": (P3, Q3[:2], 0, 0.5, 0.5),
                           "u_r = 1.0 on a round that accepts": (P3, Q3, 0, 0.1, 1.0),
                           "x = -1": (P3, Q3, -1, 0.1, 0.5), "p and q 2-D": (P3[None], Q3[None], 0, 0.5, 0.5)}.items()
    ] + drawn_step_cases(drawn("accept_needs_u_below_p_over_q"), rule)


def test_accept_needs_u_below_p_over_q():
    check(cases_accept_needs_u_below_p_over_q())


def recorded_verify_case(c: dict) -> Case:
    probs = None if c["draft_probs"] is None else [f64_row(q) for q in c["draft_probs"]]
    params = SamplingParams(**c["params"])
    rule = GREEDY_RULE if params.temperature == 0 else SAMPLED_RULE
    return verify_case(c["name"], [f32_row(r) for r in c["rows"]], c["draft"], probs, params, c["prompt"],
                       c["output"], c["seed"], {k: c["expect"][k] for k in VERIFY_KEYS}, rule)


def drawn_round(draws) -> dict:
    """A round's inputs, drawn as the recorded ones are: their sampling settings, a draft that agrees
    with the target for a while, the draft's own q or none (one-hot). L10.9's chain test draws these
    too, so a chain is checked against rounds no table holds."""
    ref_sampling = reference("sampling")
    vocab, m = draws.choice([8, 16, 32]), draws.randint(0, 6)
    gen = np.random.default_rng(draws.getrandbits(64))
    rows = [(draws.choice([1.0, 2.5]) * gen.standard_normal(vocab)).astype(np.float32) for _ in range(m + 1)]
    knobs = draws.choice([c["params"] for c in golden("verify")])
    prompt = [draws.randrange(vocab) for _ in range(draws.randint(1, 6))]
    output = [draws.randrange(vocab) for _ in range(draws.randint(0, 4))]
    agree, draft = draws.randint(0, m), []
    for j in range(m):
        best = int(np.argmax(ref_sampling.apply_penalties(rows[j], ref_sampling.SamplingParams(**knobs), prompt,
                                                          output + draft)))
        draft.append(best if j < agree else draws.randrange(vocab))
    probs = None
    if draws.random() < 0.5:
        probs = []
        for d in draft:
            q = gen.dirichlet(np.ones(vocab))
            q[d] += 0.5
            probs.append(q / q.sum())
    return {"rows": rows, "draft": draft, "probs": probs, "params": knobs, "prompt": prompt, "output": output,
            "seed": draws.getrandbits(64)}


def drawn_verify_case(draws, i: int) -> Case:
    """A drawn round (``drawn_round``) the reference verifies in the judge."""
    ref_spec, ref_sampling = reference("spec"), reference("sampling")
    r = drawn_round(draws)
    rng = ref_sampling.stream(r["seed"])
    v = ref_spec.verify_draft(r["rows"], r["draft"], r["probs"], ref_sampling.SamplingParams(**r["params"]),
                              r["prompt"], r["output"], rng)
    expected = {"tokens": [int(t) for t in v.tokens], "n_accepted": int(v.n_accepted),
                "logprobs": [float(x) for x in v.logprobs], "next_u32": int(rng.next_u32())}
    return verify_case(f"drawn-{i} (drawn when graded)", r["rows"], r["draft"], r["probs"],
                       SamplingParams(**r["params"]), r["prompt"], r["output"], r["seed"], expected,
                       SAMPLED_RULE if r["params"].get("temperature") else GREEDY_RULE)


def cases_verify_matches_python_l8_6():
    cases = [recorded_verify_case(c) for c in golden("verify")]
    draws = drawn("verify_matches_python_l8_6")
    return cases + [drawn_verify_case(draws, i) for i in range(DRAWN_CASES if draws is not None else 0)]


def test_verify_matches_python_l8_6():
    check(cases_verify_matches_python_l8_6(), "recorded round")


def cases_verify_rejects_bad_shapes():
    rows3 = [np.zeros(4, np.float32)] * 3
    q = np.full(4, 0.25)
    bad = {
        "too few rows": (rows3[:2], [1, 2], None),
        "too many rows": (rows3 + rows3[:1], [1, 2], None),
        "ragged rows": ([np.zeros(4, np.float32), np.zeros(5, np.float32), np.zeros(4, np.float32)], [1, 2], None),
        "a 2-D row": ([np.zeros((1, 4), np.float32)] * 3, [1, 2], None),
        "an empty row": ([np.zeros(0, np.float32)], [], None),
        "one draft distribution for two tokens": (rows3, [1, 2], [q]),
        "a draft distribution of the wrong length": (rows3, [1, 2], [q, np.full(5, 0.2)]),
        "a draft token past the vocabulary": (rows3, [1, 4], None),
        "a negative draft token": (rows3, [-1, 2], None),
        "a draft distribution summing to 0.9": (rows3, [1, 2], [q, np.full(4, 0.225)]),
        "a negative draft probability": (rows3, [1, 2], [q, np.array([0.6, 0.5, 0.1, -0.2])]),
        "a NaN draft probability": (rows3, [1, 2], [q, np.array([0.5, np.nan, 0.5, 0.0])]),
        "a row holding NaN": ([np.zeros(4, np.float32), np.array([0, np.nan, 0, 0], np.float32), rows3[0]], [1, 2],
                              None),
        "a row holding +inf": ([np.zeros(4, np.float32), np.array([0, np.inf, 0, 0], np.float32), rows3[0]], [1, 2],
                               None),
        "a bool draft token": (rows3, [True, 2], None),
        "a row with no finite value": ([np.full(4, -np.inf, np.float32)], [], None),
        "a float draft token": (rows3, [1.0, 2], None),
        "a draft distribution summing to 1 + 5e-6": (rows3, [1, 2], [q, np.array([0.25, 0.25, 0.25, 0.25 + 5e-6])]),
        "a draft distribution giving its own token probability 0": (rows3[:2], [1], [np.array([1.0, 0.0, 0.0, 0.0])]),
    }
    rule = ("card 2.2: a malformed round raises SpecError naming the bad value; each draft distribution is "
            "V non-negative numbers summing to 1 within 1e-6")
    refused = [verify_case(f"{what} ({'greedy' if prm is GREEDY else 'sampled'})", rows, draft, probs, prm, [0], [],
                           1, raises("SpecError"), rule)
               for what, (rows, draft, probs) in bad.items() for prm in (GREEDY, SamplingParams(temperature=1.0))]
    # Well-formed rounds beside them, answered: a verifier that refuses everything refuses these too.
    # Greedy on uniform rows: the argmax is id 0, so draft token 1 is rejected at once; no draws.
    answered = {"tokens": [0], "n_accepted": 0, "logprobs": [-math.log(4)], "next_u32": stream(1).next_u32()}
    within = [q, np.array([0.25, 0.25, 0.25, 0.25 + 5e-7])]
    return refused + [
        verify_case("a well-formed round (greedy): answered", rows3, [1, 2], None, GREEDY, [0], [], 1, answered, rule),
        verify_case("a draft distribution summing to 1 + 5e-7, within 1e-6 (greedy): answered", rows3, [1, 2], within,
                    GREEDY, [0], [], 1, answered, rule)]


def test_verify_rejects_bad_shapes():
    check(cases_verify_rejects_bad_shapes())


# --- Generation ----------------------------------------------------------------------------------

GEN_PROMPTS = [[1, 2, 3, 4, 5, 6], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [7, 7, 2, 7, 7, 2, 7, 7, 2]]
LOOP_RULE = ("card 2.5: one round per target pass; truncate after each round to everything fed except the "
             "rejected drafts and the pending last token; drafts shortened to max_new - emitted - 1")


def generation(target, cfg, prompt, params, seed, max_new, eos):
    """What one generate call did: its tokens, logprobs, counters, and the target's state after it."""
    g = generate(target, cfg, prompt, params, seed, max_new, eos)
    return {"tokens": [int(t) for t in g.tokens], "logprobs": [float(x) for x in g.logprobs],
            "drafted": g.stats.drafted, "accepted": g.stats.accepted, "target_calls": g.stats.target_calls,
            "cached": target.cached(), "max_fed": max(target.fed_positions, default=-1), "passes": target.calls}


def generation_text(target: str, cfg: SpecConfig, prompt, params, seed, max_new, eos) -> str:
    return (f"target = {target}; g = generate(target, SpecConfig(Draft.{cfg.draft.name}, {cfg.k}), {list(prompt)!r}, "
            f"{params_text(params)}, {seed}, {max_new}, {list(eos)!r})   # {target.split('(')[0]}: course/tests/fakes.py "
            "(ol shell has it)")


def greedy_judge(want_tokens, budget, passes_rule):
    def judge(got, _expected):
        if not isinstance(got, dict) or "tokens" not in got:
            return None if got == _expected else "not a generation"
        if got["tokens"] != want_tokens:
            return f"speculation changed the greedy tokens: plain greedy gives {want_tokens}"
        if got["cached"] != budget:
            return f"the target caches {got['cached']} positions after generation; it must keep {budget}"
        if got["max_fed"] >= budget:
            return f"KV written at position {got['max_fed']}, past the request's budget {budget}"
        if got["target_calls"] != got["passes"]:
            return f"stats.target_calls is {got['target_calls']}, and the target ran {got['passes']} passes"
        return passes_rule(got["passes"])  # the passes the fake counted, not what the stats say
    return judge


def drawn_greedy_request(draws) -> tuple:
    """A request for greedy_spec_equals_greedy_without_spec a grading draws: text a TableTarget(12)
    writes itself (its drafts mostly kept), greedy or with the penalties the fixed ones use."""
    seed = draws.randrange(10_000)
    prompt, writer, length = [draws.randrange(12)], TableTarget(12, seed=seed), draws.randint(4, 14)
    while len(prompt) < length:
        prompt.append(int(np.argmax(writer._logits_at(prompt))))
    prm = draws.choice([GREEDY, SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2)])
    return prompt, draws.randint(12, 40), seed, prm, draws.randint(1, 6), " (drawn when graded)"


def reference_lookup_passes(seed: int, k: int, prompt, max_new: int) -> int:
    """The target passes the reference's greedy prompt lookup takes for a request, worked out in the judge."""
    spec_ref, sampling_ref = reference("spec"), reference("sampling")
    target = TableTarget(12, seed=seed)
    spec_ref.generate(target, spec_ref.SpecConfig(spec_ref.Draft.PROMPT_LOOKUP, k), prompt, sampling_ref.SamplingParams(),
                      0, max_new, [])
    return target.calls


def cases_greedy_spec_equals_greedy_without_spec():
    cases = []
    requests = [(p, 40, 1, GREEDY, 4, "") for p in GEN_PROMPTS] + \
        [(p, 30, 5, SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2), 3, "") for p in GEN_PROMPTS]
    draws = drawn("greedy_spec_equals_greedy_without_spec")
    requests += [drawn_greedy_request(draws) for _ in range(DRAWN_GREEDY if draws is not None else 0)]
    for prompt, max_new, seed, prm, k, drawn_label in requests:
        want = plain_greedy(TableTarget(12, seed=seed), prompt, prm, max_new)
        budget = len(prompt) + max_new - 1
        for draft in Draft:
            cfg = SpecConfig(draft, k)
            # a drawn request's lookup need not find anything: it must save a pass where the reference's does
            saves = draft is Draft.PROMPT_LOOKUP and prm is GREEDY and \
                (not drawn_label or reference_lookup_passes(seed, k, prompt, max_new) < max_new)

            def passes_rule(calls, draft=draft, max_new=max_new, saves=saves):
                if draft is Draft.NONE and calls != max_new:
                    return f"{calls} target passes without a draft; one per token is {max_new}"
                if saves and calls >= max_new:
                    return f"prompt lookup saved no target pass ({calls} for {max_new} tokens)"
                return None

            cases.append(Case(
                f"{draft.value} k={k} prompt {prompt}{' with penalties' if prm is not GREEDY else ''}{drawn_label}",
                generation_text(f"TableTarget(12, seed={seed})", cfg, prompt, prm, 0, max_new, []),
                lambda p=prompt, c=cfg, s=seed, m=max_new, r=prm: generation(TableTarget(12, seed=s), c, p, r, 0, m, []),
                {"tokens": want, "cached": budget}, LOOP_RULE + "; greedy output never changes",
                judge=greedy_judge(want, budget, passes_rule)))
    return cases


def test_greedy_spec_equals_greedy_without_spec():
    check(cases_greedy_spec_equals_greedy_without_spec())


def cases_eos_and_max_tokens_end_generation():
    cycle = [2, 3, 4, 5, 0, 1] * 4
    rule = ("card 2.5: generation ends after max_new tokens, or at a token in eos (which is emitted), even "
            "inside an accepted run; the target then keeps the emitted tokens but the last")

    def judge_length(want, max_new):
        def judge(got, _expected):
            if not isinstance(got, dict) or "tokens" not in got:
                return "not a generation"
            if got["tokens"] != want:
                return f"expected the tokens {want}"
            if len(got["logprobs"]) != len(want):
                return f"{len(got['logprobs'])} logprobs for {len(want)} tokens"
            if got["max_fed"] >= len(CYCLE_PROMPT) + max(max_new, 1) - 1:
                return f"KV written at position {got['max_fed']}, past the request's budget"
            return None
        return judge

    cases = []
    for draft in Draft:
        cfg = SpecConfig(draft, 4)
        for max_new in (0, 1, 2, 5, 6, 13):
            want = cycle[:max_new]
            cases.append(Case(f"{draft.value} max_new={max_new}",
                              generation_text("CycleTarget(CYCLE)", cfg, CYCLE_PROMPT, GREEDY, 3, max_new, []),
                              lambda c=cfg, m=max_new: generation(CycleTarget(CYCLE), c, CYCLE_PROMPT, GREEDY, 3, m, []),
                              {"tokens": want}, rule, judge=judge_length(want, max_new)))
        cases.append(Case(f"{draft.value}: EOS 4 inside an accepted run",
                          generation_text("CycleTarget(CYCLE)", cfg, CYCLE_PROMPT, GREEDY, 3, 20, [4, 7]),
                          lambda c=cfg: pick(generation(CycleTarget(CYCLE), c, CYCLE_PROMPT, GREEDY, 3, 20, [4, 7]),
                                             "tokens", "cached"),
                          {"tokens": [2, 3, 4], "cached": len(CYCLE_PROMPT) + 2}, rule))
    cases.append(Case("prompt lookup: the EOS arrives in the first round",
                      generation_text("CycleTarget(CYCLE)", SpecConfig(Draft.PROMPT_LOOKUP, 4), CYCLE_PROMPT, GREEDY,
                                      3, 20, [4]) + "; g.stats",
                      lambda: pick(generation(CycleTarget(CYCLE), SpecConfig(Draft.PROMPT_LOOKUP, 4), CYCLE_PROMPT,
                                              GREEDY, 3, 20, [4]), "tokens", "target_calls", "passes"),
                      {"tokens": [2, 3, 4], "target_calls": 1, "passes": 1}, rule))
    draws = drawn("eos_and_max_tokens_end_generation")
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        req = drawn_cycle_request(draws)
        cfg = SpecConfig(Draft(req["draft"]), req["k"])
        cases.append(Case(f"drawn-{i}: {req['draft']} k={req['k']} max_new={req['max_new']} eos {req['eos']} "
                          "(drawn when graded)",
                          generation_text(f"CycleTarget({req['succ']})", cfg, req["prompt"], GREEDY, req["seed"],
                                          req["max_new"], req["eos"]),
                          lambda r=req: cycle_run(r, None, OWN), cycle_run(req, None, reference_lib()), rule))
    bad_rule = ("card 2.5: before anything is fed (max_new = 0 too), SpecError for an empty prompt, a max_new that is not an int >= 0 "
                "(a bool too), a seed that is not an int in [0, 2**64) (a bool too), and a target that already caches "
                "positions")
    for what, prompt, seed, max_new in (("an empty prompt", [], 0, 4), ("an empty prompt, max_new = 0", [], 0, 0),
                                        ("max_new = -1", [1], 0, -1),
                                        ("max_new = True", [1], 0, True), ("seed = -1", [1], -1, 4),
                                        ("seed = 2**64", [1], 2**64, 4), ("seed = True", [1], True, 4)):
        cases.append(Case(f"refused: {what}", generation_text("CycleTarget(CYCLE)", SpecConfig(Draft.NONE, 4), prompt,
                                                              GREEDY, seed, max_new, []),
                          lambda a=(prompt, seed, max_new): refused_request(*a), raises("SpecError"), bad_rule))
    cases.append(Case("refused: a target already caching positions",
                      "target = CycleTarget(CYCLE); target.extend([0, 1]); generate(target, SpecConfig(Draft.NONE, 4), "
                      f"{CYCLE_PROMPT}, SamplingParams(), 3, 4, [])", started_target_request, raises("SpecError"),
                      bad_rule))
    return cases


def refused_request(prompt, seed, max_new):
    """A bad request's generate call; it must raise before feeding the target anything."""
    target = CycleTarget(CYCLE)
    try:
        return generate(target, SpecConfig(Draft.NONE, 4), prompt, GREEDY, seed, max_new, [])
    finally:
        assert target.cached() == 0, f"the target was fed {target.cached()} positions before the request was refused"


def started_target_request():
    target = CycleTarget(CYCLE)
    target.extend([0, 1])
    return generate(target, SpecConfig(Draft.NONE, 4), CYCLE_PROMPT, GREEDY, 3, 4, [])


def pick(answer: dict, *keys: str) -> dict:
    return {k: answer[k] for k in keys}


def test_eos_and_max_tokens_end_generation():
    check(cases_eos_and_max_tokens_end_generation())


def drawn_request(draws, i: int) -> dict:
    """A whole request on a TableTarget, drawn as the recorded ones are (their sampling settings,
    repeated text or text the target writes itself), run by the reference in the judge."""
    spec = {"vocab": draws.randint(6, 12), "seed": draws.randrange(10_000), "order": draws.choice([1, 2]),
            "scale": draws.choice([3.0, 4.0, 6.0])}
    vocab = spec["vocab"]
    if i % 2:
        prompt = ([draws.randrange(vocab) for _ in range(draws.randint(2, 4))] * 8)[:draws.randint(3, 16)]
    else:  # text the target writes itself greedily: its drafts are mostly kept
        prompt, target, length = [draws.randrange(vocab)], TableTarget(**spec), draws.randint(3, 16)
        while len(prompt) < length:
            prompt.append(int(np.argmax(target._logits_at(prompt))))
    draft, k, params = draws.choice(list(Draft)).value, draws.randint(1, 8), draws.choice(
        [c["params"] for c in golden("generate")])
    seed, max_new = draws.getrandbits(64) if i % 3 == 1 else draws.randrange(1000), draws.randint(8, 40)
    eos = [draws.randrange(vocab)] if i % 4 == 2 else []
    spec_ref, sampling_ref = reference("spec"), reference("sampling")
    target = TableTarget(**spec)
    g = spec_ref.generate(target, spec_ref.SpecConfig(spec_ref.Draft(draft), k), prompt,
                          sampling_ref.SamplingParams(**params), seed, max_new, eos)
    return {"name": f"drawn-{i} (drawn when graded)", "target": spec, "prompt": prompt, "draft": draft, "k": k,
            "params": params, "seed": seed, "max_new": max_new, "eos": eos,
            "expect": {"tokens": [int(t) for t in g.tokens], "logprobs": [float(x) for x in g.logprobs],
                       "drafted": g.stats.drafted, "accepted": g.stats.accepted,
                       "target_calls": g.stats.target_calls, "cached": target.cached()}}


def cases_sampled_generation_matches_python_l8_6():
    rule = (LOOP_RULE + "; one generator stream(seed) for the whole request; tokens and logprobs are the "
            "verifier's (2.2); SpecStats counts drafted and "
            "accepted draft tokens and target passes")
    cases = []
    draws = drawn("sampled_generation_matches_python_l8_6")
    drawn_requests = [drawn_request(draws, i) for i in range(DRAWN_CASES if draws is not None else 0)]
    for c in golden("generate") + drawn_requests:
        t = c["target"]
        cfg = SpecConfig(Draft(c["draft"]), c["k"])
        prm = SamplingParams(**c["params"])
        target_text = f"TableTarget({t['vocab']}, seed={t['seed']}, order={t['order']}, scale={t['scale']})"
        want = {**c["expect"], "passes": c["expect"]["target_calls"]}  # the passes the fake counts, as the stats say

        def run(t=t, cfg=cfg, c=c, prm=prm, want=want):
            target = TableTarget(t["vocab"], seed=t["seed"], order=t["order"], scale=t["scale"])
            return pick(generation(target, cfg, c["prompt"], prm, c["seed"], c["max_new"], c["eos"]), *want)

        cases.append(Case(c["name"], generation_text(target_text, cfg, c["prompt"], prm, c["seed"], c["max_new"],
                                                     c["eos"]), run, want, rule))
    return cases


def test_sampled_generation_matches_python_l8_6():
    check(cases_sampled_generation_matches_python_l8_6(), "recorded generation")


# --- 2.3 The law of sampled output ------------------------------------------------------------

STAT_SEEDS = 4000
STAT_POOL_AT = 1e-3
STAT_P_VALUE = 1e-4  # the threshold is chi2's (1 - 1e-4) quantile; see course/L10.8.md
STAT_ROW = [2.0, 1.2, 0.4, 0.9, -5.0, -6.5]
STAT_Q = [0.1, 0.45, 0.05, 0.3, 0.1, 0.0]


def first_token_counts() -> list[int]:
    """How often each id is the first emitted token over 4000 seeds, with a draft drawn from q."""
    row = np.array(STAT_ROW, dtype=np.float32)
    q = np.array(STAT_Q)
    prm = SamplingParams(temperature=1.0)
    # The draft samples its token from q with its own generator, independent of the target's.
    drafts = np.searchsorted(np.cumsum(q), np.random.default_rng(2024).random(STAT_SEEDS), side="right")
    rows = [row, row[::-1].copy()]
    counts = [0] * len(STAT_ROW)
    streams = each(stream, [(seed,) for seed in range(len(drafts))])
    calls = [(rows, [d], [q], prm, [], [], s) for d, s in zip(drafts.tolist(), streams)]
    for v in each(verify_draft, calls):
        counts[int(v.tokens[0])] += 1
    return counts


def target_law() -> np.ndarray:
    x = np.array(STAT_ROW, dtype=np.float32).astype(np.float64)
    p = np.exp(x - x.max())
    return p / p.sum()


def chi_square(counts) -> tuple[float, int]:
    """The counts' chi-square against 4000 times the target softmax, bins with p <= 1e-3 pooled."""
    p = target_law()
    counts = np.asarray(counts, dtype=np.float64)
    big = p > STAT_POOL_AT
    observed = np.append(counts[big], counts[~big].sum())
    expected = STAT_SEEDS * np.append(p[big], p[~big].sum())
    return float(((observed - expected) ** 2 / expected).sum()), len(observed) - 1


def judge_law(counts, _expected) -> str | None:
    if not isinstance(counts, list) or len(counts) != len(STAT_ROW):
        return "not a list of counts"
    statistic, dof = chi_square(counts)
    threshold = chi2_quantile(dof, STAT_P_VALUE)
    if statistic < threshold:
        return None
    return (f"the first token's chi-square is {statistic:.1f} on {dof} degrees of freedom, above "
            f"{threshold:.1f}: not the target's law")


def cases_sampled_spec_keeps_the_target_distribution():
    expected = [round(STAT_SEEDS * float(x), 1) for x in target_law()]
    text = (f"row = np.array({STAT_ROW}, dtype=np.float32); q = np.array({STAT_Q}); for seeds 0..3999: "
            "verify_draft([row, row[::-1].copy()], [d], [q], SamplingParams(temperature=1.0), [], [], "
            "stream(seed)).tokens[0], d drawn from q (first_token_counts() in ol shell)")
    rule = ("card 2.3: accept-or-resample with the residual max(0, p - q) emits each token with the target's "
            "probability p, whatever q is")
    return [Case("4000 seeds, a stochastic draft", text, first_token_counts, expected, rule,
                 judge=judge_law, compare="law")]


def test_sampled_spec_keeps_the_target_distribution():
    check(cases_sampled_spec_keeps_the_target_distribution())


# --- 2.4 Rollback --------------------------------------------------------------------------------

ROLLBACK_RULE = ("card 2.4: keep ceil(keep / B) blocks, release each dropped block once, and set the last kept "
                 "block's fill to the positions it still holds, keep - (need - 1) * B (set, not refused, past its "
                 "fill inside the table)")


def filled_table(pool, fills):
    table = []
    for n in fills:
        b = pool.allocate()
        pool.set_fill(b, n)
        table.append(b)
    return table


def rolled_back(fills, keep, block_tokens=4, pool_class=KvPool, roll=rollback):
    """Roll back a table with these fills to ``keep`` positions: what was released and what is left
    (``pool_class`` and ``roll``: the reference's, where the judge works out a drawn case's answer)."""
    pool = pool_class(8, block_tokens)
    table = filled_table(pool, fills)
    before = list(table)
    released = roll(pool, table, keep)
    return {"released": released, "table": len(table), "fills": [pool.fill(b) for b in table],
            "freed": [pool.refcount(b) == 0 for b in before[len(table):]], "free": pool.num_free()}


def rollback_case(label, fills, keep, want):
    text = f"rolled_back({fills}, {keep})   # rolled_back() in course/tests/test_l10_8.py (ol shell has it)"
    return Case(label, text, lambda: rolled_back(fills, keep), want, ROLLBACK_RULE)


def drawn_rollback_cases(draws) -> list[Case]:
    """blocks_for of drawn sizes, and rollbacks of drawn tables (full blocks, then a partial one) to a
    drawn length, past the table sometimes; the reference answers them in the judge."""
    ref_spec, ref_pool = reference("spec"), reference("kvpool").KvPool
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        tokens, block_tokens = draws.randrange(200), draws.randint(1, 16)
        cases.append(call(f"drawn-{i}: blocks_for (drawn when graded)", blocks_for, tokens, block_tokens,
                          expected=ref_spec.blocks_for(tokens, block_tokens), rule="card 2.4: ceil(tokens / block_tokens)"))
        fills = [4] * draws.randint(0, 4) + [draws.randint(1, 4)]
        keep = draws.randint(0, 4 * len(fills) + 1)
        try:
            want = rolled_back(fills, keep, pool_class=ref_pool, roll=ref_spec.rollback)
        except ref_spec.SpecError:
            want = raises("SpecError")
        cases.append(rollback_case(f"drawn-{i}: fills {fills}, keep {keep} (drawn when graded)", fills, keep, want))
    return cases


def cases_rollback_hand_example():
    return [
        call(f"blocks_for({n}, 4)", blocks_for, n, 4, expected=want, rule="card 2.4: ceil(tokens / block_tokens)")
        for n, want in ((0, 0), (1, 1), (4, 1), (5, 2), (8, 2), (9, 3), (10, 3))
    ] + [
        call("blocks_for(7, 1)", blocks_for, 7, 1, expected=7, rule="card 2.4: ceil(tokens / block_tokens)"),
        rollback_case("section 3: fills [4 4 2], keep 5", [4, 4, 2], 5,
                      {"released": 1, "table": 2, "fills": [4, 1], "freed": [True], "free": 6}),
        rollback_case("keeping a whole block keeps it full", [4, 4, 3], 8,
                      {"released": 1, "table": 2, "fills": [4, 4], "freed": [True], "free": 6}),
        rollback_case("keeping everything releases nothing", [4, 4], 8,
                      {"released": 0, "table": 2, "fills": [4, 4], "freed": [], "free": 6}),
        rollback_case("keeping 0 releases every block", [4, 4], 0,
                      {"released": 2, "table": 0, "fills": [], "freed": [True, True], "free": 8}),
        rollback_case("keep 1 of a partial last block", [4, 1], 1,
                      {"released": 1, "table": 1, "fills": [1], "freed": [True], "free": 7}),
        rollback_case("keep past the last block's fill sets it, inside the table", [4, 2], 7,
                      {"released": 0, "table": 2, "fills": [4, 3], "freed": [], "free": 6}),
        rollback_case("keep past the table refused", [4], 5, raises("SpecError")),
        call("blocks_for(3, 0) refused", blocks_for, 3, 0, expected=raises("SpecError"),
             rule="card 2.4: blocks_for raises SpecError when block_tokens < 1 or tokens < 0"),
        call("blocks_for(-1, 4) refused", blocks_for, -1, 4, expected=raises("SpecError"),
             rule="card 2.4: blocks_for raises SpecError when block_tokens < 1 or tokens < 0"),
        Case("a table holding a freed block: the pool's error as SpecError",
             "pool = KvPool(8, 4); table = filled_table(pool, [4, 4]); pool.release(table[1]); rollback(pool, table, 3)",
             rollback_over_a_freed_block, raises("SpecError"), "card 2.4: any PoolError of the pool raises SpecError"),
    ] + drawn_rollback_cases(drawn("rollback_hand_example"))


def rollback_over_a_freed_block():
    pool = KvPool(8, 4)
    table = filled_table(pool, [4, 4])
    pool.release(table[1])
    return rollback(pool, table, 3)


def test_rollback_hand_example():
    check(cases_rollback_hand_example())


def shared_prompt_block():
    """Two sequences share a prompt block through the prefix cache; roll one back to 4, then 0."""
    pool = KvPool(8, 4)
    prompt = [11, 12, 13, 14]
    mine = filled_table(pool, [4, 3])
    shared = mine[0]
    pool.register(prompt, shared)
    pool.retain(shared)  # a second sequence reuses the prompt block through the prefix cache
    other = [shared]
    seen = {"keep 4 releases": rollback(pool, mine, 4), "kept": mine == [shared],
            "refcount after keep 4": pool.refcount(shared), "fill after keep 4": pool.fill(shared)}
    seen["keep 0 releases"] = rollback(pool, mine, 0)
    seen.update({"refcount after keep 0": pool.refcount(shared), "fill after keep 0": pool.fill(shared),
                 "still indexed": pool.lookup(prompt) == shared})
    seen["other's keep 0 releases"] = rollback(pool, other, 0)
    seen.update({"indexed at the end": pool.lookup(prompt) is not None, "free at the end": pool.num_free()})
    return seen


def cut_into_a_shared_block():
    """Keep 6 of a table whose last kept block (fill 3) another sequence also holds."""
    pool = KvPool(8, 4)
    table = filled_table(pool, [4, 3])
    pool.retain(table[1])
    return rollback(pool, table, 6)


def refused_cut_changes_nothing() -> dict:
    """Keep 6 of a table with fills 4, 3, 2 whose middle block another sequence also holds: refused,
    and the table and the pool as they were (the third block not released)."""
    pool = KvPool(8, 4)
    table = filled_table(pool, [4, 3, 2])
    pool.retain(table[1])
    before = list(table)
    try:
        rollback(pool, table, 6)
        raised = None
    except Exception as err:  # the answer names what was raised; the case expects SpecError
        raised = type(err).__name__
    return {"raised": raised, "table unchanged": table == before, "free": pool.num_free(),
            "fills": [pool.fill(b) if pool.refcount(b) else "free" for b in before],
            "refcounts": [pool.refcount(b) for b in before]}


def cases_rollback_drops_one_reference_only():
    want = {"keep 4 releases": 1, "kept": True, "refcount after keep 4": 2, "fill after keep 4": 4,
            "keep 0 releases": 1, "refcount after keep 0": 1, "fill after keep 0": 4, "still indexed": True,
            "other's keep 0 releases": 1, "indexed at the end": False, "free at the end": 8}
    return [Case("a prompt block shared with another sequence",
                 "shared_prompt_block()   # helper of course/tests/test_l10_8.py (ol shell has it)", shared_prompt_block, want,
                 "card 2.4: a dropped block loses one reference; a block shared through the prefix cache "
                 "stays alive, full and indexed for its other owner"),
            Case("cutting into a shared last block is refused",
                 "cut_into_a_shared_block()   # helper of course/tests/test_l10_8.py (ol shell has it)",
                 cut_into_a_shared_block, raises("SpecError"),
                 "card 2.4: the last kept block's fill may only be lowered when this sequence alone holds it; "
                 "a shared one raises SpecError (its other owner still reads those positions)"),
            Case("a refused cut changes nothing",
                 "refused_cut_changes_nothing()   # helper of course/tests/test_l10_8.py (ol shell has it)",
                 refused_cut_changes_nothing,
                 {"raised": "SpecError", "table unchanged": True, "free": 5, "fills": [4, 3, 2], "refcounts": [1, 2, 1]},
                 "card 2.4: the shared block is checked before anything is released: a refused cut leaves the "
                 "table and the pool as they were")]


def test_rollback_drops_one_reference_only():
    check(cases_rollback_drops_one_reference_only())


class BlocksWrong(Exception):
    """The blocks do not match the cached positions after a round (raised by CheckedTarget)."""


class CheckedTarget(TableTarget):
    """A pool-backed fake that checks the blocks after every round. When the prompt fills its
    first block, another sequence shares that block, as the prefix cache would."""

    def __init__(self, vocab, seed, pool, prompt_len):
        super().__init__(vocab, seed, order=2, scale=1.0, pool=pool)
        self.prompt_len = prompt_len
        self.shared = None
        self.rounds = 0

    def extend(self, ids):
        rows = super().extend(ids)
        if self.calls == 1 and self.prompt_len >= self.pool.block_tokens:
            self.shared = self.blocks[0]
            self.pool.retain(self.shared)
        return rows

    def truncate(self, length):
        super().truncate(length)
        self.rounds += 1
        pool, size = self.pool, self.pool.block_tokens
        fills = [pool.fill(b) for b in self.blocks]
        want = [min(size, length - i * size) for i in range(-(-length // size))]   # the judge's own ceil
        if fills != want:
            raise BlocksWrong(f"after round {self.rounds}, {length} cached positions in blocks of {size} "
                              f"need fills {want}; the table holds {fills}")
        if pool.num_free() != pool.num_blocks - len(self.blocks):
            raise BlocksWrong(f"after round {self.rounds}, {pool.num_blocks - pool.num_free()} blocks are in "
                              f"use for a table of {len(self.blocks)}: blocks leaked")
        if self.shared is not None and pool.refcount(self.shared) != 2:
            raise BlocksWrong(f"after round {self.rounds} the shared prompt block has {pool.refcount(self.shared)} "
                              "references, not 2")

    def release(self):
        super().release()
        if self.shared is not None:
            self.pool.release(self.shared)


BLOCK_TOKENS, NUM_BLOCKS = 4, 64


def conserved_request(request, prompt, cfg, max_new):
    pool = KvPool(NUM_BLOCKS, BLOCK_TOKENS)
    target = CheckedTarget(5, request, pool, len(prompt))
    g = generate(target, cfg, prompt, SamplingParams(temperature=1.0), request, max_new, [])
    rounds, passes = target.rounds, target.calls
    target.release()
    return {"rounds": rounds, "target_calls": g.stats.target_calls, "passes": passes, "leaked": NUM_BLOCKS - pool.num_free(),
            "rejected": g.stats.drafted - g.stats.accepted, "emitted": len(g.tokens), "max_new": max_new}


DRAWN_REQUESTS = 40  # requests a property test adds when graded, from a seed drawn then


def random_requests(draws, seed: int, count: int) -> list[tuple[int, np.random.Generator, str]]:
    """``count`` requests drawn from ``seed`` (the public ones), then, when graded (``draws``, the
    test's graded.drawn), ``DRAWN_REQUESTS`` more from a seed drawn then: each (request id, the
    generator its draws come from, a label suffix)."""
    rng = np.random.default_rng(seed)
    requests = [(request, rng, "") for request in range(count)]
    if draws is not None:
        more = np.random.default_rng(draws.getrandbits(64))
        requests += [(request, more, " (drawn when graded)") for request in range(count, count + DRAWN_REQUESTS)]
    return requests


def cases_blocks_conserved_across_rollbacks():
    cases = []
    for request, rng, drawn_label in random_requests(drawn("blocks_conserved_across_rollbacks"), 88, 200):
        prompt = rng.integers(0, 5, size=int(rng.integers(1, 10))).tolist()
        cfg = SpecConfig([Draft.NGRAM, Draft.PROMPT_LOOKUP][request % 2], int(rng.integers(1, 9)))
        max_new = int(rng.integers(1, 13))
        text = (f"pool = KvPool({NUM_BLOCKS}, {BLOCK_TOKENS}); target = CheckedTarget(5, {request}, pool, "
                f"{len(prompt)}); generate(target, SpecConfig(Draft.{cfg.draft.name}, {cfg.k}), {prompt}, "
                f"SamplingParams(temperature=1.0), {request}, {max_new}, []); target.release()   "
                "# CheckedTarget: course/tests/test_l10_8.py (ol shell has it)")
        cases.append(Case(f"request {request}{drawn_label}", text,
                          lambda r=request, p=prompt, c=cfg, m=max_new: conserved_request(r, p, c, m),
                          {"leaked": 0}, ROLLBACK_RULE + "; after every round the blocks match the cached positions",
                          judge=judge_conserved))
    return cases


def judge_conserved(got, _expected) -> str | None:
    if not isinstance(got, dict) or "leaked" not in got:
        return ""
    if got["leaked"]:
        return f"{got['leaked']} blocks still in use after the request released its table: leaked"
    if got["emitted"] != got["max_new"]:
        return (f"{got['emitted']} tokens emitted for max_new {got['max_new']}: with no EOS and no listener, "
                "a request emits max_new")
    if got["rounds"] != got["passes"]:
        return f"{got['rounds']} truncates for {got['passes']} target passes: one per round"
    if got["target_calls"] != got["passes"]:
        return f"stats.target_calls is {got['target_calls']}, and the target ran {got['passes']} passes"
    return None


def test_blocks_conserved_across_rollbacks():
    answers = check(cases_blocks_conserved_across_rollbacks(), "request")
    rejected = sum(a["rejected"] for a in answers)
    assert rejected >= 1000, (f"over 200 requests SpecStats counts only {rejected} rejected draft tokens "
                              "(drafted - accepted); the reference rejects over 1000 on the same requests")


def judge_stream(function: str, same_key: str, differ: str, max_new: int = 25):
    """What is wrong with a streamed answer: the listener heard other pairs than ``function``
    returned, or not ``max_new`` of them, or the run without a listener gave other tokens."""
    def judge(got, _expected) -> str | None:
        if not isinstance(got, dict) or "heard" not in got:
            return "not a stream"
        if got["heard"] != got["returned"]:
            return f"the listener heard other (token, logprob) pairs than {function} returned"
        if len(got["heard"]) != max_new:
            return f"the listener heard {len(got['heard'])} tokens, not max_new = {max_new}"
        if not got[same_key]:
            return differ
        return None
    return judge


def cases_generate_stream_hands_over_each_token_and_stops_when_told():
    rule = ("card 2.5: every emitted token and its logprob go to on_token in order as soon as their round is "
            "verified; on_token answering a false value (False, None) ends generation at once; the target then keeps the "
            "emitted tokens but the last")
    cases = []
    for draft, prm in ((Draft.PROMPT_LOOKUP, GREEDY), (Draft.NGRAM, SamplingParams(temperature=0.8)),
                       (Draft.NONE, SamplingParams(temperature=1.0, top_k=4))):
        cfg = SpecConfig(draft, 4)

        def streamed(cfg=cfg, prm=prm):
            heard = []
            g = generate_stream(TableTarget(12, seed=3), cfg, GEN_PROMPTS[2], prm, 99, 25, [],
                                lambda t, lp: heard.append([int(t), float(lp)]) is None)
            plain_run = generate(TableTarget(12, seed=3), cfg, GEN_PROMPTS[2], prm, 99, 25, [])
            return {"heard": heard, "returned": [[int(t), float(lp)] for t, lp in zip(g.tokens, g.logprobs)],
                    "generate gives the same tokens": [int(t) for t in plain_run.tokens] == [int(t) for t in g.tokens]}

        cases.append(Case(f"{draft.value} at {params_text(prm)}",
                          f"heard = []; generate_stream(TableTarget(12, seed=3), SpecConfig(Draft.{draft.name}, 4), "
                          f"{GEN_PROMPTS[2]}, {params_text(prm)}, 99, 25, [], lambda t, lp: heard.append((t, lp)) "
                          "is None)", streamed, {"heard": "every token, in order"}, rule,
                          judge=judge_stream("generate_stream", "generate gives the same tokens",
                                             "generate and generate_stream give different tokens")))

    def stopped():
        heard = []
        target = CycleTarget(CYCLE)
        g = generate_stream(target, SpecConfig(Draft.PROMPT_LOOKUP, 4), CYCLE_PROMPT, GREEDY, 0, 20, [],
                            lambda t, lp: heard.append(int(t)) or len(heard) < 3)
        return {"tokens": [int(t) for t in g.tokens], "logprobs": len(g.logprobs), "heard": heard,
                "target_calls": target.calls, "cached": target.cached(),
                "stats": [g.stats.drafted, g.stats.accepted, g.stats.target_calls]}

    def heard_eos():
        heard = []
        g = generate_stream(CycleTarget(CYCLE), SpecConfig(Draft.PROMPT_LOOKUP, 4), CYCLE_PROMPT, GREEDY, 3, 20, [4],
                            lambda t, lp: heard.append(int(t)) is None)
        return {"tokens": [int(t) for t in g.tokens], "heard": heard}

    def silent_listener():
        heard = []
        g = generate_stream(CycleTarget(CYCLE), SpecConfig(Draft.PROMPT_LOOKUP, 4), CYCLE_PROMPT, GREEDY, 3, 20, [],
                            lambda t, lp: heard.append(int(t)))
        return {"tokens": [int(t) for t in g.tokens], "heard": heard}

    cases.append(Case("a listener that returns None stops after the first token",
                      "heard = []; generate_stream(CycleTarget(CYCLE), SpecConfig(Draft.PROMPT_LOOKUP, 4), "
                      f"{CYCLE_PROMPT}, SamplingParams(), 3, 20, [], lambda t, lp: heard.append(t))",
                      silent_listener, {"tokens": [2], "heard": [2]}, rule))
    cases.append(Case("the listener hears the EOS token too",
                      "heard = []; generate_stream(CycleTarget(CYCLE), SpecConfig(Draft.PROMPT_LOOKUP, 4), "
                      f"{CYCLE_PROMPT}, SamplingParams(), 3, 20, [4], lambda t, lp: heard.append(t) is None)",
                      heard_eos, {"tokens": [2, 3, 4], "heard": [2, 3, 4]}, rule))
    cases.append(Case("a listener that says stop at the third token, inside the first round",
                      "heard = []; target = CycleTarget(CYCLE); generate_stream(target, SpecConfig(Draft.PROMPT_LOOKUP, "
                      f"4), {CYCLE_PROMPT}, SamplingParams(), 0, 20, [], lambda t, lp: heard.append(t) or "
                      "len(heard) < 3)", stopped,
                      {"tokens": [2, 3, 4], "logprobs": 3, "heard": [2, 3, 4], "target_calls": 1,
                       "cached": len(CYCLE_PROMPT) + 2, "stats": [4, 4, 1]},
                      rule + "; the stopped round's stats count in full: drafted, accepted (past the stop) and its pass"))
    draws = drawn("generate_stream_hands_over_each_token_and_stops_when_told")
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        req, stop_at = drawn_cycle_request(draws), draws.randint(1, 6)
        cases.append(Case(f"drawn-{i}: {req['draft']} k={req['k']}, stop at token {stop_at} (drawn when graded)",
                          f"heard = []; target = CycleTarget({req['succ']}); generate_stream(target, "
                          f"SpecConfig(Draft.{Draft(req['draft']).name}, {req['k']}), {req['prompt']}, SamplingParams(), "
                          f"{req['seed']}, {req['max_new']}, {req['eos']}, lambda t, lp: heard.append(t) or "
                          f"len(heard) < {stop_at})",
                          lambda r=req, n=stop_at: cycle_run(r, n, OWN), cycle_run(req, stop_at, reference_lib()), rule))
    return cases


class Loop(NamedTuple):
    """L10.8's loop and what it is called with, of the code under test (``OWN``) or of the reference
    (:func:`reference_lib`, whose answers a drawn case expects)."""
    generate: Callable
    generate_stream: Callable
    SpecConfig: type
    Draft: type
    SamplingParams: type


OWN = Loop(generate, generate_stream, SpecConfig, Draft, SamplingParams)


def reference_lib() -> Loop:
    spec_ref = reference("spec")
    return Loop(spec_ref.generate, spec_ref.generate_stream, spec_ref.SpecConfig, spec_ref.Draft,
                reference("sampling").SamplingParams)


def drawn_cycle(draws) -> tuple[list[int], list[int]]:
    """A successor map over 4 to 9 ids (a cycle target's text repeats itself, so drafts find runs to
    copy) and a prompt of 2 to 12 tokens that walks it. L10.9's streaming test draws these too."""
    vocab = draws.randint(4, 9)
    succ = [draws.randrange(vocab) for _ in range(vocab)]
    prompt = [draws.randrange(vocab)]
    for _ in range(draws.randint(1, 11)):
        prompt.append(succ[prompt[-1]])
    return succ, prompt


def drawn_cycle_request(draws) -> dict:
    """A greedy request on a CycleTarget of a drawn successor map (:func:`drawn_cycle`), with a drawn
    draft, k, seed, max_new and EOS ids."""
    succ, prompt = drawn_cycle(draws)
    return {"succ": succ, "prompt": prompt, "draft": draws.choice(list(Draft)).value, "k": draws.randint(1, 6),
            "seed": draws.randrange(1000), "max_new": draws.randint(0, 16),
            "eos": draws.sample(range(len(succ)), draws.randint(0, 2))}


def cycle_run(req: dict, stop_at: int | None, loop: Loop) -> dict:
    """``req`` run by ``loop`` on a fresh CycleTarget: with ``generate`` (how it ended: tokens, the
    target's cache, KV written past ``len(prompt) + max_new - 1``), or with ``generate_stream`` and a
    listener that says stop at its ``stop_at``-th token (what it heard too)."""
    target, heard = CycleTarget(req["succ"]), []
    args = (target, loop.SpecConfig(loop.Draft(req["draft"]), req["k"]), req["prompt"], loop.SamplingParams(),
            req["seed"], req["max_new"], req["eos"])
    if stop_at is None:
        g = loop.generate(*args)
    else:
        g = loop.generate_stream(*args, lambda t, lp: heard.append(int(t)) or len(heard) < stop_at)
    ended = {"tokens": [int(t) for t in g.tokens], "logprobs": len(g.logprobs), "cached": target.cached(),
             "KV written past the budget": max(target.fed_positions, default=-1) >= len(req["prompt"]) + max(req["max_new"], 1) - 1}
    # how the request ended and what was heard; what its drafts found (passes, stats) is the drafts' tests' business
    return ended if stop_at is None else {**ended, "heard": heard}


def test_generate_stream_hands_over_each_token_and_stops_when_told():
    check(cases_generate_stream_hands_over_each_token_and_stops_when_told())


# --- The real model ------------------------------------------------------------------------------

def tiny_llama_rows():
    """Rows of one request fed in two passes, each compared with a fresh run of its prefix."""
    from tinyllm.model import LlamaConfig, TinyLlama
    from tinyllm.runner import RunnerTarget

    model = TinyLlama.random(LlamaConfig(), 0)
    pool = model.new_pool(64, 4)
    prompt = np.random.default_rng(5).integers(0, 256, size=7).tolist()

    def fresh_last_row(prefix):
        target = RunnerTarget(model, pool)
        row = target.extend(prefix)[-1]
        target.release()
        return row

    target = RunnerTarget(model, pool)
    fed = prompt + [3, 9, 3]
    rows = target.extend(prompt) + target.extend([3, 9, 3])
    seen = {"rows": len(rows), "cached": target.cached(),
            "rows equal fresh runs": [bool(np.array_equal(r, fresh_last_row(fed[:j + 1]))) for j, r in enumerate(rows)]}
    target.truncate(8)
    seen["after truncate(8), extend([4]) equals a fresh run"] = bool(
        np.array_equal(target.extend([4])[0], fresh_last_row(fed[:8] + [4])))
    target.release()
    seen["blocks back in the pool"] = pool.num_free() == 64
    return seen


def tiny_llama_generation():
    """Greedy generation on the tiny llama, without and with prompt lookup."""
    from tinyllm.model import LlamaConfig, TinyLlama
    from tinyllm.runner import RunnerTarget

    model = TinyLlama.random(LlamaConfig(), 0)
    pool = model.new_pool(64, 4)
    prompt = np.random.default_rng(5).integers(0, 256, size=7).tolist()
    periodic = (prompt[:4] * 3)[:10]
    runs, state = {}, {}
    for draft in (Draft.NONE, Draft.PROMPT_LOOKUP):
        target = RunnerTarget(model, pool)
        runs[draft] = generate(target, SpecConfig(draft, 4), periodic, GREEDY, 0, 12, [])
        state[draft.value] = [target.cached(), len(target.table)]
        target.release()
    return {"cached and blocks": state, "same tokens": list(runs[Draft.PROMPT_LOOKUP].tokens) == list(runs[Draft.NONE].tokens),
            "drafted": runs[Draft.PROMPT_LOOKUP].stats.drafted > 0, "blocks back in the pool": pool.num_free() == 64}


def cases_runner_target_scores_every_fed_position():
    rule = ("card 4 and 2.4: RunnerTarget returns one row per fed id, each equal to a fresh run of its prefix; its "
            "truncate calls your rollback; greedy with prompt lookup emits plain greedy's tokens")
    return [
        Case("extend twice, truncate, extend", "tiny_llama_rows()   # helper of course/tests/test_l10_8.py (ol shell has it)", tiny_llama_rows,
             {"rows": 10, "cached": 10, "rows equal fresh runs": [True] * 10,
              "after truncate(8), extend([4]) equals a fresh run": True, "blocks back in the pool": True}, rule),
        Case("greedy on the tiny llama, with and without prompt lookup",
             "tiny_llama_generation()   # helper of course/tests/test_l10_8.py (ol shell has it)", tiny_llama_generation,
             {"cached and blocks": {"none": [21, 6], "prompt_lookup": [21, 6]},
              "same tokens": True, "drafted": True, "blocks back in the pool": True}, rule),
    ]


def test_runner_target_scores_every_fed_position():
    check(cases_runner_target_scores_every_fed_position())
