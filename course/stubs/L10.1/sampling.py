"""The sampler (L10.1): penalties, temperature, top-k, top-p, min-p, then one draw.

The order of the steps, the tie rules, the walk over the running sum and the logprob convention
are in ``course/L10.1.md`` sections 2.2 and 2.3, and with every edge case in
``course/spec/sampling.md``, the contract. Everything after the float32 logits is float64.
"""

# You write this file. The SamplingParams fields are given; their validation is yours. walk and
# log_softmax_at are yours too: L10.8's speculative decoder calls them.

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .pcg32 import Pcg32


# --- 2.2 The sampler's order -----------------------------------------------------------------

@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. The defaults are greedy decoding with no penalties."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def __post_init__(self) -> None:
        """Refuse bad values with a ``ValueError`` whose message names the field.

        Every float field must be finite; ``temperature >= 0``; ``top_k`` an int ``>= 0``;
        ``0 < top_p <= 1``; ``0 <= min_p <= 1``; ``repetition_penalty > 0``.
        """
        raise NotImplementedError("sampling.SamplingParams.__post_init__ (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.2")


def apply_penalties(logits, params: SamplingParams, prompt: Sequence[int],
                    output: Sequence[int]) -> np.ndarray:
    """Return a new float64 array of penalized logits; the input is left unchanged.

    Repetition first, once per distinct id seen in prompt or output: a positive logit is divided
    by the penalty, a negative one multiplied. Then, for ids in the output only,
    ``logit -= presence * [count > 0] + frequency * count``. Bad logits or ids raise ValueError.
    """
    raise NotImplementedError("sampling.apply_penalties (L10.1): not written yet -- "
                              "see course/L10.1.md section 2.2")


def argmax(logits) -> int:
    """The id of the largest logit; ties go to the lowest id."""
    raise NotImplementedError("sampling.argmax (L10.1): not written yet -- "
                              "see course/L10.1.md section 2.2")


def distribution(logits, params: SamplingParams, prompt: Sequence[int],
                 output: Sequence[int]) -> np.ndarray:
    """The float64 distribution a draw comes from, zeros where filtered.

    Penalties, then (temperature > 0) divide by the temperature, top-k, top-p over the survivors,
    min-p relative to the top probability, softmax in float64. Temperature 0 is the one-hot at
    the penalized argmax.
    """
    raise NotImplementedError("sampling.distribution (L10.1): not written yet -- "
                              "see course/L10.1.md section 2.2")


# --- 2.3 The draw and the logprob ------------------------------------------------------------

def log_softmax_at(x: np.ndarray, token: int) -> float:
    """``x[token] - logsumexp(x)`` in float64, the sampler's logprob convention (``-inf`` entries
    carry no mass)."""
    raise NotImplementedError("sampling.log_softmax_at (L10.1): not written yet -- "
                              "see course/L10.1.md section 2.3")


def walk(p: np.ndarray, u: float) -> int:
    """The first id whose running sum of ``p`` (in id order) exceeds ``u``.

    If rounding leaves ``u`` at or past the total, the last id with mass is taken.
    """
    raise NotImplementedError("sampling.walk (L10.1): not written yet -- "
                              "see course/L10.1.md section 2.3")


def sample(logits, params: SamplingParams, prompt: Sequence[int], output: Sequence[int],
           rng: Pcg32) -> tuple[int, float]:
    """Pick the next token and its logprob.

    Temperature 0 takes the penalized argmax and draws nothing. Otherwise one ``rng.next_f64()``
    walks the running sum of :func:`distribution`. The logprob is the log-softmax of the
    penalized logits (before temperature and filters) at the chosen id.
    """
    raise NotImplementedError("sampling.sample (L10.1): not written yet -- "
                              "see course/L10.1.md section 2.3")


def stream(seed: int) -> Pcg32:
    """The generator a request with this 64-bit seed draws from: ``Pcg32(seed, 54)``.

    A seed outside ``[0, 2**64)`` raises ValueError.
    """
    raise NotImplementedError("sampling.stream (L10.1): not written yet -- "
                              "see course/L10.1.md section 2.3")
