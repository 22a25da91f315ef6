"""Speculation under load: tokens/s of many requests served together, by policy and concurrency.

Closed loop at concurrency B: ``tinyllm.serve.Server`` runs at most B requests at once, admitting
the next queued request as one ends (``--quick``: B in 1, 4, 16; else 1, 2, 4, 8, 16, 32).
Workloads: code-edit (continue or edit a given function: prompt lookup is accepted often), prose
(free text: rarely), and a traffic shift (B code-edit requests, then prose requests, each with
half the output budget); ``--quick`` runs code-edit and the shift (whose second half is prose).
A cell runs until each policy has emitted the tokens of ``waves`` x B requests (at least four),
with a queue long enough that B requests run all that time; the requests still running are then
cancelled (a drain is not concurrency B). Nor is a cold start: in the code-edit and prose cells
nothing counts until B / 4 requests (at least one) have ended, and those are left out, so each
server's pooled acceptance estimate has seen the traffic, as a running server's has (the shift
starts cold on code-edit: its measure is the turn to prose). Output budgets vary from half to one and a half times
``max_new`` (real answers vary; equal budgets would keep plain decoding's requests in lockstep).
Policies: plain batched decoding (``off``), static k in 2, 4, 8, 15, and ``adaptive`` (the goodput
rule on a cost table profiled at start at the cells' context, ``tinyllm.serve.profile``), and a
negative control: ``control``, a second plain server in every cell, whose ratio to the first is
the run's own noise between like servers (the two do the same work; a ratio within that spread
of a bound does not settle it; a ratio between two policies swings more, so the crossover cells
print their repeats' range). Every request's prompt ends with a few filler words so that requests start at
different gemm slots (``p % 16``; the fillers reach 14 of the 16); every prompt's full blocks are
computed once and pinned in the prefix index, so a request feeds only the last block of its prompt.

Per cell: tokens/s (the median over repeats; each ratio is the median of the ratios measured in
one repeat) in CPU seconds of this process (one thread: on a core of its own that is wall-clock
time; on a shared machine it leaves out the time other processes held the core, which wall-clock
tokens/s, also printed, does not). The policies of a cell run side by side, one server each,
their steps taken in turn, so a busy spell of the machine slows them alike. Also 16-row gemms fed
per emitted token (deterministic), acceptance, tokens per pass, per-token latency (a request's
CPU time from first to last token over its tokens, the median over requests), and the step time
measured against the cost table's (how honest the table the policy reads is). Greedy output of a
request must be the same in every cell it runs in (alone at B = 1 included, a shorter output a
prefix of a longer); the script exits with status 1 if it is not.
It prints the cost table (with its fit's largest error over the profiled passes), the crossover
the table predicts for each static k (the first B where ``AL(k) * T(plain) / T(k)`` falls below 1;
AL and the tokens drafted per pass from that k's run of the cell, the gemms those of the cell's
first B requests' slots) beside the measured one, for the k the summary line names its ratio to
plain at each B, predicted beside measured, and, what decides it once B is large, the request
cost in rows under which that k is slower than plain decoding (from the B = 1 run) beside the
table's; the static k below plain on each workload, as the same rule predicts and as measured
(where acceptance is low speculation costs sooner: the tiny llama's k=15 keeps ahead of plain on
code-edit at B = 16 and falls behind on the shift); adaptive against the
fastest static k that feeds no more gemms per token than plain (the bound adaptive keeps; the cells
where no static k keeps it are named); where adaptive fed more gemms per emitted token than plain,
each such cell with both figures; writes ``load.json`` and ``load.png`` to ``--out``, and ends
with one line:

    load: static k=K below plain from B=X (worst W.WWx); adaptive vs plain min M.MMx over B, B=1 S.SSx; adaptive vs best static min R.RRx; blocks per token adaptive <= plain: yes|no

K and X: the static k that falls below plain at the smallest B on code-edit (the largest such k;
when none does, the one that comes closest, and X = none); W its lowest ratio; M the lowest adaptive/plain over every B and workload; S adaptive/plain at
B = 1 on code-edit; R the lowest adaptive / best static at any B and workload (the static k with the
most tokens/s in that cell; the ratio, as every ratio here, the median of the two's in one repeat).

    python bench/load.py --quick                    # the trained tiny llama
    python bench/load.py --quick --model smollm2    # SmolLM2-135M-Instruct (CI)
    python bench/load.py --quick --model smollm2 --preamble 1024    # the same at a long context

``--cost FILE`` reads the cost table from a ``load.json`` this script wrote (its ``cost``) instead
of profiling one; ``--priced`` then prices every cell's steps by that table instead of timing
them, in one repeat. The servers, their decisions and the tokens are the same as in a timed run,
and the figures are the same on any machine: two policies, or two versions of one, compare
without the machine's noise. (Tokens/s, step times and the summary line are then the
table's; latency is still measured.)

    python bench/load.py --quick --model smollm2 --cost bench/cost_tables/smollm2_quick.json --priced

``--slots random`` draws each request's starting slot at random (seeded) instead of spreading the
queue over the slots, as traffic whose prompts vary in length sits. Where every row sits at its
slot of 16-row gemms the server places the requests it admits either way
(``tinyllm.serve.Server._admit``: of the first 16 queued, the one whose last token's slot the
fewest running requests share), so plain decoding and speculation alike start each request where
it adds the fewest gemms it can; a speculating request then moves by the tokens it accepts.

``--preamble N`` opens every prompt with the same N tokens (a long system prompt, or a document
the requests all ask about), whose blocks the pool holds once: each request then reads N more
positions of K/V a pass. The line after the cost table sets that K/V beside the weights a pass
reads (:func:`kv_over_weights`); where it is large, as on the tiny llama or at a long context
(MagicDec, arXiv 2408.11049), a request is dear beside a row and the rows a draft adds stay cheap
as B grows, so the crossover moves to a larger B or goes (``bench/README.md``).

``--slot-seed N`` shuffles (or draws) the slots with another seed: the same traffic in another
order. A speculating server's requests then meet on other slots, and one cell's figures move by
more than the run's noise (``bench/load_notebook.md``, "One run is one draw"): a figure near a bound is
read over several seeds.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread: steadier timings on a shared box

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(ROOT / "bench"))

from tinyllm.sampling import SamplingParams  # noqa: E402
from tinyllm.model import GEMM_ROWS  # noqa: E402
from tinyllm.serve import CostTable, Policy, Server, gemm_blocks, profile  # noqa: E402
from tinyllm.smollm2 import RealModelMissing  # noqa: E402
from display import blas, blas_text, finish_figure, out_folder, print_table  # noqa: E402

BLOCK_TOKENS = 16
MIN_REQUESTS = 4
SLOT_SEED = 16
LENGTHS = (1.0, 0.5, 1.5, 0.75, 1.25)  # output budgets over max_new: mean 1
STATIC = (2, 4, 8, 15)
POLICIES = [Policy("off")] + [Policy("static", k) for k in STATIC] + [Policy("adaptive")]
CONTROL = "control"  # a second plain server in every cell: its ratio to the first is the run's own noise
SERVERS = [(str(p), p) for p in POLICIES] + [(CONTROL, Policy("off"))]  # each cell's servers, by label
FILLER = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar "
          "papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


@dataclass
class Workloads:
    """Each workload's request prompts (token ids), the EOS ids, the output budget, and how many
    tokens every prompt opens with alike (``--preamble``: kept once in the pool)."""

    prompts: dict[str, list[list[int]]]
    eos: list[int]
    max_new: int
    shared: int = 0


def preamble_text() -> str:
    """What a shared preamble is cut from: ``fixtures/model/held_out.txt`` (a Python module none of
    the workloads' answers copies from), said twice, as a file the requests all carry."""
    text = (ROOT / "fixtures" / "model" / "held_out.txt").read_text()
    return text + "\n" + text


def shared_prefix(prompts: dict[str, list[list[int]]]) -> int:
    """The tokens every prompt of every workload opens with."""
    every = [p for ps in prompts.values() for p in ps]
    return len(os.path.commonprefix(every))


def spread(make, count: int, slots_drawn: str = "spread", seed: int = SLOT_SEED) -> list[list[int]]:
    """``count`` prompts ``make(n)`` (n filler words), each starting its output at another of the
    gemm slots some n reaches, in an order shuffled once (seeded), and round again: requests of a
    queue do not start in step, nor on slots that follow their order in the queue (then requests
    admitted one step apart would meet on one slot). The 27 fillers reach 14 of the 16 slots on
    both models' workloads: four requests sit on four slots, sixteen share two, and the first 16
    queued, which the server places its admissions among, hold every slot the fillers reach.
    ``slots_drawn="random"`` draws each prompt's slot at random among those (seeded) instead, as
    traffic whose prompts vary in length sits. ``seed`` seeds the shuffle or the draws."""
    by_slot: dict[int, list[int]] = {}
    for n in range(len(FILLER) + 1):
        ids = make(n)
        by_slot.setdefault(len(ids) % BLOCK_TOKENS, ids)
    slots = sorted(by_slot)
    rng = random.Random(seed)
    if slots_drawn == "random":
        return [by_slot[rng.choice(slots)] for _ in range(count)]
    rng.shuffle(slots)
    return [by_slot[slots[i % len(slots)]] for i in range(count)]


def tiny_workloads(count: int, max_new: int, slots_drawn: str = "spread", seed: int = SLOT_SEED,
                   preamble: int = 0):
    """The tiny llama's workloads; ``preamble``: every prompt opens with that many bytes (its
    tokens) of :func:`preamble_text`, the last a newline."""
    from speculation import WORKLOADS

    from tinyllm.model import TinyLlama

    model = TinyLlama.load(ROOT / "fixtures" / "model" / "tiny_llama.npz")
    source = preamble_text().encode()
    if preamble > len(source):
        raise ValueError(f"--preamble {preamble}: the preamble text holds {len(source)} tokens of the tiny llama")
    opening = (source[:preamble - 1] + b"\n") if preamble else b""

    def make(text):
        return lambda n: list(opening + (" ".join(FILLER[:n]) + "\n" if n else "").encode() + text.encode())

    prompts = {"code-edit": spread(make(WORKLOADS["code"][0]), count, slots_drawn, seed),
               "prose": spread(make(WORKLOADS["prose"][0]), count, slots_drawn, seed)}
    return model, Workloads(prompts, [], max_new, shared_prefix(prompts) if preamble else 0)


def smollm2_workloads(count: int, max_new: int, slots_drawn: str = "spread", seed: int = SLOT_SEED,
                      preamble: int = 0):
    """SmolLM2's workloads; ``preamble``: the system turn (the workload's own, or the default one)
    opens with about that many tokens of :func:`preamble_text`."""
    from smollm2_speculation import WORKLOADS

    from tinyllm import smollm2

    m = smollm2.load()
    source = m.encode(preamble_text())
    if preamble > len(source):
        raise ValueError(f"--preamble {preamble}: the preamble text holds {len(source)} tokens of SmolLM2")
    notes = m.decode(source[:preamble]) if preamble else ""

    def opened(messages):
        # the notes open the system turn, so that every workload's prompts share them
        if not notes:
            return messages
        system, rest = ((messages[0]["content"], messages[1:]) if messages[0]["role"] == "system"
                        else (smollm2.DEFAULT_SYSTEM, messages))
        return [{"role": "system", "content": "A file for reference:\n" + notes + "\n\n" + system}] + rest

    def make(messages):
        def with_filler(n):
            last = dict(messages[-1])
            if n:
                last["content"] += " (ref: " + " ".join(FILLER[:n]) + ")"
            return m.chat(opened(messages[:-1] + [last]))
        return with_filler

    prompts = {"code-edit": spread(make(WORKLOADS["code-edit"][0]), count, slots_drawn, seed),
               "prose": spread(make(WORKLOADS["chat"][0]), count, slots_drawn, seed)}
    return m.model, Workloads(prompts, [m.eos], max_new, shared_prefix(prompts) if preamble else 0)


def budget(max_new: int, i: int) -> int:
    """The i-th request's output budget: ``max_new`` on average, from half to one and a half
    times it, as answers in real traffic vary. With equal budgets plain decoding's requests would
    start and end in lockstep, on slots that never meet, which a server never sees."""
    return max(1, round(max_new * LENGTHS[i % len(LENGTHS)]))


@dataclass
class Cell:
    tokens: dict[tuple, list[int]]  # prompt -> greedy output
    seconds: float                # CPU seconds of this process, the cell's own steps
    wall: float
    emitted: int                  # tokens, blocks and steps until the cell's target
    blocks: int
    steps: int
    predicted: float              # the cost table's seconds for those steps
    produced: int                 # every token of every request (the drain too)
    drafted: int
    accepted: int
    passes: int
    latency: float                # median over requests of seconds per token after the first


def warm_pool(model, work: Workloads, batch: int):
    """One pool for the whole run, every prompt's full blocks computed once and pinned (one extra
    reference each), as a server keeps popular prefixes cached: a request then feeds only the
    last, partial block of its prompt, and no cell pays for a cold cache. Each workload's first
    prompt goes first, so the others share its blocks; the rest are computed in one batch."""
    prompts = list({tuple(p): p for ps in work.prompts.values() for p in ps}.values())
    shared = work.shared // BLOCK_TOKENS  # full blocks every prompt opens with: in the pool once
    per_request = -(-(max(len(p) for p in prompts) - shared * BLOCK_TOKENS + work.max_new) // BLOCK_TOKENS)
    pinned = shared + sum(len(p) // BLOCK_TOKENS - shared for p in prompts)
    pool = model.new_pool(pinned + (len(SERVERS) * batch + len(prompts)) * per_request, BLOCK_TOKENS)
    firsts = [ps[0] for ps in work.prompts.values()]
    for wave in (firsts, [p for p in prompts if p not in firsts]):
        server = Server(model, pool, Policy("off"), max_batch=max(1, len(wave)), prefix_cache=True)
        for prompt in wave:
            server.submit(prompt, max_new=2)
        server.step()
        for r in server.running:
            for b in r.table:
                if pool.is_registered(b):
                    pool.retain(b)
        server.run()
    return pool


class Run:
    """One policy's server in a cell, with its own clock: CPU seconds of its own steps only.
    Nothing is counted until ``warm`` requests have ended, whichever they are (the pooled
    estimate has then seen the traffic, as a running server's has); those requests are left out
    of the cell's figures. Waiting for given requests instead could outlast the queue: a request
    the policy seldom drafts for takes a step a token while the others run through it."""

    def __init__(self, model, pool, cost: CostTable, label: str, policy: Policy, prompts: list[list[int]],
                 batch: int, max_new: int, eos: list[int], warm: int = 0) -> None:
        self.label, self.policy, self.batch, self.warm = label, policy, batch, warm
        self.counting = warm == 0
        self.warmed: set[int] = set()
        self.server = Server(model, pool, policy, max_batch=batch, cost=cost, prefix_cache=True)
        self.clock = self.began = 0.0
        self.stamps: dict[int, list[float]] = {}
        for i, prompt in enumerate(prompts):
            self.stamps[i] = []
            self.server.submit(prompt, SamplingParams(), seed=i, max_new=budget(max_new, i), eos=eos,
                               on_token=lambda token, logprob, s=self.stamps[i]: s.append(self.now()) or True)
        self.seconds = self.wall = self.predicted = 0.0
        self.blocks = self.emitted = self.steps = self.looked = 0

    def now(self) -> float:
        return self.clock + time.process_time() - self.began

    def step(self, cost: CostTable) -> None:
        wall, self.began = time.perf_counter(), time.process_time()
        report = self.server.step()
        spent = time.process_time() - self.began
        self.clock += spent
        if not self.counting:
            self.counting = len(self.server.results) >= self.warm
            self.warmed = set(self.server.results)
            return
        self.seconds += spent
        self.wall += time.perf_counter() - wall
        self.blocks += report.blocks
        self.emitted += report.emitted
        self.steps += 1
        # the adaptive policy's own work, its lookups among it, is the table's look_seconds a request
        # it looked up (profile's policy_seconds); a table without it prices the lookups as drafter calls
        looked = self.server.looked_up if cost.look_seconds else 0
        self.looked += looked
        self.predicted += (cost.step_seconds(report.blocks, report.rows, len(report.ks),
                                             self.server.drafter_calls(report) - looked)
                           + looked * cost.look_seconds)

    def cell(self, prompts: list[list[int]]) -> Cell:
        every = self.server.results
        results = {i: out for i, out in every.items() if i not in self.warmed}
        latency = statistics.median((s[-1] - s[0]) / (len(s) - 1) for i, s in self.stamps.items()
                                    if len(s) > 1 and i not in self.warmed)
        return Cell({tuple(prompts[i]): every[i].tokens for i in every}, self.seconds, self.wall, self.emitted,
                    self.blocks, self.steps, self.predicted, sum(len(r.tokens) for r in results.values()),
                    sum(r.stats.drafted for r in results.values()), sum(r.stats.accepted for r in results.values()),
                    sum(r.stats.target_calls for r in results.values()), latency)


def run_cells(model, pool, cost: CostTable, policies: list[tuple[str, Policy]], prompts: list[list[int]],
              batch: int, max_new: int, eos: list[int], target: int, warm: int = 0, seed: int = 0) -> dict[str, Cell]:
    """Serve the queue ``prompts`` at concurrency ``batch`` under every (label, policy), one server
    each, their steps taken in turn, in an order drawn each round from ``seed`` (a busy spell of
    the machine slows every policy alike, and none always steps after the same one),
    each until it has emitted ``target`` tokens: the queue is long enough that B requests run
    all that time, the closed loop at concurrency B. The requests still running then are
    cancelled (their blocks given back; their output so far is checked like the rest): a drain,
    fewer than B requests left, is no longer concurrency B."""
    free = pool.num_free()
    runs = [Run(model, pool, cost, label, policy, prompts, batch, max_new, eos, warm) for label, policy in policies]
    # A step runs slower after a heavy one (k = 15's evicts what the next server keeps in the
    # cache): an adaptive server stepping after k = 15 ran 1%-2.5% slower than its twin stepping
    # after plain decoding. In a fixed order one policy would always pay that, so the order is
    # drawn afresh each round (seeded).
    draw = random.Random(seed)
    while any(run.emitted < target for run in runs):
        for run in draw.sample(runs, len(runs)):
            if run.emitted < target:
                if run.server.idle():
                    raise SystemExit(f"FAIL: the queue ran dry before {target} tokens ({run.policy}, B={batch})")
                run.step(cost)
    for run in runs:
        run.server.queue.clear()
        for r in list(run.server.running):
            run.server.running.remove(r)
            run.server._finish(r)
    if pool.num_free() != free:
        raise SystemExit(f"FAIL: {free - pool.num_free()} blocks leaked (B={batch})")
    return {run.label: run.cell(prompts) for run in runs}


def cell_traffic(work: Workloads, name: str, b: int, waves: int) -> tuple[list[list[int]], int, int, int]:
    """Workload ``name``'s cell at concurrency ``b``: its queue of prompts, output budget, the tokens
    each policy emits before the cell ends (``waves`` x B requests' worth, at least four
    requests'), and the requests that end before it counts (B / 4, at least one; none on the
    shift). The queue is long enough that B requests run all that time; the shift's starts with
    B code-edit prompts (at least two), then prose, each with half the output budget."""
    code, prose = work.prompts["code-edit"], work.prompts["prose"]
    warm, count, shifted = max(1, b // 4), max(b * waves, MIN_REQUESTS), max(b, MIN_REQUESTS // 2)

    def queue(prompts: list[list[int]], n: int) -> list[list[int]]:
        return [prompts[i % len(prompts)] for i in range(n)]

    if name == "shift":
        return (code[:shifted] + queue(prose[shifted:] + prose[:shifted], 4 * shifted + b),
                work.max_new // 2, shifted * work.max_new, 0)
    return queue(work.prompts[name], warm + 3 * count + b), work.max_new, count * work.max_new, warm


def kv_over_weights(config, context: int) -> float:
    """The K/V one request reads in a pass at ``context`` positions, over the weights every pass
    reads (the embedding's rows aside, unless it is the output head too), both in values. Where it
    is large (a narrow model, a long context: MagicDec's regime) a request's attention is dear
    beside a row's weight work, and the rows speculation adds stay cheap as B grows."""
    kv = context * config.n_layers * 2 * config.n_kv_heads * config.head_dim
    weights = sum(math.prod(shape) for name, shape in config.shapes().items() if name != "tok_emb" or config.tied)
    return kv / weights


def cells_context(work: Workloads, workloads: list[str]) -> int:
    """The context the cells run at, where the cost table is profiled (a request's attention grows
    with it): each workload's prompts' mean length plus half its output budget, the shift's half
    code-edit's and half prose's with half the budget, averaged over the workloads run."""
    def mean_length(name: str) -> float:
        return statistics.mean(len(p) for p in work.prompts[name])

    def context(name: str) -> float:
        if name == "shift":
            return (mean_length("code-edit") + mean_length("prose")) / 2 + work.max_new / 4
        return mean_length(name) + work.max_new / 2
    return round(statistics.mean(context(name) for name in workloads))


def measure(model, cost: CostTable, work: Workloads, batches: list[int], workloads: list[str], waves: int,
            repeats: int):
    """Every (workload, B, policy) cell (:func:`cell_traffic`), ``repeats`` times, the policies'
    steps interleaved (:func:`run_cells`, its order seeded by the repeat). Before a
    code-edit or prose cell counts, B / 4 of its requests (at least one) end on each server, so
    that the cell measures a server that has been serving that traffic, not one whose pooled
    estimate still stands at the prior. The shift is not warmed: its measure is the turn from
    code-edit, which a warm-up would run before the count began; its code-edit start is where the
    prior is close."""
    pool = warm_pool(model, work, max(batches))
    cells: dict[tuple, list[Cell]] = {}
    for rep in range(repeats):
        for b in batches:
            for name in workloads:
                prompts, max_new, target, warm = cell_traffic(work, name, b, waves)
                ran = run_cells(model, pool, cost, SERVERS, prompts, b, max_new, work.eos, target, warm, seed=rep)
                for label, _ in SERVERS:
                    cells.setdefault((name, b, label), []).append(ran[label])
    return cells


def greedy_mismatches(cells: dict[tuple, list[Cell]]) -> list[str]:
    """A prompt must give one output in every cell it ran in (the shorter of two budgets' outputs a
    prefix of the longer)."""
    seen: dict[tuple, tuple[list[int], tuple]] = {}
    bad = []
    for where, runs in cells.items():
        for cell in runs:
            for prompt, tokens in cell.tokens.items():
                first = seen.setdefault(prompt, (tokens, where))
                n = min(len(first[0]), len(tokens))
                if first[0][:n] != tokens[:n]:
                    bad.append(f"a prompt of {len(prompt)} tokens: {where} differs from {first[1]}")
    return bad


def table(cells: dict[tuple, list[Cell]], batches: list[int]) -> list[dict]:
    rows = []
    for (name, b, policy), runs in cells.items():
        plain = cells[(name, b, "off")]
        first = runs[0]
        ratios = [(c.emitted / c.seconds) / (p.emitted / p.seconds) for c, p in zip(runs, plain)]
        rows.append({
            "workload": name, "B": b, "policy": policy,
            "tokens_per_s": statistics.median(c.emitted / c.seconds for c in runs),
            "tokens_per_s_repeats": [c.emitted / c.seconds for c in runs],
            "wall_tokens_per_s": statistics.median(c.emitted / c.wall for c in runs),
            "vs_plain": statistics.median(ratios), "vs_plain_repeats": ratios,
            "blocks_per_token": first.blocks / first.emitted,
            "acceptance": first.accepted / first.drafted if first.drafted else 0.0,
            "tokens_per_pass": first.produced / first.passes,
            "drafted_per_pass": first.drafted / first.passes,
            "latency_ms": statistics.median(c.latency for c in runs) * 1e3,
            "step_ms": statistics.median(c.seconds / c.steps for c in runs) * 1e3,
            "measured_over_predicted": statistics.median(c.seconds / c.predicted for c in runs),
        })
    return rows


def first_passes(rows: list[dict], batches: list[int], k: int, name: str = "code-edit") -> tuple[float, float]:
    """Static ``k`` on workload ``name`` at the smallest B: tokens emitted and tokens drafted per pass."""
    first = next(r for r in rows if r["workload"] == name and r["B"] == batches[0] and r["policy"] == f"k={k}")
    return first["tokens_per_pass"], first["drafted_per_pass"]


def full_row(cost: CostTable) -> float:
    """A row's seconds in a large pass: its own, plus its share of a full gemm (the table's further
    gemm over 16 rows)."""
    return cost.row_seconds + (cost.blocks(2) - cost.blocks(1)) / GEMM_ROWS


def request_in_rows(cost: CostTable) -> float | None:
    """A request's share of a step, in rows: what the crossover turns on once B is large. None
    where the table prices no row."""
    return cost.request_seconds / full_row(cost) if full_row(cost) > 0 else None


def break_even_rows(cost: CostTable, al: float, d: float) -> float | None:
    """The request cost, in rows, under which a static k that emits ``al`` tokens a pass and drafts
    ``d`` is slower than plain decoding once B is large (the first gemm's premium over a further one
    shared by many). Per request, plain pays ``R + r`` a token and the static k
    ``(R + (1 + d) r + D) / al``, ``D`` its drafter call, so it is slower where
    ``R < (r (1 + d - al) + D) / (al - 1)``. None where there is no such bound: ``al <= 1`` (slower
    whatever a request costs) or a table that prices no row."""
    if al <= 1.0 or full_row(cost) <= 0:
        return None
    return (1 + d - al + cost.draft_seconds / full_row(cost)) / (al - 1)


def turning_text(cost: CostTable, below: float | None) -> str:
    """The large-B rule for one static k, for people: its bound in rows (``break_even_rows``)
    beside the table's request."""
    if full_row(cost) <= 0:
        return "this table prices no row, so the rule in rows does not apply"
    if below is None:
        return "as B grows, below plain whatever a request costs"
    return (f"as B grows, below plain where a request costs under {below:.1f} rows "
            f"(this table's: {request_in_rows(cost):.1f})")


def predicted_ratios(cost: CostTable, rows: list[dict], starts: dict[int, list[int]], batches: list[int],
                     k: int, name: str = "code-edit") -> dict[int, float]:
    """Static ``k`` against plain decoding on workload ``name`` at each B, as the table predicts it:
    ``AL(k) * T(plain) / T(k)``. From the cell's own run of that k: AL(k), the tokens per pass, and
    d, the tokens drafted per pass (a static k drafts fewer than k when the lookup finds a shorter
    match or the output's end is near). A static k drafts the same for a request at every B, but
    each B's cell serves its own requests, with their own budgets, cut at its own end: SmolLM2's
    quick code-edit at k=15 kept 3.56 tokens a pass at B = 1 and 3.17 at B = 4, enough to move its
    predicted turn from B = 16 to B = 4, where five of six quick runs on 5 Dec measured it
    (0.92x-0.97x; 1.01x in the sixth, the noise's width).
    Then a decoding step of the cell's first B requests (``starts[B]``: the position of each one's
    first output token) feeds 1 row each, or 1 + d, in the gemms their slots give, priced by the
    cost table: the table is what is predicted from, the tokens are measured."""
    out = {}
    for b in batches:
        mine = cell_row(rows, name, b, f"k={k}")
        al, d = mine["tokens_per_pass"], mine["drafted_per_pass"]
        first = starts[b]
        plain = cost.step_seconds(gemm_blocks(first), b, b)
        fed = [p + j for p in first for j in range(1 + round(d))]
        out[b] = al * plain / cost.step_seconds(gemm_blocks(fed), b * (1 + d), b, b)
    return out


def predicted_crossover(cost: CostTable, rows: list[dict], starts: dict[int, list[int]], batches: list[int],
                        name: str = "code-edit") -> dict[int, int | None]:
    """Per static k: the first B where :func:`predicted_ratios` falls below 1 on workload ``name``."""
    out = {}
    for k in STATIC:
        ratios = predicted_ratios(cost, rows, starts, batches, k, name)
        out[k] = next((b for b in batches if ratios[b] < 1.0), None)
    return out


def ratios_text(k: int, name: str, predicted: dict[int, float], rows: list[dict]) -> str:
    """Static ``k`` against plain on workload ``name`` at each B, predicted beside measured (with
    the repeats' range where there are several), for people: where the two sit near 1 the
    crossover is a draw of the run, not of the rule. The range is the noise that matters here: a
    ratio between two policies swings from repeat to repeat far more than the control's (the
    tiny llama's k = 15 on code-edit at B = 16: 0.88x-1.14x over ten repeats, where the control
    stays within 1%; ``load_notebook.md``, "Two policies' ratio, repeat by repeat")."""
    def measured(b: int) -> str:
        row = cell_row(rows, name, b, f"k={k}")
        repeats = row.get("vs_plain_repeats", [])
        spread = f" ({min(repeats):.2f}x-{max(repeats):.2f}x over {len(repeats)} repeats)" if len(repeats) > 1 else ""
        return f"{row['vs_plain']:.2f}x{spread}"
    return (f"static k={k} on {name} against plain, predicted / measured: " + ", ".join(
        f"B={b} {ratio:.2f}x / {measured(b)}" for b, ratio in predicted.items()))


def crossover_text(name: str, predicted: dict[int, int | None], measured: dict[str, tuple[int, float]]) -> str:
    """One workload's static k below plain, as the table predicts and as measured, for people:
    each k either names, the first B of each and the lowest measured ratio."""
    said = []
    for k in STATIC:
        b, worst = measured.get(str(k), (None, None))
        if predicted[k] is None and b is None:
            continue
        said.append(f"k={k} predicted from B={predicted[k] or 'none'}, measured from B={b or 'none'}"
                    + (f" ({worst:.2f}x)" if worst is not None else ""))
    return f"{name} " + (", ".join(said) or "none")


def cell_row(rows: list[dict], name: str, b: int, policy: str) -> dict:
    """The table's row of one cell: workload ``name`` at concurrency ``b`` under ``policy``."""
    return next(r for r in rows if r["workload"] == name and r["B"] == b and r["policy"] == policy)


def falls_below(rows: list[dict], batches: list[int], name: str) -> dict[int, tuple[int, float]]:
    """Each static k measured below plain decoding somewhere on workload ``name``: the first B
    where it is, and its lowest ratio over B."""
    out = {}
    for k in STATIC:
        ratios = [cell_row(rows, name, b, f"k={k}")["vs_plain"] for b in batches]
        falls = [b for b, r in zip(batches, ratios) if r < 1.0]
        if falls:
            out[k] = (falls[0], min(ratios))
    return out


def floored(x: float) -> str:
    """``x`` rounded down to two decimals: a minimum set against a bound is never printed above
    what was measured (0.8954 prints 0.89, where rounding would print the bound, 0.90)."""
    return f"{math.floor(x * 100 + 1e-9) / 100:.2f}"


def summary(rows: list[dict], batches: list[int]) -> tuple[str, dict]:
    def ratio(name, b, policy):
        return cell_row(rows, name, b, policy)

    def over_fastest(name, b, ks):
        """Adaptive over the static k of ``ks`` with the most tokens/s (the median over repeats): the
        median of the two's ratios in one repeat, as every ratio here (a busy spell slows both)."""
        fastest = max(ks, key=lambda k: ratio(name, b, f"k={k}")["tokens_per_s"])
        mine, theirs = (ratio(name, b, p)["tokens_per_s_repeats"] for p in ("adaptive", f"k={fastest}"))
        return statistics.median(a / s for a, s in zip(mine, theirs))

    names = sorted({r["workload"] for r in rows})
    by_workload = {n: falls_below(rows, batches, n) for n in names}
    below = by_workload["code-edit"]
    adaptive = [ratio(n, b, "adaptive")["vs_plain"] for n in names for b in batches]
    vs_best = [over_fastest(n, b, STATIC) for n in names for b in batches]
    # the cells where adaptive fed more gemms per emitted token than plain, with both figures: a "no"
    # says where, and by how much
    pairs = {f"{n} B={b}": (ratio(n, b, "adaptive")["blocks_per_token"], ratio(n, b, "off")["blocks_per_token"])
             for n in names for b in batches}
    over = {cell: (mine, plain) for cell, (mine, plain) in pairs.items() if mine > plain}
    blocks_ok = not over
    within = {}  # per cell: the fastest static k that feeds no more gemms per token than plain, if any
    for n in names:
        for b in batches:
            plain = ratio(n, b, "off")["blocks_per_token"]
            kept = [k for k in STATIC if ratio(n, b, f"k={k}")["blocks_per_token"] <= plain]
            within[f"{n} B={b}"] = over_fastest(n, b, kept) if kept else None
    if below:
        k = min(below, key=lambda k: (below[k][0], -k))
        head = f"static k={k} below plain from B={below[k][0]} (worst {floored(below[k][1])}x)"
    else:  # none falls below: the k that comes closest
        worst = {k: min(ratio("code-edit", b, f"k={k}")["vs_plain"] for b in batches) for k in STATIC}
        k = min(worst, key=worst.get)
        head = f"static k={k} below plain from B=none (worst {floored(worst[k])}x)"
    control = [ratio(n, b, CONTROL)["vs_plain"] for n in names for b in batches]
    facts = {"static_named": k, "static_below": {str(k): v for k, v in below.items()},
             "static_below_by_workload": {n: {str(k): v for k, v in ks.items()} for n, ks in by_workload.items()},
             "adaptive_vs_plain_min": min(adaptive),
             "control_vs_plain": [min(control), max(control)],
             "adaptive_vs_plain_b1": ratio("code-edit", batches[0], "adaptive")["vs_plain"],
             "adaptive_vs_best_static_min": min(vs_best), "blocks_per_token_ok": blocks_ok,
             "blocks_per_token_over_plain": over,
             "adaptive_vs_best_static_within_plain_gemms": within}
    line = (f"load: {head}; adaptive vs plain min {floored(min(adaptive))}x over B, "
            f"B=1 {facts['adaptive_vs_plain_b1']:.2f}x; adaptive vs best static min {floored(min(vs_best))}x; "
            f"blocks per token adaptive <= plain: {'yes' if blocks_ok else 'no'}")
    return line, facts


def print_rows(rows: list[dict]) -> None:
    head = (f"{'workload':9} {'B':>3} {'policy':8} {'tok/s':>8} {'wall':>7} {'vs plain':>8} {'gemms/tok':>9} "
            f"{'accept':>6} {'tok/pass':>8} {'ms/tok':>7} {'ms/step':>7} {'/table':>6}")
    print_table(head, (f"{r['workload']:9} {r['B']:>3} {r['policy']:8} {r['tokens_per_s']:8.1f} "
                       f"{r['wall_tokens_per_s']:7.1f} {r['vs_plain']:7.2f}x {r['blocks_per_token']:9.3f} "
                       f"{r['acceptance']:6.2f} {r['tokens_per_pass']:8.2f} {r['latency_ms']:7.1f} "
                       f"{r['step_ms']:7.1f} {r['measured_over_predicted']:5.2f}x" for r in rows))


def plot(rows: list[dict], batches: list[int], crossover: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("code-edit", "prose", "shift") if any(r["workload"] == n for r in rows)]
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4.2))
    for ax, name in zip(axes, names):
        for j, policy in enumerate(str(p) for p in POLICIES):
            ys = [next(r["tokens_per_s"] for r in rows if r["workload"] == name and r["B"] == b
                       and r["policy"] == policy) for b in batches]
            style = {"off": "k-", "adaptive": "r-"}.get(policy, f"C{j}--")
            ax.plot(batches, ys, style, marker="o", lw=2 if policy in ("off", "adaptive") else 1, label=policy)
        if name == "code-edit":
            for j, k in enumerate(STATIC):
                if crossover.get(k):
                    ax.axvline(crossover[k], color=f"C{j + 1}", ls=":", lw=1)
                    ax.annotate(f"k={k} predicted", (crossover[k], ax.get_ylim()[1]), rotation=90, va="top",
                                fontsize=7, color=f"C{j + 1}")
        ax.set(xscale="log", xlabel="concurrency B", ylabel="tokens/s (whole batch)", title=name)
        ax.set_xticks(batches, [str(b) for b in batches])
    finish_figure(fig, path, *axes)


def saved_cost(path: Path, rows_alone: bool) -> CostTable:
    """The cost table a ``load.json`` at ``path`` recorded; ``rows_alone`` is the model's."""
    try:
        saved = json.loads(path.read_text())["cost"]
        return CostTable(tuple(float(t) for t in saved["block_seconds"]), float(saved["row_seconds"]),
                         float(saved["request_seconds"]), float(saved["draft_seconds"]),
                         float(saved["fit_error"]), rows_alone, float(saved.get("look_seconds", 0.0)))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"FAIL: --cost {path}: not a load.json with a cost table ({type(e).__name__}: {e})") from None


def main() -> int:
    ap = argparse.ArgumentParser(description="Speculation under load: tokens/s against concurrency by policy.")
    ap.add_argument("--quick", action="store_true", help="B in 1, 4, 16; short outputs; fewer repeats")
    ap.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--cost", type=Path, help="read the cost table from this load.json instead of profiling one")
    ap.add_argument("--priced", action="store_true", help="price each cell's steps by the cost table, not the clock")
    ap.add_argument("--slots", choices=("spread", "random"), default="spread",
                    help="the gemm slots the queued requests start at: spread over the slots in a shuffled "
                         "round, or drawn at random (where rows sit at their slots the server places its "
                         "admissions among the first 16 queued)")
    ap.add_argument("--slot-seed", type=int, default=SLOT_SEED, metavar="N",
                    help=f"seed of the slots' shuffle or draws (default {SLOT_SEED}): the same traffic in another order")
    ap.add_argument("--preamble", type=int, default=0, metavar="N",
                    help="every prompt opens with the same N tokens (a long system prompt or a document, "
                         "cached once): each request reads N more positions of K/V a pass")
    args = ap.parse_args()
    if args.preamble < 0:
        ap.error(f"--preamble must be 0 or more tokens, got {args.preamble}")
    if args.priced and args.cost is None:
        ap.error("--priced needs --cost FILE: a table profiled in the same run would differ run to run")
    out_folder(args.out)
    began = time.perf_counter()
    batches = [1, 4, 16] if args.quick else [1, 2, 4, 8, 16, 32]
    workloads = ["code-edit", "shift"] if args.quick else ["code-edit", "prose", "shift"]
    # (output budget, waves of B requests, repeats)
    settings = {("tiny", True): (48, 4, 5), ("tiny", False): (96, 4, 3),
                ("smollm2", True): (16, 1, 1), ("smollm2", False): (32, 1, 2)}
    max_new, waves, repeats = settings[(args.model, args.quick)]
    repeats = 1 if args.priced else repeats  # a priced cell comes out the same every time
    load = tiny_workloads if args.model == "tiny" else smollm2_workloads
    try:
        model, work = load(max(max(batches) * max(waves, 2), 2 * MIN_REQUESTS), max_new, args.slots, args.slot_seed,
                           args.preamble)
    except (RealModelMissing, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    context = cells_context(work, workloads)
    cost = (saved_cost(args.cost, model.rows_alone) if args.cost else
            profile(model, max_blocks=4, repeats=15 if args.model == "tiny" else 3, context=context))
    kernels = blas(model)
    print(blas_text(kernels))
    print("cost table (ms): " + ", ".join(f"{g} gemm{'s' if g > 1 else ''} {t * 1e3:.2f}"
                                           for g, t in enumerate(cost.block_seconds, start=1))
          + f"; per row {cost.row_seconds * 1e3:.3f}, per request {cost.request_seconds * 1e3:.3f}, "
            f"per draft {cost.draft_seconds * 1e3:.3f}, the adaptive policy's work per request "
            f"{cost.look_seconds * 1e3:.3f} (at {context} tokens of context; "
            f"the fit within {cost.fit_error:.0%} of every profiled pass)")
    kv_share = kv_over_weights(model.config, context)
    print(f"a request reads {kv_share:.1%} of the weights' size in K/V a pass "
          f"at {context} positions" + (f" ({work.shared} of them shared by every prompt: --preamble)" if work.shared else ""))
    print("slots: " + ("each request's starting slot drawn at random (--slots random)" if args.slots == "random" else
                       "spread, a slot each before any shares one (--slots random draws them)")
          + f", seed {args.slot_seed}"
          + ("; rows fed alone: the server admits in arrival order" if model.rows_alone else
             "; the server places each admission among the first 16 queued"))
    cells = measure(model, cost, work, batches, workloads, waves, repeats)
    if args.priced:
        print(f"priced: every cell's seconds are the cost table's ({args.cost}), not measured")
        for runs in cells.values():
            for cell in runs:
                cell.seconds = cell.wall = cell.predicted
    bad = greedy_mismatches(cells)
    rows = table(cells, batches)
    print_rows(rows)
    print("cost table check, plain decoding's step, measured / the table's: " + ", ".join(
        f"{r['workload']} B={r['B']} {r['step_ms']:.1f} ms {r['measured_over_predicted']:.2f}x"
        for r in rows if r["policy"] == "off"))
    starts = {name: {b: [len(p) for p in cell_traffic(work, name, b, waves)[0][:b]] for b in batches}
              for name in workloads}
    predicted = {name: predicted_crossover(cost, rows, starts[name], batches, name) for name in workloads}
    crossover = predicted["code-edit"]
    turns = {k: break_even_rows(cost, *first_passes(rows, batches, k)) for k in STATIC}
    line, facts = summary(rows, batches)
    for k in STATIC:
        measured = facts["static_below"].get(str(k), (None,))[0]
        print(f"static k={k}: predicted below plain from B={crossover[k]}, measured from B={measured}; "
              + turning_text(cost, turns[k]))
    named = facts["static_named"]
    named_ratios = predicted_ratios(cost, rows, starts["code-edit"], batches, named)
    print(ratios_text(named, "code-edit", named_ratios, rows))
    print("static k below plain on each workload, as the table predicts and as measured: " + "; ".join(
        crossover_text(name, predicted[name], facts["static_below_by_workload"][name]) for name in workloads))
    low, high = facts["control_vs_plain"]
    print(f"control: a second plain server in every cell, against the first: {low:.2f}x to {high:.2f}x "
          "(the noise between two servers doing the same work: a ratio this close to a bound does not settle it; "
          "one between two policies swings more, as the repeats' range above shows)")
    within = facts["adaptive_vs_best_static_within_plain_gemms"]
    held = [r for r in within.values() if r is not None]
    none = [cell for cell, r in within.items() if r is None]
    print("adaptive vs the best static k that feeds no more gemms per token than plain: "
          + (f"min {min(held):.2f}x over {len(held)} cells; " if held else "")
          + f"no static k does in {len(none)} of {len(within)} cells" + (f" ({', '.join(none)})" if none else ""))
    if facts["blocks_per_token_over_plain"]:
        print("gemms per emitted token, adaptive above plain: " + ", ".join(
            f"{cell} {mine:.5f} against {plain:.5f} ({mine / plain - 1:+.2%})"
            for cell, (mine, plain) in facts["blocks_per_token_over_plain"].items()))
    stem = "load" if args.model == "tiny" else "load_smollm2"
    report = {"model": args.model, "blas": kernels, "quick": args.quick, "slots": args.slots,
              "slot_seed": args.slot_seed, "preamble": args.preamble, "shared_tokens": work.shared,
              "batches": batches,
              "workloads": workloads, "waves": waves, "max_new": max_new, "priced": args.priced,
              "repeats": repeats, "cost": {"block_seconds": cost.block_seconds, "row_seconds": cost.row_seconds,
                                           "request_seconds": cost.request_seconds,
                                           "draft_seconds": cost.draft_seconds, "fit_error": cost.fit_error,
                                           "look_seconds": cost.look_seconds},
              "predicted_crossover": {str(k): v for k, v in crossover.items()},
              "predicted_crossover_by_workload": {name: {str(k): v for k, v in ks.items()}
                                                  for name, ks in predicted.items()},
              "break_even_request_rows": {str(k): v for k, v in turns.items()},
              "predicted_ratios_named_k": {str(b): v for b, v in named_ratios.items()},
              "request_in_rows": request_in_rows(cost), "context": context,
              "kv_over_weights": kv_share, "summary": facts,
              "greedy_mismatches": bad, "seconds": time.perf_counter() - began, "rows": rows}
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(rows, batches, crossover, args.out / f"{stem}.png")
    print(f"wrote {args.out / (stem + '.json')} and {args.out / (stem + '.png')} ({report['seconds']:.0f} s)")
    for mismatch in bad:
        print(f"FAIL: greedy output {mismatch}")
    print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
