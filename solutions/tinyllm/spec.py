"""Speculative decoding in the engine (L10.8).

Draft a few tokens cheaply from the request's own context, score them all with one target
forward pass, keep the longest prefix the verifier accepts, and give back the KV of the rest.
Section numbers refer to the module card (``course/L10.8.md``); the functions come in the order
its section 2 lists them, ``SpecConfig.parse`` first and ``generate_stream`` last.
"""

# BEGIN PROMPT
# Given: MAX_K, SpecError, Draft, SpecConfig's fields and its validation (__post_init__), Verified,
# Target, SpecStats, Generated and generate. Yours: the twelve functions that raise
# NotImplementedError; write them in the order of the list at the top of the card's section 2,
# which describes each. ol tests L10.8 lists the tests, ol check L10.8 grades them.
# END PROMPT

import enum
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

# What this module uses from L10.1 (the card's "Needs" row).
from .kvpool import KvPool, PoolError
from .pcg32 import Pcg32
from .sampling import SamplingParams, distribution, log_softmax_at, apply_penalties, sample, stream, walk

MAX_K = 16


class SpecError(ValueError):
    """Bad input to speculative decoding, named with the offending value."""


# --- 2.1 Drafts from the context -------------------------------------------------------------

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
        """The runtime values ``draft = "none" | "ngram" | "prompt_lookup"`` and ``k`` (section 2.1).

        The name must be exactly one of the three; any other raises :class:`SpecError` naming it.
        The answer is ``SpecConfig(Draft(draft), k)`` with the default n-gram sizes; the given
        constructor already refuses a ``k`` that is not an ``int`` in ``1..16`` (bools and floats too).
        """
        # BEGIN SOLUTION
        names = [d.value for d in Draft]
        if draft not in names:
            raise SpecError(f"unknown draft {draft!r}; expected one of {', '.join(names)}")
        return SpecConfig(Draft(draft), k)
        # END SOLUTION


def prompt_lookup(ctx: Sequence[int], k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """Copy what followed the most recent earlier occurrence of the context's suffix.

    For ``n`` from ``max_ngram`` down to ``min_ngram``: find the largest start ``i < t - n`` with
    ``ctx[i:i+n] == ctx[t-n:]`` (the occurrence may overlap the suffix); the draft is
    ``ctx[i+n : i+n+k]``, which may run into the suffix itself (it stops only at the end of the
    context). The first ``n`` with a match wins; no match at all, or ``k <= 0``, gives ``[]``.
    """
    # BEGIN SOLUTION
    tokens = np.asarray(ctx, dtype=np.int64)
    t = tokens.shape[0]
    if k <= 0:
        return []
    for n in range(max_ngram, min_ngram - 1, -1):
        if n >= t:
            continue
        starts = t - n  # candidate starts 0 .. t-n-1
        match = np.ones(starts, dtype=bool)
        for j in range(n):
            match &= tokens[j:j + starts] == tokens[t - n + j]
        hits = np.flatnonzero(match)
        if hits.size:
            begin = int(hits[-1]) + n
            return tokens[begin:begin + k].tolist()
    return []
    # END SOLUTION


def ngram_draft(ctx: Sequence[int], k: int, n: int) -> list[int]:
    """Draft up to ``k`` tokens, each the most frequent follower of the recent context.

    For each draft token: for ``m`` from ``n - 1`` down to 1, count the tokens that followed every
    earlier occurrence of the last ``m`` tokens (occurrences may overlap the suffix); the most
    frequent wins, ties to the lowest id. Each drafted token joins the context the next counts
    read. Stop when no ``m`` matches, or at ``k`` tokens; ``n = 1`` drafts nothing.
    """
    # BEGIN SOLUTION
    ext = [int(t) for t in ctx]
    draft: list[int] = []
    while len(draft) < k:
        choice = None
        for m in range(n - 1, 0, -1):
            if len(ext) <= m:
                continue
            suffix = ext[-m:]
            counts: dict[int, int] = {}
            for i in range(len(ext) - m):
                if ext[i:i + m] == suffix:
                    follower = ext[i + m]
                    counts[follower] = counts.get(follower, 0) + 1
            if counts:
                choice = min(counts, key=lambda tok: (-counts[tok], tok))
                break
        if choice is None:
            break
        draft.append(choice)
        ext.append(choice)
    return draft
    # END SOLUTION


def propose(cfg: SpecConfig, ctx: Sequence[int], k: int) -> list[int]:
    """The configured draft of at most ``k`` tokens (``k`` may be shorter than ``cfg.k``).

    ``Draft.NONE`` or ``k <= 0`` drafts nothing; prompt lookup uses ``cfg.max_ngram`` and
    ``cfg.min_ngram``; the n-gram draft uses ``n = cfg.max_ngram``.
    """
    # BEGIN SOLUTION
    if k <= 0 or cfg.draft is Draft.NONE:
        return []
    if cfg.draft is Draft.PROMPT_LOOKUP:
        return prompt_lookup(ctx, k, cfg.max_ngram, cfg.min_ngram)
    return ngram_draft(ctx, k, cfg.max_ngram)
    # END SOLUTION


# --- 2.2 One round ---------------------------------------------------------------------------

def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``normalize(max(0, p - q))``: where the mass the draft over-proposed is given back.

    When the sum of ``max(0, p - q)`` is exactly 0.0 (every ``p <= q``, as when ``p == q``; no
    epsilon) the residual has no mass, and a rejection cannot happen in exact arithmetic: return
    ``p / sum(p)`` then.
    """
    # BEGIN SOLUTION
    r = np.maximum(0.0, np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64))
    total = r.sum()
    if total <= 0.0:
        return np.asarray(p, dtype=np.float64) / np.sum(p)
    return r / total
    # END SOLUTION


def sample_dense(p: np.ndarray, u: float) -> int:
    """The first id whose running sum of ``p`` exceeds ``u``, strictly; if rounding leaves ``u`` at or
    past the last running sum, the last id with mass (L10.1's ``walk``)."""
    # BEGIN SOLUTION
    return walk(np.asarray(p, dtype=np.float64), u)
    # END SOLUTION


# BEGIN SOLUTION NO PROMPT
def _check_dist(d, vocab: int, what: str) -> np.ndarray:
    arr = np.asarray(d, dtype=np.float64)
    if arr.shape != (vocab,):
        raise SpecError(f"{what} has shape {arr.shape}, expected ({vocab},)")
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        raise SpecError(f"{what} holds {float(arr[bad[0]])!r} at id {int(bad[0])}; "
                        "probabilities must be finite and non-negative")
    if abs(arr.sum() - 1.0) > 1e-6:
        raise SpecError(f"{what} sums to {float(arr.sum())!r}, not 1")
    return arr
# END SOLUTION


# BEGIN SOLUTION NO PROMPT
def _check_u(u: float, what: str) -> None:
    if not 0.0 <= u < 1.0:
        raise SpecError(f"{what} must be in [0, 1), got {u!r}")
# END SOLUTION


def speculative_step(p: np.ndarray, q: np.ndarray, x: int, u_accept: float,
                     u_resample: float) -> tuple[int, bool]:
    """Accept draft token ``x`` when ``u_accept < p(x) / q(x)``, strictly; else walk the residual at
    ``u_resample``.

    Returns ``(token, accepted)``. ``u_accept`` equal to the ratio rejects, and a token with
    ``p(x) = 0`` is never accepted. A ``q`` with ``q(x) = 0`` could not have proposed ``x``: raise
    :class:`SpecError`, as for shapes that differ, ``x`` outside the vocabulary, or a ``u``
    outside ``[0, 1)``. Section 2.3 shows why this keeps the target's distribution.
    """
    # BEGIN SOLUTION
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.ndim != 1 or q.shape != p.shape:
        raise SpecError(f"p and q must be 1-D of one length, got {p.shape} and {q.shape}")
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < p.shape[0]:
        raise SpecError(f"draft token {x!r} is outside the vocabulary [0, {p.shape[0]})")
    _check_u(u_accept, "u_accept")
    _check_u(u_resample, "u_resample")
    if q[x] <= 0.0:
        raise SpecError(f"q({x}) = {float(q[x])!r}: the draft could not have proposed token {x}")
    if u_accept < p[x] / q[x]:
        return int(x), True
    return sample_dense(residual(p, q), u_resample), False
    # END SOLUTION


def dense_distribution(logits, params: SamplingParams, prompt: Sequence[int],
                       output: Sequence[int]) -> np.ndarray:
    """The target's sampling distribution ``p`` over the whole vocabulary: L10.1's ``distribution``.

    Float64, length V, in id order, zeros where filtered, so it lines up with ``q`` id by id.
    """
    # BEGIN SOLUTION
    return distribution(logits, params, prompt, output)
    # END SOLUTION


@dataclass
class Verified:
    tokens: list[int]
    logprobs: list[float]
    n_accepted: int


# BEGIN SOLUTION NO PROMPT
def _check_rows(rows, draft: Sequence[int], draft_probs) -> tuple[list[np.ndarray], int]:
    rows = [np.asarray(r) for r in rows]
    if len(rows) != len(draft) + 1:
        raise SpecError(f"{len(rows)} rows of logits for a draft of {len(draft)}: "
                        f"expected {len(draft) + 1}")
    vocab = rows[0].shape[0] if rows[0].ndim == 1 else 0
    for i, r in enumerate(rows):
        if r.ndim != 1 or r.shape[0] != vocab or vocab == 0:
            raise SpecError(f"row {i} has shape {r.shape}; every row must be 1-D of length {vocab or '>0'}")
        top = r.max()  # NaN if any is NaN, else +inf if any is +inf, -inf if none is finite: one pass
        if np.isnan(top) or top == np.inf:
            raise SpecError(f"row {i} holds NaN or +inf")
        if top == -np.inf:
            raise SpecError(f"row {i} has no finite logit")
    for i, d in enumerate(draft):
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d < vocab:
            raise SpecError(f"draft token {d!r} at position {i} is outside the vocabulary [0, {vocab})")
    if draft_probs is not None and len(draft_probs) != len(draft):
        raise SpecError(f"{len(draft_probs)} draft distributions for a draft of {len(draft)}")
    return rows, vocab
# END SOLUTION


def verify_draft(rows, draft: Sequence[int], draft_probs, params: SamplingParams,
                 prompt: Sequence[int], output: Sequence[int], rng: Pcg32) -> Verified:
    """Walk the draft against the target's ``len(draft) + 1`` rows (section 2.2).

    Penalties count ``output`` followed by the tokens emitted so far in this round.
    Greedy: keep ``d_i`` while it is the penalized argmax of row ``i`` (ties to the lowest id, so a
    draft token that only ties the maximum at a higher id is rejected); a mismatch emits the
    argmax and stops; after a full acceptance row ``m`` gives the bonus token. No draws.
    Sampled: at every position draw ``u_a`` then ``u_r`` (both, always) and apply
    :func:`speculative_step` with ``p`` from :func:`dense_distribution` and ``q`` the draft
    distribution (one-hot when ``draft_probs`` is None); after a full acceptance the bonus is
    L10.1's ``sample`` of row ``m`` (one draw).
    Logprobs are L10.1's: the log-softmax of the penalized row at the emitted token.
    Rows of the wrong number or shape, NaN or +inf, draft distributions of the wrong number,
    length or sum (1 within 1e-6) or giving their own token 0, and draft ids outside the
    vocabulary raise :class:`SpecError`.
    """
    # BEGIN SOLUTION
    rows, vocab = _check_rows(rows, draft, draft_probs)
    qs = None
    if draft_probs is not None:
        qs = [_check_dist(q, vocab, f"draft distribution {i}") for i, q in enumerate(draft_probs)]
        for i, (q, d) in enumerate(zip(qs, draft)):
            if q[int(d)] <= 0.0:
                raise SpecError(f"draft distribution {i} gives its own token {int(d)} probability 0")
    seen = list(output)
    tokens: list[int] = []
    logprobs: list[float] = []
    for i, d in enumerate(int(d) for d in draft):
        if params.temperature == 0.0:
            token, logprob = sample(rows[i], params, prompt, seen, rng)
            accepted = token == d
        else:
            p = dense_distribution(rows[i], params, prompt, seen)
            if qs is None:
                q = np.zeros(vocab)
                q[d] = 1.0
            else:
                q = qs[i]
            u_accept = rng.next_f64()
            u_resample = rng.next_f64()
            token, accepted = speculative_step(p, q, d, u_accept, u_resample)
            logprob = log_softmax_at(apply_penalties(rows[i], params, prompt, seen), token)
        tokens.append(token)
        logprobs.append(logprob)
        seen.append(token)
        if not accepted:
            return Verified(tokens, logprobs, len(tokens) - 1)
    token, logprob = sample(rows[-1], params, prompt, seen, rng)
    tokens.append(token)
    logprobs.append(logprob)
    return Verified(tokens, logprobs, len(draft))
    # END SOLUTION


# --- 2.4 Rollback ----------------------------------------------------------------------------

def blocks_for(tokens: int, block_tokens: int) -> int:
    """How many blocks ``tokens`` positions need: ``ceil(tokens / block_tokens)``.

    ``block_tokens < 1`` or ``tokens < 0`` raises :class:`SpecError`.
    """
    # BEGIN SOLUTION
    if block_tokens < 1:
        raise SpecError(f"block_tokens must be >= 1, got {block_tokens!r}")
    if tokens < 0:
        raise SpecError(f"tokens must be >= 0, got {tokens!r}")
    return -(-tokens // block_tokens)
    # END SOLUTION


def rollback(pool: KvPool, table: list[int], keep: int) -> int:
    """Shrink ``table`` in place to the blocks ``keep`` positions need; return how many it released.

    Each dropped block loses one reference (a block shared through the prefix cache survives for
    its other owner); the last kept block's fill becomes what it still holds, so a block a
    rejected draft filled is never full inside the kept length and never enters the prefix index
    (``RunnerTarget.truncate`` indexes after calling this; you never register a block here). A
    ``keep`` outside ``[0, len(table) * block_tokens]``, a cut into a shared last block, or a
    ``PoolError`` raises :class:`SpecError`.
    """
    # BEGIN SOLUTION
    capacity = len(table) * pool.block_tokens
    if not 0 <= keep <= capacity:
        raise SpecError(f"keep {keep!r} is outside [0, {capacity}] for a table of {len(table)} blocks")
    need = blocks_for(keep, pool.block_tokens)
    dropped = table[need:]
    try:
        if need:
            last = table[need - 1]
            fill = keep - (need - 1) * pool.block_tokens
            # checked before anything is released: a refused rollback leaves the table and the pool as they were
            if pool.refcount(last) > 1 and fill < pool.fill(last):
                raise SpecError(f"keep {keep} would cut into block {last}, shared with another sequence")
        for b in dropped:
            pool.release(b)
        del table[need:]
        if need:
            pool.set_fill(last, fill)
    except PoolError as err:
        raise SpecError(f"rollback to {keep}: {err}") from err
    return len(dropped)
    # END SOLUTION


# --- 2.5 The generation loop -----------------------------------------------------------------

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


# BEGIN SOLUTION NO PROMPT
def _check_request(target: Target, prompt: Sequence[int], seed: int, max_new: int) -> None:
    if len(prompt) == 0:
        raise SpecError("prompt must hold at least one token")
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 0:
        raise SpecError(f"max_new must be an integer >= 0, got {max_new!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise SpecError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    if target.cached() != 0:
        raise SpecError(f"the target already caches {target.cached()} positions; start from an empty one")
# END SOLUTION


def generate_stream(target: Target, cfg: SpecConfig, prompt: Sequence[int], params: SamplingParams,
                    seed: int, max_new: int, eos: Sequence[int],
                    on_token: Callable[[int, float], bool]) -> Generated:
    """Generate up to ``max_new`` tokens, one round per target pass, streaming each token (section 2.5).

    One generator, L10.1's ``stream(seed)``, for the whole request. A round proposes from the
    prompt and every emitted token a draft shortened to ``max_new - emitted - 1``, feeds the
    pending tokens (the prompt first, then the last emitted token) plus the draft in one
    ``extend``, verifies the last ``len(draft) + 1`` rows, hands each verified token to
    ``on_token(token, logprob)`` in order, and truncates the target to ``base + len(pending) +
    handed_over - 1`` (the last emitted token stays pending). Generation ends at ``max_new``, after
    an EOS token (emitted, and heard), or after a token for which ``on_token`` returns False; the
    rest of that round is dropped. ``stats``: drafted (draft tokens proposed), accepted (the
    verifier's ``n_accepted``, also past an EOS or a stop), target_calls (``extend`` calls).
    An empty prompt, a ``max_new`` that is not an int >= 0, a seed outside ``[0, 2**64)`` or a
    target that is not empty raise :class:`SpecError`.
    """
    # BEGIN SOLUTION
    _check_request(target, prompt, seed, max_new)
    prompt = [int(t) for t in prompt]
    stop_ids = {int(t) for t in eos}
    rng = stream(seed)
    stats = SpecStats()
    out = Generated([], [], stats)
    pending = list(prompt)
    while len(out.tokens) < max_new:
        draft = propose(cfg, prompt + out.tokens, min(cfg.k, max_new - len(out.tokens) - 1))
        base = target.cached()
        rows = target.extend(pending + draft)
        stats.target_calls += 1
        verified = verify_draft(rows[-(len(draft) + 1):], draft, None, params, prompt, out.tokens, rng)
        stats.drafted += len(draft)
        stats.accepted += verified.n_accepted
        emitted = 0
        go_on = True
        for token, logprob in zip(verified.tokens, verified.logprobs):
            out.tokens.append(token)
            out.logprobs.append(logprob)
            emitted += 1
            go_on = bool(on_token(token, logprob)) and token not in stop_ids
            if not go_on:
                break
        # The last emitted token is pending: its KV is written by the next round's pass.
        target.truncate(base + len(pending) + emitted - 1)
        if not go_on:
            break
        pending = [out.tokens[-1]]
    return out
    # END SOLUTION


def generate(target: Target, cfg: SpecConfig, prompt: Sequence[int], params: SamplingParams,
             seed: int, max_new: int, eos: Sequence[int]) -> Generated:
    """:func:`generate_stream` with a listener that never stops it."""
    return generate_stream(target, cfg, prompt, params, seed, max_new, eos, lambda token, logprob: True)
