"""The sampler (L10.1): penalties, temperature, top-k, top-p, min-p, then one draw.

The order of the steps, the tie rules, the walk over the running sum and the logprob convention
are in ``course/L10.1.md`` sections 2.2 and 2.3, and with every edge case in
``course/spec/sampling.md``, the contract. Everything after the float32 logits is float64.
"""

# BEGIN PROMPT
# You write this file. The SamplingParams fields are given; their validation is yours. walk and
# log_softmax_at are yours too: L10.8's speculative decoder calls them.
# END PROMPT

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
        # BEGIN SOLUTION
        def bad(field: str, rule: str) -> ValueError:
            return ValueError(f"SamplingParams.{field} {rule}, got {getattr(self, field)!r}")

        for field in ("temperature", "top_p", "min_p", "repetition_penalty",
                      "presence_penalty", "frequency_penalty"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(field, "must be a finite number")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise bad("top_k", "must be an integer >= 0 (0 turns it off)")
        if self.temperature < 0:
            raise bad("temperature", "must be >= 0 (0 is greedy)")
        if not 0 < self.top_p <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if not 0 <= self.min_p <= 1:
            raise bad("min_p", "must be in [0, 1]")
        if self.repetition_penalty <= 0:
            raise bad("repetition_penalty", "must be > 0 (1 turns it off)")
        # END SOLUTION


# BEGIN SOLUTION NO PROMPT
def _check_logits(logits) -> np.ndarray:
    x = np.asarray(logits)
    if x.ndim != 1 or x.shape[0] == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {x.shape}")
    top = float(x.max())  # NaN if any is NaN, else +inf if any is +inf, -inf if none is finite: one pass
    if math.isnan(top) or top == math.inf:
        raise ValueError("logits must not contain NaN or +inf")
    if top == -math.inf:
        raise ValueError("logits must have at least one finite value")
    return x


def _check_ids(ids: Sequence[int], vocab: int, what: str) -> np.ndarray:
    arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    if arr.size and (arr.min() < 0 or arr.max() >= vocab):
        worst = int(arr[(arr < 0) | (arr >= vocab)][0])
        raise ValueError(f"{what} holds token id {worst}, outside the vocabulary [0, {vocab})")
    return arr
# END SOLUTION


def apply_penalties(logits, params: SamplingParams, prompt: Sequence[int],
                    output: Sequence[int]) -> np.ndarray:
    """Return a new float64 array of penalized logits; the input is left unchanged.

    Repetition first, once per distinct id seen in prompt or output: a positive logit is divided
    by the penalty, a negative one multiplied. Then, for ids in the output only,
    ``logit -= presence * [count > 0] + frequency * count``. Bad logits or ids raise ValueError.
    """
    # BEGIN SOLUTION
    x = _check_logits(logits).astype(np.float64)
    vocab = x.shape[0]
    prompt_ids = _check_ids(prompt, vocab, "prompt")
    output_ids = _check_ids(output, vocab, "output")
    if params.repetition_penalty != 1.0:
        seen = np.unique(np.concatenate([prompt_ids, output_ids]))
        vals = x[seen]
        x[seen] = np.where(vals > 0, vals / params.repetition_penalty, vals * params.repetition_penalty)
    if output_ids.size and (params.presence_penalty or params.frequency_penalty):
        counts = np.bincount(output_ids, minlength=vocab)
        seen = counts > 0
        x[seen] -= params.presence_penalty + params.frequency_penalty * counts[seen]
    return x
    # END SOLUTION


def argmax(logits) -> int:
    """The id of the largest logit; ties go to the lowest id."""
    # BEGIN SOLUTION
    return int(np.argmax(_check_logits(logits)))
    # END SOLUTION


# BEGIN SOLUTION NO PROMPT
def _softmax(x: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x)
    z = np.zeros_like(x)
    z[finite] = np.exp(x[finite] - x[finite].max())
    return z / z.sum()


def _filtered(x: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Temperature, then top-k, top-p, min-p on penalized logits; filtered ids become -inf."""
    x = x / params.temperature
    vocab = x.shape[0]
    order = np.lexsort((np.arange(vocab), -x))  # descending logit, ties to the lowest id
    if 0 < params.top_k < vocab:
        x[order[params.top_k:]] = -np.inf
    if params.top_p < 1.0:
        probs = _softmax(x)[order]
        keep = min(int(np.searchsorted(np.cumsum(probs), params.top_p, side="left")) + 1, vocab)
        x[order[keep:]] = -np.inf
    if params.min_p > 0.0:
        probs = _softmax(x)
        x[probs < params.min_p * probs.max()] = -np.inf
    return x
# END SOLUTION


def distribution(logits, params: SamplingParams, prompt: Sequence[int],
                 output: Sequence[int]) -> np.ndarray:
    """The float64 distribution a draw comes from, zeros where filtered.

    Penalties, then (temperature > 0) divide by the temperature, top-k, top-p over the survivors,
    min-p relative to the top probability, softmax in float64. Temperature 0 is the one-hot at
    the penalized argmax.
    """
    # BEGIN SOLUTION
    x = apply_penalties(logits, params, prompt, output)
    if params.temperature == 0.0:
        onehot = np.zeros_like(x)
        onehot[int(np.argmax(x))] = 1.0
        return onehot
    return _softmax(_filtered(x, params))
    # END SOLUTION


# --- 2.3 The draw and the logprob ------------------------------------------------------------

def log_softmax_at(x: np.ndarray, token: int) -> float:
    """``x[token] - logsumexp(x)`` in float64, the sampler's logprob convention (``-inf`` entries
    carry no mass)."""
    # BEGIN SOLUTION
    finite = x[np.isfinite(x)]
    top = finite.max()
    return float(x[token] - (top + math.log(np.exp(finite - top).sum())))
    # END SOLUTION


def walk(p: np.ndarray, u: float) -> int:
    """The first id whose running sum of ``p`` (in id order) exceeds ``u``.

    If rounding leaves ``u`` at or past the total, the last id with mass is taken.
    """
    # BEGIN SOLUTION
    token = int(np.searchsorted(np.cumsum(p), u, side="right"))
    if token >= p.shape[0]:
        token = int(np.flatnonzero(p > 0)[-1])
    return token
    # END SOLUTION


def sample(logits, params: SamplingParams, prompt: Sequence[int], output: Sequence[int],
           rng: Pcg32) -> tuple[int, float]:
    """Pick the next token and its logprob.

    Temperature 0 takes the penalized argmax and draws nothing. Otherwise one ``rng.next_f64()``
    walks the running sum of :func:`distribution`. The logprob is the log-softmax of the
    penalized logits (before temperature and filters) at the chosen id.
    """
    # BEGIN SOLUTION
    x = apply_penalties(logits, params, prompt, output)
    if params.temperature == 0.0:
        token = int(np.argmax(x))
    else:
        token = walk(_softmax(_filtered(x, params)), rng.next_f64())
    return token, log_softmax_at(x, token)
    # END SOLUTION


def stream(seed: int) -> Pcg32:
    """The generator a request with this 64-bit seed draws from: ``Pcg32(seed, 54)``.

    A seed outside ``[0, 2**64)`` raises ValueError.
    """
    # BEGIN SOLUTION
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    return Pcg32(seed, 54)
    # END SOLUTION
