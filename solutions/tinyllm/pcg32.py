"""PCG32 (PCG-XSH-RR 64/32), the generator every seeded draw in the course comes from (L10.1).

It follows the PCG paper's minimal C library exactly: ``pcg32_srandom_r(initstate=seed,
initseq=stream)`` to seed and ``pcg32_random_r`` to step, so seed 42 / stream 54 reproduces
the published ``pcg32-demo`` output. ``course/spec/pcg32.md`` states the algorithm and how a
float is made from two 32-bit draws.
"""

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1
MULTIPLIER = 6364136223846793005


class Pcg32:
    """A PCG32 generator: 64-bit LCG state, 32-bit xorshift-rotate output."""

    def __init__(self, seed: int, stream: int = 54) -> None:
        for name, value in (("seed", seed), ("stream", stream)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MASK64:
                raise ValueError(f"Pcg32 {name} must be an integer in [0, 2**64), got {value!r}")
        self.state = 0
        self.inc = ((stream << 1) | 1) & MASK64
        self.next_u32()
        self.state = (self.state + seed) & MASK64
        self.next_u32()

    def next_u32(self) -> int:
        """Advance the LCG and return the permuted 32-bit output of the old state."""
        old = self.state
        self.state = (old * MULTIPLIER + self.inc) & MASK64
        xorshifted = (((old >> 18) ^ old) >> 27) & MASK32
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & MASK32

    def next_f64(self) -> float:
        """A float in [0, 1) with 53 random bits: 27 from one draw, then 26 from the next."""
        high = self.next_u32() >> 5
        low = self.next_u32() >> 6
        return (high * 67108864 + low) / 9007199254740992.0
