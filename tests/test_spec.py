"""Speculative decoding (L10.8): the card's worked examples, its rules as properties, bad inputs.

Section numbers refer to the module card. The oracles below are written from the card's text,
not from ``tinyllm.spec``, so a slip in the reference shows up as a disagreement.
"""

import math

import numpy as np
import pytest
from scipy.stats import chisquare

import tinyllm.spec as spec
from tinyllm.kvpool import KvPool
from tinyllm.pcg32 import Pcg32
from tinyllm.sampling import SamplingParams, apply_penalties, distribution, sample, stream, walk
from tinyllm.spec import (Draft, Generated, SpecConfig, SpecError, SpecStats, Verified, blocks_for,
                          dense_distribution, generate, generate_stream, ngram_draft, prompt_lookup,
                          propose, residual, rollback, sample_dense, speculative_step, verify_draft)

GREEDY = SamplingParams()
WARM = SamplingParams(temperature=1.0)
ALL_DRAFTS = ["none", "ngram", "prompt_lookup"]


def log_softmax(x, token):
    x = np.asarray(x, dtype=np.float64)
    top = x[np.isfinite(x)].max()
    return float(x[token] - top - math.log(np.exp(x[np.isfinite(x)] - top).sum()))


# --- oracles written from the card ------------------------------------------------------------

def naive_prompt_lookup(ctx, k, max_ngram, min_ngram):
    """Section 2.1: longest suffix first, most recent earlier start, copy up to k tokens."""
    t = len(ctx)
    for n in range(max_ngram, min_ngram - 1, -1):
        for i in range(t - n - 1, -1, -1):
            if n < t and ctx[i:i + n] == ctx[t - n:]:
                return ctx[i + n:i + n + k]
    return []


def naive_ngram(ctx, k, n):
    """Section 2.1: most frequent follower of the last m tokens, m = n-1 .. 1, ties to the lowest id."""
    ext, draft = list(ctx), []
    while len(draft) < k:
        for m in range(n - 1, 0, -1):
            followers = [ext[i + m] for i in range(len(ext) - m) if ext[i:i + m] == ext[-m:]]
            if followers and len(ext) > m:
                best = max(set(followers), key=lambda tok: (followers.count(tok), -tok))
                draft.append(best)
                ext.append(best)
                break
        else:
            return draft
    return draft


def oracle_verify(rows, draft, draft_probs, params, prompt, output, seed):
    """Section 2.2 with the draws taken from a fresh ``Pcg32(seed)``; returns the generator too."""
    rng = Pcg32(seed)
    seen, tokens, logprobs = list(output), [], []
    for i, d in enumerate(draft):
        penalized = apply_penalties(rows[i], params, prompt, seen)
        if params.temperature == 0.0:
            token = int(np.argmax(penalized))
            accepted = token == d
        else:
            p = distribution(rows[i], params, prompt, seen)
            q = np.eye(len(p))[d] if draft_probs is None else np.asarray(draft_probs[i])
            u_a, u_r = rng.next_f64(), rng.next_f64()
            accepted = u_a < p[d] / q[d]
            if accepted:
                token = d
            else:
                r = np.maximum(0.0, p - q)
                token = int(np.searchsorted(np.cumsum(r / r.sum()), u_r, side="right"))
        tokens.append(token)
        logprobs.append(log_softmax(penalized, token))
        seen.append(token)
        if not accepted:
            return tokens, logprobs, i, rng
    penalized = apply_penalties(rows[-1], params, prompt, seen)
    if params.temperature == 0.0:
        token = int(np.argmax(penalized))
    else:
        token = walk(distribution(rows[-1], params, prompt, seen), rng.next_f64())
    return tokens + [token], logprobs + [log_softmax(penalized, token)], len(draft), rng


# --- SpecConfig -------------------------------------------------------------------------------

@pytest.mark.parametrize("name, draft", [("none", Draft.NONE), ("ngram", Draft.NGRAM),
                                         ("prompt_lookup", Draft.PROMPT_LOOKUP)])
def test_config_parses_runtime_values(name, draft):
    for k in (1, 4, 16):
        assert SpecConfig.parse(name, k) == SpecConfig(draft, k, max_ngram=3, min_ngram=1)


@pytest.mark.parametrize("k", [0, 17, -1, 2.0, True, "4"])
def test_config_refuses_k_outside_1_to_16(k):
    with pytest.raises(SpecError, match=f"k must be an integer in \\[1, 16\\], got {k!r}"):
        SpecConfig.parse("prompt_lookup", k)


@pytest.mark.parametrize("name", ["promt_lookup", "NGRAM", "", "prompt-lookup"])
def test_config_refuses_a_typo_naming_it(name):
    with pytest.raises(SpecError, match=f"unknown draft {name!r}"):
        SpecConfig.parse(name, 4)


def test_config_refuses_bad_ngram_sizes_and_non_draft_values():
    with pytest.raises(SpecError, match="min_ngram 3 is larger than max_ngram 2"):
        SpecConfig(Draft.NGRAM, 4, max_ngram=2, min_ngram=3)
    with pytest.raises(SpecError, match="max_ngram must be an integer >= 1, got 0"):
        SpecConfig(Draft.NGRAM, 4, max_ngram=0)
    with pytest.raises(SpecError, match="draft must be a Draft, got 'ngram'"):
        SpecConfig("ngram", 4)


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)


# --- 2.1 drafts -------------------------------------------------------------------------------

def test_hand_example_prompt_lookup():
    assert prompt_lookup([5, 6, 7, 8, 5, 6], 3, 3, 1) == [7, 8, 5]


def test_prompt_lookup_runs_into_the_suffix():
    # [1 2] last occurred at 0; what followed it is the suffix itself.
    assert prompt_lookup([1, 2, 1, 2], 4, 3, 1) == [1, 2]
    assert prompt_lookup([3, 3, 3], 2, 2, 1) == [3]


def test_prompt_lookup_without_an_earlier_occurrence_drafts_nothing():
    assert prompt_lookup([1, 2, 3, 4], 3, 3, 1) == []
    assert prompt_lookup([7], 3, 3, 1) == []
    assert prompt_lookup([], 3, 3, 1) == []


def test_prompt_lookup_copies_after_the_most_recent_occurrence():
    assert prompt_lookup([1, 2, 9, 1, 2, 8, 1, 2], 1, 2, 1) == [8]


def test_prompt_lookup_tries_the_longest_suffix_first():
    ctx = [3, 1, 2, 7, 4, 1, 2, 5, 3, 1, 2]
    assert prompt_lookup(ctx, 3, 3, 1) == [7, 4, 1]
    assert prompt_lookup(ctx, 3, 2, 1) == [5, 3, 1]


def test_prompt_lookup_respects_min_ngram_and_k():
    assert prompt_lookup([1, 2, 3, 1], 3, 3, 1) == [2, 3, 1]
    assert prompt_lookup([1, 2, 3, 1], 3, 3, 2) == []
    assert prompt_lookup([1, 2, 3, 1], 1, 3, 1) == [2]
    assert prompt_lookup([1, 2, 3, 1], 0, 3, 1) == []


def test_prompt_lookup_matches_the_rule_on_seeded_contexts():
    gen = np.random.default_rng(11)
    for _ in range(300):
        ctx = gen.integers(0, int(gen.integers(2, 6)), size=int(gen.integers(0, 30))).tolist()
        k, hi = int(gen.integers(1, 8)), int(gen.integers(1, 5))
        lo = int(gen.integers(1, hi + 1))
        draft = prompt_lookup(ctx, k, hi, lo)
        assert draft == naive_prompt_lookup(ctx, k, hi, lo), (ctx, k, hi, lo)
        assert len(draft) <= k
        assert all(isinstance(t, int) for t in draft)


def test_ngram_draft_hand_example():
    # Counts: 1 was followed by 5, 5, 6; then 5 was followed by 1 twice.
    assert ngram_draft([1, 5, 1, 5, 1, 6, 1], 2, 2) == [5, 1]
    # Ties go to the lowest id.
    assert ngram_draft([1, 6, 1, 5, 1], 1, 2) == [5]
    # The longest context first: [2 1] was followed by 7, while [1] alone mostly by 5.
    ctx = [2, 1, 7, 3, 1, 5, 3, 1, 5, 2, 1]
    assert ngram_draft(ctx, 1, 3) == [7]
    assert ngram_draft(ctx, 1, 2) == [5]
    # Back-off: [9 1] never occurred earlier, [1] did.
    assert ngram_draft([4, 1, 5, 9, 1], 1, 3) == [5]
    # Stop: nothing matches.
    assert ngram_draft([1, 2, 3], 4, 3) == []
    assert ngram_draft([], 4, 3) == []


def test_ngram_draft_matches_the_rule_on_seeded_contexts():
    gen = np.random.default_rng(12)
    for _ in range(200):
        ctx = gen.integers(0, int(gen.integers(2, 6)), size=int(gen.integers(0, 25))).tolist()
        k, n = int(gen.integers(1, 6)), int(gen.integers(2, 5))
        draft = ngram_draft(ctx, k, n)
        assert draft == naive_ngram(ctx, k, n), (ctx, k, n)
        assert len(draft) <= k


def test_propose_dispatches_on_the_configured_draft_and_never_exceeds_k():
    ctx = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    assert propose(SpecConfig(Draft.NONE, 4), ctx, 4) == []
    assert propose(SpecConfig(Draft.PROMPT_LOOKUP, 4), ctx, 4) == prompt_lookup(ctx, 4, 3, 1)
    assert propose(SpecConfig(Draft.PROMPT_LOOKUP, 4, max_ngram=2, min_ngram=2), ctx, 2) == [7, 8]
    assert propose(SpecConfig(Draft.NGRAM, 4), ctx, 3) == ngram_draft(ctx, 3, 3)
    gen = np.random.default_rng(13)
    for _ in range(200):
        ctx = gen.integers(0, 4, size=int(gen.integers(1, 30))).tolist()
        cfg = SpecConfig.parse(str(gen.choice(ALL_DRAFTS)), int(gen.integers(1, 17)))
        k = int(gen.integers(0, cfg.k + 1))
        draft = propose(cfg, ctx, k)
        assert len(draft) <= k
        if cfg.draft is Draft.PROMPT_LOOKUP and draft:
            # A prompt-lookup draft is a copy of a stretch of the context.
            assert any(ctx[i:i + len(draft)] == draft for i in range(len(ctx)))


# --- 2.2 / 2.3 accept or resample -------------------------------------------------------------

P = np.array([0.2, 0.5, 0.3])
Q = np.array([0.6, 0.2, 0.2])


def test_hand_example_sampled_step():
    assert speculative_step(P, Q, 0, 0.3, 0.8) == (0, True)
    np.testing.assert_allclose(residual(P, Q), [0.0, 0.75, 0.25])
    assert sample_dense(residual(P, Q), 0.8) == 2
    assert speculative_step(P, Q, 0, 0.5, 0.8) == (2, False)
    assert speculative_step(P, Q, 0, 0.5, 0.7) == (1, False)


def test_acceptance_is_p_over_q_with_a_strict_comparison():
    p, q = np.array([0.25, 0.75]), np.array([0.5, 0.5])
    assert speculative_step(p, q, 0, 0.4999, 0.0) == (0, True)
    assert speculative_step(p, q, 0, 0.5, 0.0) == (1, False)
    # p(x) >= q(x): always kept.
    assert speculative_step(p, q, 1, 0.9999, 0.0) == (1, True)


def test_a_q_that_never_proposed_x_is_refused():
    with pytest.raises(SpecError, match=r"q\(2\) = 0.0"):
        speculative_step(P, np.array([0.5, 0.5, 0.0]), 2, 0.3, 0.3)


def test_one_hot_draft_keeps_d_with_p_d_else_samples_p_without_d():
    q = np.array([0.0, 1.0, 0.0])
    np.testing.assert_allclose(residual(P, q), [0.4, 0.0, 0.6])
    assert speculative_step(P, q, 1, 0.49, 0.9) == (1, True)
    assert speculative_step(P, q, 1, 0.5, 0.39) == (0, False)
    assert speculative_step(P, q, 1, 0.5, 0.41) == (2, False)


def test_residual_of_equal_distributions_falls_back_to_p():
    np.testing.assert_allclose(residual(P, P), P)


@pytest.mark.parametrize("u", [-0.1, 1.0, 1.5, math.nan])
def test_uniforms_outside_the_unit_interval_are_refused(u):
    with pytest.raises(SpecError, match=f"u_accept must be in \\[0, 1\\), got {u!r}"):
        speculative_step(P, Q, 0, u, 0.5)
    with pytest.raises(SpecError, match=f"u_resample must be in \\[0, 1\\), got {u!r}"):
        speculative_step(P, Q, 0, 0.5, u)


@pytest.mark.parametrize("x", [3, -1, 0.5, True])
def test_a_draft_token_outside_the_vocabulary_is_refused(x):
    with pytest.raises(SpecError, match=f"draft token {x!r} is outside the vocabulary"):
        speculative_step(P, Q, x, 0.5, 0.5)


def test_p_and_q_must_have_one_shape():
    with pytest.raises(SpecError, match=r"\(3,\) and \(2,\)"):
        speculative_step(P, np.array([0.5, 0.5]), 0, 0.5, 0.5)


def test_dense_distribution_is_the_sampler_distribution():
    logits = np.array([0.0, 1.0, 3.0, 0.5], dtype=np.float32)
    params = SamplingParams(temperature=0.8, top_k=3, repetition_penalty=1.2)
    np.testing.assert_array_equal(dense_distribution(logits, params, [1], [2]),
                                  distribution(logits, params, [1], [2]))


# --- 2.2 verification -------------------------------------------------------------------------

HAND_ROWS = [np.array(r, dtype=np.float32) for r in ([0, 1, 3, 0.5], [0, 1, 0.5, 2], [5, 0, 0, 0])]


def test_hand_example_greedy_verify(counting_rng):
    rng = counting_rng(7)
    got = verify_draft(HAND_ROWS, [2, 1], None, GREEDY, [], [], rng)
    assert (got.tokens, got.n_accepted, rng.draws) == ([2, 3], 1, 0)
    first = 3 - math.log(math.exp(0) + math.exp(1) + math.exp(3) + math.exp(0.5))
    assert got.logprobs[0] == pytest.approx(first, abs=1e-12)
    assert got.logprobs[1] == pytest.approx(log_softmax(HAND_ROWS[1], 3), abs=1e-12)

    got = verify_draft(HAND_ROWS, [2, 3], None, GREEDY, [], [], rng)
    assert (got.tokens, got.n_accepted, rng.draws) == ([2, 3, 0], 2, 0)
    assert got.logprobs[2] == pytest.approx(log_softmax(HAND_ROWS[2], 0), abs=1e-12)
    assert isinstance(got, Verified)


def test_an_empty_draft_emits_the_target_token_alone(counting_rng):
    rng = counting_rng(7)
    assert verify_draft(HAND_ROWS[:1], [], None, GREEDY, [], [], rng).tokens == [2]
    got = verify_draft(HAND_ROWS[:1], [], None, WARM, [], [], rng)
    assert got.n_accepted == 0 and len(got.tokens) == 1 and rng.draws == 1


def test_greedy_penalties_see_the_tokens_accepted_this_round():
    rows = [np.array([0, 5, 0], dtype=np.float32), np.array([0, 2, 1.5], dtype=np.float32),
            np.array([0, 0, 9], dtype=np.float32)]
    params = SamplingParams(presence_penalty=1.0)
    # Row 1 prefers 1 unpenalized; once the accepted 1 is seen its logit drops to 1 < 1.5.
    got = verify_draft(rows, [1, 1], None, params, [], [], Pcg32(0))
    assert (got.tokens, got.n_accepted) == ([1, 2], 1)


def test_verification_matches_the_card_on_seeded_cases(counting_rng):
    gen = np.random.default_rng(21)
    for case in range(300):
        vocab, m = int(gen.integers(3, 9)), int(gen.integers(0, 5))
        rows = [gen.normal(scale=2.0, size=vocab).astype(np.float32) for _ in range(m + 1)]
        # Drafts that often agree with the row's favourite, so acceptance runs vary in length.
        draft = [int(np.argmax(r)) if gen.random() < 0.7 else int(gen.integers(vocab)) for r in rows[:m]]
        probs = None
        if gen.random() < 0.4:
            probs = [gen.dirichlet(np.ones(vocab)) for _ in range(m)]
        params = SamplingParams(
            temperature=float(gen.choice([0.0, 0.5, 1.0, 1.7])), top_k=int(gen.integers(0, 4)),
            top_p=float(gen.choice([1.0, 0.9])), min_p=float(gen.choice([0.0, 0.05])),
            repetition_penalty=float(gen.choice([1.0, 1.3])), presence_penalty=float(gen.choice([0.0, 0.4])),
            frequency_penalty=float(gen.choice([0.0, 0.2])))
        prompt = gen.integers(vocab, size=3).tolist()
        output = gen.integers(vocab, size=int(gen.integers(0, 4))).tolist()
        seed = int(gen.integers(2**64, dtype=np.uint64))
        rng = counting_rng(seed)
        got = verify_draft(rows, draft, probs, params, prompt, output, rng)
        tokens, logprobs, n_accepted, oracle_rng = oracle_verify(rows, draft, probs, params, prompt,
                                                                 output, seed)
        assert (got.tokens, got.n_accepted) == (tokens, n_accepted), case
        np.testing.assert_allclose(got.logprobs, logprobs, rtol=0, atol=1e-9)
        assert 1 <= len(got.tokens) == got.n_accepted + 1 <= m + 1
        assert got.tokens[:got.n_accepted] == draft[:got.n_accepted]
        # Two draws per verified position, one for the bonus; none when greedy.
        verified = got.n_accepted + (got.n_accepted < m)
        expected_draws = 0 if params.temperature == 0 else 2 * verified + (got.n_accepted == m)
        assert rng.draws == expected_draws, case
        assert rng.next_u32() == oracle_rng.next_u32(), case


def first_token_counts(rows, draft_for, probs, seeds):
    counts = np.zeros(rows[0].shape[0], dtype=np.int64)
    for seed in seeds:
        draft = draft_for(seed)
        counts[verify_draft(rows, draft, probs, WARM, [], [], stream(seed)).tokens[0]] += 1
    return counts


def chi_square_p_value(counts, p):
    keep = p > 1e-3
    expected = p[keep] / p[keep].sum() * counts[keep].sum()
    return chisquare(counts[keep], expected).pvalue


TARGET_ROW = np.array([0.5, 1.2, -0.3, 0.9, 0.0, -1.5], dtype=np.float32)
TARGET_ROWS = [TARGET_ROW, np.zeros(6, dtype=np.float32)]


def test_sampled_verification_with_a_one_hot_draft_keeps_the_target_law():
    p = distribution(TARGET_ROW, WARM, [], [])
    counts = first_token_counts(TARGET_ROWS, lambda seed: [1], None, range(4000))
    assert chi_square_p_value(counts, p) > 1e-3


@pytest.mark.parametrize("wrong_residual", [
    lambda p, q: np.asarray(p, dtype=np.float64),  # resample from p (s12)
    lambda p, q: np.abs(p - q) / np.abs(p - q).sum(),  # |p - q| (s06)
])
def test_the_law_check_catches_a_wrong_residual(monkeypatch, wrong_residual):
    monkeypatch.setattr(spec, "residual", wrong_residual)
    p = distribution(TARGET_ROW, WARM, [], [])
    counts = first_token_counts(TARGET_ROWS, lambda seed: [1], None, range(500))
    assert chi_square_p_value(counts, p) < 1e-6


def test_sampled_verification_with_a_stochastic_draft_keeps_the_target_law():
    q = np.array([0.05, 0.1, 0.4, 0.2, 0.05, 0.2])
    p = distribution(TARGET_ROW, WARM, [], [])
    proposals = np.random.default_rng(31).choice(6, size=2000, p=q)
    counts = first_token_counts(TARGET_ROWS, lambda seed: [int(proposals[seed])], [q], range(2000))
    assert chi_square_p_value(counts, p) > 1e-3


# --- bad inputs to verification ---------------------------------------------------------------

ROW = np.zeros(4, dtype=np.float32)
Q4 = np.array([0.25, 0.25, 0.25, 0.25])


@pytest.mark.parametrize("rows, draft, probs, message", [
    ([ROW, ROW], [1, 2], None, "2 rows of logits for a draft of 2"),
    ([], [], None, "0 rows of logits for a draft of 0"),
    ([np.zeros((2, 4))], [], None, r"row 0 has shape \(2, 4\)"),
    ([ROW, np.zeros(3)], [1], None, r"row 1 has shape \(3,\)"),
    ([np.zeros(0)], [], None, r"row 0 has shape \(0,\)"),
    ([ROW, np.array([0, math.nan, 0, 0])], [1], None, "row 1 holds NaN"),
    ([np.array([0, math.inf, 0, 0])], [], None, r"row 0 holds NaN or \+inf"),
    ([np.full(4, -math.inf)], [], None, "row 0 has no finite logit"),
    ([ROW, ROW, ROW], [1, 4], None, "draft token 4 at position 1"),
    ([ROW, ROW], [-1], None, "draft token -1 at position 0"),
    ([ROW, ROW], [1.5], None, "draft token 1.5 at position 0"),
    ([ROW, ROW, ROW], [1, 2], [Q4], "1 draft distributions for a draft of 2"),
    ([ROW, ROW], [1], [np.full(3, 1 / 3)], r"draft distribution 0 has shape \(3,\)"),
    ([ROW, ROW], [1], [np.full(4, 0.225)], "draft distribution 0 sums to 0.9"),
    ([ROW, ROW], [1], [np.array([0.6, 0.5, 0.1, -0.2])], "draft distribution 0 holds -0.2 at id 3"),
    ([ROW, ROW], [1], [np.array([0.5, math.nan, 0.5, 0])], "draft distribution 0 holds nan at id 1"),
    ([ROW, ROW], [2], [np.array([0.5, 0.5, 0.0, 0.0])], "gives its own token 2 probability 0"),
])
@pytest.mark.parametrize("params", [GREEDY, WARM], ids=["greedy", "sampled"])
def test_bad_verification_inputs_raise_spec_error_naming_the_value(rows, draft, probs, message, params):
    with pytest.raises(SpecError, match=message):
        verify_draft(rows, draft, probs, params, [], [], Pcg32(0))


# --- 2.4 rollback -----------------------------------------------------------------------------

def filled_table(pool, positions):
    table = []
    for pos in range(positions):
        if pos % pool.block_tokens == 0:
            table.append(pool.allocate())
        pool.set_fill(table[-1], pos % pool.block_tokens + 1)
    return table


def assert_blocks_match(pool, table, positions):
    b = pool.block_tokens
    assert len(table) == blocks_for(positions, b)
    for i, block in enumerate(table):
        assert pool.refcount(block) >= 1
        assert pool.fill(block) == (b if i < len(table) - 1 else positions - i * b)


def test_rollback_hand_example():
    pool = KvPool(5, 4)
    table = filled_table(pool, 10)
    assert [pool.fill(b) for b in table] == [4, 4, 2]
    third = table[2]
    assert rollback(pool, table, 5) == 1
    assert table == [0, 1] and pool.fill(1) == 1
    assert pool.refcount(third) == 0 and pool.num_free() == 3


def test_rollback_to_a_block_boundary_keeps_the_full_block():
    pool = KvPool(5, 4)
    table = filled_table(pool, 10)
    assert rollback(pool, table, 8) == 1
    assert_blocks_match(pool, table, 8)
    assert rollback(pool, table, 8) == 0


def test_rollback_to_zero_releases_everything():
    pool = KvPool(5, 4)
    table = filled_table(pool, 10)
    assert rollback(pool, table, 0) == 3
    assert table == [] and pool.num_free() == 5


def test_blocks_for():
    assert [blocks_for(n, 4) for n in (0, 1, 4, 5, 8, 10)] == [0, 1, 1, 2, 2, 3]
    assert blocks_for(7, 1) == 7
    with pytest.raises(SpecError, match="block_tokens must be >= 1, got 0"):
        blocks_for(3, 0)
    with pytest.raises(SpecError, match="tokens must be >= 0, got -1"):
        blocks_for(-1, 4)


def test_rollback_drops_one_reference_only():
    pool = KvPool(5, 2)
    table = filled_table(pool, 6)
    shared = table[2]
    pool.retain(shared)  # another sequence holds it through the prefix cache
    pool.register([1, 2, 3, 4, 5, 6], shared)
    assert rollback(pool, table, 3) == 1
    assert pool.refcount(shared) == 1 and pool.fill(shared) == 2
    assert pool.lookup([1, 2, 3, 4, 5, 6]) == shared
    pool.release(shared)
    assert pool.lookup([1, 2, 3, 4, 5, 6]) is None


def test_a_released_block_leaves_the_prefix_index():
    pool = KvPool(4, 2)
    table = filled_table(pool, 4)
    pool.register([7, 8, 9, 10], table[1])
    rollback(pool, table, 2)
    assert pool.lookup([7, 8, 9, 10]) is None and not pool.is_registered(1)


@pytest.mark.parametrize("keep", [-1, 13, 100])
def test_rollback_refuses_keep_out_of_range(keep):
    pool = KvPool(5, 4)
    table = filled_table(pool, 10)
    with pytest.raises(SpecError, match=f"keep {keep} is outside \\[0, 12\\]"):
        rollback(pool, table, keep)
    assert_blocks_match(pool, table, 10)


@pytest.mark.parametrize("done_to_block_1,keep,refusal", [
    ("retain", 6, "shared with another sequence"),      # a cut into a block another sequence holds
    ("release", 3, "rollback to 3: block 1 is free"),   # a broken table, reported as a SpecError
])
def test_rollback_refuses_a_shared_or_freed_block(done_to_block_1, keep, refusal):
    pool = KvPool(3, 4)
    table = filled_table(pool, 8)
    getattr(pool, done_to_block_1)(table[1])
    with pytest.raises(SpecError, match=refusal):
        rollback(pool, table, keep)


def test_blocks_conserved_across_random_rollbacks():
    gen = np.random.default_rng(41)
    for _ in range(200):
        pool = KvPool(16, int(gen.integers(1, 6)))
        table, positions = [], 0
        for _ in range(10):
            grow = int(gen.integers(0, 9))
            while positions + grow > pool.num_blocks * pool.block_tokens:
                grow -= 1
            for pos in range(positions, positions + grow):
                if pos % pool.block_tokens == 0:
                    table.append(pool.allocate())
                pool.set_fill(table[-1], pos % pool.block_tokens + 1)
            positions = int(gen.integers(0, positions + grow + 1))
            rollback(pool, table, positions)
            assert_blocks_match(pool, table, positions)
            assert pool.num_free() == pool.num_blocks - len(table)
        rollback(pool, table, 0)
        assert pool.num_free() == pool.num_blocks


# --- the generation loop over a fake target ---------------------------------------------------

VOCAB = 10


def make_table(seed):
    return (np.random.default_rng(seed).normal(size=(VOCAB, VOCAB, VOCAB)) * 2.0).astype(np.float32)


def logits_after(table, ctx):
    """The fake model: the next token's logits depend on the last two cached ids."""
    return table[ctx[-2] if len(ctx) > 1 else 0, ctx[-1]].copy()


class FakeTarget:
    """A Target whose cache is the list of fed ids; it records passes and the longest cache."""

    def __init__(self, table, log=None):
        self.table, self.ctx, self.calls, self.longest, self.log = table, [], 0, 0, log

    def cached(self):
        return len(self.ctx)

    def extend(self, ids):
        self.calls += 1
        if self.log is not None:
            self.log.append(("extend", len(ids)))
        rows = []
        for t in ids:
            self.ctx.append(int(t))
            rows.append(logits_after(self.table, self.ctx))
        self.longest = max(self.longest, len(self.ctx))
        return rows

    def truncate(self, length):
        assert 0 <= length <= len(self.ctx)
        del self.ctx[length:]


class PooledTarget(FakeTarget):
    """A FakeTarget that also keeps its positions in KvPool blocks and rolls back with ``rollback``."""

    def __init__(self, table, pool):
        super().__init__(table)
        self.pool, self.blocks = pool, []

    def extend(self, ids):
        b = self.pool.block_tokens
        for pos in range(len(self.ctx), len(self.ctx) + len(ids)):
            if pos % b == 0:
                self.blocks.append(self.pool.allocate())
            self.pool.set_fill(self.blocks[-1], pos % b + 1)
        return super().extend(ids)

    def truncate(self, length):
        rollback(self.pool, self.blocks, length)
        super().truncate(length)
        assert_blocks_match(self.pool, self.blocks, length)


def plain_decode(table, prompt, params, seed, max_new, eos=()):
    """No speculation: one target step and one L10.1 sample per token."""
    ctx, out, logprobs, rng = list(prompt), [], [], stream(seed)
    while len(out) < max_new:
        token, logprob = sample(logits_after(table, ctx), params, prompt, out, rng)
        out.append(token)
        logprobs.append(logprob)
        ctx.append(token)
        if token in eos:
            break
    return out, logprobs


PROMPTS = [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [5], [3, 9, 0, 7, 7, 2, 8, 1, 6, 4, 0, 3]]


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2)],
                         ids=["plain", "penalized"])
def test_greedy_spec_equals_greedy_without_spec(prompt, params):
    table = make_table(1)
    want, want_logprobs = plain_decode(table, prompt, params, 0, 40)
    calls = {}
    for name in ALL_DRAFTS:
        target = FakeTarget(table)
        got = generate(target, SpecConfig.parse(name, 4), prompt, params, 0, 40, [])
        assert isinstance(got, Generated) and got.tokens == want, name
        np.testing.assert_allclose(got.logprobs, want_logprobs, rtol=0, atol=1e-12)
        # The cache holds exactly the prompt and every emitted token but the last (still pending).
        assert target.ctx == (prompt + want)[:-1], name
        assert got.stats.target_calls == target.calls
        calls[name] = target.calls
    assert calls["none"] == 40
    assert calls["prompt_lookup"] < calls["none"]


def test_sampled_generation_without_a_draft_is_plain_sampling():
    table = make_table(2)
    params = SamplingParams(temperature=0.9, top_k=6, presence_penalty=0.3)
    for seed in (0, 1, 2**64 - 1):
        got = generate(FakeTarget(table), SpecConfig.parse("none", 4), [1, 2, 3], params, seed, 30, [])
        want, want_logprobs = plain_decode(table, [1, 2, 3], params, seed, 30)
        assert got.tokens == want
        np.testing.assert_allclose(got.logprobs, want_logprobs, rtol=0, atol=1e-12)


def test_sampled_speculative_generation_keeps_the_target_law():
    table = make_table(3)
    prompt = [4, 4, 4]  # prompt lookup always drafts 4
    p = distribution(logits_after(table, prompt), WARM, [], [])
    cfg = SpecConfig.parse("prompt_lookup", 4)
    counts = np.zeros(VOCAB, dtype=np.int64)
    for seed in range(2000):
        counts[generate(FakeTarget(table), cfg, prompt, WARM, seed, 2, []).tokens[0]] += 1
    assert chi_square_p_value(counts, p) > 1e-3


@pytest.mark.parametrize("name", ALL_DRAFTS)
def test_max_new_is_exact_and_no_kv_is_written_past_the_budget(name):
    table = make_table(1)
    prompt = PROMPTS[0]
    full, _ = plain_decode(table, prompt, GREEDY, 0, 25)
    for max_new in range(26):
        target = FakeTarget(table)
        got = generate(target, SpecConfig.parse(name, 16), prompt, GREEDY, 0, max_new, [])
        assert got.tokens == full[:max_new]
        if max_new:
            assert len(prompt) <= target.longest <= len(prompt) + max_new - 1
        else:
            assert target.calls == 0
    assert generate(FakeTarget(table), SpecConfig.parse(name, 4), prompt, GREEDY, 0, 0, []).stats == \
        SpecStats(0, 0, 0)


@pytest.mark.parametrize("name", ALL_DRAFTS)
def test_eos_ends_generation_even_inside_an_accepted_run(name):
    table = make_table(1)
    prompt = [4, 9, 2, 5, 4, 9, 2, 5, 4]  # the fake model's greedy cycle, so lookup drafts it at once
    full, _ = plain_decode(table, prompt, GREEDY, 0, 30)
    stopped_inside_a_run = False
    for j, eos in enumerate(full):
        if eos in full[:j]:
            continue
        target = FakeTarget(table)
        got = generate(target, SpecConfig.parse(name, 8), prompt, GREEDY, 0, 30, [eos, 99])
        assert got.tokens == full[:j + 1]
        assert target.ctx == (prompt + got.tokens)[:-1]
        stopped_inside_a_run |= got.stats.accepted > 0 and target.calls < j + 1
    if name == "prompt_lookup":
        assert stopped_inside_a_run


@pytest.mark.parametrize("name", ALL_DRAFTS)
def test_generate_stream_hands_over_each_token_and_stops_when_told(name):
    table = make_table(1)
    prompt = PROMPTS[0]
    cfg = SpecConfig.parse(name, 6)
    log = []

    def listen(token, logprob):
        log.append(("token", token, logprob))
        return True

    target = FakeTarget(table, log)
    got = generate_stream(target, cfg, prompt, WARM, 5, 20, [], listen)
    heard = [event[1:] for event in log if event[0] == "token"]
    assert heard == list(zip(got.tokens, got.logprobs))
    assert got.tokens == generate(FakeTarget(table), cfg, prompt, WARM, 5, 20, []).tokens
    # Each round's tokens are handed over before the next pass starts.
    rounds = [event for event in log if event[0] == "extend"]
    assert log[0][0] == "extend" and len(rounds) == target.calls
    for a, b in zip(log, log[1:]):
        assert not (a[0] == "extend" and b[0] == "extend")

    for stop_after in range(1, 21):
        heard = []
        target = FakeTarget(table)

        def listener(token, logprob):
            heard.append(token)
            return len(heard) < stop_after

        stopped = generate_stream(target, cfg, prompt, WARM, 5, 20, [], listener)
        assert stopped.tokens == heard == got.tokens[:stop_after]
        assert target.ctx == (prompt + stopped.tokens)[:-1]


def test_stats_count_drafted_accepted_and_passes():
    table = make_table(1)
    got = generate(FakeTarget(table), SpecConfig.parse("prompt_lookup", 4), PROMPTS[0], GREEDY, 0, 40, [])
    stats = got.stats
    assert 0 < stats.accepted <= stats.drafted
    assert stats.accept_rate() == stats.accepted / stats.drafted
    # Every pass emits its accepted drafts plus one token.
    assert stats.accepted + stats.target_calls == len(got.tokens)
    assert SpecStats().accept_rate() == 0.0


@pytest.mark.parametrize("name", ALL_DRAFTS)
def test_blocks_conserved_across_rollbacks_in_generation(name):
    gen = np.random.default_rng(51)
    pool = KvPool(64, 4)
    rejected = 0
    for request in range(200 if name == "ngram" else 40):
        table = make_table(int(gen.integers(1000)))
        prompt = gen.integers(VOCAB, size=int(gen.integers(1, 12))).tolist()
        params = GREEDY if request % 2 else WARM
        target = PooledTarget(table, pool)
        got = generate(target, SpecConfig.parse(name, int(gen.integers(1, 9))), prompt, params,
                       request, int(gen.integers(0, 16)), [])
        rejected += got.stats.drafted - got.stats.accepted
        assert_blocks_match(pool, target.blocks, target.cached())
        rollback(pool, target.blocks, 0)
        assert pool.num_free() == pool.num_blocks
    if name == "ngram":
        assert rejected > 200


@pytest.mark.parametrize("prompt, seed, max_new, message", [
    ([], 0, 4, "prompt must hold at least one token"),
    ([1], 0, -1, "max_new must be an integer >= 0, got -1"),
    ([1], 0, 2.0, "max_new must be an integer >= 0, got 2.0"),
    ([1], -1, 4, "seed must be an integer in"),
    ([1], 2**64, 4, "seed must be an integer in"),
])
def test_bad_requests_raise_spec_error(prompt, seed, max_new, message):
    with pytest.raises(SpecError, match=message):
        generate(FakeTarget(make_table(1)), SpecConfig.parse("ngram", 4), prompt, GREEDY, seed, max_new, [])


def test_generation_starts_from_an_empty_target():
    target = FakeTarget(make_table(1))
    target.extend([1, 2, 3])
    with pytest.raises(SpecError, match="already caches 3 positions"):
        generate(target, SpecConfig.parse("ngram", 4), [1], GREEDY, 0, 4, [])
