"""Graded tests for L10.8, speculative decoding in the engine (card: course/L10.8.md, section 4).

Each test is named after a row of the card's table. The code under test is reached only through
``tinyllm.*``, which the conftest binds to the package ``OL_IMPL`` names; ``fakes`` holds the fake
targets of the generation tests.
"""

import math

import numpy as np
import pytest
from scipy.special import chdtri

from conftest import load_fixture
from fakes import CycleTarget, TableTarget
from tinyllm.kvpool import KvPool
from tinyllm.sampling import SamplingParams, sample, stream
from tinyllm.spec import (Draft, SpecConfig, SpecError, blocks_for, generate, generate_stream,
                          ngram_draft, prompt_lookup, residual, rollback, sample_dense,
                          speculative_step, verify_draft)

GOLDEN = "L10.8/spec_golden.json"
GREEDY = SamplingParams()

# The cycle 0 -> 1 -> ... -> 5 -> 0; ids 6 and 7 lead back into it.
CYCLE = [1, 2, 3, 4, 5, 0, 0, 0]
CYCLE_PROMPT = [0, 1, 2, 3, 4, 5, 0, 1]


@pytest.fixture(scope="module")
def golden():
    return load_fixture(GOLDEN)


def f32_row(hexed: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hexed), dtype="<f4").copy()


def f64_row(hexed: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hexed), dtype="<f8").copy()


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

def test_hand_example_prompt_lookup():
    # Section 3: [8 5 6] never occurred; [5 6] did, at 0, and [7 8 5] followed it.
    assert prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1) == [7, 8, 5]
    # The continuation runs on into the suffix itself and stops only at the end of the context.
    assert prompt_lookup([1, 2, 3, 1, 2], 4, 3, 1) == [3, 1, 2]
    assert prompt_lookup([4, 4, 4], 3, 2, 1) == [4]
    # No earlier occurrence of any suffix, or a context no longer than the n-gram: no draft.
    assert prompt_lookup([1, 2, 3, 4], 3, 3, 1) == []
    assert prompt_lookup([9], 3, 3, 1) == []
    assert prompt_lookup([], 3, 3, 1) == []
    # min_ngram 2 refuses a one-token match.
    assert prompt_lookup([1, 2, 3, 4, 2], 3, 3, 2) == []


def test_prompt_lookup_matches_python_l8_6(golden):
    cases = golden["prompt_lookup"]
    assert len(cases) == 150
    wrong = []
    for case in cases:
        got = prompt_lookup(case["ctx"], case["k"], case["max_ngram"], case["min_ngram"])
        if [int(t) for t in got] != case["draft"]:
            wrong.append(f"{case['name']}: expected {case['draft']}, got {list(got)}")
    assert not wrong, f"{len(wrong)} of 150 contexts differ; first: {wrong[:3]}"


def test_ngram_draft_hand_example():
    # Counts: after [7] came 1 once and 2 twice; the most frequent wins.
    assert ngram_draft([7, 1, 7, 2, 7, 2, 7], 1, 2) == [2]
    # Ties go to the lowest id; drafted tokens join the context the next counts read.
    assert ngram_draft([1, 2, 3, 1, 2, 4, 1, 2], 5, 3) == [3, 1, 2, 3, 1]
    # Longest context first: [1 5] was followed by 3, though [5] alone was followed by 2 twice.
    assert ngram_draft([1, 5, 3, 2, 5, 2, 9, 5, 2, 1, 5], 1, 3) == [3]
    # Back-off: [9 6] never occurred earlier, [6] did.
    assert ngram_draft([4, 6, 9, 6], 1, 3) == [9]
    # Stop: nothing matches, or there is no context length to try.
    assert ngram_draft([1, 2, 3], 4, 3) == []
    assert ngram_draft([3, 3, 3], 4, 1) == []


def test_config_parses_runtime_values():
    assert SpecConfig.parse("none", 4).draft is Draft.NONE
    assert SpecConfig.parse("ngram", 1).draft is Draft.NGRAM
    cfg = SpecConfig.parse("prompt_lookup", 16)
    assert (cfg.draft, cfg.k) == (Draft.PROMPT_LOOKUP, 16)
    for draft, k in (("prompt_lookup", 0), ("ngram", 17), ("none", -1), ("prompt-lookup", 4),
                     ("Prompt_Lookup", 4), ("", 4), ("ngram", True), ("ngram", 2.0)):
        with pytest.raises(SpecError):
            SpecConfig.parse(draft, k)


# --- 2.2 Verification ----------------------------------------------------------------------------

HAND_ROWS = [np.array([0, 1, 3, 0.5], dtype=np.float32),
             np.array([0, 1, 0.5, 2], dtype=np.float32),
             np.array([5, 0, 0, 0], dtype=np.float32)]


def test_hand_example_greedy_verify():
    rng = stream(7)
    v = verify_draft(HAND_ROWS, [2, 1], None, GREEDY, [0], [], rng)
    assert (list(v.tokens), v.n_accepted) == ([2, 3], 1)
    expected = 3 - math.log(math.exp(0) + math.exp(1) + math.exp(3) + math.exp(0.5))
    assert v.logprobs[0] == pytest.approx(expected, abs=1e-12)
    assert v.logprobs[1] == pytest.approx(2 - math.log(1 + math.e + math.exp(0.5) + math.exp(2)),
                                          abs=1e-12)
    full = verify_draft(HAND_ROWS, [2, 3], None, GREEDY, [0], [], rng)
    assert (list(full.tokens), full.n_accepted) == ([2, 3, 0], 2)
    assert full.logprobs[2] == pytest.approx(5 - math.log(math.exp(5) + 3), abs=1e-12)
    # Greedy verification draws nothing.
    assert rng.next_u32() == stream(7).next_u32()


def test_hand_example_sampled_step():
    p = np.array([0.2, 0.5, 0.3])
    q = np.array([0.6, 0.2, 0.2])
    assert speculative_step(p, q, 0, 0.3, 0.8) == (0, True)
    assert speculative_step(p, q, 0, 0.5, 0.8) == (2, False)
    assert speculative_step(p, q, 0, 0.5, 0.7) == (1, False)
    np.testing.assert_allclose(residual(p, q), [0.0, 0.75, 0.25], atol=1e-12)
    assert sample_dense(np.array([0.0, 0.75, 0.25]), 0.8) == 2
    assert sample_dense(np.array([0.0, 0.75, 0.25]), 0.0) == 1
    # p(x) > q(x): always kept, whatever u_accept says.
    assert speculative_step(p, q, 1, 0.999, 0.0) == (1, True)
    # A q that gives x no mass could not have proposed it.
    with pytest.raises(SpecError):
        speculative_step(p, np.array([0.0, 0.5, 0.5]), 0, 0.1, 0.1)


def run_case(case):
    prm = SamplingParams(**case["params"])
    rows = [f32_row(r) for r in case["rows"]]
    probs = None if case["draft_probs"] is None else [f64_row(q) for q in case["draft_probs"]]
    rng = stream(case["seed"])
    v = verify_draft(rows, case["draft"], probs, prm, case["prompt"], case["output"], rng)
    return v, rng.next_u32()


def test_verify_matches_python_l8_6(golden):
    cases = golden["verify"]
    assert len(cases) == 120
    wrong = []
    for case in cases:
        v, next_u32 = run_case(case)
        want = case["expect"]
        got = {"tokens": [int(t) for t in v.tokens], "n_accepted": v.n_accepted, "next_u32": next_u32}
        if got != {key: want[key] for key in got}:
            wrong.append(f"{case['name']}: expected {want}, got {got}")
        elif not np.allclose(v.logprobs, want["logprobs"], rtol=0, atol=1e-9):
            wrong.append(f"{case['name']}: logprobs {list(v.logprobs)}, expected {want['logprobs']}")
    assert not wrong, f"{len(wrong)} of 120 cases differ; first: {wrong[:2]}"


def test_verify_rejects_bad_shapes():
    rows3 = [np.zeros(4, np.float32)] * 3
    q = np.full(4, 0.25)
    bad = {
        "too few rows": (rows3[:2], [1, 2], None),
        "too many rows": (rows3 + rows3[:1], [1, 2], None),
        "ragged rows": ([np.zeros(4, np.float32), np.zeros(5, np.float32), np.zeros(4, np.float32)],
                        [1, 2], None),
        "a 2-D row": ([np.zeros((1, 4), np.float32)] * 3, [1, 2], None),
        "an empty row": ([np.zeros(0, np.float32)], [], None),
        "one draft distribution for two tokens": (rows3, [1, 2], [q]),
        "a draft distribution of the wrong length": (rows3, [1, 2], [q, np.full(5, 0.2)]),
        "a draft token past the vocabulary": (rows3, [1, 4], None),
        "a negative draft token": (rows3, [-1, 2], None),
    }
    for what, (rows, draft, probs) in bad.items():
        for prm in (GREEDY, SamplingParams(temperature=1.0)):
            with pytest.raises(SpecError):
                verify_draft(rows, draft, probs, prm, [0], [], stream(1))
                pytest.fail(f"{what} was accepted")


# --- Generation ----------------------------------------------------------------------------------

GEN_PROMPTS = [[1, 2, 3, 4, 5, 6], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [7, 7, 2, 7, 7, 2, 7, 7, 2]]


def test_greedy_spec_equals_greedy_without_spec():
    max_new = 40
    for prompt in GEN_PROMPTS:
        want = plain_greedy(TableTarget(12, seed=1), prompt, GREEDY, max_new)
        calls = {}
        for draft in Draft:
            target = TableTarget(12, seed=1)
            g = generate(target, SpecConfig(draft, 4), prompt, GREEDY, 0, max_new, [])
            assert list(g.tokens) == want, f"{draft.value}: speculation changed the greedy tokens"
            assert target.cached() == len(prompt) + max_new - 1, \
                f"{draft.value}: the cache holds positions nobody kept"
            budget = len(prompt) + max_new - 1
            assert max(target.fed_positions) < budget, \
                f"{draft.value}: KV written at position {max(target.fed_positions)}, budget {budget}"
            calls[draft] = target.calls
        assert calls[Draft.NONE] == max_new
        assert calls[Draft.PROMPT_LOOKUP] < max_new, "prompt lookup saved no target pass"
    # Penalties see the tokens accepted so far, so they too leave greedy output unchanged.
    prm = SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2)
    for prompt in GEN_PROMPTS:
        want = plain_greedy(TableTarget(12, seed=5), prompt, prm, 30)
        for draft in Draft:
            g = generate(TableTarget(12, seed=5), SpecConfig(draft, 3), prompt, prm, 0, 30, [])
            assert list(g.tokens) == want, f"{draft.value} with penalties, prompt {prompt}"


def test_eos_and_max_tokens_end_generation():
    cycle = [2, 3, 4, 5, 0, 1] * 4
    for draft in Draft:
        cfg = SpecConfig(draft, 4)
        for max_new in (0, 1, 2, 5, 6, 13):
            target = CycleTarget(CYCLE)
            g = generate(target, cfg, CYCLE_PROMPT, GREEDY, 3, max_new, [])
            assert list(g.tokens) == cycle[:max_new], f"{draft.value}, max_new {max_new}"
            assert len(g.logprobs) == max_new
            assert max(target.fed_positions, default=-1) < len(CYCLE_PROMPT) + max_new - 1
        # EOS ends the request at the EOS token, even inside an accepted run.
        target = CycleTarget(CYCLE)
        g = generate(target, cfg, CYCLE_PROMPT, GREEDY, 3, 20, [4, 7])
        assert list(g.tokens) == [2, 3, 4], draft.value
        assert target.cached() == len(CYCLE_PROMPT) + 2
    target = CycleTarget(CYCLE)
    g = generate(target, SpecConfig(Draft.PROMPT_LOOKUP, 4), CYCLE_PROMPT, GREEDY, 3, 20, [4])
    assert g.stats.target_calls == 1 and g.stats.accepted >= 2, "EOS was not inside an accepted run"


# --- 2.3 The law of sampled output ------------------------------------------------------------

STAT_SEEDS = 4000
STAT_POOL_AT = 1e-3
STAT_P_VALUE = 1e-4  # the threshold is chi2's (1 - 1e-4) quantile; see course/L10.8.md


def first_token_chi_square():
    """The chi-square of the first emitted token over 4000 seeds against the target softmax."""
    row = np.array([2.0, 1.2, 0.4, 0.9, -5.0, -6.5], dtype=np.float32)
    q = np.array([0.1, 0.45, 0.05, 0.3, 0.1, 0.0])
    prm = SamplingParams(temperature=1.0)
    # The draft samples its token from q with its own generator, independent of the target's.
    drafts = np.searchsorted(np.cumsum(q), np.random.default_rng(2024).random(STAT_SEEDS), side="right")
    rows = [row, row[::-1].copy()]
    counts = np.zeros(row.shape[0])
    for seed, d in enumerate(drafts.tolist()):
        v = verify_draft(rows, [d], [q], prm, [], [], stream(seed))
        counts[int(v.tokens[0])] += 1
    x = row.astype(np.float64)
    p = np.exp(x - x.max())
    p /= p.sum()
    big = p > STAT_POOL_AT
    observed = np.append(counts[big], counts[~big].sum())
    expected = STAT_SEEDS * np.append(p[big], p[~big].sum())
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return statistic, len(observed) - 1


def test_sampled_spec_keeps_the_target_distribution():
    statistic, dof = first_token_chi_square()
    threshold = chdtri(dof, STAT_P_VALUE)
    assert statistic < threshold, (f"the first token's chi-square is {statistic:.1f} on {dof} degrees "
                                   f"of freedom, above {threshold:.1f}: not the target's law")


# --- 2.4 Rollback --------------------------------------------------------------------------------

def filled_table(pool, fills):
    table = []
    for n in fills:
        b = pool.allocate()
        pool.set_fill(b, n)
        table.append(b)
    return table


def test_rollback_hand_example():
    assert [blocks_for(n, 4) for n in (0, 1, 4, 5, 8, 9, 10)] == [0, 1, 1, 2, 2, 3, 3]
    assert blocks_for(7, 1) == 7
    pool = KvPool(8, 4)
    table = filled_table(pool, [4, 4, 2])
    third = table[2]
    assert rollback(pool, table, 5) == 1
    assert len(table) == 2 and pool.refcount(third) == 0
    assert [pool.fill(b) for b in table] == [4, 1]
    assert pool.num_free() == 6
    # Keeping a whole block keeps it full.
    table = filled_table(pool, [4, 4, 3])
    assert rollback(pool, table, 8) == 1
    assert [pool.fill(b) for b in table] == [4, 4]
    # Keeping everything releases nothing; keeping 0 releases every block.
    assert rollback(pool, table, 8) == 0
    assert rollback(pool, table, 0) == 2 and table == []
    table = filled_table(pool, [4, 1])
    assert rollback(pool, table, 1) == 1 and [pool.fill(b) for b in table] == [1]
    rollback(pool, table, 0)
    assert pool.num_free() == 6
    with pytest.raises(SpecError):
        rollback(pool, filled_table(pool, [4]), 5)


def test_rollback_drops_one_reference_only():
    pool = KvPool(8, 4)
    prompt = [11, 12, 13, 14]
    mine = filled_table(pool, [4, 3])
    shared = mine[0]
    pool.register(prompt, shared)
    pool.retain(shared)  # a second sequence reuses the prompt block through the prefix cache
    other = [shared]
    assert rollback(pool, mine, 4) == 1
    assert mine == [shared] and pool.refcount(shared) == 2 and pool.fill(shared) == 4
    assert rollback(pool, mine, 0) == 1 and mine == []
    assert pool.refcount(shared) == 1, "the other sequence lost its block"
    assert pool.fill(shared) == 4 and pool.lookup(prompt) == shared
    assert rollback(pool, other, 0) == 1
    assert pool.lookup(prompt) is None and pool.num_free() == 8


def test_blocks_conserved_across_rollbacks():
    block_tokens, num_blocks = 4, 64
    pool = KvPool(num_blocks, block_tokens)
    prm = SamplingParams(temperature=1.0)
    rejected = 0
    rng = np.random.default_rng(88)
    for request in range(200):
        prompt = rng.integers(0, 5, size=int(rng.integers(1, 10))).tolist()
        cfg = SpecConfig([Draft.NGRAM, Draft.PROMPT_LOOKUP][request % 2], int(rng.integers(1, 9)))
        target = CheckedTarget(5, request, pool, len(prompt))
        g = generate(target, cfg, prompt, prm, request, int(rng.integers(1, 13)), [])
        rejected += g.stats.drafted - g.stats.accepted
        assert target.rounds == g.stats.target_calls
        target.release()
        assert pool.num_free() == num_blocks, f"request {request} leaked blocks"
        if target.shared is not None:
            assert pool.refcount(target.shared) == 0
    assert rejected >= 1000, f"only {rejected} drafted tokens rejected: the test proves little"


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
        assert len(self.blocks) == blocks_for(length, size)
        fills = [pool.fill(b) for b in self.blocks]
        assert fills == [min(size, length - i * size) for i in range(len(self.blocks))]
        in_use = len(self.blocks)
        assert pool.num_free() == pool.num_blocks - in_use
        if self.shared is not None:
            assert pool.refcount(self.shared) == 2

    def release(self):
        super().release()
        if self.shared is not None:
            self.pool.release(self.shared)


def test_generate_stream_hands_over_each_token_and_stops_when_told():
    for draft, prm in ((Draft.PROMPT_LOOKUP, GREEDY), (Draft.NGRAM, SamplingParams(temperature=0.8)),
                       (Draft.NONE, SamplingParams(temperature=1.0, top_k=4))):
        cfg = SpecConfig(draft, 4)
        heard = []
        g = generate_stream(TableTarget(12, seed=3), cfg, GEN_PROMPTS[2], prm, 99, 25, [],
                            lambda t, lp: heard.append((t, lp)) is None)
        assert heard == list(zip(g.tokens, g.logprobs)), draft.value
        assert len(heard) == 25
        assert list(generate(TableTarget(12, seed=3), cfg, GEN_PROMPTS[2], prm, 99, 25, []).tokens) \
            == list(g.tokens)
    # A listener that says stop at the third token, inside the first round's accepted run.
    heard = []
    target = CycleTarget(CYCLE)
    g = generate_stream(target, SpecConfig(Draft.PROMPT_LOOKUP, 4), CYCLE_PROMPT, GREEDY, 0, 20, [],
                        lambda t, lp: heard.append(t) or len(heard) < 3)
    assert list(g.tokens) == [2, 3, 4] and len(g.logprobs) == 3
    assert heard == [2, 3, 4]
    assert target.calls == 1, "generation went on after the listener said stop"
    assert target.cached() == len(CYCLE_PROMPT) + 2


# --- The real model ------------------------------------------------------------------------------

def test_runner_target_scores_every_fed_position():
    from tinyllm.model import LlamaConfig, TinyLlama
    from tinyllm.runner import RunnerTarget

    model = TinyLlama.random(LlamaConfig(), 0)
    pool = model.new_pool(64, 4)
    free = pool.num_free()
    rng = np.random.default_rng(5)
    prompt = rng.integers(0, 256, size=7).tolist()

    def fresh_last_row(prefix):
        target = RunnerTarget(model, pool)
        row = target.extend(prefix)[-1]
        target.release()
        return row

    target = RunnerTarget(model, pool)
    fed = prompt + [3, 9, 3]
    rows = target.extend(prompt)
    rows += target.extend([3, 9, 3])
    assert len(rows) == len(fed) and target.cached() == len(fed)
    for j, row in enumerate(rows):
        # The runner's rows are bitwise batch-invariant (tinyllm.runner's docstring).
        np.testing.assert_array_equal(row, fresh_last_row(fed[:j + 1]),
                                      err_msg=f"row {j} is not a fresh run of its prefix")
    target.truncate(8)
    again = target.extend([4])
    np.testing.assert_array_equal(again[0], fresh_last_row(fed[:8] + [4]))
    target.release()

    periodic = (prompt[:4] * 3)[:10]
    runs = {}
    for draft in (Draft.NONE, Draft.PROMPT_LOOKUP):
        target = RunnerTarget(model, pool)
        runs[draft] = generate(target, SpecConfig(draft, 4), periodic, GREEDY, 0, 12, [])
        assert target.cached() == len(periodic) + 11 and len(target.table) == blocks_for(21, 4)
        target.release()
    assert list(runs[Draft.PROMPT_LOOKUP].tokens) == list(runs[Draft.NONE].tokens)
    assert runs[Draft.PROMPT_LOOKUP].stats.drafted > 0
    assert pool.num_free() == free
