"""Speculation under load: continuous batching and a policy never slower than plain decoding (L10.10).

Many requests share one :class:`KvPool`, each with its own block table. Every step feeds the rows
of every running request -- its pending ids (the prompt first, then the last emitted token) plus a
draft of ``k`` tokens -- to **one** forward, then verifies each request with L10.8's
``verify_draft`` and rolls it back with L10.8's ``rollback``, independently. Batch invariance (see
:mod:`tinyllm.model`) makes each row bitwise the row of the request alone, so greedy output never
depends on who shares the pass.

The pass is paid in whole 16-row gemms, and a row at position ``p`` sits at gemm slot ``p % 16``:
draft rows are free while they land in slots the pass pays anyway, and cost a whole gemm once one
slot overflows. Where a request starts sets its slots for as long as it runs, so the scheduler
places each one it admits on the least crowded slot it can find near the queue's head, passing
no request over more than ``ADMIT_WINDOW`` times. The adaptive policy chooses every request's
``k`` each step to maximise goodput, the tokens the batch is expected to emit per second:
expected tokens per round from a per-position acceptance estimate, over a step time from a cost
table profiled on the machine at start. ``k = 0`` is the plain path: no drafter call, no extra
row (the adaptive policy looks a draft up to choose ``k``, and while looking does not pay for
itself it stands aside and looks nothing up, section 2.3). Section numbers refer to
``course/L10.10.md``.
"""

# Given: MAX_DRAFT, PRIOR, WEIGHT, POOL_WEIGHT, EXPLORE, FADE, BANK_RATE, BANK_LIMIT, PROFILE_POOLS, LOOK_WEIGHT,
# ADMIT_WINDOW, MATCHES, ORIGINS, MATCH_KEYS, lookup_match, copied_from, lookup_drafter, MatchIndex, Acceptance,
# CostTable, profile, policy_seconds, Policy, Lane, fed_positions, slot_rows, faded, untried, widen, trim, Bank, Request,
# StepReport, and in Server: the constructor, submit, idle, run, _share_prefix, _lanes, _lookup, _origin, _settle,
# _stands_aside, _room_for_drafts, _explore, _set_fills and _offer_prompt. Yours:
# the eleven functions that raise NotImplementedError, starting with observe; write them in the order of the list at
# the top of the card's section 2.
# ol tests L10.10 lists the tests, ol check L10.10 grades them.

import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from .kvpool import KvPool
from .model import GEMM_ROWS, TinyLlama
from .sampling import SamplingParams, stream
from .spec import Generated, SpecError, SpecStats, blocks_for, prompt_lookup, rollback, verify_draft

MAX_DRAFT = GEMM_ROWS - 1  # a request's last token and its draft fit one gemm's 16 rows
PRIOR = 0.85  # acceptance assumed at a position nothing has been drafted at yet (vLLM's adaptive k: 0.85)
WEIGHT = 0.3  # how far one observation moves the estimate (an exponential moving average)
POOL_WEIGHT = 0.1  # how far one round moves the pooled estimate: it remembers about ten rounds, not three
EXPLORE = 16  # rounds without a draft after which an adaptive request tries one token in a free row
FADE = 0.7  # per round without a draft, how much of its own estimate's shortfall below the pool's is trusted
BANK_RATE = 0.9  # the share of a saved gemm banked: plain decoding's gemms per token are estimated, not known
BANK_LIMIT = 4  # the most gemms the bank holds: old savings do not fund a burst after the traffic changed
PROFILE_POOLS = 3  # pools profile times each pass on, the median kept
LOOK_WEIGHT = 0.02  # how far one looked-up request moves what looking is worth: it remembers about fifty

ADMIT_WINDOW = GEMM_ROWS  # queued requests admission chooses among, and the most times one may be passed over

MATCHES = (3, 2, 1)  # the n-gram lengths the default drafter's lookup tries, longest first
# where a draft is copied from, against the request's last match: its first; the span the last was copied
# from, carried on by the tokens emitted since; another place (Server._origin)
ORIGINS = ("first", "on", "moved")
MATCH_KEYS = tuple((n, origin) for n in MATCHES for origin in ORIGINS)  # the adaptive policy's estimates

Drafter = Callable[[Sequence[int], int], list[int]]


def lookup_match(ctx: Sequence[int], k: int) -> tuple[int, list[int]]:
    """L10.8's prompt lookup (n-grams 3 down to 1) and the ``n`` its draft came from (0: no match).

    A draft copied after a 3-token match is accepted far more often than one after a 1-token
    match (bench/load_notebook.md), so the adaptive policy keeps an estimate per ``n`` and origin
    (section 2.3, :data:`ORIGINS`).
    The draft for ``k`` is the first ``k`` tokens of the longest, whichever ``k``."""
    for n in MATCHES:
        draft = prompt_lookup(list(ctx), MAX_DRAFT, n, n)  # a list, as the loop passes: L10.8's lookup may compare lists
        if draft:
            return n, draft[:max(k, 0)]
    return 0, []


def copied_from(ctx: Sequence[int], n: int) -> int:
    """Where :func:`lookup_match`'s draft after an ``n``-token match is copied from: the position
    after the latest earlier occurrence of the context's last ``n`` tokens (-1 for ``n = 0``)."""
    if 0 < n < len(ctx):
        a = np.asarray(ctx)
        starts = np.ones(len(a) - n, dtype=bool)  # 0 .. len - n - 1: each has a later token after its n
        for j in range(n):
            starts &= a[j:len(a) - n + j] == a[len(a) - n + j]
        found = np.flatnonzero(starts)
        if found.size:
            return int(found[-1]) + n
    return -1


def lookup_drafter(ctx: Sequence[int], k: int) -> list[int]:
    """L10.8's prompt lookup (n-grams 3 down to 1): the default drafter."""
    return lookup_match(ctx, k)[1]


class MatchIndex:
    """:func:`lookup_match` over one request's context as it grows, at the cost of the tokens
    added since the last call, not of the whole context (section 2.3). A server looks every
    request up every step; a scan of an 835-token context took 55 us, 16 of them a tenth of a
    step on the tiny llama. For each match length ``n`` the index keeps the latest start of every
    ``n`` tokens that a later token follows: those are the earlier occurrences L10.8's lookup
    reads."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.latest: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in MATCHES}

    def match(self, ctx: Sequence[int], k: int) -> tuple[int, list[int]]:
        """``lookup_match(ctx, k)``, for a ``ctx`` that extends the one the last call was given (a
        request's context only grows; comparing the tokens already indexed would cost a scan)."""
        n, source = self.find(ctx)
        return (n, self.tokens[source:source + MAX_DRAFT][:max(k, 0)]) if n else (0, [])

    def find(self, ctx: Sequence[int]) -> tuple[int, int]:
        """The match length :meth:`match` finds and where its draft is copied from,
        ``copied_from(ctx, n)``; ``(0, -1)`` where nothing matches."""
        seen = len(self.tokens)
        tokens = self.tokens
        tokens.extend(map(int, ctx[seen:]))
        end = len(tokens)
        for n, latest in self.latest.items():
            first = max(seen, n) - n  # the first start of n tokens that a token follows, new since the last call
            if end - first > MAX_DRAFT + 1:  # more than a step adds (a prompt): zipped at C speed, a later start winning
                latest.update(zip(zip(*[tokens[first + j:end - n + j] for j in range(n)]), range(first, end - n)))
            else:  # what one step adds: a loop costs less than setting the zips up
                for start in range(first, end - n):
                    latest[tuple(tokens[start:start + n])] = start
        for n in MATCHES:
            start = self.latest[n].get(tuple(tokens[end - n:])) if n < end else None
            if start is not None:
                return n, start + n
        return 0, -1


# --- 2.1 Acceptance, per position ------------------------------------------------------------

def observe(rates: Sequence[float], drafted: int, accepted: int, weight: float = WEIGHT) -> list[float]:
    """The estimate after one round that drafted ``drafted`` tokens and kept ``accepted`` (section 2.1).

    Positions ``1..accepted`` were accepted; position ``accepted + 1``, if drafted, was rejected;
    later positions were not tried and are not observed. A round that drafted nothing observes
    nothing. Each observed position moves ``weight`` of the way to what it saw (1 or 0).
    """
    raise NotImplementedError("serve.observe (L10.10): not written yet -- "
                              "see course/L10.10.md section 2.1")


def survival(rates: Sequence[float], k: int) -> list[float]:
    """``s[m - 1] = a[0] * ... * a[m - 1]``: the chance draft token ``m`` is accepted, m = 1..k."""
    raise NotImplementedError("serve.survival (L10.10): not written yet -- "
                              "see course/L10.10.md section 2.1")


@dataclass
class Acceptance:
    """One request's estimate of ``a[j]``: the chance that draft token ``j + 1`` is accepted when
    the ``j`` before it were (a conditional rate, so position 3 is only seen when 1 and 2 passed)."""

    rates: list[float] = field(default_factory=lambda: [PRIOR] * MAX_DRAFT)
    weight: float = WEIGHT

    def update(self, drafted: int, accepted: int) -> None:
        self.rates = observe(self.rates, drafted, accepted, self.weight)


def expected_tokens(rates: Sequence[float], k: int) -> float:
    """``AL(k) = 1 + sum_{m=1..k} prod_{j<=m} a_j``: tokens one round emits on average (section 2.1).

    The 1 is the token the target always gives (the correction or the bonus); ``AL(0) = 1``.
    """
    raise NotImplementedError("serve.expected_tokens (L10.10): not written yet -- "
                              "see course/L10.10.md section 2.1")


# --- 2.2 What a step costs -------------------------------------------------------------------

def gemm_blocks(positions: Sequence[int]) -> int:
    """16-row gemms a forward of rows at these positions runs: the most rows sharing one slot
    ``p % 16`` (:func:`slot_rows`; the model's ``gemm_rows`` puts same-slot rows in successive gemms)."""
    raise NotImplementedError("serve.gemm_blocks (L10.10): not written yet -- "
                              "see course/L10.10.md section 2.2")


@dataclass(frozen=True)
class CostTable:
    """Seconds of one step, profiled on this machine (section 2.2):
    ``block_seconds[g - 1]`` for a pass of ``g`` gemms, plus ``row_seconds`` per row fed (its share
    of the forward and its verification), ``request_seconds`` per request in the pass and
    ``draft_seconds`` per drafter call. ``fit_error``: how far the fitted forward strayed from the
    passes it was fitted to (the largest relative error; 0 for a table written by hand).
    ``rows_alone``: the model runs its weight matmuls over the pass's own rows
    (:attr:`TinyLlama.rows_alone`), so a pass of ``n`` rows runs ``ceil(n / 16)`` gemms wherever they
    sit, and the 17th row of a pass opens a gemm (:meth:`gemms`). ``look_seconds``: the adaptive
    policy's own work a step per running request (its lookup, its estimate, its share of choosing
    ``k``), which plain decoding never does; the price of not standing aside (section 2.3)."""

    block_seconds: tuple[float, ...]
    row_seconds: float = 0.0
    request_seconds: float = 0.0
    draft_seconds: float = 0.0
    fit_error: float = 0.0
    rows_alone: bool = False
    look_seconds: float = 0.0

    def gemms(self, blocks: int, rows: int) -> int:
        """The gemms a pass runs: ``blocks`` (:func:`gemm_blocks`, its fullest slot) where every row
        sits at its slot of padded gemms, ``ceil(rows / 16)`` where the rows are fed alone."""
        return int(-(-rows // GEMM_ROWS)) if self.rows_alone else blocks  # int(): a bench prices mean rows

    def blocks(self, g: int) -> float:
        """The pass of ``g`` gemms; past the table, the last step's slope carries on."""
        table = self.block_seconds
        if g <= len(table):
            return table[g - 1]
        slope = table[-1] - table[-2] if len(table) > 1 else table[-1]
        return table[-1] + (g - len(table)) * slope

    def step_seconds(self, blocks: int, rows: int, requests: int, drafts: int = 0) -> float:
        return (self.blocks(self.gemms(blocks, rows)) + rows * self.row_seconds + requests * self.request_seconds
                + drafts * self.draft_seconds)


def profile(model: TinyLlama, max_blocks: int = 4, repeats: int = 5, drafter: Drafter = lookup_drafter,
            context: int = 96) -> CostTable:
    """Time the model's forward on a scratch pool over passes of 1, 4, 16, 17, 33 and 64 rows shared
    by 1, 4 or 16 requests (at slots spread over the gemm and two to a block count around
    ``context``, as a server's requests sit),
    plus ``g = 2..max_blocks`` requests of one row each at one slot (``g`` gemms for ``g`` rows
    where rows sit at their slots; one where the model feeds rows alone, :meth:`CostTable.gemms`),
    and fit ``first + (g - 1) * gemm + rows * row + requests * request`` to them by least squares
    on relative errors, every term >= 0; a pass's cost is not linear in its rows, and a fit over
    the passes a server feeds prices all of them at once, where a difference of two passes prices
    the rows between them only. Then the verifier on a draft of 0 and of 15 accepted tokens adds
    its cost per row and per request, timed as a step runs it: sixteen requests one after another,
    each with a prompt of ``context`` tokens (the sampler reads a request's prompt at every token);
    the first verification after the passes finds the cache cold, and what it costs past the others
    is the pass's, paid once a step (timed alone, as before 6 Dec, it priced every request 64 us
    dearer on the tiny llama, where a step's requests take 14-28 us each: the table then priced
    plain decoding's steps at up to 1.5 times what they took and predicted no crossover where one was
    measured, ``bench/load_notebook.md``). Ten drafter calls give ``draft_seconds`` (the default
    drafter's through a :class:`MatchIndex`, its context a token longer each call, as a server's). A pass's time
    is the fastest of interleaved repeats (another process on the machine only ever adds time) in
    this process's CPU seconds: on a core of its own they are wall-clock seconds, and on a shared
    machine they leave out the time another process held the core (section 2.2). Every pass runs
    on ``PROFILE_POOLS`` pools in turn, and the median pool's time is kept: on one pool a pass of
    16 requests took 6%-12% more or less from one process to the next (where the pool sat in
    memory), and its K/V stayed in the cache from one repeat to the next, where a server's large
    pool is read cold."""
    from scipy.optimize import nnls  # here, not at the top: it takes 0.4 s to import, and only profile needs it

    bt = 16
    if context < 3 * bt:
        raise SpecError(f"context must be at least {3 * bt} (16 requests spread over 8 block counts around it), got {context!r}")
    sizes, shares = (1, 4, 16, 17, 33, 64), (1, 4, 16)  # rows up to 16 requests drafting 3 each; requests
    top = max(sizes)
    per = blocks_for(context + bt * (max(shares) // 4 + 2) + top, bt)
    pools = [model.new_pool(max(shares) * per, bt) for _ in range(PROFILE_POOLS)]
    tables_of = [[[pool.allocate() for _ in range(per)] for _ in range(max(shares))] for pool in pools]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, model.config.vocab, top).tolist()
    prompt = rng.integers(0, model.config.vocab, context).tolist()  # the sampler reads it at every token

    def passes_on(tables: list[list[int]]) -> list[tuple]:
        return ([spread(tables, r, q) for r in sizes for q in shares if q <= r]
                + [([tables[i] for i in range(g)], [context] * g, ids[:g]) for g in range(2, max_blocks + 1)])

    def spread(tables: list[list[int]], rows: int, requests: int) -> tuple:
        # request i starts at slot 5 * i % 16 (all 16 differ), two requests to a block count (a
        # server's requests end at many; the model stacks the attention of those rounding alike)
        tb, pos = [], []
        for i in range(requests):
            mine = rows // requests + (i < rows % requests)
            start = context + 5 * i % bt + bt * (i // 2 - (requests - 1) // 4)
            tb += [tables[i]] * mine
            pos += range(start, start + mine)
        return tb, pos, ids[:rows]

    on_pools = [passes_on(tables) for tables in tables_of]  # the same passes, on each pool's tables
    passes = on_pools[0]
    logits = list(model.forward(pools[0], *spread(tables_of[0], 16, 1)))
    accepted = [int(np.argmax(row)) for row in logits[:MAX_DRAFT]]  # greedy keeps every one
    checks = {0: (logits[:1], []), MAX_DRAFT: (logits, accepted)}
    passed = [[[] for _ in passes] for _ in pools]  # each pool's times of its passes
    verified: dict[int, list[float]] = {key: [] for key in checks}
    cold: list[float] = []  # each repeat's first verification after its passes
    for _ in range(repeats):
        for pool, its, timed in zip(pools, on_pools, passed):
            for spent, (tb, pos, tok) in zip(timed, its):
                began = time.process_time()
                model.forward(pool, tb, pos, tok)
                spent.append(time.process_time() - began)
        began = time.process_time()  # a step's first verification, just after its pass
        verify_draft(*checks[0], None, SamplingParams(), prompt, [], stream(0))
        cold.append(time.process_time() - began)
        for key, (rows, draft) in checks.items():
            began = time.process_time()
            for _ in range(max(shares)):  # the rest, one request after another
                verify_draft(rows, draft, None, SamplingParams(), prompt, [], stream(0))
            verified[key].append((time.process_time() - began) / max(shares))
    seconds = np.median([[min(spent) for spent in timed] for timed in passed], axis=0)
    rows_alone = model.rows_alone
    counts = CostTable((0.0,), rows_alone=rows_alone)  # counts a pass's gemms as the fitted table will
    # one row per pass: 1, its gemms past the first (from its fullest slot), rows, requests
    design = np.array([[1.0, counts.gemms(int(max(np.bincount(np.asarray(pos) % bt))), len(tok)) - 1, len(tok),
                        len({id(x) for x in tb})] for tb, pos, tok in passes])
    (first, gemm, row, request), _ = nnls(design / seconds[:, None], np.ones(len(passes)))
    first = max(first, seconds[0] / 4)  # a pass always costs something, even where the fit says not
    fit_error = float(np.max(np.abs(design @ [first, gemm, row, request] / seconds - 1)))
    verify_row = max(0.0, (min(verified[MAX_DRAFT]) - min(verified[0])) / MAX_DRAFT)
    first += max(0.0, min(cold) - min(verified[0]))  # paid once a step, not by every request
    # the server looks the default drafter's drafts up through each request's index, grown a token or so a step
    look = MatchIndex().match if drafter is lookup_drafter else drafter
    ctx = rng.integers(0, 8, 266).tolist()
    look(ctx[:256], MAX_DRAFT)
    began = time.process_time()
    for end in range(257, 267):
        look(ctx[:end], MAX_DRAFT)
    table = CostTable(tuple(float(first + g * gemm) for g in range(max_blocks)), float(row) + verify_row,
                      float(request) + min(verified[0]), (time.process_time() - began) / 10, fit_error, rows_alone)
    try:
        look = min(policy_seconds(model, table, drafter, context) for _ in range(3))
    except NotImplementedError:  # a learner's server not written yet (chapter 8 profiles from the start)
        look = 0.0
    return replace(table, look_seconds=look)


def policy_seconds(model: TinyLlama, cost: CostTable, drafter: Drafter, context: int, requests: int = 16,
                   rounds: int = 16) -> float:
    """The adaptive policy's own work per request a step (``CostTable.look_seconds``): a server's
    ``_lanes``, ``choose_ks`` and ``_explore``, and nothing else, over ``requests`` requests of
    ``context`` random tokens, each a token longer every round (its lookup index built in the
    first, as a request's is in its second step). No forward runs: the rows it would feed are
    priced by the rest of the table. Until the server's functions are written, :func:`profile`
    prices the policy's work at 0."""
    rng = np.random.default_rng(1)
    bt = 16
    server = Server(model, model.new_pool(requests * blocks_for(context + rounds + 1, bt), bt), Policy("adaptive"),
                    max_batch=requests, cost=cost, drafter=drafter)
    for _ in range(requests):
        server.submit(rng.integers(0, model.config.vocab, context).tolist(), max_new=rounds + 2)
    server._admit()
    tokens = rng.integers(0, model.config.vocab, (rounds, requests)).tolist()
    spent = 0.0
    for row in tokens:
        for r, token in zip(server.running, row):
            r.out.tokens.append(token)
            r.cached, r.pending = len(r.prompt) + len(r.out.tokens) - 1, [token]
        began = time.process_time()
        server._explore(choose_ks(server.policy, server._lanes(), cost))
        spent += time.process_time() - began
    return spent / (rounds * requests)


# --- 2.3 Policies ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Policy:
    """``off`` (plain batched decoding), ``static`` (every request drafts ``k``) or ``adaptive``."""

    kind: str
    k: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("off", "static", "adaptive"):
            raise SpecError(f"policy must be off, static or adaptive, got {self.kind!r}")
        if self.kind == "static" and (isinstance(self.k, bool) or not isinstance(self.k, int)
                                      or not 1 <= self.k <= MAX_DRAFT):
            raise SpecError(f"a static k must be an integer in [1, {MAX_DRAFT}], got {self.k!r}")

    @staticmethod
    def parse(text: str) -> "Policy":
        """``"off"``, ``"adaptive"`` or a static ``k`` such as ``"4"``."""
        if text in ("off", "adaptive"):
            return Policy(text)
        if text.isdigit():
            return Policy("static", int(text))
        raise SpecError(f"policy must be off, adaptive or a number 1..{MAX_DRAFT}, got {text!r}")

    def __str__(self) -> str:
        return f"k={self.k}" if self.kind == "static" else self.kind


@dataclass(frozen=True)
class Lane:
    """What the policy sees of one running request this step."""

    start: int                 # position of its first fed row
    fixed: int                 # rows it feeds whatever k is: the prompt's rest, or the last token
    cap: int                   # the longest draft it may take
    rates: Sequence[float]     # its acceptance estimate


def goodput(lanes: Sequence[Lane], ks: Sequence[int], cost: CostTable) -> float:
    """Tokens the step is expected to emit per second: ``sum AL_i(k_i)`` over the step's seconds."""
    raise NotImplementedError("serve.goodput (L10.10): not written yet -- "
                              "see course/L10.10.md section 2.3")


def adaptive_ks(lanes: Sequence[Lane], cost: CostTable) -> list[int]:
    """Each request's ``k`` for the highest goodput within the gemms the plain pass runs (section 2.3).

    Draft slots go, likeliest to be accepted first, to requests whose next row still finds room
    in those gemms, while a slot's survival ``s`` pays for its row (``s / extra seconds`` above
    the step's goodput so far). No gemm is added: a draft then never feeds more gemms per
    expected token than plain decoding. A slot whose ``s`` does not beat the plain pass's goodput
    per row it costs never helps, and is not considered.
    """
    raise NotImplementedError("serve.adaptive_ks (L10.10): not written yet -- "
                              "see course/L10.10.md section 2.3")


def choose_ks(policy: Policy, lanes: Sequence[Lane], cost: CostTable | None) -> list[int]:
    """``off``: all 0; ``static``: ``min(k, cap)``; ``adaptive``: :func:`adaptive_ks`."""
    raise NotImplementedError("serve.choose_ks (L10.10): not written yet -- "
                              "see course/L10.10.md section 2.3")


def fed_positions(lanes: Sequence[Lane], ks: Sequence[int]) -> list[int]:
    """The positions a step feeds: each request's fixed rows, then its ``k`` draft rows."""
    return [p for lane, k in zip(lanes, ks) for p in range(lane.start, lane.start + lane.fixed + k)]


def slot_rows(positions: Sequence[int]) -> list[int]:
    """Rows at each gemm slot ``p % 16``."""
    used = [0] * GEMM_ROWS
    for p in positions:
        used[p % GEMM_ROWS] += 1
    return used


def faded(rates: Sequence[float], pooled: Sequence[float], quiet: int) -> list[float]:
    """What the adaptive policy trusts of a request's estimate after ``quiet`` rounds without a
    draft (section 2.3): where it is below the pooled one it moves ``1 - FADE ** quiet`` of the way
    up to it. A low estimate is what stops a request drafting, and then no round corrects it; a
    high one drafts, and its rounds correct it."""
    if quiet == 0:  # nothing to fade (a request that drafted last round)
        return list(rates)
    pull = 1 - FADE ** quiet
    return [a + (p - a) * pull if a < p else a for a, p in zip(rates, pooled)]


def untried(rates: Sequence[float], depth: int) -> list[float]:
    """``rates`` with every position past ``depth``, the deepest its pool has seen a draft reach
    (section 2.3), no likelier than position ``depth``: a position no round has reached still
    holds the prior. ``depth = 0`` (nothing drafted yet) leaves the prior everywhere."""
    if depth == 0 or depth >= len(rates):
        return list(rates)
    return list(rates[:depth]) + [min(a, rates[depth - 1]) for a in rates[depth:]]


def widen(lanes: Sequence[Lane], ks: Sequence[int], cost: CostTable, gemms: int, per_gemm: float) -> list[int]:
    """``ks`` grown into up to ``gemms`` gemms past those their pass runs, one at a time while a
    new gemm is expected to add at least ``per_gemm`` tokens and the wider pass has the higher
    goodput (section 2.3). A new gemm's rows go, likeliest first, to requests whose next draft
    token lands in a slot with room and pays for its row, as in :func:`adaptive_ks`."""
    out = list(ks)
    if gemms < 1:
        return out
    used = slot_rows(fed_positions(lanes, out))
    # goodput, priced as rows are added: each adds its survival to the expected tokens
    tokens, rows = sum(expected_tokens(lane.rates, k) for lane, k in zip(lanes, out)), sum(used)
    best = tokens / cost.step_seconds(max(used), rows, len(lanes), sum(k > 0 for k in out))
    # the draft rows past ks that pay for their row at this goodput, likeliest first, with their
    # slots; best only rises, so a row left out now stays out
    rows_past = []
    for i, lane in enumerate(lanes):
        for m, s in enumerate(survival(lane.rates, lane.cap)[out[i]:], start=out[i] + 1):
            extra = cost.row_seconds + (cost.draft_seconds if m == 1 else 0.0)
            if s <= best * extra:
                break
            rows_past.append((s, i, m, (lane.start + lane.fixed + m - 1) % GEMM_ROWS, extra))
    rows_past.sort(key=lambda c: (-c[0], c[1], c[2]))
    for cap in range(max(used) + 1, max(used) + 1 + gemms):
        trial, room, added = list(out), list(used), 0.0
        for s, i, m, slot, extra in rows_past:
            if trial[i] == m - 1 and room[slot] < cap and s > best * extra:
                room[slot] += 1
                trial[i], added = m, added + s
        fed = rows + sum(trial) - sum(out)
        wider = (tokens + added) / cost.step_seconds(max(room), fed, len(lanes), sum(k > 0 for k in trial))
        if added < per_gemm or wider <= best:
            break
        out, used, best, tokens, rows = trial, room, wider, tokens + added, fed
    return out


def trim(lanes: Sequence[Lane], ks: Sequence[int], cost: CostTable) -> list[int]:
    """``ks`` or fewer draft rows, whichever pass has the highest goodput (section 2.3): one gemm
    fewer at a time, down to the gemms the fixed rows need, each by taking back draft rows, the
    unlikeliest first (the lowest survival of a request's last draft token). Only where the model
    feeds rows alone (``cost.rows_alone``): there the 17th row of a pass opens a gemm wherever it
    sits, which the slot rule of :func:`adaptive_ks` prices as one row."""
    out = list(ks)
    fixed = sum(lane.fixed for lane in lanes)
    if not cost.rows_alone or -(-(fixed + sum(out)) // GEMM_ROWS) == -(-fixed // GEMM_ROWS):
        return out  # no gemm to take back: the fixed rows need every one the pass runs
    # Survival never rises along a draft, so the unlikeliest row left is always some request's last:
    # every draft row, the order they are taken back in (ties: the later request, its later token).
    order = sorted(((s, -i, -m, i) for i, (lane, k) in enumerate(zip(lanes, out))
                    for m, s in enumerate(survival(lane.rates, k), start=1)))
    # goodput, priced as rows are taken back: each takes its survival from the expected tokens, and
    # with rows fed alone the pass's seconds follow from its rows and drafting requests
    tokens, rows = sum(expected_tokens(lane.rates, k) for lane, k in zip(lanes, out)), fixed + sum(out)
    trial, taken = list(out), 0
    best = tokens / cost.step_seconds(0, rows, len(lanes), sum(k > 0 for k in out))
    while True:
        fewer = (-(-rows // GEMM_ROWS) - 1) * GEMM_ROWS  # the rows one gemm fewer holds
        if fewer < fixed or rows == fixed:
            return out
        while rows > fewer:
            s, _, _, i = order[taken]
            trial[i], tokens, rows, taken = trial[i] - 1, tokens - s, rows - 1, taken + 1
        value = tokens / cost.step_seconds(0, rows, len(lanes), sum(k > 0 for k in trial))
        if value > best:
            out, best = list(trial), value


@dataclass
class Bank:
    """Gemms the adaptive policy saved against plain decoding, to spend on wider passes (section 2.3).

    Each pass is settled at the next step: its tokens earn ``BANK_RATE`` times plain decoding's
    gemms per token (``rate``: the gemms the pass's fixed rows need, over its requests, each of
    which plain decoding would give one token) and the gemms it was planned to feed are paid.
    Spending only what is banked keeps gemms per token near plain decoding's (the estimate can run
    above it: section 2.3); the balance stops at ``BANK_LIMIT``, so savings made before the traffic
    changed do not pay for many gemms after."""

    balance: float = 0.0
    rate: float = 0.0
    fed: int = 0
    counted: dict[int, tuple[Generated, int]] = field(default_factory=dict)

    def settled(self) -> float:
        """The balance once the last pass is settled."""
        emitted = sum(len(out.tokens) - seen for out, seen in self.counted.values())
        return min(BANK_LIMIT, self.balance + BANK_RATE * emitted * self.rate - self.fed)

    def settle(self, running: Sequence["Request"]) -> None:
        self.balance = self.settled()
        self.counted = {r.rid: (r.out, len(r.out.tokens)) for r in running}


# --- 2.4 The scheduler -----------------------------------------------------------------------

@dataclass
class Request:
    """One request's state; ``table`` is its own block table in the shared pool."""

    rid: int
    prompt: list[int]
    params: SamplingParams
    seed: int
    max_new: int
    eos: frozenset[int]
    on_token: Callable[[int, float], bool]
    out: Generated = field(default_factory=lambda: Generated([], [], SpecStats()))
    table: list[int] = field(default_factory=list)
    cached: int = 0
    pending: list[int] = field(default_factory=list)
    estimate: Acceptance = field(default_factory=Acceptance)
    rng: object = None
    reserved: int = 0
    quiet: int = 0            # rounds since it last drafted (adaptive policy: see Server._explore)
    matched: dict[tuple[int, str], Acceptance] = field(default_factory=dict)  # its estimates by match (Server._lanes)
    match: tuple[int, str] | None = None  # this step's lookup: its match length and origin (None: no match)
    copied: tuple[int, int, str] | None = None  # its last match: where copied from, its tokens then, its origin
    settled: tuple[int, int] = (0, 0)  # its drafted and accepted counts when Server._settle last read them
    overtaken: int = 0        # requests queued after it that were admitted before it (Server._admit)
    index: MatchIndex = field(default_factory=MatchIndex)  # its context's lookups (Server._lookup)
    looked_at: int = -2       # the server's look it was last looked up at (Server._lookup)
    offered: int = 0          # its prompt's first blocks known indexed (Server._offer_prompt)


@dataclass
class StepReport:
    """What one step fed and emitted: rows, 16-row gemms, tokens emitted, each request's k."""

    rows: int
    blocks: int
    emitted: int
    ks: dict[int, int]
    finished: list[int]


class Server:
    """Continuous batching over one pool (section 2.4).

    ``submit`` queues a request; each ``step`` admits queued requests, placed on the gemm slots
    (:meth:`_admit`), while the batch has room (``max_batch``) and the pool can hold each one's
    whole budget, then runs one forward for every running request. A request that ends (EOS,
    ``max_new``, or its listener says stop) gives back all its blocks in that step and its result
    goes to ``results``. ``place`` (default: where the model sits rows at their slots, not
    ``model.rows_alone``) turns placement on; without it admission goes in arrival order.
    """

    def __init__(self, model: TinyLlama, pool: KvPool, policy: Policy, max_batch: int = 16,
                 cost: CostTable | None = None, drafter: Drafter = lookup_drafter,
                 prefix_cache: bool = False, place: bool | None = None) -> None:
        if policy.kind == "adaptive" and cost is None:
            raise SpecError("the adaptive policy needs a cost table: profile(model)")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise SpecError(f"max_batch must be an integer >= 1, got {max_batch!r}")
        self.model, self.pool, self.policy, self.cost = model, pool, policy, cost
        self.max_batch, self.prefix_cache = max_batch, prefix_cache
        # placing admissions on the slots pays only where a pass runs as many gemms as its fullest slot
        self.place = not model.rows_alone if place is None else place
        # The default drafter reads the lookups this step made first (Server._lookup), so the
        # adaptive policy's look before it chooses k costs no second lookup.
        self.looks_up = drafter is lookup_drafter
        self.drafter: Drafter = self._looked_up_draft if self.looks_up else drafter
        self._looked: dict[int, list[tuple[Sequence[int], tuple[int, list[int], int]]]] = {}
        self.queue: deque[Request] = deque()
        self.running: list[Request] = []
        self.results: dict[int, Generated] = {}
        # every request's rounds, moved POOL_WEIGHT a round: where a new request's estimate starts, and what a
        # quiet one fades to (faded); with a request's own WEIGHT, one request's bad run would be the prior
        self.pooled = Acceptance(weight=POOL_WEIGHT)
        self.pooled_matched = {key: Acceptance(weight=POOL_WEIGHT) for key in MATCH_KEYS}  # the same, by match
        self.matched_rounds = dict.fromkeys(MATCH_KEYS, 0)  # rounds each match's pool has seen (Server._settle)
        self.matched_depth = dict.fromkeys(MATCH_KEYS, 0)  # the deepest position a draft of each match reached (untried)
        self._unsettled: list[Request] = []
        # what a looked-up request's drafts earned a step, net of their rows, against plain decoding
        # (seconds, from the cost table): the mean of the first 1 / LOOK_WEIGHT looks, then moved
        # LOOK_WEIGHT a look; looks_valued counts them (Server._settle)
        self.look_value = 0.0
        self.looks_valued = 0
        self._token_seconds = 0.0  # plain decoding's seconds a token, in the pass the last look priced
        self.aside = False         # this step runs as plain decoding: nothing looked up (Server._lanes)
        self._looks = 0            # the steps _lanes has seen
        self._steps_aside = 0      # steps since the policy last looked while it stands aside (Server._stands_aside)
        self._aside_period = 2     # one step in this many looks again while it stands aside: doubles to EXPLORE
        self._seen: tuple[tuple, tuple[Lane, ...]] = ((), ())  # the last lanes _lanes gave, and the state read at
        self.looked_up = 0  # requests whose draft the adaptive policy looked up this step (Server._lanes)
        self.bank = Bank()
        self._reserved = 0
        self._next_id = 0

    def submit(self, prompt: Sequence[int], params: SamplingParams = SamplingParams(), seed: int = 0,
               max_new: int = 64, eos: Sequence[int] = (),
               on_token: Callable[[int, float], bool] | None = None) -> int:
        """Queue a request; returns its id. The pool must be able to hold its whole budget."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise SpecError("prompt must hold at least one token")
        if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 0:
            raise SpecError(f"max_new must be an integer >= 0, got {max_new!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise SpecError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        need = blocks_for(len(prompt) + max_new, self.pool.block_tokens)
        if need > self.pool.num_blocks:
            raise SpecError(f"{len(prompt)} prompt tokens and max_new {max_new} need {need} blocks; "
                            f"the pool has {self.pool.num_blocks}")
        rid = self._next_id
        self._next_id += 1
        listener = on_token if on_token is not None else (lambda token, logprob: True)
        self.queue.append(Request(rid, prompt, params, seed, max_new, frozenset(int(t) for t in eos), listener,
                                  pending=list(prompt), rng=stream(seed), reserved=need))
        return rid

    def idle(self) -> bool:
        return not self.queue and not self.running

    def run(self) -> dict[int, Generated]:
        """Step until every submitted request has ended; the results by request id."""
        while not self.idle():
            self.step()
        return self.results

    def _admit(self) -> None:
        """Admit while fewer than ``max_batch`` run and the pool can hold the head's budget (a head
        that does not fit waits, and nothing passes it). With ``place``, each admission places a
        request: of the first ``ADMIT_WINDOW`` queued, among those the pool can hold, the one whose
        last token's slot the fewest running requests' last tokens share, the earliest on a tie; a
        head passed over ``ADMIT_WINDOW`` times goes next. Without, the head goes. An admitted
        request's estimate starts from the server's pooled one."""
        raise NotImplementedError("serve.Server._admit (L10.10): not written yet -- "
                                  "see course/L10.10.md section 2.4")

    def _share_prefix(self, req: Request) -> None:
        """Take the indexed full blocks holding the prompt's start; their rows are not fed again
        (batch invariance: the K/V they hold is what this request would write). The last prompt
        token is always fed, for its logits."""
        bt = self.pool.block_tokens
        for i in range((len(req.prompt) - 1) // bt):
            b = self.pool.lookup(req.prompt[:(i + 1) * bt])
            if b is None:
                break
            self.pool.retain(b)
            req.table.append(b)
        req.cached = len(req.table) * bt
        req.pending = req.prompt[req.cached:]

    def _lanes(self) -> list[Lane]:
        """Under the adaptive policy a request drafts from its second round on: its first round
        feeds the prompt, the dearest step it has, and a lookup there has only the prompt
        (a chat template) to match. Until it first drafts, the policy sees the pool as it stands
        (its estimate holds nothing of its own yet, and the copy taken at admission may predate
        a turn of the traffic); after, its estimate :func:`faded` by its quiet rounds.

        With the default drafter the policy first looks each request's draft up
        (:meth:`_lookup`) and reads the estimate of the match it found, its length and origin,
        its own and the pool's (:meth:`_settle`), with ``cap`` the draft's length: one estimate
        for every draft would average drafts that are nearly always right with drafts that are
        nearly always wrong. Positions past the deepest a draft of that match has reached are
        read :func:`untried`: a match whose first drafts were rejected early is not drafted deep
        on the prior. ``off`` and static ``k`` draft as L10.8's loop does."""
        def room(r: Request) -> int:  # the longest draft its budget leaves
            return min(MAX_DRAFT, r.max_new - len(r.out.tokens) - 1)

        self._looked = {}  # a new step: the last one's lookups are for contexts no request has now
        self._looks += 1
        if self.policy.kind != "adaptive":
            if self.policy.kind == "static" and self.looks_up:
                for r in self.running:  # every request with room drafts: its lookup goes through its index
                    if room(r) > 0:
                        self._lookup(r, 0)
            return [Lane(r.cached, len(r.pending), room(r), r.estimate.rates) for r in self.running]
        if not self.looks_up:
            lanes = [Lane(r.cached, len(r.pending), room(r) if r.out.tokens else 0,
                          faded(r.estimate.rates, self.pooled.rates, r.quiet) if r.out.stats.drafted else self.pooled.rates)
                     for r in self.running]
        else:
            self._settle()
            lanes, self.looked_up = [], 0
            self.aside = self._stands_aside()
            fixed = (p for r in self.running for p in range(r.cached, r.cached + len(r.pending)))
            if self.aside or not self._room_for_drafts(used := slot_rows(fixed)):  # aside: no slot counted
                self._seen = (self._state(), tuple(Lane(r.cached, len(r.pending), 0, self.pooled.rates)
                                                   for r in self.running))
                return list(self._seen[1])
            self._token_seconds = self.cost.step_seconds(max(used), sum(used), len(self.running)) / len(self.running)
            read: dict[tuple[int, str], list[float]] = {}  # a match's pooled estimate as lanes read it: one list a step
            for r in self.running:
                cap = room(r) if r.out.tokens else 0
                r.match, draft = self._lookup(r, cap) if cap > 0 else (None, [])
                self.looked_up += cap > 0
                pooled = self.pooled_matched[r.match].rates if r.match else self.pooled.rates
                mine = r.matched.get(r.match)
                depth = self.matched_depth.get(r.match, 0)
                if not mine and r.match not in read:
                    read[r.match] = untried(pooled, depth)
                rates = untried(faded(mine.rates, pooled, r.quiet), depth) if mine else read[r.match]
                lanes.append(Lane(r.cached, len(r.pending), len(draft), rates))
            self._unsettled = list(self.running)
        self._seen = (self._state(), tuple(lanes))  # a copy: what choose_ks does to its list stays there
        return lanes

    def _room_for_drafts(self, used: list[int]) -> bool:
        """Whether this step could feed a draft row at all, ``used`` its fixed rows at each slot:
        some request's first draft row finds its slot with room in the gemms the fixed rows fill
        (:func:`adaptive_ks` and exploration add rows only there), or the bank can pay for a gemm
        more (:func:`widen`). Where neither, every ``k`` is 0 whatever a lookup finds, and none is
        made (16 requests on 16 slots and an empty bank: a busy server's first steps)."""
        return (int(self.bank.settled()) >= 1
                or any(used[(r.cached + len(r.pending)) % GEMM_ROWS] < max(used) for r in self.running))

    def _stands_aside(self) -> bool:
        """Whether this step runs as plain decoding, nothing looked up and nothing chosen (section
        2.3): while a looked-up request's drafts are earning less than the policy's own work on it
        costs (``look_value`` below ``cost.look_seconds``), every step but one in two stands aside,
        and that one (a probe) looks every request up and measures again; each probe after which
        looks still do not pay doubles the period, up to one step in ``EXPLORE``. A verdict
        reached on a few bad rounds, just under the line, then costs a step of plain decoding
        where the traffic is good, not fifteen; traffic whose looks never pay is probed three
        times more in its first thirty steps. Disabled must mean absent: a policy that looked and
        chose ``k = 0`` would still pay for looking."""
        if self.looks_valued * LOOK_WEIGHT < 1 or self.look_value >= self.cost.look_seconds:
            self._steps_aside, self._aside_period = 0, 2  # fewer than fifty looks valued: one bad draft is not the traffic
            return False
        if self._steps_aside == self._aside_period:  # the last step probed, and looks still do not pay
            self._steps_aside, self._aside_period = 0, min(2 * self._aside_period, EXPLORE)
        self._steps_aside += 1
        return self._steps_aside < self._aside_period

    def _lookup(self, r: Request, k: int) -> tuple[tuple[int, str] | None, list[int]]:
        """:func:`lookup_match` on the request's context, through its :class:`MatchIndex`, and
        remembered by that context until the next step: the policy looks a request's draft up
        before it chooses ``k``, and the step's drafter call then finds it. Each server remembers
        its own lookups, and for one step only: servers sharing a process (``bench/load.py`` runs
        one per policy, on the same prompts) never draft from one another's. Returns the match
        (its length and :meth:`_origin`; None where nothing matched) and the draft."""
        ctx = r.prompt + r.out.tokens
        found = self._looked_for(ctx)
        if found is None:
            # building an index costs three or four scans of the context: a look while the policy
            # stands aside (its probe, one step in two up to one in EXPLORE) scans; any other is made again next step
            if self._steps_aside > 0:
                n, draft = lookup_match(ctx, MAX_DRAFT)
                found = (n, draft, copied_from(ctx, n))
            else:
                n, source = r.index.find(ctx)
                found = (n, ctx[source:source + MAX_DRAFT] if n else [], source)
            self._looked.setdefault(len(ctx), []).append((ctx, found))
            r.looked_at = self._looks
        n, draft, source = found
        return ((n, self._origin(r, source)) if n else None), draft[:max(k, 0)]

    def _origin(self, r: Request, source: int) -> str:
        """Where this step's draft is copied from, ``source``, against the request's last match
        (section 2.3): ``first`` (it has had none), ``on`` (the span the last was copied from, as
        far on as the tokens emitted since) or ``moved``. A draft that carries a copy on is another
        bet than one that jumped elsewhere, as a request's first is (an edit's copy of its text)."""
        made, last = len(r.out.tokens), r.copied
        if last is not None and last[1] == made:  # looked up again in the same step
            return last[2]
        origin = "first" if last is None else "on" if source == last[0] + made - last[1] else "moved"
        r.copied = (source, made, origin)
        return origin

    def _looked_for(self, ctx: Sequence[int]) -> tuple[int, list[int], int] | None:
        """This step's lookup of this very context, if one was made. Filed by length and compared
        whole: a tuple of the context as the key, built and hashed at each of three uses, cost
        0.07 ms a step more at B = 16 on the tiny llama."""
        ctx = ctx if isinstance(ctx, list) else list(ctx)  # a drafter may be handed a tuple or an array
        for seen, found in self._looked.get(len(ctx), ()):
            if seen == ctx:
                return found
        return None

    def _looked_up_draft(self, ctx: Sequence[int], k: int) -> list[int]:
        """The default drafter, :func:`lookup_drafter`, through this step's lookups (:meth:`_lookup`);
        a context no request was looked up at is scanned whole."""
        found = self._looked_for(ctx)
        return found[1][:max(k, 0)] if found is not None else lookup_drafter(ctx, k)

    def _state(self) -> tuple[tuple[int, int], ...]:
        """Which requests run and how far each has come: a step changes it for every one."""
        return tuple((r.rid, len(r.out.tokens)) for r in self.running)

    def _settle(self) -> None:
        """The rounds drafted since the last look, each into the estimates of the match its draft
        came from (its length and origin): the request's (started from the pool's for that match,
        where the request has none yet) and the pool's. Read from each request's stats, as the bank is
        settled, so ``step`` and ``_verify`` stay L10.8's round; a request that ended is settled
        too."""
        earned, looked, drafting = 0.0, 0, 0
        for r in self._unsettled:
            drafted, accepted = r.out.stats.drafted - r.settled[0], r.out.stats.accepted - r.settled[1]
            r.settled = (r.out.stats.drafted, r.out.stats.accepted)
            if r.looked_at == self._looks - 1:  # looked up at the last step: what did that earn?
                # its accepted tokens saved plain steps; its draft rows and drafter call cost
                earned += (accepted * self._token_seconds - drafted * self.cost.row_seconds
                           - (drafted > 0) * self.cost.draft_seconds)
                looked, drafting = looked + 1, drafting + (drafted > 0)
            if not drafted or not r.match:
                continue
            if r.match not in r.matched:
                r.matched[r.match] = Acceptance(list(self.pooled_matched[r.match].rates))
            r.matched[r.match].update(drafted, accepted)
            # the prior counts as one round: a match the traffic seldom makes learns from its first rounds
            seen = self.matched_rounds[r.match] = self.matched_rounds[r.match] + 1
            self.matched_depth[r.match] = max(self.matched_depth[r.match], min(accepted + 1, drafted))
            pool = self.pooled_matched[r.match]
            pool.rates = observe(pool.rates, drafted, accepted, max(POOL_WEIGHT, 1 / (seen + 1)))
        if drafting:  # a step that drafted nothing (a full gemm, an empty bank) says nothing of what drafts earn
            for _ in range(looked):
                self.looks_valued += 1
                self.look_value += max(LOOK_WEIGHT, 1 / self.looks_valued) * (earned / looked - self.look_value)

    def drafter_calls(self, report: StepReport) -> int:
        """The lookups the step made: one per request that drafted, and where the adaptive policy
        looked drafts up first (:meth:`_lanes`), one per request it looked up."""
        drafted = sum(k > 0 for k in report.ks.values())
        return max(drafted, self.looked_up) if self.policy.kind == "adaptive" else drafted

    def _explore(self, ks: list[int]) -> list[int]:
        """The adaptive policy's moves past :func:`adaptive_ks` (section 2.3); other policies'
        ``ks`` pass unchanged.

        Exploration: a request that has not drafted for ``EXPLORE`` rounds drafts one token if
        that row's slot is free in the gemms the pass runs anyway (and, where rows are fed alone,
        those gemms have a row to spare). Its estimate learns only from what it drafts; the cost is
        at most one row in ``EXPLORE`` rounds, never a gemm.

        Following the pool: a request drafting for the first time had its ``k`` read from the pool
        as it stands (:meth:`_lanes`), so its estimate restarts there; its rounds then move it.

        The bank: ``adaptive_ks`` never adds a gemm, so its drafts save gemms against plain
        decoding. Those savings (:class:`Bank`) pay for whole gemms more, :func:`widen`, while a
        wider pass has the higher goodput. A full bank keeps nothing a step saves: then, where no
        gemm was opened, one banked gemm goes to the wider pass with the higher goodput, however
        few tokens it adds. Last, :func:`trim` takes back rows that open a gemm
        without paying for it, where rows are fed alone. A step that stands aside
        (:meth:`_stands_aside`) is plain decoding's: all zeros, and the bank starts afresh after it."""
        if self.policy.kind != "adaptive":
            return ks
        # the lanes k was chosen from, where the step asked for them (a second look costs the lookups again)
        lanes = list(self._seen[1]) if self._seen[0] == self._state() else self._lanes()
        if self.aside:  # plain decoding's step: no draft, no bank; the next look starts the bank afresh
            self.bank.counted, self.bank.fed = {}, 0
            return [0] * len(lanes)
        used = slot_rows(fed_positions(lanes, ks))
        paid = max(used)
        # rows fed alone: a row is free only while the paid gemms have room (the 17th opens one)
        spare = GEMM_ROWS * self.cost.gemms(paid, sum(used)) - sum(used) if self.cost.rows_alone else len(lanes)
        out = list(ks)
        for i, (r, lane) in enumerate(zip(self.running, lanes)):
            r.quiet = 0 if out[i] else r.quiet + 1
            slot = (lane.start + lane.fixed) % GEMM_ROWS
            if r.quiet >= EXPLORE and lane.cap > 0 and used[slot] < paid and spare > 0:
                used[slot] += 1
                spare -= 1
                out[i], r.quiet = 1, 0
        self.bank.settle(self.running)
        self.bank.rate = gemm_blocks(fed_positions(lanes, [0] * len(lanes))) / len(lanes)
        out = widen(lanes, out, self.cost, max(0, int(self.bank.balance)), 1 / (BANK_RATE * self.bank.rate))
        if self.bank.balance >= BANK_LIMIT and gemm_blocks(fed_positions(lanes, out)) == paid:
            # a full bank keeps none of what this step saves: one banked gemm goes where goodput alone says
            out = widen(lanes, out, self.cost, 1, 0.0)
        out = trim(lanes, out, self.cost)
        for r, k in zip(self.running, out):
            r.quiet = 0 if k else r.quiet
            if k and not r.out.stats.drafted:  # its first draft: the estimate restarts where its k was read
                r.estimate = Acceptance(list(self.pooled.rates))
        self.bank.fed = gemm_blocks(fed_positions(lanes, out))
        return out

    def step(self) -> StepReport:
        """Admit, choose each k, draft, one forward for all, then verify and roll back each request."""
        raise NotImplementedError("serve.Server.step (L10.10): not written yet -- "
                                  "see course/L10.10.md section 2.4")

    def _verify(self, r: Request, draft: list[int], rows: np.ndarray) -> int:
        """L10.8's round on this request's rows alone; returns the tokens it emitted."""
        raise NotImplementedError("serve.Server._verify (L10.10): not written yet -- "
                                  "see course/L10.10.md section 2.4")

    def _set_fills(self, r: Request, end: int) -> None:
        bt = self.pool.block_tokens
        for i in range(r.cached // bt, len(r.table)):
            self.pool.set_fill(r.table[i], min(bt, end - i * bt))

    def _offer_prompt(self, r: Request) -> None:
        """Index the prompt's full blocks once their K/V is written, for later requests to share."""
        bt = self.pool.block_tokens
        written = min(r.cached, len(r.prompt)) // bt
        for i in range(r.offered, written):  # those before r.offered were indexed at an earlier step
            if not self.pool.is_registered(r.table[i]):
                self.pool.register(r.prompt[:(i + 1) * bt], r.table[i])
        r.offered = max(r.offered, written)

    def _finish(self, r: Request) -> None:
        """Give back every block (one reference each) and the budget; publish the result."""
        raise NotImplementedError("serve.Server._finish (L10.10): not written yet -- "
                                  "see course/L10.10.md section 2.4")
