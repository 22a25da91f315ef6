"""Graded tests for L10.10, speculation under load (card: course/L10.10.md, section 4).

Each test is named after a row of the card's table and checks a list of cases (``grader.cases``):
``cases_<name>()`` builds them, ``test_<name>()`` checks them. The code under test is reached only
through ``tinyllm.*``; the model is the given tiny llama with small random weights (``small()``),
so a request served in company can be compared with the same request served alone.
"""

import math
import random
from typing import Callable, NamedTuple

from graded import DRAWN_RULE_CASES, drawn, load_fixture, reference
from grader.cases import Case, call, check, in_turn, keys_of, raises
from tinyllm.model import LlamaConfig, TinyLlama
from tinyllm.runner import RunnerTarget
from tinyllm.sampling import SamplingParams
from tinyllm.serve import (MAX_DRAFT, CostTable, Lane, Policy, Server, adaptive_ks, choose_ks, expected_tokens,
                           gemm_blocks, goodput, observe, survival)
from tinyllm.spec import SpecConfig, generate

GOLDEN = "L10.10/serve_golden.json"
GREEDY = SamplingParams()
# Section 3's cost table: a gemm 10 ms, each further one 10 ms more; a row 0.01 ms, a request
# 0.1 ms, a drafter call 0.01 ms.
HAND_COST = CostTable((0.010, 0.020, 0.030, 0.040), row_seconds=1e-5, request_seconds=1e-4, draft_seconds=1e-5)
HAND_COST_TEXT = "CostTable((0.010, 0.020, 0.030, 0.040), 1e-5, 1e-4, 1e-5)"
# section 3's table on a machine that feeds rows alone (card 2.2): a pass runs ceil(rows / 16) gemms
HAND_ALONE = CostTable((0.010, 0.020, 0.030, 0.040), row_seconds=1e-5, request_seconds=1e-4, draft_seconds=1e-5,
                       rows_alone=True)
HAND_ALONE_TEXT = "CostTable((0.010, 0.020, 0.030, 0.040), 1e-5, 1e-4, 1e-5, rows_alone=True)"
SMALL = {"vocab": 24, "dim": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "hidden": 24}
_small: list[TinyLlama] = []


def small() -> TinyLlama:
    """The given llama, one layer, seeded random weights over 24 ids (built once per process)."""
    if not _small:
        _small.append(TinyLlama.random(LlamaConfig(**SMALL), 5))
    return _small[0]


_reference_small: list = []


def reference_small():
    """:func:`small` by the reference's copy of the given llama, built once per process in the judge:
    the same weights, for the drawn cases the reference answers."""
    if not _reference_small:
        model = reference("model")
        _reference_small.append(model.TinyLlama.random(model.LlamaConfig(**SMALL), 5))
    return _reference_small[0]


class Engine(NamedTuple):
    """What a scheduler scenario runs on: the server, the policy, the small llama and greedy
    settings, and ``greedy(prompt, max_new)``, the tokens L10.8's plain generate emits alone. The
    scenario runs on the code under test (:func:`under_test`); a drawn case's answer is the same
    scenario on the reference (:func:`the_reference`), in the judge."""
    Server: type
    Policy: type
    model: object
    greedy_params: object
    greedy: Callable[[list[int], int], list[int]]


def under_test() -> Engine:
    return Engine(Server, Policy, small(), GREEDY, lambda p, n: alone(p, 0, GREEDY, 0, n)["tokens"])


def the_reference() -> Engine:
    serve = reference("serve")
    return Engine(serve.Server, serve.Policy, reference_small(), reference("sampling").SamplingParams(),
                  lambda p, n: reference_alone(p, 0, 0.0, 0, n)["tokens"])


def rounded(values) -> list[float]:
    return [round(float(v), 12) for v in values]


def drawn_lanes(draws: random.Random, most: int = 20) -> list[list]:
    """Lanes as ``[start, fixed, cap, rates]``, drawn as the recorded steps' are."""
    return [[draws.randrange(300), draws.randint(2, 19) if draws.random() < 0.1 else 1, draws.randint(0, MAX_DRAFT),
             drawn_rates(draws)] for _ in range(draws.randint(1, most))]


def drawn_cost(draws: random.Random) -> list:
    """A cost table as ``[block_seconds, row, request, draft]``: gemms that grow, the rest a share of the first."""
    first = draws.uniform(0.5e-3, 0.12)
    blocks, total = [], 0.0
    for step in [first] + [draws.uniform(0.05, 1.2) * first for _ in range(3)]:
        total += step
        blocks.append(round(total, 6))
    return [blocks, round(draws.uniform(0, 0.02) * first, 6), round(draws.uniform(0, 0.4) * first / 16, 6),
            round(draws.uniform(0, 0.01) * first, 6)]


def drawn_rates(draws: random.Random) -> list[float]:
    """An estimate as the fixture's oracle draws one: flat, falling with depth, or anything."""
    kind = draws.randrange(3)
    if kind == 0:
        return [round(draws.uniform(0.05, 0.95), 4)] * MAX_DRAFT
    if kind == 1:
        top = draws.uniform(0.5, 0.98)
        return [round(top * 0.93 ** j, 4) for j in range(MAX_DRAFT)]
    return [round(draws.random(), 4) for _ in range(MAX_DRAFT)]


# --- 2.1 Acceptance and AL(k) ---------------------------------------------------------------------

ACCEPT_RULE = ("card 2.1: a round that drafted d and kept n observes positions 1..min(n + 1, d): the first n "
               "accepted (1), position n + 1 rejected (0) if drafted; a[j] += 0.3 * (seen - a[j]); rounds "
               "that drafted nothing observe nothing")


def updated(rounds) -> list[float]:
    rates = [0.5] * MAX_DRAFT
    for drafted, accepted in rounds:
        rates = observe(rates, drafted, accepted)
    return rounded(rates)


def acceptance_case(label, rounds, want) -> Case:
    text = "rates = [0.5] * 15; " + "; ".join(f"rates = observe(rates, {d}, {n})" for d, n in rounds) + "; rates"
    return Case(label, text, lambda: updated(rounds), rounded(want + [0.5] * (MAX_DRAFT - len(want))), ACCEPT_RULE)


def cases_hand_example_acceptance():
    survival_rule = "card 2.1: survival(rates, k)[m - 1] = a[0] * ... * a[m - 1]"
    return [
        acceptance_case("section 3: 4 drafted, 2 kept", [(4, 2)], [0.65, 0.65, 0.35]),
        acceptance_case("section 3, then 2 drafted, 2 kept", [(4, 2), (2, 2)], [0.755, 0.755, 0.35]),
        acceptance_case("nothing drafted observes nothing", [(0, 0), (0, 0), (0, 0)], []),
        acceptance_case("a draft of 3 all kept: position 4 not tried", [(3, 3)], [0.65, 0.65, 0.65]),
        acceptance_case("the first token rejected", [(5, 0)], [0.35]),
        acceptance_case("15 drafted, 15 kept", [(15, 15)], [0.65] * 15),
        Case("survival of 0.8, 0.5, 0.25", "survival([0.8, 0.5, 0.25] + [0.5] * 12, 3)",
             lambda: rounded(survival([0.8, 0.5, 0.25] + [0.5] * 12, 3)), [0.8, 0.4, 0.1], survival_rule),
        Case("survival(rates, 0)", "survival([0.5] * 15, 0)", lambda: rounded(survival([0.5] * 15, 0)), [],
             survival_rule),
        Case("observe leaves its argument alone", "rates = [0.5] * 15; observe(rates, 3, 1); rates",
             lambda: (lambda rates: (observe(rates, 3, 1), rates)[1])([0.5] * 15), [0.5] * 15,
             "card 2.1: observe returns the new estimate"),
        call("more kept than drafted", observe, [0.5] * 15, 2, 3, expected=raises("SpecError"),
             rule="card 2.1: 0 <= accepted <= drafted <= len(rates), else SpecError"),
        call("more drafted than the estimate holds", observe, [0.5] * 15, 16, 3, expected=raises("SpecError"),
             rule="card 2.1: 0 <= accepted <= drafted <= len(rates), else SpecError"),
        call("fewer than none kept", observe, [0.5] * 15, 2, -1, expected=raises("SpecError"),
             rule="card 2.1: 0 <= accepted <= drafted <= len(rates), else SpecError"),
        Case("survival past the estimate", "len(survival([0.5] * 15, 16))", lambda: len(survival([0.5] * 15, 16)),
             15, "card 2.1: survival checks nothing: for k >= 0 it returns min(k, len(rates)) values"),
    ] + drawn_acceptance_cases(drawn("hand_example_acceptance"))


def drawn_acceptance_cases(draws) -> list[Case]:
    """Rounds of drafts and kept tokens, the estimate after them the reference's."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        rounds = [(d, draws.randint(0, d)) for d in (draws.randint(0, MAX_DRAFT) for _ in range(draws.randint(1, 6)))]
        rates = [0.5] * MAX_DRAFT
        for d, n in rounds:
            rates = reference("serve").observe(rates, d, n)
        text = "rates = [0.5] * 15; " + "; ".join(f"rates = observe(rates, {d}, {n})" for d, n in rounds) + "; rates"
        cases.append(Case(f"drawn-{i} (drawn when graded)", text, lambda r=rounds: updated(r), rounded(rates),
                          ACCEPT_RULE))
    return cases


def test_hand_example_acceptance():
    check(cases_hand_example_acceptance())


def cases_hand_example_expected_tokens():
    rule = "card 2.1: AL(k) = 1 + sum over m = 1..k of a[0] * ... * a[m - 1]; AL(0) = 1"
    rates = [0.8, 0.5, 0.25] + [0.5] * 12
    cases = [call(f"AL({k}) of 0.8, 0.5, 0.25", lambda k=k: round(expected_tokens(rates, k), 12), expected=want,
                  rule=rule, name=f"expected_tokens({rates}, {k}) # rounded")
             for k, want in ((0, 1.0), (1, 1.8), (2, 2.2), (3, 2.3))]
    cases.append(call("AL(15) at a = 0.6", lambda: round(expected_tokens([0.6] * 15, 15), 9),
                      expected=round((1 - 0.6 ** 16) / 0.4, 9), rule=rule + " = (1 - a^(k+1)) / (1 - a)",
                      name="expected_tokens([0.6] * 15, 15) # rounded"))
    cases.append(call("k past the estimate", expected_tokens, [0.5] * 15, 16, expected=raises("SpecError"),
                      rule="card 2.1: k in 0..len(rates), else SpecError"))
    cases.append(call("a k below 0", expected_tokens, [0.5] * 15, -1, expected=raises("SpecError"),
                      rule="card 2.1: k in 0..len(rates), else SpecError"))
    cases.append(call("a bool k", expected_tokens, [0.5] * 15, True, expected=raises("SpecError"),
                      rule="card 2.1: k an int in 0..len(rates) (a bool too), else SpecError"))
    return cases + drawn_expected_tokens_cases(drawn("hand_example_expected_tokens"))


def drawn_expected_tokens_cases(draws) -> list[Case]:
    rule = "card 2.1: AL(k) = 1 + sum over m = 1..k of a[0] * ... * a[m - 1]; AL(0) = 1"
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        rates, k = drawn_rates(draws), draws.randint(0, MAX_DRAFT)
        cases.append(call(f"drawn-{i} (drawn when graded)", expected_tokens, rates, k,
                          expected=reference("serve").expected_tokens(rates, k), rule=rule))
    return cases


def test_hand_example_expected_tokens():
    check(cases_hand_example_expected_tokens())


# --- 2.2 What a step costs ------------------------------------------------------------------------

def cases_gemm_blocks_count_the_fullest_slot():
    rule = "card 2.2: a row at position p sits at gemm slot p % 16; the pass runs as many gemms as its fullest slot holds"
    shapes = [([], 0), (list(range(16)), 1), (list(range(5, 22)), 2), ([3, 19, 35, 4], 3), ([7], 1),
              (list(range(40, 48)) + list(range(44, 52)), 2), ([0, 16, 32, 48, 64], 5)]
    cases = [call(f"{len(p)} rows", gemm_blocks, p, expected=want, rule=rule) for p, want in shapes]
    draws = drawn("gemm_blocks_count_the_fullest_slot")
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        positions = [draws.randrange(400) for _ in range(draws.randint(1, 80))]
        cases.append(call(f"drawn-{i}: {len(positions)} rows (drawn when graded)", gemm_blocks, positions,
                          expected=reference("serve").gemm_blocks(positions), rule=rule))
    return cases


def test_gemm_blocks_count_the_fullest_slot():
    check(cases_gemm_blocks_count_the_fullest_slot())


# --- 2.3 The policy -------------------------------------------------------------------------------

GOODPUT_RULE = ("card 2.3: goodput = sum AL_i(k_i) / (T(gemms) + rows * row + requests * request + drafting "
                "requests * draft), gemms the fullest slot's count")
CHOICE_RULE = ("card 2.3: within the plain pass's gemms g0, slots likeliest first, taken when their request's "
               "previous slot is taken, their gemm slot holds fewer than g0 rows and s * seconds > tokens * extra "
               "(extra: row_seconds, plus draft_seconds for a request's first draft token, m = 1)")


def raw_lanes_text(raw) -> str:
    """Lanes given as ``[start, fixed, cap, rates]`` lists, as Python text."""
    return "[" + ", ".join(f"Lane({start}, {fixed}, {cap}, {list(rates)!r})" for start, fixed, cap, rates in raw) + "]"


def lanes_text(lanes) -> str:
    return raw_lanes_text([(lane.start, lane.fixed, lane.cap, lane.rates) for lane in lanes])


def cases_hand_example_goodput():
    sure, even = [0.8] * MAX_DRAFT, [0.5] * MAX_DRAFT
    one = [Lane(40, 1, 15, sure)]
    full = [Lane(p, 1, 15, sure) for p in range(32, 48)]
    pair = [Lane(3, 1, 15, sure), Lane(19, 1, 15, sure)]
    nearly = [Lane(p, 1, 15, even) for p in range(32, 46)]
    still = [Lane(3, 1, 0, sure), Lane(19, 1, 0, sure)]
    rare = [Lane(3, 1, 15, [0.003] * MAX_DRAFT), Lane(19, 1, 15, [0.003] * MAX_DRAFT)]
    three = [Lane(3, 1, 15, sure), Lane(19, 1, 15, sure), Lane(5, 1, 15, sure)]
    mixed = [Lane(3, 1, 15, even), Lane(19, 1, 0, even), Lane(20, 1, 15, [0.25] * MAX_DRAFT), Lane(21, 1, 0, even)]
    cases = [
        Case("section 3: one request, plain", f"goodput({lanes_text(one)}, [0], {HAND_COST_TEXT})",
             lambda: round(goodput(one, [0], HAND_COST), 6), round(1 / (0.010 + 1e-5 + 1e-4), 6), GOODPUT_RULE),
        Case("section 3: one request, k = 4", f"goodput({lanes_text(one)}, [4], {HAND_COST_TEXT})",
             lambda: round(goodput(one, [4], HAND_COST), 6),
             round((1 + 0.8 + 0.8 ** 2 + 0.8 ** 3 + 0.8 ** 4) / (0.010 + 5e-5 + 1e-4 + 1e-5), 6), GOODPUT_RULE),
        Case("section 3: sixteen requests, k = 1 each: two gemms and sixteen drafter calls",
             f"goodput({lanes_text(full)}, [1] * 16, {HAND_COST_TEXT})",
             lambda: round(goodput(full, [1] * 16, HAND_COST), 6),
             round(16 * 1.8 / (0.020 + 32e-5 + 16e-4 + 16e-5), 6), GOODPUT_RULE),
        Case("section 3: one request drafts into its free slots",
             f"adaptive_ks({lanes_text(one)}, {HAND_COST_TEXT})", lambda: adaptive_ks(one, HAND_COST), [15],
             CHOICE_RULE),
        Case("section 3: sixteen requests fill one gemm: a draft costs a second",
             f"adaptive_ks({lanes_text(full)}, {HAND_COST_TEXT})", lambda: adaptive_ks(full, HAND_COST), [0] * 16,
             CHOICE_RULE),
        Case("section 3: two requests at one slot pay two gemms; the second takes drafts",
             f"adaptive_ks({lanes_text(pair)}, {HAND_COST_TEXT})", lambda: adaptive_ks(pair, HAND_COST), [15, 15],
             CHOICE_RULE),
        Case("14 requests on slots 0-13: only the last has free slots after it",
             f"adaptive_ks({lanes_text(nearly)}, {HAND_COST_TEXT})", lambda: adaptive_ks(nearly, HAND_COST),
             [0] * 13 + [2], CHOICE_RULE),
        Case("a cap of 0 drafts nothing", f"adaptive_ks([Lane(5, 1, 0, {sure!r})], {HAND_COST_TEXT})",
             lambda: adaptive_ks([Lane(5, 1, 0, sure)], HAND_COST), [0], CHOICE_RULE),
        Case("rows fed alone: two rows at one slot run one gemm",
             f"goodput({lanes_text(still)}, [0, 0], {HAND_ALONE_TEXT})",
             lambda: round(goodput(still, [0, 0], HAND_ALONE), 6), round(2 / (0.010 + 2e-5 + 2e-4), 6),
             GOODPUT_RULE + "; the table's step_seconds counts the gemms its machine runs (rows alone: ceil(rows / 16))"),
        Case("rows fed alone: the plain pass is one gemm, not the fullest slot's two",
             f"adaptive_ks({lanes_text(rare)}, {HAND_ALONE_TEXT})", lambda: adaptive_ks(rare, HAND_ALONE), [0, 0],
             CHOICE_RULE + "; seconds from the table's step_seconds, which counts the gemms its machine runs"),
        Case("every draft token sure: ties go to the lower m, the whole draft taken",
             f"adaptive_ks([Lane(40, 1, 15, {[1.0] * MAX_DRAFT!r})], {HAND_COST_TEXT})",
             lambda: adaptive_ks([Lane(40, 1, 15, [1.0] * MAX_DRAFT)], HAND_COST), [15],
             CHOICE_RULE + "; candidates sorted by s descending, then request index, then m"),
        Case("equal rates: ties go to the earlier request",
             f"adaptive_ks({lanes_text(three)}, {HAND_COST_TEXT})", lambda: adaptive_ks(three, HAND_COST), [15, 1, 13],
             CHOICE_RULE + "; candidates sorted by s descending, then request index, then m"),
        Case("an exact tie does not pay: s * seconds must exceed tokens * extra",
             "adaptive_ks([Lane(0, 1, 1, [1.0]), Lane(5, 1, 1, [0.75])], CostTable((1.0,), 1.0))",
             lambda: adaptive_ks([Lane(0, 1, 1, [1.0]), Lane(5, 1, 1, [0.75])], CostTable((1.0,), 1.0)), [1, 0],
             CHOICE_RULE + "; after the first slot, tokens 3 and seconds 4: the second's 0.75 * 4 = 3 * 1 ties, "
             "and a tie is not taken"),
        Case("equal chances at different m: the earlier request first, then m",
             f"adaptive_ks({lanes_text(mixed)}, {HAND_COST_TEXT})", lambda: adaptive_ks(mixed, HAND_COST),
             [8, 0, 0, 0], CHOICE_RULE + "; candidates sorted by s descending, then request index, then m"),
    ]
    return cases + drawn_goodput_cases(drawn("hand_example_goodput"))


def drawn_goodput_cases(draws) -> list[Case]:
    """Steps of drawn lanes, each request's k within its cap, their goodput the reference's."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        raw, (blocks, *rest) = drawn_lanes(draws, most=12), drawn_cost(draws)
        ks = [draws.randint(0, cap) for _, _, cap, _ in raw]
        serve = reference("serve")
        want = serve.goodput([serve.Lane(*lane) for lane in raw], ks, serve.CostTable(tuple(blocks), *rest))
        cases.append(Case(f"drawn-{i} (drawn when graded)",
                          f"goodput({raw_lanes_text(raw)}, {ks}, CostTable({tuple(blocks)!r}, {rest[0]!r}, "
                          f"{rest[1]!r}, {rest[2]!r}))",
                          lambda r=raw, k=ks, b=tuple(blocks), c=rest: goodput([Lane(*lane) for lane in r], k,
                                                                             CostTable(b, *c)),
                          want, GOODPUT_RULE, judge=judge_relative))
    return cases


def judge_relative(got, want) -> str | None:
    """Goodput runs to hundreds of thousands of tokens a second: equal to a relative 1e-9."""
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return f"not a number of tokens a second: {got!r}"
    return None if math.isclose(got, want, rel_tol=1e-9) else f"goodput {got!r}; the reference's is {want!r}"


def test_hand_example_goodput():
    check(cases_hand_example_goodput())


def recorded_choice_case(c: dict) -> Case:
    lanes = [Lane(*lane) for lane in c["lanes"]]
    cost = CostTable(tuple(c["cost"][0]), *c["cost"][1:])
    text = (f"adaptive_ks({lanes_text(lanes)}, CostTable({tuple(c['cost'][0])!r}, {c['cost'][1]!r}, "
            f"{c['cost'][2]!r}, {c['cost'][3]!r}))")
    return Case(c["name"], text, lambda: adaptive_ks(lanes, cost), c["expect"], CHOICE_RULE)


DRAWN_STEPS = 12  # steps the recorded test draws when graded: a table of the public ones has no answer for them


def drawn_choice_case(draws: random.Random, i: int) -> Case:
    """A step the reference's adaptive_ks answers in the judge, drawn as the recorded ones are."""
    if i % 5 == 4:  # a busy pass on consecutive slots
        base, n = draws.randrange(300), draws.randint(14, 32)
        lanes = [[base + j, 1, draws.randint(0, MAX_DRAFT), drawn_rates(draws)] for j in range(n)]
    else:
        lanes = drawn_lanes(draws)
    cost = drawn_cost(draws)
    serve = reference("serve")
    expect = serve.adaptive_ks([serve.Lane(*lane) for lane in lanes], serve.CostTable(tuple(cost[0]), *cost[1:]))
    return recorded_choice_case({"name": f"drawn-{i} (drawn when graded)", "lanes": lanes, "cost": cost,
                                 "expect": expect})


def cases_adaptive_matches_recorded():
    cases = [recorded_choice_case(c) for c in load_fixture(GOLDEN)["adaptive"]]
    draws = drawn("adaptive_matches_recorded")
    return cases + [drawn_choice_case(draws, i) for i in range(DRAWN_STEPS if draws is not None else 0)]


def test_adaptive_matches_recorded():
    check(cases_adaptive_matches_recorded(), "recorded step")


def cases_static_and_off_choices():
    rule = "card 2.3: off gives every request 0; static k gives each request min(k, its own cap); adaptive needs a cost table"
    lanes = [Lane(0, 1, 2, [0.5] * MAX_DRAFT), Lane(5, 3, 9, [0.5] * MAX_DRAFT), Lane(9, 1, 15, [0.9] * MAX_DRAFT)]
    text = lanes_text(lanes)
    return [
        Case("static 4", f"choose_ks(Policy('static', 4), {text}, None)",
             lambda: choose_ks(Policy("static", 4), lanes, None), [2, 4, 4], rule),
        Case("static 15", f"choose_ks(Policy('static', 15), {text}, None)",
             lambda: choose_ks(Policy("static", 15), lanes, None), [2, 9, 15], rule),
        Case("off", f"choose_ks(Policy('off'), {text}, None)", lambda: choose_ks(Policy("off"), lanes, None),
             [0, 0, 0], rule),
        Case("adaptive", f"choose_ks(Policy('adaptive'), {text}, {HAND_COST_TEXT})",
             lambda: choose_ks(Policy("adaptive"), lanes, HAND_COST), adaptive_ks(lanes, HAND_COST), rule),
        Case("adaptive without a table", f"choose_ks(Policy('adaptive'), {text}, None)",
             lambda: choose_ks(Policy("adaptive"), lanes, None), raises("SpecError"), rule),
    ] + drawn_static_cases(drawn("static_and_off_choices"), rule)


def drawn_static_cases(draws, rule: str) -> list[Case]:
    """Off and static k over drawn lanes, their choices the reference's."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        raw, k = drawn_lanes(draws), draws.randint(1, MAX_DRAFT)
        name = "off" if i == 0 else str(k)
        serve = reference("serve")
        want = serve.choose_ks(serve.Policy.parse(name), [serve.Lane(*lane) for lane in raw], None)
        made = "Policy('off')" if i == 0 else f"Policy('static', {k})"
        cases.append(Case(f"drawn-{i}: {made} (drawn when graded)", f"choose_ks({made}, {raw_lanes_text(raw)}, None)",
                          lambda n=name, r=raw: choose_ks(Policy.parse(n), [Lane(*lane) for lane in r], None),
                          want, rule))
    return cases


def test_static_and_off_choices():
    check(cases_static_and_off_choices())


# --- 2.4 The scheduler ----------------------------------------------------------------------------

PROMPTS = [[1, 2, 3, 4, 1, 2, 3], [5, 5, 6, 5, 5, 6, 5], [7, 8, 9, 10, 11, 7, 8, 9, 10], [2, 4, 2, 4, 2],
           [12, 3, 12, 3, 12, 3, 12, 3, 12, 3, 12, 3, 12, 3, 12, 3, 12, 3], [9]]
SERVE_RULE = ("card 2.4: every request is verified on its own rows with L10.8's verify_draft and its own "
              "generator, and rolled back with L10.8's rollback: its output is its output alone")
GREEDY_SERVE_RULE = SERVE_RULE + "; greedy output is plain greedy output"
SAMPLED_SERVE_RULE = SERVE_RULE + "; with one k each request draws what it draws alone, whoever shares its passes"


def alone(prompt, k, params, seed, max_new, eos=()) -> dict:
    """L10.8's generate on a RunnerTarget of its own: the request alone."""
    model = small()
    cfg = SpecConfig.parse("none" if k == 0 else "prompt_lookup", max(k, 1))
    g = generate(RunnerTarget(model, model.new_pool(32, 4)), cfg, prompt, params, seed, max_new, eos)
    return generated_row(g)


def generated_row(g) -> dict:
    return {"tokens": g.tokens, "logprobs": rounded(g.logprobs), "drafted": g.stats.drafted,
            "accepted": g.stats.accepted, "target_calls": g.stats.target_calls}


def reference_alone(prompt, k, temperature, seed, max_new) -> dict:
    """:func:`alone` by the reference's L10.8 on the given llama, worked out in the judge."""
    spec, model = reference("spec"), reference_small()
    cfg = spec.SpecConfig.parse("none" if k == 0 else "prompt_lookup", max(k, 1))
    target = reference("runner").RunnerTarget(model, model.new_pool(32, 4))
    params = reference("sampling").SamplingParams(temperature=temperature)
    return generated_row(spec.generate(target, cfg, prompt, params, seed, max_new, ()))


def drawn_requests(draws: random.Random, temperature: float) -> list[tuple]:
    """Requests as ``(prompt, temperature, seed, max_new)``: a motif over the llama's 24 ids said a few
    times and a tail, so that prompt lookup finds something to draft, as in PROMPTS."""
    requests = []
    for _ in range(draws.randint(3, 7)):
        motif = [draws.randrange(24) for _ in range(draws.randint(1, 4))]
        tail = [draws.randrange(24) for _ in range(draws.randint(0, 3))]
        requests.append((motif * draws.randint(1, 4) + tail, temperature, draws.randrange(1000), draws.randint(1, 12)))
    return requests


def drained(server, most: int) -> str | None:
    """``server.run()`` that gives up after ``most`` steps: ``None`` once the server is idle, else
    :func:`still_held`. A correct server needs no more than every request's ``max_new + 1`` steps
    one after another (each step emits a token for every running request, and a pool its requests
    gave back admits the queue's head), so a server that never goes idle fails its case with its
    state instead of running until the test's timeout."""
    for _ in range(most):
        if server.idle():
            return None
        server.step()
    return None if server.idle() else f"not idle after {most} steps: {still_held(server)}"


def still_held(server) -> str:
    """What a server that should be idle by now still holds."""
    def some(requests, what: str) -> str:
        rids = [str(r.rid) for r in requests]
        shown = ", ".join(rids[:6]) + (", ..." if len(rids) > 6 else "")
        return f"{len(rids)} {what}" + (f" ({shown})" if rids else "")

    return (f"{some(server.running, 'running')}, {some(server.queue, 'queued')}, "
            f"{server.pool.num_free()} of {server.pool.num_blocks} blocks free, {getattr(server, '_reserved', '?')} "
            "reserved (card 2.4: _finish gives a request's blocks and budget back)")


def served(policy: str, batch: int, requests: list[tuple], with_stats: bool = True) -> list[dict]:
    """Serve ``requests`` (prompt, params, seed, max_new) together; each one's result, and the pool's free
    blocks at the end."""
    model = small()
    server = Server(model, model.new_pool(64, 4), Policy.parse(policy), max_batch=batch, cost=HAND_COST)
    ids = [server.submit(p, params, seed=seed, max_new=n) for p, params, seed, n in requests]
    stuck = drained(server, sum(n + 1 for *_, n in requests))
    if stuck:
        return [{"stuck": stuck}]
    out = []
    for i in ids:
        g = server.results[i]
        row = {"tokens": g.tokens, "logprobs": rounded(g.logprobs)}
        if with_stats:
            row |= {"drafted": g.stats.drafted, "accepted": g.stats.accepted, "target_calls": g.stats.target_calls}
        out.append(row)
    return out + [{"free blocks": server.pool.num_free()}]


def serve_text(policy, batch, requests) -> str:
    reqs = ", ".join(f"({p}, {'GREEDY' if prm.temperature == 0 else f'SamplingParams(temperature={prm.temperature})'}, "
                     f"{seed}, {n})" for p, prm, seed, n in requests)
    return f"served({policy!r}, {batch}, [{reqs}])   # served() in course/tests/test_l10_10.py"


DRAWN_SERVES = 2  # servings each differential scheduler test draws when graded


def drawn_serve_case(draws: random.Random, i: int, policy: str, temperature: float, rule: str) -> Case:
    """A batch of drawn requests served together, each one's answer the reference's alone."""
    batch, requests = draws.randint(2, 6), drawn_requests(draws, temperature)
    k = 0 if policy in ("off", "adaptive") else int(policy)
    want = [reference_alone(p, k, t, s, n) for p, t, s, n in requests]
    if temperature == 0:
        want = [{"tokens": w["tokens"]} for w in want]
    made = [(p, GREEDY if t == 0 else SamplingParams(temperature=t), s, n) for p, t, s, n in requests]
    shown = policy if policy in ("off", "adaptive") else f"static k={policy}"
    return Case(f"drawn-{i}: B={batch} {shown} (drawn when graded)", serve_text(policy, batch, made),
                lambda a=(policy, batch, made): [{"tokens": r["tokens"]} if "tokens" in r and temperature == 0 else r
                                                 for r in served(*a, with_stats=temperature != 0)],
                want + [{"free blocks": 64}], rule)


def cases_batched_greedy_equals_alone():
    cases = []
    for batch in (1, 2, 5):
        for policy in ("off", "3", "15", "adaptive"):
            requests = [(PROMPTS[i % len(PROMPTS)], GREEDY, i, 6 + 3 * i) for i in range(7)]
            want = [{"tokens": alone(p, 0, GREEDY, s, n)["tokens"]} for p, _, s, n in requests] + [{"free blocks": 64}]
            cases.append(Case(f"B={batch} {policy}", serve_text(policy, batch, requests),
                              lambda a=(policy, batch, requests): [{"tokens": r["tokens"]} if "tokens" in r else r
                                                                   for r in served(*a, with_stats=False)],
                              want, GREEDY_SERVE_RULE))
    draws = drawn("batched_greedy_equals_alone")
    policies = ("off", str(draws.randint(1, MAX_DRAFT)), "adaptive") if draws is not None else ()
    return cases + [drawn_serve_case(draws, i, draws.choice(policies), 0.0, GREEDY_SERVE_RULE)
                    for i in range(DRAWN_SERVES if draws is not None else 0)]


def test_batched_greedy_equals_alone():
    check(cases_batched_greedy_equals_alone(), "batch")


def cases_sampled_draws_as_alone():
    cases = []
    warm = SamplingParams(temperature=1.0)
    for batch in (2, 4):
        for k in (2, 5):
            requests = [(PROMPTS[i % len(PROMPTS)], warm, 40 + i, 4 + 5 * (i % 3)) for i in range(6)]
            want = [alone(p, k, prm, s, n) for p, prm, s, n in requests] + [{"free blocks": 64}]
            cases.append(Case(f"B={batch} static k={k}", serve_text(str(k), batch, requests),
                              lambda a=(str(k), batch, requests): served(*a), want, SAMPLED_SERVE_RULE))
    draws = drawn("sampled_draws_as_alone")
    return cases + [drawn_serve_case(draws, i, str(draws.randint(1, 8)), draws.choice([0.7, 1.0, 1.3]), SAMPLED_SERVE_RULE)
                    for i in range(DRAWN_SERVES if draws is not None else 0)]


def test_sampled_draws_as_alone():
    check(cases_sampled_draws_as_alone(), "batch")


class RowCounter:
    """A model that counts what each forward is fed, where the test runs: what a step feeds is
    counted, not what its report says. ``rows`` fed in all, and ``widest``, the most requests
    (block tables) one pass fed. The code under test may call ``forward``, nothing else of it."""

    def __init__(self, model) -> None:
        self.model, self.rows, self.widest = model, 0, 0

    def forward(self, pool, tables, positions, ids, write=None):
        # read once, as plain ints: what is counted is what the model is fed (a sequence of the code
        # under test could give one length when counted and another when read)
        tables, read = list(tables), {}  # rows of one request share its table: read each once
        for table in tables:
            if id(table) not in read:
                read[id(table)] = [int(b) for b in table]
        tables = [read[id(table)] for table in tables]
        positions, ids = [int(p) for p in positions], [int(t) for t in ids]
        write = None if write is None else [bool(w) for w in write]
        self.rows += len(ids)
        self.widest = max(self.widest, len({tuple(table) for table in tables}))
        return self.model.forward(pool, tables, positions, ids, write)

    def new_pool(self, num_blocks: int, block_tokens: int):
        return self.model.new_pool(num_blocks, block_tokens)


def counted_step(server, model: RowCounter) -> tuple:
    """A step's report and the rows its model was fed in it, counted where the test runs."""
    before = model.rows
    report = server.step()
    return report, model.rows - before


def wrapped_server(policy: Policy, on: Engine | None = None, **kwargs) -> tuple:
    """A server on the small llama (the code under test's, or ``on``'s) wrapped in a :class:`RowCounter`,
    placing admissions as it would unwrapped."""
    e = on or under_test()
    model = RowCounter(e.model)
    return e.Server(model, model.new_pool(64, 4), policy, place=not model.model.rows_alone, **kwargs), model


def off_rows(batch: int, prompts: list[list[int]] = PROMPTS[:4], max_new: int = 6) -> dict:
    calls = []

    def spy(ctx, k):
        calls.append(k)
        return [ctx[-1]] * k

    model = RowCounter(small())
    # place given: the code under test reads only the methods of a model the test wraps, not rows_alone
    server = Server(model, model.new_pool(64, 4), Policy("off"), max_batch=batch, drafter=spy, place=False)
    ids = {server.submit(p, GREEDY, seed=i, max_new=max_new): p for i, p in enumerate(prompts)}
    most = len(prompts) * (max_new + 1)  # each request's max_new steps, one after another: a correct server is idle sooner
    reported = pending = 0
    missing: list[int] = []
    for _ in range(most):
        if server.idle():
            break
        before = {r.rid for r in server.running}
        report = server.step()
        ran = {r.rid for r in server.running} | set(report.finished)
        missing += sorted(ran - set(report.ks))
        # what the step fed beyond each request's pending ids (prompt, or its last token)
        pending += sum(len(ids.get(rid, [])) if rid not in before else 1 for rid in report.ks)
        reported += report.rows
    if not server.idle():
        return {"stuck": f"not idle after {most} steps: {still_held(server)}"}
    return {"requests that ran in a step but are not in its report.ks": missing,
            "drafter calls": len(calls), "rows fed": model.rows, "rows reported": reported,
            "prompt ids and last tokens of the requests in report.ks": pending,
            "most requests in one pass": model.widest}


OFF_RULE = ("card 2.3: k = 0 is the plain path: no drafter call, no row beyond the request's pending ids "
            "(its prompt in its first step, then its last token); card 2.4: one forward a step feeds every "
            "running request's rows, and the step's ks holds every request that ran in it, one that ended too")


def cases_off_is_plain_decoding():
    cases = []
    for batch in (1, 4):
        model_rows = off_rows_expected(batch, PROMPTS[:4], 6)
        cases.append(Case(f"B={batch}", f"off_rows({batch})   # off_rows() in course/tests/test_l10_10.py",
                          lambda b=batch: off_rows(b), model_rows, OFF_RULE))
    draws = drawn("off_is_plain_decoding")
    return cases + [drawn_off_case(draws, i) for i in range(DRAWN_RULE_CASES if draws is not None else 0)]


def drawn_off_case(draws: random.Random, i: int) -> Case:
    """Plain decoding of 1 to 6 drawn prompts (a pool of 64 blocks of 4 holds all their budgets at
    once) at a drawn B and max_new; the answer is the rule's count, as for the public cases."""
    prompts = [[draws.randrange(24) for _ in range(draws.randint(1, 12))] for _ in range(draws.randint(1, 6))]
    batch, max_new = draws.randint(1, 6), draws.randint(1, 8)
    return Case(f"drawn-{i}: B={batch}, {len(prompts)} requests, max_new {max_new} (drawn when graded)",
                f"off_rows({batch}, {prompts}, {max_new})   # off_rows() in course/tests/test_l10_10.py",
                lambda a=(batch, prompts, max_new): off_rows(*a), off_rows_expected(batch, prompts, max_new), OFF_RULE)


def off_rows_expected(batch: int, prompts: list[list[int]], max_new: int) -> dict:
    """What plain decoding feeds: each prompt once, then one row per token emitted but the last;
    its first step runs every request the batch holds."""
    rows = sum(len(p) for p in prompts) + len(prompts) * (max_new - 1)
    return {"requests that ran in a step but are not in its report.ks": [],
            "drafter calls": 0, "rows fed": rows, "rows reported": rows,
            "prompt ids and last tokens of the requests in report.ks": rows,
            "most requests in one pass": min(batch, len(prompts))}


def test_off_is_plain_decoding():
    check(cases_off_is_plain_decoding())


def admission_order(batch: int, lengths: list[int], pool_blocks: int, on: Engine | None = None) -> dict:
    """The requests in the order they first ran (by arrival position; those admitted in the same step
    by arrival), the most that ran at once, and whether every one was served."""
    e = on or under_test()
    server = e.Server(e.model, e.model.new_pool(pool_blocks, 4), e.Policy("static", 3), max_batch=batch)
    ids = [server.submit([1, 2, 3, 1, 2], e.greedy_params, seed=i, max_new=n) for i, n in enumerate(lengths)]
    first, peak, step = {}, 0, 0
    while not server.idle():
        if step == sum(n + 1 for n in lengths):  # a correct server is idle sooner
            return {"stuck": f"not idle after {step} steps: {still_held(server)}"}
        report = server.step()
        for rid in report.ks:
            first.setdefault(rid, step)
        peak = max(peak, len(report.ks))
        step += 1
    never = [j for j in range(len(ids)) if ids[j] not in first]
    if never:  # a request that ends in the step it was admitted in is in that step's ks too (card 2.4)
        return {"requests never in a step's report.ks": never}
    order = sorted(range(len(ids)), key=lambda j: (first[ids[j]], j))
    return {"admitted": order, "peak": peak, "all served": sorted(server.results) == ids}


def admitted_at_once(lengths: list[int], budgets: list[int], batch: int = 2, place: bool = True,
                     pool_blocks: int = 256, on: Engine | None = None) -> dict:
    """Prompts of these lengths and budgets queued on a server with ``place`` and a pool of
    ``pool_blocks`` 4-token blocks, then one ``_admit``: the running requests in the order admitted,
    and the ``max_new = 0`` ones it admitted and finished on the way (they take no seat, so one call
    can pass a request over many times)."""
    e = on or under_test()
    server = e.Server(e.model, e.model.new_pool(pool_blocks, 4), e.Policy("off"), max_batch=batch, place=place)
    for i, (n, m) in enumerate(zip(lengths, budgets)):
        server.submit([1 + (j % 5) for j in range(n)], e.greedy_params, seed=i, max_new=m)
    server._admit()
    return {"running": [r.rid for r in server.running], "finished at admission": list(server.results)}


def overtaken_after_admit(budgets: list[int], pool_blocks: int, batch: int = 3) -> dict:
    """Prompts of 5, 5, 6 and 6 tokens with these budgets queued on a server with ``place`` and a pool
    of ``pool_blocks`` 4-token blocks, then one ``_admit``: the running requests in the order
    admitted, the requests still queued and each one's ``overtaken``."""
    model = small()
    server = Server(model, model.new_pool(pool_blocks, 4), Policy("off"), max_batch=batch, place=True)
    for i, (n, m) in enumerate(zip([5, 5, 6, 6], budgets)):
        server.submit([1 + (j % 5) for j in range(n)], GREEDY, seed=i, max_new=m)
    server._admit()
    return {"running": [r.rid for r in server.running], "queued": [r.rid for r in server.queue],
            "overtaken": [r.overtaken for r in server.queue]}


def admitted_after_steps(first: int, steps: int, lengths: list[int], batch: int = 3) -> list[int]:
    """A prompt of ``first`` tokens served ``steps`` steps alone (plain decoding: a token a step),
    then prompts of these lengths queued and one ``_admit``: the running requests in the order
    admitted."""
    model = small()
    server = Server(model, model.new_pool(256, 4), Policy("off"), max_batch=batch, place=True)
    server.submit([1 + (j % 5) for j in range(first)], GREEDY, max_new=12)
    for _ in range(steps):
        server.step()
    for i, n in enumerate(lengths, start=1):
        server.submit([1 + (j % 5) for j in range(n)], GREEDY, seed=i, max_new=3)
    server._admit()
    return [r.rid for r in server.running]


ADMISSION_RULE = ("card 2.4: the queue's head is admitted first, while fewer than max_batch run and the pool can hold "
                  "its whole budget (blocks_for(prompt + max_new)) beside the budgets the running reserve, whatever "
                  "pool.num_free() says; no request overtakes it")
PLACED_RULE = ("card 2.4: with place, among the first 16 queued requests (the head and the 15 behind it), those the "
               "pool holds, the one whose last token's slot "
               "(len(prompt) - 1) % 16 the fewest running requests' last tokens share (a running request's: "
               "(len(prompt) + len(out.tokens) - 1) % 16; one admitted earlier in the same _admit counts, a max_new = 0 "
               "one not: it never runs), the earliest on a tie; "
               "every request passed over, one the pool cannot hold yet too, counts one more overtaken, and "
               "a head passed over 16 times goes next")


def cases_admission_placed_never_starved():
    rule, placed = ADMISSION_RULE, PLACED_RULE  # the card's two rules, as the cases below name them
    return [
        Case("a request on a crowded slot waits for one on a free slot",
             "admitted_at_once([5, 5, 6], [3, 3, 3], batch=3)", lambda: admitted_at_once([5, 5, 6], [3, 3, 3], batch=3),
             {"running": [0, 2, 1], "finished at admission": []}, placed),
        Case("without place, arrival order", "admitted_at_once([5, 5, 6], [3, 3, 3], batch=3, place=False)",
             lambda: admitted_at_once([5, 5, 6], [3, 3, 3], batch=3, place=False),
             {"running": [0, 1, 2], "finished at admission": []}, rule),
        Case("a crowded request passed over 16 times goes next",
             "admitted_at_once([5, 5] + [6] * 20, [3, 3] + [0] * 20)",
             lambda: admitted_at_once([5, 5] + [6] * 20, [3, 3] + [0] * 20),
             {"running": [0, 1], "finished at admission": list(range(2, 18))}, placed),
        Case("a running request's slot is its last token's, emitted ones counted",
             "admitted_after_steps(5, 1, [6, 5])", lambda: admitted_after_steps(5, 1, [6, 5]), [0, 2, 1], placed),
        Case("a request the pool cannot hold yet is passed over too",
             "overtaken_after_admit([3, 3, 70, 3], pool_blocks=20)",
             lambda: overtaken_after_admit([3, 3, 70, 3], pool_blocks=20),
             {"running": [0, 3, 1], "queued": [2], "overtaken": [1]}, placed),
        Case("only those queued ahead of the one admitted are passed over",
             "overtaken_after_admit([3, 3, 3, 3], pool_blocks=256, batch=2)",
             lambda: overtaken_after_admit([3, 3, 3, 3], pool_blocks=256, batch=2),
             {"running": [0, 2], "queued": [1, 3], "overtaken": [1, 0]}, placed),
        Case("a max_new = 0 request waits for its reservation like any other",
             "admitted_at_once([5, 5], [11, 0], batch=2, pool_blocks=4)",
             lambda: admitted_at_once([5, 5], [11, 0], batch=2, pool_blocks=4),
             {"running": [0], "finished at admission": []},
             rule + "; a max_new = 0 request is admitted like any other, while its reservation fits"),
        Case("only the first 16 queued are looked at", "admitted_at_once([5] * 17 + [6], [3] + [0] * 16 + [3])",
             lambda: admitted_at_once([5] * 17 + [6], [3] + [0] * 16 + [3]),
             {"running": [0, 17], "finished at admission": [1]}, placed),
        Case("the first 16 queued are looked at, then those the pool holds kept",
             "admitted_at_once([5, 5] + [5] * 15 + [6], [3, 3] + [75] * 15 + [3], batch=3, pool_blocks=20)",
             lambda: admitted_at_once([5, 5] + [5] * 15 + [6], [3, 3] + [75] * 15 + [3], batch=3, pool_blocks=20),
             {"running": [0, 1], "finished at admission": []}, placed),
        Case("max_batch 2, long and short requests", "admission_order(2, [9, 2, 7, 1, 3, 5, 8], 64)",
             lambda: admission_order(2, [9, 2, 7, 1, 3, 5, 8], 64),
             {"admitted": [0, 1, 2, 3, 4, 5, 6], "peak": 2, "all served": True},
             rule),
        Case("a pool for two budgets", "admission_order(8, [11, 11, 11, 11, 3], 8)",
             lambda: admission_order(8, [11, 11, 11, 11, 3], 8),
             {"admitted": [0, 1, 2, 3, 4], "peak": 2, "all served": True},
             rule),
        Case("two budgets that fill the pool exactly run together", "admission_order(8, [11, 11, 11], 8)",
             lambda: admission_order(8, [11, 11, 11], 8), {"admitted": [0, 1, 2], "peak": 2, "all served": True},
             rule),
        Case("a short request behind a long one", "admission_order(1, [12, 1, 1, 1], 64)",
             lambda: admission_order(1, [12, 1, 1, 1], 64), {"admitted": [0, 1, 2, 3], "peak": 1, "all served": True},
             rule),
    ] + drawn_admission_cases(drawn("admission_placed_never_starved"))


def drawn_admission_cases(draws: random.Random | None) -> list[Case]:
    """When graded: requests of one prompt served to the end at a drawn batch, budgets and pool (one
    that holds the largest budget), and four placing _admits, each over a drawn queue of prompts of
    3 to 12 tokens, up to 28 of them, many max_new = 0. The reference runs the same scenario in the
    judge."""
    if draws is None:
        return []
    cases = []
    for i in range(DRAWN_RULE_CASES):
        batch, lengths = draws.randint(1, 4), [draws.randint(1, 12) for _ in range(draws.randint(3, 8))]
        pool = draws.randint(5, 20)
        cases.append(Case(f"drawn-{i}: served to the end (drawn when graded)",
                          f"admission_order({batch}, {lengths}, {pool})",
                          lambda a=(batch, lengths, pool): admission_order(*a),
                          admission_order(batch, lengths, pool, on=the_reference()), ADMISSION_RULE))
    for i in range(DRAWN_RULE_CASES + 1):
        # a few requests on one slot, then many on another with max_new = 0 (they take no seat, so
        # one _admit can pass the first group's later ones over 16 times) or, every other queue, a
        # quarter of them not (they take the seats placement gives them first), then a few anywhere
        first, other = draws.sample(range(3, 13), 2)
        groups = [(first, draws.randint(1, 4), 0.0), (other, draws.randint(0, 22), 0.75 if i % 2 else 1.0),
                  (None, draws.randint(0, 3), 0.3)]
        lengths, budgets = [], []
        for length, count, zeros in groups:
            for _ in range(count):
                lengths.append(length or draws.randint(3, 12))
                budgets.append(0 if draws.random() < zeros else draws.randint(1, 6))
        batch, pool = draws.randint(2, 4), draws.randint(6, 40)
        cases.append(Case(f"drawn-{i}: one _admit (drawn when graded)",
                          f"admitted_at_once({lengths}, {budgets}, batch={batch}, pool_blocks={pool})",
                          lambda a=(lengths, budgets, batch, True, pool): admitted_at_once(*a),
                          admitted_at_once(lengths, budgets, batch, True, pool, on=the_reference()), PLACED_RULE))
    return cases


def test_admission_placed_never_starved():
    check(cases_admission_placed_never_starved())


def moved(a: float, seen: float, weight: float = 0.3) -> float:
    """Card 2.1's moving average, one observed position: ``a + weight * (seen - a)``, with a
    request's ``WEIGHT = 0.3`` or the pool's ``POOL_WEIGHT = 0.1`` (card 2.4)."""
    return a + weight * (seen - a)


LATER = [9] * 7  # as long as PROMPTS[0] and PROMPTS[1]


def pooled_start(first: int, k: int = 2, right: int = 1, max_new: int = 3, on: Engine | None = None) -> dict:
    """``first`` requests (PROMPTS[0..first - 1], greedy, static k, max_new) run together: in each
    step each drafts ``right`` of the next greedy tokens, then wrong ones up to k (by default 2
    drafted, 1 kept in the first step; in the second none, its cap is 0), until each ends. LATER,
    queued behind them, is admitted after (its last token on their slot: placement keeps arrival
    order). Positions 1 to k + 1 of each running request's estimate and of the pool's after the
    first step, and where the later request's estimate starts."""
    e = on or under_test()
    greedy = {tuple(p): e.greedy(p, max_new + k + 1) for p in PROMPTS[:first]}

    def right_then_wrong(ctx, most):
        for p, tokens in greedy.items():
            if tuple(ctx[:len(p)]) == p:
                at = len(ctx) - len(p)
                return (tokens[at:at + right] + [(tokens[at + right] + 1) % 24] * k)[:most]
        return []

    server = e.Server(e.model, e.model.new_pool(64, 4), e.Policy("static", k), max_batch=first,
                      drafter=right_then_wrong)
    for i in range(first):
        server.submit(PROMPTS[i], e.greedy_params, seed=i, max_new=max_new)
    server.submit(LATER, e.greedy_params, seed=first, max_new=3)
    server.step()
    after = {"estimates": [rounded(r.estimate.rates[:k + 1]) for r in server.running],
             "pooled": rounded(server.pooled.rates[:k + 1])}
    most = first * (max_new + 1)  # a correct server ends them sooner
    for _ in range(most):
        if not server.running:
            break
        server.step()
    if server.running:
        return {"stuck": f"requests {[r.rid for r in server.running]} still running after {most} steps"}
    server._admit()
    return {"after the first step": after,
            "the later request starts at": rounded(server.running[0].estimate.rates[:k + 1])}


def pooled_after_an_end() -> list[float]:
    """PROMPTS[0] alone, static k = 2, a drafter whose draft is wrong from its first token, every id an
    EOS: the request ends in its first round (2 drafted, 0 kept). Positions 1 to 3 of the pool's
    estimate after that step."""
    model = small()
    server = Server(model, model.new_pool(64, 4), Policy("static", 2), max_batch=1, drafter=lambda ctx, k: [0] * k)
    server.submit(PROMPTS[0], GREEDY, max_new=5, eos=list(range(24)))
    server.step()
    return rounded(server.pooled.rates[:3])


def first_estimate() -> list[float]:
    """A fresh server's first request, once admitted: its estimate."""
    model = small()
    server = Server(model, model.new_pool(64, 4), Policy("static", 2))
    server.submit(PROMPTS[0], GREEDY, max_new=3)
    server._admit()
    return rounded(server.running[0].estimate.rates)


ESTIMATE_RULE = ("card 2.4: _admit starts a request's estimate as a copy of self.pooled; _verify updates the request's "
                 "estimate and self.pooled, each once a round (card 2.1: a round of 2 drafted, 1 kept moves position 1 "
                 "WEIGHT = 0.3 of the way to 1 and position 2 0.3 of the way to 0; the pool moves POOL_WEIGHT = 0.1 of the "
                 "way, its own weight)")


def cases_estimate_starts_from_the_pool():
    rule = ESTIMATE_RULE
    one = [moved(0.85, 1.0), moved(0.85, 0.0), 0.85]
    pool_one = [moved(0.85, 1.0, 0.1), moved(0.85, 0.0, 0.1), 0.85]
    pool_two = [moved(pool_one[0], 1.0, 0.1), moved(pool_one[1], 0.0, 0.1), 0.85]
    return [
        Case("a fresh server's first request starts at the prior",
             "first_estimate()   # first_estimate() in course/tests/test_l10_10.py", first_estimate,
             rounded([0.85] * MAX_DRAFT), rule),
        Case("one request's round, then a later request",
             "pooled_start(1)   # pooled_start() in course/tests/test_l10_10.py", lambda: pooled_start(1),
             {"after the first step": {"estimates": [rounded(one)], "pooled": rounded(pool_one)},
              "the later request starts at": rounded(pool_one)}, rule),
        Case("two requests' rounds in one pass, then a later request",
             "pooled_start(2)   # pooled_start() in course/tests/test_l10_10.py", lambda: pooled_start(2),
             {"after the first step": {"estimates": [rounded(one), rounded(one)], "pooled": rounded(pool_two)},
              "the later request starts at": rounded(pool_two)}, rule),
        Case("a round that ends its request updates the pool too",
             "pooled_after_an_end()   # pooled_after_an_end() in course/tests/test_l10_10.py", pooled_after_an_end,
             rounded([moved(0.85, 0.0, 0.1), 0.85, 0.85]), rule),
    ] + drawn_estimate_cases(drawn("estimate_starts_from_the_pool"))


def drawn_estimate_cases(draws: random.Random | None) -> list[Case]:
    """When graded: :func:`pooled_start` of 1 to 4 requests at a drawn static k, kept tokens and
    max_new; the reference runs the same scenario in the judge."""
    if draws is None:
        return []
    cases = []
    for i in range(DRAWN_RULE_CASES):
        first, k = draws.randint(1, 4), draws.randint(1, 5)
        right, max_new = draws.randint(0, k), draws.randint(2, 8)
        cases.append(Case(f"drawn-{i}: {first} requests, static k={k}, {right} right a round (drawn when graded)",
                          f"pooled_start({first}, k={k}, right={right}, max_new={max_new})"
                          "   # pooled_start() in course/tests/test_l10_10.py",
                          lambda a=(first, k, right, max_new): pooled_start(*a),
                          pooled_start(first, k, right, max_new, on=the_reference()), ESTIMATE_RULE))
    return cases


def test_estimate_starts_from_the_pool():
    check(cases_estimate_starts_from_the_pool())


def prefix_rows(first: list[int], second: list[int], cache: bool = True, on: Engine | None = None) -> dict:
    """Request A (``first``) runs one step alone; then B (``second``) arrives and both decode plainly
    (policy off, greedy, max_new 4). The rows fed in the first two steps, both outputs, and the free
    blocks at the end (a pool of 64 blocks of 4)."""
    e = on or under_test()
    server, model = wrapped_server(e.Policy("off"), e, max_batch=2, prefix_cache=cache)
    a = server.submit(first, e.greedy_params, max_new=4)
    steps = [counted_step(server, model)]
    b = server.submit(second, e.greedy_params, max_new=4)
    steps.append(counted_step(server, model))
    stuck = drained(server, 2 * 5)
    if stuck:
        return {"stuck": stuck}
    fed, reported = [rows for _, rows in steps], [report.rows for report, _ in steps]
    return {"rows of steps 1 and 2": fed, "tokens": [server.results[a].tokens, server.results[b].tokens],
            "free blocks": server.pool.num_free(), **({} if reported == fed else {"their reports' rows": reported})}


PREFIX_RULE = ("card 2.4: with prefix_cache, _verify offers a running request's prompt blocks (_offer_prompt) and "
               "_admit calls _share_prefix(head): the head takes the indexed full blocks of its prompt and feeds only "
               "the rest, its last token always; its output is its output alone")


def cases_prefix_cache_feeds_the_rest():
    a = PROMPTS[2]  # 9 tokens: blocks 0 and 1 full once its first step is verified
    shapes = [("the same 9-token prompt: 2 blocks shared, 1 row fed", a, True, 1),
              ("a prompt sharing its first block: 5 rows fed", a[:4] + [1, 2, 3, 4, 5], True, 5),
              ("a 5-token prompt: its full block shared, its last token fed", a[:5], True, 1),
              ("prefix_cache off: every prompt row fed", a, False, 9)]
    cases = []
    for label, b, cache, fed in shapes:
        want = {"rows of steps 1 and 2": [len(a), 1 + fed],
                "tokens": [alone(a, 0, GREEDY, 0, 4)["tokens"], alone(b, 0, GREEDY, 0, 4)["tokens"]],
                "free blocks": 64}
        text = (f"prefix_rows({a}, {b}" + (")" if cache else ", cache=False)")
                + "   # prefix_rows() in course/tests/test_l10_10.py")
        cases.append(Case(label, text, lambda b=b, cache=cache: prefix_rows(a, b, cache), want, PREFIX_RULE))
    draws = drawn("prefix_cache_feeds_the_rest")
    return cases + [drawn_prefix_case(draws, i) for i in range(DRAWN_RULE_CASES if draws is not None else 0)]


def drawn_prefix_case(draws: random.Random, i: int) -> Case:
    """A drawn first prompt of 4 to 14 tokens and a second that shares a drawn start of it (often all
    of it, or whole blocks), then a drawn tail; the reference runs the same two requests in the judge."""
    first = [draws.randrange(24) for _ in range(draws.randint(4, 14))]
    # shared: all of it, a whole number of blocks, or any start
    shared = draws.choice([len(first), 4 * draws.randint(1, len(first) // 4), draws.randint(0, len(first))])
    second = first[:shared] + [draws.randrange(24) for _ in range(draws.choice([0, 0, draws.randint(1, 5)]))]
    second = second or [draws.randrange(24)]
    cache = draws.random() < 0.8
    text = (f"prefix_rows({first}, {second}" + (")" if cache else ", cache=False)")
            + "   # prefix_rows() in course/tests/test_l10_10.py")
    return Case(f"drawn-{i}: {len(first)} and {len(second)} tokens (drawn when graded)", text,
                lambda a=(first, second, cache): prefix_rows(*a), prefix_rows(first, second, cache, on=the_reference()),
                PREFIX_RULE)


def test_prefix_cache_feeds_the_rest():
    check(cases_prefix_cache_feeds_the_rest())


def conserved(seed: int, requests: int) -> dict:
    """``requests`` random requests (arrivals, prompts, lengths, EOS, listeners that stop early, sampled or
    greedy) under each policy in turn; after every step each running request holds the blocks its cache
    needs and every other block is free; a request ends with its blocks back in that step; each step's
    report counts the tokens its listeners heard and the requests that ended in it."""
    rnd = random.Random(seed)
    model = small()
    pool = model.new_pool(48, 4)
    problems: list[str] = []
    heard: list[int] = []  # every token any listener heard, in order

    def note(problem: str) -> None:
        if len(problems) < 3:
            problems.append(problem)

    served_count = 0
    for policy in ("off", "4", "adaptive"):
        server = Server(model, pool, Policy.parse(policy), max_batch=rnd.choice([2, 6]), cost=HAND_COST)
        pool = server.pool  # the next policy's server starts from the pool this one leaves
        left = requests // 3
        steps = stalled = 0
        ended_so_far: set[int] = set()  # server.results' ids
        # read once: in an isolated check each attribute read is a round trip to the learner's process
        is_idle, take_step, num_free, submit = server.idle, server.step, server.pool.num_free, server.submit
        # a step and what is read around it, in one round trip when isolated (results' ids alone: the
        # whole dict, growing, would cross every step)
        around_a_step = [(is_idle, ()), (take_step, ()), (keys_of, (server, "results")),
                         (getattr, (server, "running")), (num_free, ())]
        while left or not is_idle():
            for _ in range(min(left, rnd.choice([0, 0, 1, 3]))):
                stop_at = rnd.choice([None, rnd.randint(1, 8)])
                mine: list[int] = []

                def listener(token, logprob, mine=mine, stop_at=stop_at):
                    mine.append(token)
                    heard.append(token)
                    return stop_at is None or len(mine) < stop_at

                prompt = [rnd.randrange(6) for _ in range(rnd.randint(1, 10))]
                submit(prompt, SamplingParams(temperature=rnd.choice([0.0, 1.0])), seed=rnd.randrange(99),
                       max_new=rnd.randint(0, 14), eos=[rnd.randrange(24)], on_token=listener)
                left -= 1
            heard_before = len(heard)
            idle, report, ended_ids, running, free = in_turn(around_a_step)
            now = set(ended_ids)
            ended, ended_so_far = sorted(now - ended_so_far), now
            if sorted(report.finished) != sorted(ended):
                note(f"{policy}: requests {sorted(ended)} ended in a step that reports finished {report.finished}")
            if idle and (report.rows, report.blocks, report.emitted, report.ks, report.finished) != (0, 0, 0, {}, []):
                note(f"{policy}: a step of an idle server reports {report}")
            if report.emitted != len(heard) - heard_before:
                note(f"{policy}: a step reports {report.emitted} tokens emitted, its listeners heard "
                     f"{len(heard) - heard_before}")
            # a correct server's step that is not idle hands a listener a token or ends a request; 112
            # requests take it at most about 300 steps
            steps += 1
            stalled = 0 if idle or len(heard) > heard_before or len(ended) else stalled + 1
            if stalled == 3 or steps == 5 * (requests // 3):
                note(f"{policy}: " + (f"not idle after {steps} steps" if stalled < 3 else
                                      "3 steps in a row without a token or an end") + f": {still_held(server)}")
                break
            held = sum(len(r.table) for r in running)
            wrong = [r.rid for r in running if len(r.table) != -(-r.cached // 4)]
            in_use = 48 - free
            if wrong or in_use != held:
                note(f"{policy}: after a step {in_use} blocks in use, the running requests' caches need {held}"
                     + (f"; request {wrong[0]}'s table does not fit its cache" if wrong else ""))
        served_count += len(server.results)
    return {"served": served_count, "free at the end": server.pool.num_free(), "problems": problems}


def one_served(policy: str, max_new: int, eos=(), listener: str = "goes on", drafter: str | None = None,
               params: SamplingParams = GREEDY) -> dict:
    """PROMPTS[0] (greedy alone: 3, 3, 3, ...) served alone with these ``eos`` ids, a listener that
    answers True ("goes on"), None ("None") or False ("stops"), and a drafter: the server's own
    (None), "sure" (``[3] * k``, the greedy continuation), "nothing" (``[]``) or "long" (``[1] * (k + 3)``,
    more than asked for). Each step's (rows, blocks, the request's ks entry); the tokens, what the
    listener heard, and the stats."""
    drafters = {"sure": lambda ctx, k: [3] * k, "nothing": lambda ctx, k: [], "long": lambda ctx, k: [1] * (k + 3)}
    kwargs = {} if drafter is None else {"drafter": drafters[drafter]}
    server, model = wrapped_server(Policy.parse(policy), max_batch=1, cost=HAND_COST, **kwargs)
    heard: list[int] = []

    def on_token(token, logprob):
        heard.append(token)
        return {"goes on": True, "None": None, "stops": False}[listener]

    rid = server.submit(PROMPTS[0], params, seed=0, max_new=max_new, eos=list(eos), on_token=on_token)
    steps = []
    for _ in range(max_new + 1):  # a correct server ends it sooner
        if server.idle():
            break
        report, fed = counted_step(server, model)
        steps.append([report.rows, report.blocks, report.ks.get(rid)] + ([] if fed == report.rows else [f"fed {fed}"]))
    if not server.idle():
        return {"stuck": f"not idle after {max_new + 1} steps: {still_held(server)}"}
    g = server.results[rid]
    return {"steps": steps, "tokens": g.tokens, "heard": heard,
            "stats": [g.stats.drafted, g.stats.accepted, g.stats.target_calls]}


def first_step_of_two(prompts: list[list[int]]) -> list:
    """Two prompts, plain decoding, one step: its (rows, blocks)."""
    server, model = wrapped_server(Policy("off"), max_batch=2)
    for i, prompt in enumerate(prompts):
        server.submit(prompt, GREEDY, seed=i, max_new=2)
    report, fed = counted_step(server, model)
    return [report.rows, report.blocks] + ([] if fed == report.rows else [f"fed {fed}"])


def drafts_after_quiet_steps() -> dict:
    """Adaptive, section 3's table, prompt [9] alone for 40 tokens, every draft wrong: whether a step
    drafts nothing after steps that drafted, and whether one drafts after that. The estimate falls
    until the policy drafts nothing; ``_explore`` (given) then fades it back, so it drafts again."""
    model = small()
    server = Server(model, model.new_pool(64, 4), Policy("adaptive"), max_batch=1, cost=HAND_COST,
                    drafter=lambda ctx, k: [(ctx[-1] + 7) % 24] * k)
    rid = server.submit([9], GREEDY, max_new=40)
    ks = []
    for _ in range(41):
        if server.idle():
            break
        ks.append(server.step().ks.get(rid))
    quiet = next((i for i in range(1, len(ks)) if ks[i] == 0 and any(ks[:i])), None)
    return {"stops drafting": quiet is not None, "drafts again": quiet is not None and any(ks[quiet + 1:])}


def ends_at_admission(policy: str) -> dict:
    """One request with ``max_new = 0``, alone on a fresh server: what its one step reports."""
    model = small()
    server = Server(model, model.new_pool(16, 4), Policy.parse(policy), max_batch=2, cost=HAND_COST)
    rid = server.submit([1, 2, 3], max_new=0)
    report = server.step()
    return {"finished": report.finished, "rows": report.rows, "result tokens": server.results[rid].tokens
            if rid in server.results else None, "free blocks": server.pool.num_free(), "idle": server.idle()}


def cases_blocks_conserved_under_load():
    rule = ("card 2.4: after every step a running request's table holds blocks_for(its cached positions); a "
            "request that ends gives back all its blocks in that step; nothing leaks; a StepReport's emitted is "
            "the tokens its step handed the listeners, its finished every request that ended in it (max_new = 0 at "
            "admission too, also when nothing runs after admission), and an idle server's step reports nothing")
    draws = drawn("blocks_conserved_under_load")  # when graded, a fourth run from a seed drawn then
    seeds = [(seed, "") for seed in (1, 2, 3)]
    if draws is not None:
        seeds.append((draws.getrandbits(32), " (drawn when graded)"))
    return [Case(f"seed {seed}{label}", f"conserved({seed}, 336)   # conserved() in course/tests/test_l10_10.py",
                 lambda s=seed: conserved(s, 336), {"served": 336, "free at the end": 48, "problems": []}, rule)
            for seed, label in seeds] + [
        Case(f"max_new = 0 alone, {policy}", f"ends_at_admission({policy!r})   # in course/tests/test_l10_10.py",
             lambda policy=policy: ends_at_admission(policy),
             {"finished": [0], "rows": 0, "result tokens": [], "free blocks": 16, "idle": True}, rule)
        for policy in ("off", "adaptive")] + cases_one_round()


def cases_one_round() -> list[Case]:
    """Card 2.4's step and _verify, one request at a time: what a StepReport holds, and L10.8's loop."""
    report_rule = ("card 2.4: a StepReport holds the rows fed, gemm_blocks of their positions (the fullest slot, on "
                   "any machine), and ks: each running request's draft this step, len(draft) (the k chosen after "
                   "_explore, or shorter where the drafter found less; a longer draft is cut to its first k)")
    loop_rule = ("card 2.4, _verify: one round of L10.8's loop: the stats take verify_draft's n_accepted (also past a "
                 "stop); each token goes to the listener, the EOS too, until one says stop (bool(answer) False: "
                 "None too), is an EOS or reaches max_new; verify_draft gets the prompt and the output so far apart")
    text = "one_served({})   # one_served() in course/tests/test_l10_10.py"
    penalized = SamplingParams(frequency_penalty=5.0)
    return [
        Case("a drafter that finds nothing: ks 0", text.format("'3', 3, drafter='nothing'"),
             lambda: one_served("3", 3, drafter="nothing")["steps"], [[7, 1, 0], [1, 1, 0], [1, 1, 0]], report_rule),
        Case("a longer draft is cut to k", text.format("'2', 4, drafter='long'"),
             lambda: one_served("2", 4, drafter="long")["steps"], [[9, 1, 2], [3, 1, 2], [2, 1, 1], [1, 1, 0]],
             report_rule),
        Case("two rows at one slot: two gemms", "first_step_of_two([[9], [9]])   # in course/tests/test_l10_10.py",
             lambda: first_step_of_two([[9], [9]]), [2, 2], report_rule),
        Case("every draft wrong: adaptive stops drafting, then drafts again",
             "drafts_after_quiet_steps()   # in course/tests/test_l10_10.py", drafts_after_quiet_steps,
             {"stops drafting": True, "drafts again": True}, report_rule + "; step passes choose_ks's ks through self._explore (given)"),
        Case("an EOS is emitted and heard", text.format("'off', 4, eos=[3]"),
             lambda: {k: v for k, v in one_served("off", 4, eos=[3]).items() if k != "steps"},
             {"tokens": [3], "heard": [3], "stats": [0, 0, 1]}, loop_rule),
        Case("a listener that answers None stops", text.format("'off', 4, listener='None'"),
             lambda: {k: v for k, v in one_served("off", 4, listener="None").items() if k != "steps"},
             {"tokens": [3], "heard": [3], "stats": [0, 0, 1]}, loop_rule),
        Case("a stop past accepted tokens: all of them counted", text.format("'3', 6, listener='stops', drafter='sure'"),
             lambda: {k: v for k, v in one_served("3", 6, listener="stops", drafter="sure").items() if k != "steps"},
             {"tokens": [3], "heard": [3], "stats": [3, 3, 1]}, loop_rule),
        Case("penalties read the output as output", text.format("'off', 6, params=SamplingParams(frequency_penalty=5.0)"),
             lambda: one_served("off", 6, params=penalized)["tokens"],
             alone(PROMPTS[0], 0, penalized, 0, 6)["tokens"], loop_rule),
    ]


def test_blocks_conserved_under_load():
    check(cases_blocks_conserved_under_load(), "run")
