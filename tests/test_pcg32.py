"""PCG32 against the PCG paper's published demo output, and how a float is made from it."""

import pytest

from tinyllm.pcg32 import Pcg32
from tinyllm.sampling import stream

# pcg32-demo from the PCG paper's minimal C library, round 1, seeded with
# pcg32_srandom_r(&rng, 42u, 54u).
DEMO_U32 = [0xA15C02B7, 0x7B47F409, 0xBA1D3330, 0x83D2F293, 0xBFA4784B, 0xCBED606E]
DEMO_COINS = "HHTTTHTHHHTHTTTHHHHHTTTHHHTHTHTHTTHTTTHHHHHHTTTTHHTTTTTHTTTTTTTHT"
DEMO_ROLLS = [3, 4, 1, 1, 2, 2, 3, 2, 4, 3, 2, 4, 3, 3, 5, 2, 3, 1, 3, 1, 5, 1, 4, 1, 5, 6, 4, 6,
              6, 2, 6, 3, 3]


def bounded(rng: Pcg32, bound: int) -> int:
    """pcg32_boundedrand_r: reject draws below 2**32 mod bound, then reduce."""
    threshold = (2**32 - bound) % bound
    while True:
        r = rng.next_u32()
        if r >= threshold:
            return r % bound


def test_published_demo_vector_seed_42_stream_54():
    rng = Pcg32(42, 54)
    assert [rng.next_u32() for _ in range(6)] == DEMO_U32
    assert "".join("H" if bounded(rng, 2) else "T" for _ in range(65)) == DEMO_COINS
    assert [bounded(rng, 6) + 1 for _ in range(33)] == DEMO_ROLLS


def test_default_stream_is_54_and_request_stream_uses_it():
    assert Pcg32(42).next_u32() == DEMO_U32[0]
    rng = stream(42)
    assert [rng.next_u32() for _ in range(6)] == DEMO_U32


def test_f64_takes_27_then_26_bits_from_two_draws():
    rng = Pcg32(42, 54)
    expected = ((DEMO_U32[0] >> 5) * 2**26 + (DEMO_U32[1] >> 6)) / 2**53
    assert rng.next_f64() == expected
    assert rng.next_u32() == DEMO_U32[2]


def test_f64_stays_in_unit_interval():
    rng = Pcg32(2**64 - 1, 2**64 - 1)
    values = [rng.next_f64() for _ in range(2000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert 0.45 < sum(values) / len(values) < 0.55


def test_streams_and_seeds_differ():
    firsts = {(s, t): Pcg32(s, t).next_u32() for s in (0, 1, 42) for t in (0, 1, 54)}
    assert len(set(firsts.values())) == len(firsts)


@pytest.mark.parametrize("seed, stream_id", [(-1, 54), (2**64, 54), (1.5, 54), (True, 54), (42, -3)])
def test_bad_seed_or_stream_raises(seed, stream_id):
    with pytest.raises(ValueError, match="seed" if stream_id == 54 else "stream"):
        Pcg32(seed, stream_id)


@pytest.mark.parametrize("seed", [-1, 2**64, "42", None])
def test_request_stream_refuses_bad_seeds(seed):
    with pytest.raises(ValueError, match="seed"):
        stream(seed)
