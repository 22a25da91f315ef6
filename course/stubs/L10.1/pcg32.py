"""PCG32 (PCG-XSH-RR 64/32), the generator every seeded draw in the course comes from (L10.1).

It follows the PCG paper's minimal C library exactly: ``pcg32_srandom_r(initstate=seed,
initseq=stream)`` to seed and ``pcg32_random_r`` to step, so seed 42 / stream 54 reproduces
the published ``pcg32-demo`` output. The rules are in ``course/L10.1.md`` section 2.1 and, bit by
bit, in ``course/spec/pcg32.md``, which also states how a float is made from two 32-bit draws.
"""

# You write this file: the three methods of Pcg32. The constants below are the PCG paper's and are
# given.

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1
MULTIPLIER = 6364136223846793005


# --- 2.1 PCG32 -------------------------------------------------------------------------------

class Pcg32:
    """A PCG32 generator: a 64-bit LCG state and a 32-bit xorshift-rotate output.

    Seeding follows the paper's ``pcg32_srandom_r(initstate=seed, initseq=stream)``: state 0,
    increment ``(stream << 1) | 1``, one step, add ``seed`` to the state, one more step. ``seed``
    and ``stream`` must be integers in ``[0, 2**64)``, otherwise ``ValueError``.
    Seed 42, stream 54 must reproduce the published pcg32-demo output (``0xa15c02b7`` first).
    """

    def __init__(self, seed: int, stream: int = 54) -> None:
        raise NotImplementedError("pcg32.Pcg32.__init__ (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.1")

    def next_u32(self) -> int:
        """Advance the LCG and return the xorshift-rotate output of the state before the step."""
        raise NotImplementedError("pcg32.Pcg32.next_u32 (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.1")

    def next_f64(self) -> float:
        """A float in [0, 1) with 53 random bits from two draws: ``((a >> 5) * 2**26 + (b >> 6)) / 2**53``."""
        raise NotImplementedError("pcg32.Pcg32.next_f64 (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.1")
