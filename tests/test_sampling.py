"""The sampler (L10.1): parameters, penalties, filters, the walk, the logprob convention, draws."""

import dataclasses
import math

import numpy as np
import pytest

from tinyllm.pcg32 import Pcg32
from tinyllm.sampling import (SamplingParams, apply_penalties, argmax, distribution, sample, stream,
                              walk)

GREEDY = SamplingParams()
WARM = SamplingParams(temperature=1.0)


def softmax(x):
    z = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return z / z.sum()


# --- SamplingParams ---------------------------------------------------------------------------

def test_defaults_are_greedy_without_penalties():
    assert GREEDY == SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0,
                                    repetition_penalty=1.0, presence_penalty=0.0,
                                    frequency_penalty=0.0)


def test_params_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GREEDY.temperature = 1.0


@pytest.mark.parametrize("field, value", [
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf),
    ("temperature", "1"), ("top_k", -1), ("top_k", 2.0), ("top_k", True),
    ("top_p", 0.0), ("top_p", 1.5), ("top_p", math.nan), ("min_p", -0.1), ("min_p", 1.01),
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0), ("presence_penalty", math.inf),
    ("frequency_penalty", math.nan), ("frequency_penalty", None),
])
def test_bad_value_raises_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_edge_values_are_accepted():
    SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=1.0, repetition_penalty=0.5,
                   presence_penalty=-1.0, frequency_penalty=2.0)


# --- penalties --------------------------------------------------------------------------------

def test_repetition_divides_positive_and_multiplies_negative_for_prompt_and_output_ids():
    logits = np.array([2.0, -2.0, 2.0, -2.0, 1.0], dtype=np.float32)
    out = apply_penalties(logits, SamplingParams(repetition_penalty=2.0), prompt=[0, 1], output=[2])
    np.testing.assert_array_equal(out, [1.0, -4.0, 1.0, -2.0, 1.0])
    assert out.dtype == np.float64
    np.testing.assert_array_equal(logits, [2.0, -2.0, 2.0, -2.0, 1.0])  # the input is untouched


def test_presence_and_frequency_count_output_only():
    logits = np.zeros(4, dtype=np.float32)
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    out = apply_penalties(logits, params, prompt=[3, 3], output=[1, 2, 2, 2])
    np.testing.assert_allclose(out, [0.0, -0.75, -1.25, 0.0])


def test_repetition_counts_an_id_once_however_often_it_appears():
    out = apply_penalties([4.0, 1.0], SamplingParams(repetition_penalty=2.0), [0, 0], [0])
    np.testing.assert_array_equal(out, [2.0, 1.0])


@pytest.mark.parametrize("prompt, output", [([5], []), ([], [-1])])
def test_ids_outside_the_vocabulary_are_refused(prompt, output):
    with pytest.raises(ValueError, match="vocabulary"):
        apply_penalties(np.zeros(5, dtype=np.float32), GREEDY, prompt, output)


@pytest.mark.parametrize("logits", [[], [[1.0]], [1.0, math.nan], [1.0, math.inf], [-math.inf] * 2])
def test_bad_logits_are_refused(logits):
    with pytest.raises(ValueError, match="logits"):
        distribution(np.asarray(logits, dtype=np.float32), WARM, [], [])


# --- argmax, distribution ---------------------------------------------------------------------

def test_argmax_ties_go_to_the_lowest_id():
    assert argmax(np.array([1.0, 3.0, 3.0, 0.0], dtype=np.float32)) == 1
    assert argmax([-math.inf, 0.0]) == 1


def test_greedy_distribution_is_one_hot_at_the_penalized_argmax():
    logits = np.array([3.0, 2.0, 0.0], dtype=np.float32)
    np.testing.assert_array_equal(distribution(logits, GREEDY, [], []), [1.0, 0.0, 0.0])
    params = SamplingParams(presence_penalty=2.0)
    np.testing.assert_array_equal(distribution(logits, params, [], [0]), [0.0, 1.0, 0.0])


def test_temperature_scales_before_softmax_in_float64():
    logits = np.array([0.0, 1.0, 3.0, 0.5], dtype=np.float32)
    p = distribution(logits, SamplingParams(temperature=2.0), [], [])
    assert p.dtype == np.float64
    np.testing.assert_allclose(p, softmax(logits / 2.0), rtol=1e-12)


def test_top_k_keeps_the_k_largest_ties_to_the_lowest_id():
    logits = np.array([1.0, 2.0, 2.0, 2.0, 0.0], dtype=np.float32)
    p = distribution(logits, SamplingParams(temperature=1.0, top_k=2), [], [])
    np.testing.assert_allclose(p, [0.0, 0.5, 0.5, 0.0, 0.0])


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = distribution(logits, SamplingParams(temperature=1.0, top_p=0.79), [], [])
    np.testing.assert_allclose(p, [0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0])
    p = distribution(logits, SamplingParams(temperature=1.0, top_p=0.81), [], [])
    np.testing.assert_allclose(p, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0])


def test_min_p_drops_ids_below_a_fraction_of_the_top():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = distribution(logits, SamplingParams(temperature=1.0, min_p=0.31), [], [])
    np.testing.assert_allclose(p, [0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0])


def test_top_k_comes_before_top_p():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    # top-k 2 renormalizes to 4/7, 3/7, and 4/7 alone reaches top-p 0.5 (the other order keeps two).
    params = SamplingParams(temperature=1.0, top_k=2, top_p=0.5)
    np.testing.assert_allclose(distribution(logits, params, [], []), [1.0, 0.0, 0.0, 0.0])


def test_top_p_comes_before_min_p():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    # top-p 0.42 needs two ids of the full distribution; min-p first would drop 0.1, lift 0.4 to
    # 4/9 > 0.42 and keep one.
    params = SamplingParams(temperature=1.0, top_p=0.42, min_p=0.3)
    np.testing.assert_allclose(distribution(logits, params, [], []), [4 / 7, 3 / 7, 0.0, 0.0])


def test_distributions_sum_to_one_with_zeros_where_filtered():
    gen = np.random.default_rng(7)
    for _ in range(50):
        logits = gen.normal(size=12).astype(np.float32)
        params = SamplingParams(temperature=float(gen.uniform(0.1, 2.0)), top_k=int(gen.integers(0, 6)),
                                top_p=float(gen.uniform(0.2, 1.0)), min_p=float(gen.uniform(0, 0.3)))
        p = distribution(logits, params, [], [])
        assert abs(p.sum() - 1.0) < 1e-12 and (p >= 0).all()
        if params.top_k:
            assert np.count_nonzero(p) <= params.top_k


# --- the walk and the draw --------------------------------------------------------------------

def test_walk_takes_the_first_id_whose_running_sum_exceeds_u():
    p = np.array([0.0, 0.75, 0.25])
    assert walk(p, 0.0) == 1  # an id with no mass is never chosen
    assert walk(p, 0.74) == 1
    assert walk(p, 0.75) == 2
    assert walk(p, 0.8) == 2


def test_walk_falls_back_to_the_last_id_with_mass_when_rounding_leaves_u_past_the_total():
    assert walk(np.array([0.3, 0.3, 0.3, 0.0]), 0.95) == 2


def test_greedy_sample_draws_nothing_and_reports_the_logprob(counting_rng):
    logits = np.array([0.0, 1.0, 3.0, 0.5], dtype=np.float32)
    rng = counting_rng(1)
    token, logprob = sample(logits, GREEDY, [], [], rng)
    assert token == 2 and rng.draws == 0
    assert logprob == pytest.approx(3 - math.log(math.exp(0) + math.exp(1) + math.exp(3) + math.exp(0.5)),
                                    abs=1e-12)


def test_sampled_draw_uses_one_float_walked_over_the_distribution(counting_rng):
    gen = np.random.default_rng(3)
    for seed in range(40):
        logits = gen.normal(size=6).astype(np.float32)
        params = SamplingParams(temperature=0.7, top_k=4, repetition_penalty=1.3)
        rng = counting_rng(seed)
        token, logprob = sample(logits, params, [1], [2, 2], rng)
        assert rng.draws == 1
        u = Pcg32(seed).next_f64()
        assert token == walk(distribution(logits, params, [1], [2, 2]), u)
        # The logprob is of the penalized logits, before temperature and filters.
        penalized = apply_penalties(logits, params, [1], [2, 2])
        assert logprob == pytest.approx(math.log(softmax(penalized)[token]), abs=1e-9)


def test_sampling_follows_the_distribution():
    logits = np.array([0.0, 1.0, 2.0], dtype=np.float32)
    rng = stream(11)
    counts = np.bincount([sample(logits, WARM, [], [], rng)[0] for _ in range(3000)], minlength=3)
    np.testing.assert_allclose(counts / 3000, softmax(logits), atol=0.03)


def test_stream_is_pcg32_on_stream_54():
    a, b = stream(2**63 + 5), Pcg32(2**63 + 5, 54)
    assert [a.next_u32() for _ in range(4)] == [b.next_u32() for _ in range(4)]


def test_the_worked_example_of_the_sampling_spec():
    logits = np.array([2, 1, 1, 0, -3], dtype=np.float32)
    params = SamplingParams(temperature=1.0, top_k=4, top_p=0.9, min_p=0.3)
    p = distribution(logits, params, [], [])
    e = math.e
    np.testing.assert_allclose(p, [e / (e + 2), 1 / (e + 2), 1 / (e + 2), 0.0, 0.0], rtol=1e-12)
    assert walk(p, 0.6) == 1

    class FixedDraw:
        def next_f64(self):
            return 0.6

    token, logprob = sample(logits, params, [], [], FixedDraw())
    assert token == 1
    assert logprob == pytest.approx(1 - math.log(sum(math.exp(v) for v in (2, 1, 1, 0, -3))), abs=1e-12)
