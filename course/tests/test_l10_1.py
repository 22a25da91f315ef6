"""Graded tests for L10.1: PCG32, the sampler and KvPool.

Each test is a row of the table in ``course/L10.1.md`` ("What the tests check"); the rules they
hold the code to are ``course/spec/pcg32.md`` and ``course/spec/sampling.md``. The code under test
is whatever ``tinyllm`` package ``OL_IMPL`` points at (see ``conftest.py``).
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tinyllm.kvpool import KvPool, PoolError
from tinyllm.pcg32 import Pcg32
from tinyllm.sampling import (SamplingParams, apply_penalties, argmax, distribution, log_softmax_at,
                              sample, stream, walk)

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "L10.1" / "sampler_golden.json"

# The first six outputs of the PCG paper's pcg32-demo for seed 42, stream 54.
DEMO = [0xA15C02B7, 0x7B47F409, 0xBA1D3330, 0x83D2F293, 0xBFA4784B, 0xCBED606E]


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def softmax(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def spread(support: list[int], probs, vocab: int) -> np.ndarray:
    """A length-``vocab`` distribution holding ``probs`` on ``support`` and zeros elsewhere."""
    out = np.zeros(vocab)
    out[support] = probs
    return out


def logsumexp(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(x.max() + math.log(np.exp(x - x.max()).sum()))


def load_golden() -> dict:
    try:
        return json.loads(GOLDEN.read_text())
    except FileNotFoundError as err:
        raise AssertionError(f"golden fixture {GOLDEN} is missing; run oracle/L10.1/sampler_golden.py") from err


def params_from(d: dict) -> SamplingParams:
    return SamplingParams(**d)


# ---------------------------------------------------------------- PCG32


def test_pcg32_published_demo_vector():
    rng = Pcg32(42, 54)
    assert [rng.next_u32() for _ in range(6)] == DEMO
    default_stream = Pcg32(42)
    assert default_stream.next_u32() == DEMO[0], "the default stream is 54"


def test_pcg32_matches_golden_streams():
    for case in load_golden()["pcg32"]:
        rng = Pcg32(case["seed"], case["stream"])
        got = [rng.next_u32() for _ in range(len(case["u32"]))]
        assert got == case["u32"], f"seed {case['seed']} stream {case['stream']}"
        floats = [rng.next_f64() for _ in range(len(case["f64"]))]
        assert floats == case["f64"], f"next_f64 after the u32s, seed {case['seed']} stream {case['stream']}"


def test_pcg32_rejects_bad_seeds():
    Pcg32(0, 0)
    Pcg32(2**64 - 1, 2**64 - 1)
    for seed, stream_id in ((-1, 54), (2**64, 54), (1.5, 54), (1, -1), (1, 2**64)):
        with pytest.raises(ValueError):
            Pcg32(seed, stream_id)


def test_next_f64_from_two_draws():
    rng, twin = Pcg32(7, 3), Pcg32(7, 3)
    for _ in range(200):
        high, low = twin.next_u32(), twin.next_u32()
        expected = ((high >> 5) * 2**26 + (low >> 6)) / 2**53
        got = rng.next_f64()
        assert got == expected
        assert 0.0 <= got < 1.0
    assert rng.next_u32() == twin.next_u32(), "next_f64 must consume exactly two u32 draws"


# ---------------------------------------------------------------- SamplingParams


def test_sampling_params_reject_bad_values():
    nan, inf = float("nan"), float("inf")
    bad = [("temperature", -0.1), ("temperature", nan), ("temperature", inf), ("top_k", -1),
           ("top_k", 2.5), ("top_p", 0.0), ("top_p", 1.5), ("top_p", nan), ("min_p", -0.01),
           ("min_p", 1.01), ("repetition_penalty", 0.0), ("repetition_penalty", -1.0),
           ("presence_penalty", nan), ("frequency_penalty", inf)]
    for field, value in bad:
        with pytest.raises(ValueError, match=field):
            SamplingParams(**{field: value})
    SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)
    SamplingParams(temperature=2.0, top_k=50, top_p=0.01, min_p=1.0, repetition_penalty=0.5,
                   presence_penalty=-1.0, frequency_penalty=-0.5)


# ---------------------------------------------------------------- penalties


def test_repetition_penalty_on_negative_logits():
    logits = f32(2.0, -2.0, 0.0, 1.0, -1.0)
    before = logits.copy()
    out = apply_penalties(logits, SamplingParams(repetition_penalty=2.0), [0, 1], [2, 1, 1])
    assert out.dtype == np.float64
    # id 0 (prompt) halves, id 1 (seen four times) doubles once, id 2 is zero, ids 3 and 4 unseen
    np.testing.assert_array_equal(out, [1.0, -4.0, 0.0, 1.0, -1.0])
    np.testing.assert_array_equal(logits, before)
    out = apply_penalties(logits, SamplingParams(repetition_penalty=0.5), [], [0, 1])
    np.testing.assert_array_equal(out, [4.0, -1.0, 0.0, 1.0, -1.0])


def test_presence_and_frequency_count_output_only():
    logits = f32(1.0, 1.0, 1.0, 1.0)
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    out = apply_penalties(logits, params, [0, 0, 3], [1, 2, 2, 2])
    np.testing.assert_array_equal(out, [1.0, 0.25, -0.25, 1.0])
    # repetition first, then presence: 2 -> 1 -> 0 and -1 -> -2 -> -3
    params = SamplingParams(repetition_penalty=2.0, presence_penalty=1.0)
    out = apply_penalties(f32(2.0, 2.0, -1.0), params, [], [0, 2])
    np.testing.assert_array_equal(out, [0.0, 2.0, -3.0])


# ---------------------------------------------------------------- greedy and ties


def test_argmax_ties_to_lowest_id():
    assert argmax(f32(1.0, 3.0, 3.0, 2.0)) == 1
    assert argmax(f32(-2.0, -2.0, -5.0)) == 0
    assert argmax(f32(0.0, 0.0, 0.0, 0.0)) == 0
    assert argmax(f32(-1.0, 4.0)) == 1
    token, _ = sample(f32(0.5, 2.0, 2.0), SamplingParams(), [], [], stream(1))
    assert token == 1
    np.testing.assert_array_equal(distribution(f32(0.5, 2.0, 2.0), SamplingParams(), [], []), [0, 1, 0])


def test_greedy_draws_nothing():
    logits = f32(1.0, 3.0, 2.9, -1.0)
    rng, twin = stream(5), stream(5)
    params = SamplingParams(repetition_penalty=2.0, top_k=1, top_p=0.1, min_p=0.5)
    token, logprob = sample(logits, params, [1], [], rng)
    assert token == 2, "the penalty halves id 1, so id 2 is the penalized argmax"
    penalized = [1.0, 1.5, float(np.float32(2.9)), -1.0]
    assert logprob == pytest.approx(penalized[2] - logsumexp(penalized), abs=1e-12)
    assert rng.next_u32() == twin.next_u32(), "temperature 0 must not draw"
    np.testing.assert_array_equal(distribution(logits, params, [1], []), [0, 0, 1, 0])


# ---------------------------------------------------------------- the filters


def test_temperature_scales_before_filters():
    logits = f32(2.0, 1.0, 0.0, -1.0)
    for t in (0.5, 1.0, 2.0):
        got = distribution(logits, SamplingParams(temperature=t), [], [])
        np.testing.assert_allclose(got, softmax(np.array([2.0, 1.0, 0.0, -1.0]) / t), rtol=1e-12)
    # top-p 0.8 keeps one id at T=0.5, two at T=1 and three at T=2
    expected = {0.5: [0], 1.0: [0, 1], 2.0: [0, 1, 2]}
    for t, support in expected.items():
        got = distribution(logits, SamplingParams(temperature=t, top_p=0.8), [], [])
        want = spread(support, softmax(np.array([2.0, 1.0, 0.0, -1.0])[support] / t), 4)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # min-p 0.1 drops id 3 at T=1 (ratio e^-3) but keeps it at T=2 (ratio e^-1.5)
    assert distribution(logits, SamplingParams(temperature=1.0, min_p=0.1), [], [])[3] == 0.0
    assert distribution(logits, SamplingParams(temperature=2.0, min_p=0.1), [], [])[3] > 0.0


def test_top_k_keeps_the_k_highest():
    got = distribution(f32(1.0, 3.0, 2.0, 3.0, 0.5), SamplingParams(temperature=1.0, top_k=2), [], [])
    np.testing.assert_allclose(got, [0, 0.5, 0, 0.5, 0], rtol=1e-12, atol=0)
    # a tie at the cut keeps the lowest ids
    got = distribution(f32(1.0, 2.0, 2.0, 2.0, 0.0), SamplingParams(temperature=1.0, top_k=2), [], [])
    np.testing.assert_allclose(got, [0, 0.5, 0.5, 0, 0], rtol=1e-12, atol=0)
    got = distribution(f32(1.0, 2.0, 2.0), SamplingParams(temperature=0.7, top_k=1), [], [])
    np.testing.assert_array_equal(got, [0, 1, 0])
    logits = f32(1.0, 3.0, 2.0)
    full = softmax(np.array([1.0, 3.0, 2.0]))
    for k in (0, 3, 10):
        got = distribution(logits, SamplingParams(temperature=1.0, top_k=k), [], [])
        np.testing.assert_allclose(got, full, rtol=1e-12)


def test_top_p_keeps_the_token_that_crosses():
    flat = f32(0.0, 0.0, 0.0, 0.0)  # each id holds exactly 0.25
    cases = {0.25: [0], 0.5: [0, 1], 0.6: [0, 1, 2], 0.76: [0, 1, 2, 3], 1.0: [0, 1, 2, 3]}
    for top_p, support in cases.items():
        got = distribution(flat, SamplingParams(temperature=1.0, top_p=top_p), [], [])
        want = spread(support, 1.0 / len(support), 4)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"top_p={top_p}")
    # probabilities 0.644, 0.087, 0.237, 0.032: id 0 alone is short of 0.7, id 2 crosses it
    logits = f32(3.0, 1.0, 2.0, 0.0)
    got = distribution(logits, SamplingParams(temperature=1.0, top_p=0.7), [], [])
    np.testing.assert_allclose(got, spread([0, 2], softmax([3.0, 2.0]), 4), rtol=1e-12, atol=0)


def test_min_p_relative_to_the_top_probability():
    # probabilities are proportional to 1, e^-1, e^-2, e^-3 (the top one is 0.644)
    logits = f32(0.0, -1.0, -2.0, -3.0)
    got = distribution(logits, SamplingParams(temperature=1.0, min_p=0.1), [], [])
    np.testing.assert_allclose(got, spread([0, 1, 2], softmax([0.0, -1.0, -2.0]), 4), rtol=1e-12, atol=0)
    got = distribution(logits, SamplingParams(temperature=1.0, min_p=0.4), [], [])
    np.testing.assert_array_equal(got, [1, 0, 0, 0])
    # an id exactly at the threshold stays: min_p 1 keeps every id tied with the top
    got = distribution(f32(1.0, 1.0, 0.0), SamplingParams(temperature=1.0, min_p=1.0), [], [])
    np.testing.assert_allclose(got, [0.5, 0.5, 0], rtol=1e-12, atol=0)


def test_filters_apply_in_order():
    # top-k leaves ids 0 and 1 at 0.5 each; top-p 0.5 over those survivors keeps id 0 alone
    got = distribution(f32(0.0, 0.0, 0.0, 0.0), SamplingParams(temperature=1.0, top_k=2, top_p=0.5), [], [])
    np.testing.assert_array_equal(got, [1, 0, 0, 0])
    # top-k 4 drops id 4; top-p 0.9 over the rest (0.53, 0.20, 0.20, 0.07) keeps ids 0, 1, 2
    logits = f32(2.0, 1.0, 1.0, 0.0, -3.0)
    params = SamplingParams(temperature=1.0, top_k=4, top_p=0.9, min_p=0.3)
    np.testing.assert_allclose(distribution(logits, params, [], []),
                               spread([0, 1, 2], softmax([2.0, 1.0, 1.0]), 5), rtol=1e-12, atol=0)
    params = SamplingParams(temperature=1.0, top_k=4, top_p=0.9, min_p=0.4)
    np.testing.assert_array_equal(distribution(logits, params, [], []), [1, 0, 0, 0, 0])
    # penalties come first: the repetition penalty moves id 0 out of the top 2
    params = SamplingParams(temperature=1.0, top_k=2, repetition_penalty=4.0)
    np.testing.assert_allclose(distribution(logits, params, [0], []),
                               spread([1, 2], [0.5, 0.5], 5), rtol=1e-12, atol=0)


# ---------------------------------------------------------------- the draw and the logprob


def test_sample_walks_the_running_sum():
    p = np.array([0.25, 0.0, 0.5, 0.25])
    for u, token in ((0.0, 0), (0.2499, 0), (0.25, 2), (0.5, 2), (0.75, 3), (0.9999, 3)):
        assert walk(p, u) == token, f"u={u}"
    assert walk(np.array([0.0, 0.5, 0.5]), 0.0) == 1, "an id with no mass is never chosen"
    assert walk(np.array([0.3, 0.3, 0.3, 0.0]), 0.95) == 2, "past the total: the last id with mass"
    logits = f32(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    params = SamplingParams(temperature=1.0)
    for seed in range(20):
        rng, twin = stream(seed), stream(seed)
        token, _ = sample(logits, params, [], [], rng)
        assert token == int(twin.next_f64() * 8), f"seed {seed}: one next_f64 walks eight ids of 1/8"
        assert rng.next_u32() == twin.next_u32(), f"seed {seed}: sample must draw exactly one float"


def test_logprob_is_log_softmax_of_penalized_logits():
    x = np.array([0.0, 1.0, 3.0, 0.5])
    assert log_softmax_at(x, 2) == pytest.approx(3.0 - math.log(1 + math.e + math.e**3 + math.e**0.5),
                                                 abs=1e-12)
    logits = f32(2.0, 1.0, 0.0, -1.0)
    penalized = [2.0 / 1.5, 1.0, 0.0, -1.0]
    params = SamplingParams(temperature=0.5, top_k=2, repetition_penalty=1.5)
    for seed in range(10):
        token, logprob = sample(logits, params, [0], [], stream(seed))
        assert token in (0, 1)
        assert logprob == pytest.approx(penalized[token] - logsumexp(penalized), abs=1e-12)


def test_stream_is_pcg32_stream_54():
    for seed in (0, 42, 2**63 + 5, 2**64 - 1):
        a, b = stream(seed), Pcg32(seed, 54)
        assert [a.next_u32() for _ in range(4)] == [b.next_u32() for _ in range(4)], f"seed {seed}"
    assert stream(42).next_u32() == DEMO[0]
    for seed in (-1, 2**64):
        with pytest.raises(ValueError):
            stream(seed)


def test_sampler_rejects_bad_inputs():
    params = SamplingParams(temperature=1.0)
    with pytest.raises(ValueError):
        distribution(f32(0.0, float("nan")), params, [], [])
    with pytest.raises(ValueError):
        distribution(f32(0.0, float("inf")), params, [], [])
    with pytest.raises(ValueError):
        distribution(f32(-float("inf"), -float("inf")), params, [], [])
    with pytest.raises(ValueError):
        distribution(np.zeros(0, dtype=np.float32), params, [], [])
    with pytest.raises(ValueError):
        distribution(np.zeros((2, 3), dtype=np.float32), params, [], [])
    with pytest.raises(ValueError, match="3"):
        apply_penalties(f32(0.0, 1.0, 2.0), SamplingParams(repetition_penalty=1.2), [3], [])
    with pytest.raises(ValueError, match="-1"):
        sample(f32(0.0, 1.0, 2.0), params, [], [-1], stream(0))
    # -inf marks an id that can never be chosen; it is not an error
    masked = f32(0.0, -float("inf"), 0.0)
    np.testing.assert_array_equal(distribution(masked, params, [1], [1]), [0.5, 0.0, 0.5])
    token, logprob = sample(masked, SamplingParams(repetition_penalty=1.5), [1], [], stream(0))
    assert token == 0 and logprob == pytest.approx(-math.log(2), abs=1e-12)


def test_sample_draws_from_its_distribution():
    gen = Pcg32(99, 7)
    for case in range(300):
        vocab = 2 + gen.next_u32() % 40
        logits = np.array([(gen.next_u32() % 97) / 8.0 - 6.0 for _ in range(vocab)], dtype=np.float32)
        prompt = [gen.next_u32() % vocab for _ in range(gen.next_u32() % 5)]
        output = [gen.next_u32() % vocab for _ in range(gen.next_u32() % 8)]
        params = SamplingParams(temperature=0.25 + (gen.next_u32() % 8) / 4, top_k=gen.next_u32() % 6,
                                top_p=1.0 - (gen.next_u32() % 4) / 5, min_p=(gen.next_u32() % 3) / 10,
                                repetition_penalty=1.0 + (gen.next_u32() % 3) / 4,
                                presence_penalty=(gen.next_u32() % 3) / 4,
                                frequency_penalty=(gen.next_u32() % 3) / 8)
        d = distribution(logits, params, prompt, output)
        assert d.dtype == np.float64 and d.shape == (vocab,)
        assert (d >= 0).all() and d.sum() == pytest.approx(1.0, abs=1e-12), f"case {case}"
        if params.top_k:
            assert np.count_nonzero(d) <= params.top_k, f"case {case}"
        rng, twin = stream(case), stream(case)
        token, logprob = sample(logits, params, prompt, output, rng)
        assert token == walk(d, twin.next_f64()) and d[token] > 0, f"case {case}"
        assert logprob <= 0.0
        assert rng.next_u32() == twin.next_u32(), f"case {case}"


def test_sampler_matches_golden():
    cases = load_golden()["sampling"]
    assert len(cases) >= 100
    for case in cases:
        where = f"case {case['id']}"
        logits = np.array(case["logits"], dtype=np.float32)
        params = params_from(case["params"])
        want = np.array(case["distribution"])
        got = distribution(logits, params, case["prompt"], case["output"])
        np.testing.assert_array_equal(got > 0, want > 0, err_msg=f"{where}: which ids survive the filters")
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15, err_msg=where)
        rng = stream(case["seed"])
        for _ in range(case["skip"]):
            rng.next_u32()
        token, logprob = sample(logits, params, case["prompt"], case["output"], rng)
        assert token == case["token"], where
        assert logprob == pytest.approx(case["logprob"], rel=1e-9, abs=1e-12), where
        assert rng.next_u32() == case["next_u32"], f"{where}: the generator drew a different number of times"


# ---------------------------------------------------------------- KvPool


def test_kvpool_allocate_and_release():
    pool = KvPool(4, 16)
    assert pool.num_blocks == 4 and pool.block_tokens == 16
    assert pool.num_free() == 4
    blocks = [pool.allocate() for _ in range(4)]
    assert sorted(blocks) == [0, 1, 2, 3]
    assert all(pool.refcount(b) == 1 and pool.fill(b) == 0 for b in blocks)
    assert pool.num_free() == 0
    pool.set_fill(blocks[1], 9)
    pool.release(blocks[1])
    assert pool.refcount(blocks[1]) == 0 and pool.num_free() == 1
    again = pool.allocate()
    assert again == blocks[1], "the only free block"
    assert pool.fill(again) == 0 and pool.refcount(again) == 1


def test_kvpool_retain_shares_a_block():
    pool = KvPool(3, 4)
    b = pool.allocate()
    pool.set_fill(b, 4)
    pool.retain(b)
    assert pool.refcount(b) == 2
    pool.release(b)
    assert pool.refcount(b) == 1 and pool.num_free() == 2, "the other owner still holds it"
    assert pool.fill(b) == 4
    pool.release(b)
    assert pool.refcount(b) == 0 and pool.num_free() == 3


def test_kvpool_fill_and_set_fill():
    pool = KvPool(2, 8)
    b = pool.allocate()
    for n in (0, 1, 8, 3):
        pool.set_fill(b, n)
        assert pool.fill(b) == n
    for n in (9, -1):
        with pytest.raises(PoolError):
            pool.set_fill(b, n)
    assert pool.fill(b) == 3, "a refused set_fill changes nothing"


def test_kvpool_prefix_index():
    pool = KvPool(6, 2)
    first, second, twin, partial = (pool.allocate() for _ in range(4))
    for b in (first, second, twin):
        pool.set_fill(b, 2)
    pool.set_fill(partial, 1)
    assert pool.lookup([5, 6]) is None
    assert pool.register([5, 6], first) == first
    assert pool.register([5, 6, 7, 8], second) == second
    assert pool.lookup([5, 6]) == first
    assert pool.lookup([5, 6, 7, 8]) == second
    assert pool.lookup([5]) is None and pool.lookup([6, 5]) is None and pool.lookup([7, 8]) is None
    assert pool.register([5, 6], twin) == first, "an earlier registration wins"
    assert pool.is_registered(first) and pool.is_registered(second)
    assert not pool.is_registered(twin) and not pool.is_registered(partial)
    with pytest.raises(PoolError):
        pool.register([1, 2], partial)
    with pytest.raises(PoolError):
        pool.register([1, 2, 3], twin)


def test_kvpool_freed_block_leaves_prefix_index():
    pool = KvPool(2, 2)
    b = pool.allocate()
    pool.set_fill(b, 2)
    pool.register([3, 4], b)
    pool.retain(b)
    pool.release(b)
    assert pool.lookup([3, 4]) == b, "still held by its other owner"
    pool.release(b)
    assert pool.lookup([3, 4]) is None, "a freed block must leave the prefix index"
    assert not pool.is_registered(b)
    blocks = [pool.allocate(), pool.allocate()]
    for c in blocks:
        pool.set_fill(c, 2)
    assert pool.lookup([3, 4]) is None, "a reused block must not answer for its old prefix"
    assert pool.register([9, 9], blocks[0]) == blocks[0]
    assert pool.register([3, 4], blocks[1]) == blocks[1]


def test_kvpool_exhaustion_raises_pool_error():
    pool = KvPool(3, 4)
    held = [pool.allocate() for _ in range(3)]
    with pytest.raises(PoolError):
        pool.allocate()
    assert pool.num_free() == 0
    pool.release(held[0])
    assert pool.allocate() == held[0]
    with pytest.raises(PoolError):
        KvPool(0, 4)
    with pytest.raises(PoolError):
        KvPool(4, 0)


def test_kvpool_double_release_raises_pool_error():
    pool = KvPool(3, 4)
    b = pool.allocate()
    pool.release(b)
    with pytest.raises(PoolError):
        pool.release(b)
    assert pool.num_free() == 3 and pool.refcount(b) == 0
    for touch in (pool.retain, pool.fill, lambda blk: pool.set_fill(blk, 1)):
        with pytest.raises(PoolError):
            touch(b)
    for missing in (-1, 3, 99):
        with pytest.raises(PoolError):
            pool.release(missing)
    assert {pool.allocate() for _ in range(3)} == {0, 1, 2}


def test_kvpool_kv_storage():
    pool = KvPool(3, 4, layers=2, kv_heads=2, head_dim=8)
    for arr in (pool.k, pool.v):
        assert arr.shape == (2, 3, 4, 2, 8) and arr.dtype == np.float32
        assert not arr.any()
    pool.k[1, 2, 3] = 1.0
    assert not pool.v.any(), "K and V are separate arrays"


def test_kvpool_conserves_blocks():
    gen = Pcg32(11, 1)
    pool = KvPool(8, 4)
    refs: dict[int, int] = {}
    for step in range(600):
        op = gen.next_u32() % 3
        if op == 0 and len(refs) < 8:
            b = pool.allocate()
            assert b not in refs and 0 <= b < 8, f"step {step}: block {b} handed out twice"
            refs[b] = 1
        elif op == 1 and refs:
            b = sorted(refs)[gen.next_u32() % len(refs)]
            pool.retain(b)
            refs[b] += 1
        elif refs:
            b = sorted(refs)[gen.next_u32() % len(refs)]
            pool.release(b)
            refs[b] -= 1
            if refs[b] == 0:
                del refs[b]
        assert pool.num_free() == 8 - len(refs), f"step {step}"
        assert all(pool.refcount(b) == n for b, n in refs.items()), f"step {step}"
