"""Speculative decoding in the engine (L10.8) -- your file.

Draft a few tokens cheaply from the request's own context, score them all with one target
forward pass, keep the longest prefix the verifier accepts, and give back the KV of the rest.
Section numbers refer to the module card, ``course/L10.8.md``.

The types (SpecError, Draft, SpecConfig, Verified, Target, SpecStats, Generated) and ``generate``
are given. Every function that raises NotImplementedError is yours; ``ol tests L10.8`` lists the
tests, ``ol check L10.8`` grades them.
"""

import enum
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from .kvpool import KvPool
from .pcg32 import Pcg32
from .sampling import SamplingParams

MAX_K = 16


class SpecError(ValueError):
    """Bad input to speculative decoding, named with the offending value."""


class Draft(enum.Enum):
    NONE = "none"
    NGRAM = "ngram"
    PROMPT_LOOKUP = "prompt_lookup"


@dataclass(frozen=True)
class SpecConfig:
    """Which draft to use and how long (``1 <= k <= 16``); n-gram sizes for the drafts."""

    draft: Draft
    k: int
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.draft, Draft):
            raise SpecError(f"draft must be a Draft, got {self.draft!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= MAX_K:
            raise SpecError(f"k must be an integer in [1, {MAX_K}], got {self.k!r}")
        for name in ("max_ngram", "min_ngram"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"{name} must be an integer >= 1, got {value!r}")
        if self.min_ngram > self.max_ngram:
            raise SpecError(f"min_ngram {self.min_ngram} is larger than max_ngram {self.max_ngram}")

    @staticmethod
    def parse(draft: str, k: int) -> "SpecConfig":
        """The runtime values ``draft = "none" | "ngram" | "prompt_lookup"`` and ``k``.

        Any other draft name, or a ``k`` outside ``1..16``, raises :class:`SpecError`.
        """
        raise NotImplementedError("spec.SpecConfig.parse (L10.8): not written yet -- "
                                  "see course/L10.8.md section 4")


# --- 2.1 Drafts from the context -------------------------------------------------------------

def prompt_lookup(ctx: Sequence[int], k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """Copy what followed the most recent earlier occurrence of the context's suffix.

    For ``n`` from ``max_ngram`` down to ``min_ngram``: find the largest start ``i < t - n`` with
    ``ctx[i:i+n] == ctx[t-n:]``; the draft is ``ctx[i+n : i+n+k]``, which may run into the suffix
    itself (it stops only at the end of the context). The first ``n`` with a match wins; no match
    at all gives ``[]``.
    """
    raise NotImplementedError("spec.prompt_lookup (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.1")


def ngram_draft(ctx: Sequence[int], k: int, n: int) -> list[int]:
    """Draft up to ``k`` tokens, each the most frequent follower of the recent context.

    For each draft token: for ``m`` from ``n - 1`` down to 1, count the tokens that followed every
    earlier occurrence of the last ``m`` tokens (drafted tokens included); the most frequent wins,
    ties to the lowest id. Stop when no ``m`` matches.
    """
    raise NotImplementedError("spec.ngram_draft (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.1")


def propose(cfg: SpecConfig, ctx: Sequence[int], k: int) -> list[int]:
    """The configured draft of at most ``k`` tokens (``k`` may be shorter than ``cfg.k``).

    ``Draft.NONE`` or ``k <= 0`` drafts nothing; n-gram drafts use ``n = cfg.max_ngram``.
    """
    raise NotImplementedError("spec.propose (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.1")


# --- 2.2 / 2.3 Accept or resample ------------------------------------------------------------

def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``normalize(max(0, p - q))``: where the mass the draft over-proposed is given back.

    When ``p == q`` up to rounding the residual has no mass (a rejection cannot happen in exact
    arithmetic); return ``p`` itself then.
    """
    raise NotImplementedError("spec.residual (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.3")


def sample_dense(p: np.ndarray, u: float) -> int:
    """The first id whose running sum of ``p`` exceeds ``u`` (L10.1's walk)."""
    raise NotImplementedError("spec.sample_dense (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.2")


def speculative_step(p: np.ndarray, q: np.ndarray, x: int, u_accept: float,
                     u_resample: float) -> tuple[int, bool]:
    """Accept draft token ``x`` when ``u_accept < p(x) / q(x)``; else draw from the residual.

    Returns ``(token, accepted)``. A ``q`` with ``q(x) = 0`` could not have proposed ``x``: raise
    :class:`SpecError`, as for shapes that differ, ``x`` outside the vocabulary, or a ``u``
    outside ``[0, 1)``.
    """
    raise NotImplementedError("spec.speculative_step (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.2")


def dense_distribution(logits, params: SamplingParams, prompt: Sequence[int],
                       output: Sequence[int]) -> np.ndarray:
    """The target's sampling distribution ``p`` over the whole vocabulary (L10.1's rules)."""
    raise NotImplementedError("spec.dense_distribution (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.2")


@dataclass
class Verified:
    tokens: list[int]
    logprobs: list[float]
    n_accepted: int


def verify_draft(rows, draft: Sequence[int], draft_probs, params: SamplingParams,
                 prompt: Sequence[int], output: Sequence[int], rng: Pcg32) -> Verified:
    """Walk the draft against the target's ``len(draft) + 1`` rows (section 2.2).

    Greedy: keep ``d_i`` while it is the penalized argmax of row ``i`` (penalties see the tokens
    accepted so far); a mismatch emits the argmax and stops; after a full acceptance row ``m``
    gives the bonus token. No draws.
    Sampled: at every position draw ``u_a`` then ``u_r`` (both, always) and apply
    :func:`speculative_step` with ``q`` the draft distribution (one-hot when ``draft_probs`` is
    None); after a full acceptance the bonus is L10.1's ``sample`` of row ``m`` (one draw).
    Logprobs are L10.1's: the log-softmax of the penalized row at the emitted token.
    Rows of the wrong number or shape, draft distributions of the wrong number or length, and
    draft ids outside the vocabulary raise :class:`SpecError`.
    """
    raise NotImplementedError("spec.verify_draft (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.2")


# --- 2.4 Rollback ----------------------------------------------------------------------------

def blocks_for(tokens: int, block_tokens: int) -> int:
    """How many blocks ``tokens`` positions need: ``ceil(tokens / block_tokens)``."""
    raise NotImplementedError("spec.blocks_for (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.4")


def rollback(pool: KvPool, table: list[int], keep: int) -> int:
    """Shrink ``table`` in place to the blocks ``keep`` positions need; return how many it released.

    Each dropped block loses one reference (a block shared through the prefix cache survives for
    its other owner); the last kept block's fill becomes what it still holds. A ``keep`` outside
    ``[0, len(table) * block_tokens]`` raises :class:`SpecError`.
    """
    raise NotImplementedError("spec.rollback (L10.8): not written yet -- "
                              "see course/L10.8.md section 2.4")


# --- The generation loop ---------------------------------------------------------------------

class Target(Protocol):
    """A model with a KV cache that can score several fed ids in one pass."""

    def cached(self) -> int:
        """How many positions the cache holds."""

    def extend(self, ids: Sequence[int]) -> list[np.ndarray]:
        """Append ``ids`` to the cache in one forward; row ``j`` scores the token after ``ids[j]``."""

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` cached positions and forget the rest."""


@dataclass
class SpecStats:
    """Counters of one request: draft tokens proposed, draft tokens the verifier accepted (also
    those past an EOS or a listener's stop in the same round), and target forward passes."""

    drafted: int = 0
    accepted: int = 0
    target_calls: int = 0

    def accept_rate(self) -> float:
        """Accepted draft tokens over drafted ones (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass
class Generated:
    tokens: list[int]
    logprobs: list[float]
    stats: SpecStats = field(default_factory=SpecStats)


def generate_stream(target: Target, cfg: SpecConfig, prompt: Sequence[int], params: SamplingParams,
                    seed: int, max_new: int, eos: Sequence[int],
                    on_token: Callable[[int, float], bool]) -> Generated:
    """Generate up to ``max_new`` tokens, one round per target pass, streaming each token.

    The generator is L10.1's ``stream(seed)``. A round feeds the pending tokens (the prompt first,
    then the last emitted token) plus a draft shortened to ``max_new - emitted - 1``, verifies,
    and truncates the target to what was kept (the last emitted token stays pending). Every
    emitted token goes to ``on_token(token, logprob)`` in order as soon as its round is verified;
    generation ends at an EOS token, at ``max_new``, or when ``on_token`` returns False. The
    target must start empty; an empty prompt, a negative ``max_new`` or a seed outside
    ``[0, 2**64)`` raise :class:`SpecError`.
    """
    raise NotImplementedError("spec.generate_stream (L10.8): not written yet -- "
                              "see course/L10.8.md section 4")


def generate(target: Target, cfg: SpecConfig, prompt: Sequence[int], params: SamplingParams,
             seed: int, max_new: int, eos: Sequence[int]) -> Generated:
    """:func:`generate_stream` with a listener that never stops it."""
    return generate_stream(target, cfg, prompt, params, seed, max_new, eos, lambda token, logprob: True)
