"""Speculation under load (L10.10): continuous batching on the tiny llama, and the policy's rules.

Section numbers refer to ``course/L10.10.md``. Requests served together must come out token for
token as each comes out alone; the pool must end empty; the policy must pick what its goodput rule
says, which the oracles below compute by brute force over every k.
"""

import dataclasses
import itertools
import random
from pathlib import Path

import pytest

from tinyllm.model import LlamaConfig, TinyLlama
from tinyllm.runner import RunnerTarget
from tinyllm.sampling import SamplingParams
from tinyllm.serve import (BANK_LIMIT, BANK_RATE, EXPLORE, FADE, MATCH_KEYS, MATCHES, MAX_DRAFT, PRIOR,
                           Acceptance, Bank, CostTable, Lane, Policy, Request, Server, adaptive_ks, choose_ks,
                           copied_from, expected_tokens, faded, fed_positions, gemm_blocks, goodput, lookup_drafter,
                           lookup_match, observe, profile, trim, untried, widen)
from tinyllm.spec import Generated, SpecConfig, SpecError, SpecStats, generate, prompt_lookup

WEIGHTS = Path(__file__).resolve().parents[1] / "fixtures" / "model" / "tiny_llama.npz"
GREEDY = SamplingParams()
TEXTS = [
    "def take(self, n=1):\n    if n < 0:\n        raise ValueError(n)\n    return n\n\ndef take(self, n=1):\n",
    "The workshop opens at eight in the morning. Before anyone arrives,",
    "tool: {\"code\": \"BR-2\", \"count\": 6}\ncall: order({\"code\": \"",
    "abcabcabcabcab",
]
# One gemm 10 ms, each further one 10 ms more; rows, requests and drafts almost free.
COST = CostTable((0.010, 0.020, 0.030, 0.040), row_seconds=1e-5, request_seconds=1e-4, draft_seconds=1e-5)
# A further gemm almost free, as on the tiny llama on this machine's CPU.
CHEAP = CostTable((0.010, 0.0101, 0.0102, 0.0103), row_seconds=1e-5, request_seconds=1e-4, draft_seconds=1e-5)


@pytest.fixture(scope="module")
def tiny():
    return TinyLlama.load(WEIGHTS)


@pytest.fixture(scope="module")
def small():
    """A random one-layer llama: the leak test's 1,000 requests in seconds."""
    return TinyLlama.random(LlamaConfig(vocab=32, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, hidden=24), 3)


def blind(ctx, k):
    """The default drafter's drafts without its match length: the adaptive policy then keeps one
    estimate for every draft."""
    return prompt_lookup(ctx, k, 3, 1)


def alone(model, prompt, k, params=GREEDY, seed=0, max_new=40, eos=()):
    cfg = SpecConfig.parse("none" if k == 0 else "prompt_lookup", max(k, 1))
    return generate(RunnerTarget(model, model.new_pool(64, 16)), cfg, prompt, params, seed, max_new, eos)


# --- the scheduler (section 2.4) -------------------------------------------------------------

@pytest.mark.parametrize("policy", ["off", "2", "15", "adaptive"])
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_greedy_batched_equals_alone(tiny, policy, batch):
    prompts = [list(t.encode()) for t in TEXTS]
    want = [alone(tiny, p, 0).tokens for p in prompts]
    server = Server(tiny, tiny.new_pool(160, 16), Policy.parse(policy), max_batch=batch, cost=COST,
                    prefix_cache=True)
    ids = [server.submit(prompts[i % 4], max_new=40) for i in range(10)]
    server.run()
    for i in ids:
        assert server.results[i].tokens == want[i % 4], f"request {i} at B={batch}, policy {policy}"
    assert server.pool.num_free() == server.pool.num_blocks


@pytest.mark.parametrize("k", [2, 8])
def test_sampled_static_k_draws_as_alone(tiny, k):
    """Each request's own generator: with the same k, a request served in company draws exactly
    what it draws alone (tokens and logprobs), whoever shares its passes."""
    params = SamplingParams(temperature=0.9, top_k=20)
    prompts = [list(t.encode()) for t in TEXTS]
    server = Server(tiny, tiny.new_pool(160, 16), Policy("static", k), max_batch=4)
    ids = [server.submit(prompts[i % 4], params, seed=100 + i, max_new=30) for i in range(8)]
    server.run()
    for i in ids:
        want = alone(tiny, prompts[i % 4], k, params, seed=100 + i, max_new=30)
        got = server.results[i]
        assert got.tokens == want.tokens and got.logprobs == want.logprobs
        assert (got.stats.drafted, got.stats.accepted) == (want.stats.drafted, want.stats.accepted)


def test_off_never_calls_the_drafter_nor_feeds_draft_rows(tiny):
    calls = []

    def spy(ctx, k):
        calls.append(k)
        return []

    server = Server(tiny, tiny.new_pool(64, 16), Policy("off"), max_batch=4, drafter=spy)
    for t in TEXTS:
        server.submit(list(t.encode()), max_new=12)
    first = server.step()
    assert first.rows == sum(len(t.encode()) for t in TEXTS)
    while not server.idle():
        report = server.step()
        assert report.rows == len(report.ks) and set(report.ks.values()) == {0}
    assert calls == []


def test_placed_admission_keeps_plain_decoding_in_one_gemm(small):
    """Four requests of five queued fit four slots of their own, but the second shares the first's:
    placement passes it over, so plain decoding feeds one gemm a step after the prompts, where
    arrival order would feed two; it runs once the first ends."""
    lengths = ((5, 6), (5, 6), (6, 8), (7, 8), (8, 8))
    server = Server(small, small.new_pool(64, 4), Policy("off"), max_batch=4, place=True)
    ids = [server.submit([1 + j % 5 for j in range(n)], max_new=m) for n, m in lengths]
    first = server.step()
    assert [r.rid for r in server.running] == [ids[0], ids[2], ids[3], ids[4]] and first.blocks > 1
    blocks = [server.step().blocks for _ in range(4)]
    assert blocks == [1, 1, 1, 1]
    while ids[1] not in [r.rid for r in server.running]:
        server.step()
    assert ids[0] in server.results and server.running[-1].overtaken == 3
    unplaced = Server(small, small.new_pool(64, 4), Policy("off"), max_batch=4, place=False)
    for n, m in lengths:
        unplaced.submit([1 + j % 5 for j in range(n)], max_new=m)
    unplaced.step()
    assert [r.rid for r in unplaced.running] == [0, 1, 2, 3] and unplaced.step().blocks == 2


def test_placement_is_on_where_rows_sit_at_their_slots(small):
    """By default a server places its admissions exactly where the model's pass costs its fullest slot."""
    assert Server(small, small.new_pool(8, 4), Policy("off")).place is (not small.rows_alone)


def test_admission_in_arrival_order_for_prompts_of_one_length(small):
    """Requests whose prompts sit on one slot: one admitted later never overtakes one queued before it."""
    server = Server(small, small.new_pool(64, 4), Policy("off"), max_batch=2)
    lengths = [9, 2, 7, 1, 3, 5]
    ids = [server.submit([1, 2, 3], max_new=n) for n in lengths]
    started = {}
    step = 0
    while not server.idle():
        server.step()
        for r in server.running:
            started.setdefault(r.rid, step)
        for rid in server.results:
            started.setdefault(rid, step)
        step += 1
    assert [started[i] for i in ids] == sorted(started[i] for i in ids)


def test_a_pool_too_small_waits_instead_of_failing(small):
    """Admission reserves each request's whole budget: a pool for two requests runs six in turn."""
    server = Server(small, small.new_pool(8, 4), Policy("static", 3), max_batch=8)
    for i in range(6):
        server.submit([1, 2, 3, 4, 5], max_new=11, seed=i)
    peak = 0
    while not server.idle():
        server.step()
        peak = max(peak, len(server.running))
    assert peak == 2 and len(server.results) == 6 and server.pool.num_free() == 8


def test_no_block_leaks_over_1000_requests(small):
    """Random arrivals, prompts, lengths, EOS and listeners that stop early, under every policy;
    after every step each running request holds exactly the blocks its cache needs and the
    pool's free count is what is not held; at the end the pool is empty."""
    rnd = random.Random(7)
    pool = small.new_pool(96, 4)
    policies = [Policy("off"), Policy("static", 4), Policy("adaptive")]
    done = 0
    for round_ in range(3):
        server = Server(small, pool, policies[round_], max_batch=rnd.choice([3, 8]), cost=COST)
        left = [334, 333, 333][round_]
        while left or not server.idle():
            for _ in range(min(left, rnd.choice([0, 0, 1, 3]))):
                stop_at = rnd.choice([None, rnd.randint(1, 10)])
                heard = []

                def listener(token, logprob, heard=heard, stop_at=stop_at):
                    heard.append(token)
                    return stop_at is None or len(heard) < stop_at

                prompt = [rnd.randrange(4) for _ in range(rnd.randint(1, 14))]
                server.submit(prompt, SamplingParams(temperature=rnd.choice([0.0, 1.0])), seed=rnd.randrange(99),
                              max_new=rnd.randint(0, 20), eos=[rnd.randrange(32)], on_token=listener)
                left -= 1
            server.step()
            held = 0
            for r in server.running:
                assert len(r.table) == -(-r.cached // pool.block_tokens)
                held += len(r.table)
            assert pool.num_free() == pool.num_blocks - held
        done += len(server.results)
    assert done == 1000 and pool.num_free() == pool.num_blocks


@pytest.mark.parametrize("policy", ["off", "4", "adaptive"])
def test_the_prefix_cache_leaks_no_block_and_changes_no_token(small, policy):
    """Prompts that share their first blocks, random arrivals, lengths, EOS, temperatures and
    listeners that stop early: after every step the free blocks are those no running request
    holds (a shared block counted once); at the end the pool is empty; and every request comes
    out token for token as it does from a server without the cache (under the adaptive policy the
    greedy ones: a sampled request's draws follow the rows it is given, section 2.4)."""
    rnd = random.Random(11)
    bases = [[rnd.randrange(32) for _ in range(12)] for _ in range(3)]
    plan = []  # (step, prompt, temperature, seed, max_new, eos, stop_at) per request
    for step in range(120):
        for _ in range(rnd.choice([0, 0, 1, 3])):
            prompt = rnd.choice(bases)[:rnd.randint(1, 12)] + [rnd.randrange(32) for _ in range(rnd.randint(0, 4))]
            plan.append((step, prompt, rnd.choice([0.0, 1.0]), rnd.randrange(99), rnd.randint(0, 16),
                         [rnd.randrange(32)], rnd.choice([None, rnd.randint(1, 8)])))
    outputs = []
    for cache in (True, False):
        pool = small.new_pool(64, 4)
        server = Server(small, pool, Policy.parse(policy), max_batch=6, cost=COST, prefix_cache=cache)
        ids, at, step = [], 0, 0
        while at < len(plan) or not server.idle():
            while at < len(plan) and plan[at][0] <= step:
                _, prompt, temperature, seed, max_new, eos, stop_at = plan[at]
                heard: list[int] = []

                def listener(token, logprob, heard=heard, stop_at=stop_at):
                    heard.append(token)
                    return stop_at is None or len(heard) < stop_at

                ids.append(server.submit(prompt, SamplingParams(temperature=temperature), seed=seed,
                                         max_new=max_new, eos=eos, on_token=listener))
                at += 1
            server.step()
            step += 1
            held = {b for r in server.running for b in r.table}
            assert pool.num_free() == pool.num_blocks - len(held)
        assert pool.num_free() == pool.num_blocks
        outputs.append([server.results[i].tokens for i in ids])
    same = [i for i, request in enumerate(plan) if policy != "adaptive" or request[2] == 0.0]
    assert len(same) > 40 and [outputs[0][i] for i in same] == [outputs[1][i] for i in same]


def test_blocks_fed_adaptive_never_above_plain(tiny):
    """Drafts only take slots the pass pays anyway or gemms worth their time: on repeating text
    at B = 8 adaptive feeds no more 16-row gemms per emitted token than plain decoding."""
    prompts = [list(t.encode()) for t in TEXTS]
    per_token = {}
    for policy in ("off", "adaptive"):
        server = Server(tiny, tiny.new_pool(160, 16), Policy.parse(policy), max_batch=8, cost=COST)
        for i in range(8):
            server.submit(prompts[i % 4], max_new=40)
        blocks = emitted = 0
        while not server.idle():
            report = server.step()
            blocks += report.blocks
            emitted += report.emitted
        per_token[policy] = blocks / emitted
    assert per_token["adaptive"] <= per_token["off"]


def wrong_drafter(ctx, k):
    return [0] * k  # NUL: never the tiny llama's greedy token after text


@pytest.mark.parametrize("drafts", ["right", "wrong"])
def test_gemms_from_the_bank_keep_gemms_per_token_within_plain(tiny, drafts):
    """Where a further gemm is almost free, the server spends the gemms its drafts saved on wider
    passes: where drafts are right some step feeds more gemms than its plain pass; where they are
    all wrong (while the estimates still say 0.85) nothing was saved and no pass is wider. Over
    the run it feeds no more gemms per emitted token than plain decoding, and its greedy output
    is plain's."""
    prompts = [list(t.encode()) for t in TEXTS]
    per_token, outputs, wider = {}, {}, 0
    for policy in ("off", "adaptive"):
        server = Server(tiny, tiny.new_pool(320, 16), Policy.parse(policy), max_batch=16, cost=CHEAP,
                        drafter=wrong_drafter if drafts == "wrong" else lookup_drafter)
        for i in range(16):
            server.submit(prompts[(i % 2) * 3], max_new=48)
        blocks = emitted = 0
        while not server.idle():
            server._admit()
            lanes = server._lanes()
            plain = gemm_blocks(fed_positions(lanes, [0] * len(lanes)))
            report = server.step()
            wider += policy == "adaptive" and report.blocks > plain
            blocks += report.blocks
            emitted += report.emitted
        per_token[policy] = blocks / emitted
        outputs[policy] = {i: r.tokens for i, r in server.results.items()}
    assert (wider > 0) == (drafts == "right")
    assert per_token["adaptive"] <= per_token["off"]
    assert outputs["adaptive"] == outputs["off"]


def test_widen_opens_a_gemm_only_where_it_pays():
    """Sixteen requests on sixteen slots: no free row. A second gemm almost free holds one draft
    row each; not without a banked gemm, not when its rows would add fewer tokens than asked, and
    not when a gemm costs as much as the first."""
    full = [Lane(p, 1, 15, [0.8] * MAX_DRAFT) for p in range(32, 48)]
    assert adaptive_ks(full, CHEAP) == [0] * 16
    assert widen(full, [0] * 16, CHEAP, 1, 1.0) == [1] * 16
    assert widen(full, [0] * 16, CHEAP, 2, 1.0) == [2] * 16
    assert widen(full, [0] * 16, CHEAP, 0, 1.0) == [0] * 16
    assert widen(full, [0] * 16, CHEAP, 1, 16 * 0.8 + 0.1) == [0] * 16
    assert widen(full, [0] * 16, COST, 1, 1.0) == [0] * 16


def test_a_full_bank_spends_a_gemm_for_goodput_alone(tiny):
    """Sixteen requests fill a gemm; a second, almost free, would hold one draft row each for 12.8
    expected tokens, fewer than a banked gemm must buy (plain decoding's 16 over BANK_RATE). Short
    of full, the bank keeps its gemms; full, it would keep none of what this step saves, so one
    gemm opens because the wider pass has the higher goodput."""
    for balance, ks in ((BANK_LIMIT - 0.5, [0] * 16), (BANK_LIMIT, [1] * 16)):
        server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), max_batch=16, cost=CHEAP)
        for _ in range(16):
            server.submit([1, 2, 3], max_new=8)
        server._admit()
        server._seen = (server._state(), tuple(Lane(p, 1, 15, [0.8] * MAX_DRAFT) for p in range(32, 48)))
        server.bank.balance = balance
        assert server._explore([0] * 16) == ks, balance


def test_rows_fed_alone_count_a_gemm_per_16_rows():
    """Where the model feeds its weights the pass's rows alone, a pass runs ceil(rows / 16) gemms
    wherever its rows sit; where rows sit at their slots, the fullest slot's count."""
    alone = dataclasses.replace(COST, rows_alone=True)
    assert [alone.gemms(1, rows) for rows in (1, 16, 17, 32, 33)] == [1, 1, 2, 2, 3]
    assert COST.gemms(1, 17) == 1 and COST.gemms(3, 17) == 3
    assert alone.step_seconds(1, 17, 16) == pytest.approx(COST.step_seconds(2, 17, 16))


def test_trim_takes_back_a_gemm_that_does_not_pay():
    """Rows fed alone: sixteen requests fill the first gemm and one draft each opens a second. Kept
    where the drafts are likely enough to pay for it, taken back (unlikeliest first, down to the
    rows one gemm holds) where not; a table whose rows sit at their slots is left alone."""
    alone = dataclasses.replace(COST, rows_alone=True)

    def lanes(rate):
        return [Lane(p, 1, 15, [rate] * MAX_DRAFT) for p in range(32, 48)]

    assert trim(lanes(0.99), [1] * 16, alone) == [1] * 16
    assert trim(lanes(0.3), [1] * 16, alone) == [0] * 16
    assert trim(lanes(0.3), [1] * 16, COST) == [1] * 16
    mixed = lanes(0.3)[:15] + [Lane(47, 1, 15, [0.99] * MAX_DRAFT)]
    assert trim(mixed, [0] * 15 + [2], alone) == [0] * 16


def test_the_bank_earns_plains_gemms_per_token_pays_what_was_fed_and_stops_at_its_limit():
    """Settling a pass: each token emitted since the last settle earns BANK_RATE x plain decoding's
    gemms per token (rate) and the gemms fed are paid; a request that ended in the pass is counted
    then, and no more."""
    a, b = Generated([], [], SpecStats()), Generated([], [], SpecStats())
    bank = Bank()
    bank.settle([Request(0, [1], GREEDY, 0, 9, frozenset(), print, out=a),
                 Request(1, [1], GREEDY, 0, 9, frozenset(), print, out=b)])
    a.tokens += [5, 6, 7]
    b.tokens += [5]
    bank.rate, bank.fed = 0.5, 1
    bank.settle([])  # both ended in that pass
    assert bank.balance == pytest.approx(BANK_RATE * 4 * 0.5 - 1)
    b.tokens += [6]
    bank.settle([])  # nothing counted twice
    assert bank.balance == pytest.approx(BANK_RATE * 4 * 0.5 - 2)
    bank.balance, bank.fed = BANK_LIMIT - 0.5, 0
    bank.counted = {0: (a, 0)}
    bank.settle([])
    assert bank.balance == BANK_LIMIT


def test_a_quiet_low_estimate_fades_up_to_the_pool(tiny):
    """A rate below the pooled one moves 1 - FADE ** quiet of the way up; one above stays."""
    assert faded([0.1, 0.9], [0.5, 0.5], 0) == [0.1, 0.9]
    low, high = faded([0.1, 0.9], [0.5, 0.5], 2)
    assert low == pytest.approx(0.1 + 0.4 * (1 - FADE ** 2)) and high == 0.9
    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), cost=COST, drafter=blind)
    server.submit(list(TEXTS[1].encode()), max_new=8)
    server._admit()
    r = server.running[0]
    r.estimate.rates, r.quiet, r.out.stats.drafted = [0.0] * MAX_DRAFT, 3, 2
    assert server._lanes()[0].rates == faded([0.0] * MAX_DRAFT, server.pooled.rates, 3)
    assert r.estimate.rates == [0.0] * MAX_DRAFT


def test_until_it_first_drafts_a_request_follows_the_pool(tiny):
    """Under adaptive, a request that has not drafted yet is read at the pool as it stands, not
    at the copy taken when it was admitted; when it first drafts, its estimate restarts there."""
    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), cost=COST, drafter=blind)
    server.submit(list(TEXTS[1].encode()), max_new=8)
    server._admit()
    r = server.running[0]
    server.pooled.rates = [0.2] * MAX_DRAFT  # the traffic turned after it was admitted
    assert server._lanes()[0].rates == [0.2] * MAX_DRAFT
    server.step()  # the prompt: no draft
    server.pooled.rates = [0.99] * MAX_DRAFT
    report = server.step()
    assert report.ks[r.rid] > 0, "a request whose pool is sure drafts"
    drafted, accepted = r.out.stats.drafted, r.out.stats.accepted
    assert r.estimate.rates == observe([0.99] * MAX_DRAFT, drafted, accepted)


def test_lookup_match_is_the_lookup_with_the_length_it_matched():
    """The draft is L10.8's lookup for every k, whether or not the context was looked up before;
    the length is the longest n-gram that matched, 0 for none."""
    rng = random.Random(5)
    for _ in range(200):
        ctx = [rng.randrange(6) for _ in range(rng.randrange(1, 40))]
        for k in (0, 1, 4, MAX_DRAFT):
            n, draft = lookup_match(ctx, k)
            assert draft == prompt_lookup(ctx, k, 3, 1) == lookup_drafter(ctx, k)
            assert n == next((m for m in MATCHES if prompt_lookup(ctx, 1, m, m)), 0)
            source = copied_from(ctx, n)
            assert (source == -1) if n == 0 else (draft == ctx[source:source + k]), (ctx, k, source)
    assert lookup_match([1, 2, 3, 9, 1, 2, 3], 2) == (3, [9, 1])
    assert lookup_match([1, 2, 3, 9, 5, 2, 3], 2) == (2, [9, 5])
    assert lookup_match([1, 2, 3], 2) == (0, [])


def test_a_match_index_looks_up_as_lookup_match_does_while_its_context_grows():
    """A request's index gives L10.8's lookup at every length its context grows through, a token
    or several at a time, over alphabets small enough that the 1-, 2- and 3-token matches all
    occur."""
    import random

    from tinyllm.serve import MatchIndex

    rng = random.Random(7)
    for _ in range(200):
        alphabet = rng.choice((2, 3, 6, 40))
        ctx = [rng.randrange(alphabet) for _ in range(rng.randrange(1, 30))]
        index = MatchIndex()
        for _ in range(25):
            k = rng.randrange(MAX_DRAFT + 1)
            assert index.match(list(ctx), k) == lookup_match(ctx, k), (ctx, k)
            n = lookup_match(ctx, 1)[0]
            assert index.find(list(ctx)) == (n, copied_from(ctx, n)), ctx
            ctx += [rng.randrange(alphabet) for _ in range(rng.randrange(1, 4))]
    assert MatchIndex().match([1, 2, 3, 9, 1, 2, 3], 2) == (3, [9, 1])
    assert MatchIndex().match([1, 2, 3, 9, 5, 2, 3], 2) == (2, [9, 5])
    assert MatchIndex().match([1, 2, 3], 2) == (0, [])


def test_a_server_looks_a_draft_up_once_a_step_and_never_for_another_server(tiny, monkeypatch):
    """The adaptive policy looks each request's draft up before it chooses k, and the step's drafter
    call finds that lookup instead of making another; servers on the same prompts in one process
    each make their own (bench/load.py times one server per policy: a lookup one made and another
    reused would be timed in the first only)."""
    import tinyllm.serve as serve

    calls, find, scan = [], serve.MatchIndex.find, serve.lookup_match
    monkeypatch.setattr(serve.MatchIndex, "find", lambda self, ctx: calls.append("index") or find(self, ctx))
    monkeypatch.setattr(serve, "lookup_match", lambda ctx, k: calls.append("scan") or scan(ctx, k))
    servers = [Server(tiny, tiny.new_pool(64, 16), policy, cost=CHEAP)
               for policy in (Policy("adaptive"), Policy("adaptive"), Policy("static", 4))]
    for server in servers:
        server.submit(list(TEXTS[0].encode()), max_new=30)
        server.step()  # the prompt: the adaptive policy looks nothing up yet
        for key in MATCH_KEYS:
            server.pooled_matched[key].rates = [0.99] * MAX_DRAFT
    for server in servers:
        calls.clear()
        report = server.step()
        assert all(k > 0 for k in report.ks.values()), "a request whose pool is sure drafts"
        assert calls == ["index"], f"{server.policy}: {calls} (one lookup a step, through the request's index)"



def test_adaptive_reads_the_estimate_of_the_match_its_lookup_made(tiny):
    """With the default drafter a request's lane holds the estimate of its lookup's match, its
    length and origin (the pool's, until it has drafted after such a match), and its draft's
    length as cap; the rounds it drafts move that match's estimates only, its own by WEIGHT and
    the pool's by 1 / (rounds + 1) until that is POOL_WEIGHT, and the one estimate of every
    draft as before."""
    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), cost=CHEAP)
    server.submit(list(TEXTS[0].encode()), max_new=30)
    server.step()  # the prompt
    r = server.running[0]
    n, draft = lookup_match(r.prompt + r.out.tokens, MAX_DRAFT)
    assert n in MATCHES
    n = (n, "first")  # the request's first match
    server.pooled_matched[n].rates = [0.99] * MAX_DRAFT
    others = {m: [0.01 * i] * MAX_DRAFT for i, m in enumerate(MATCH_KEYS) if m != n}
    for m, rates in others.items():
        server.pooled_matched[m].rates = list(rates)
    lane = server._lanes()[0]
    assert lane.rates == [0.99] * MAX_DRAFT and lane.cap == len(draft)
    blind_before = list(r.estimate.rates)
    report = server.step()
    k = report.ks[r.rid]
    assert k > 0, "a request whose match length's pool is sure drafts"
    accepted = r.out.stats.accepted
    server._lanes()  # the round is settled at the next look
    assert r.matched[n].rates == observe([0.99] * MAX_DRAFT, k, accepted)
    # the prior counts as one round: the length's first round moves its pool half way
    assert server.pooled_matched[n].rates == observe([0.99] * MAX_DRAFT, k, accepted, 0.5)
    assert server.matched_rounds == {m: int(m == n) for m in MATCH_KEYS}
    assert server.matched_depth == {m: min(accepted + 1, k) if m == n else 0 for m in MATCH_KEYS}, "the deepest position tried"
    assert {m: server.pooled_matched[m].rates for m in others} == others and set(r.matched) == {n}
    assert r.estimate.rates == observe(blind_before, k, accepted)
    settled = dict(r.matched[n].__dict__)
    server._lanes()  # a second look in one step counts nothing twice
    assert r.matched[n].__dict__ == settled


@pytest.mark.parametrize("probe", [False, True], ids=["through the index", "a probe's scan"])
def test_a_match_is_keyed_by_where_its_draft_is_copied_from(tiny, probe):
    """A request's first match is ``first``; a draft copied from the span the last one was, as far
    on as the tokens emitted since, is ``on``; one copied from elsewhere is ``moved``. A second
    look in the same step keeps the step's origin. The same whether the look goes through the
    request's index or scans (a probe while the policy stands aside)."""
    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), cost=CHEAP)
    server.submit([1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3], max_new=30)
    server._admit()
    server._steps_aside = int(probe)
    r = server.running[0]

    def look(*tokens):
        r.out.tokens.extend(tokens)
        server._looked = {}  # a new step
        return server._lookup(r, MAX_DRAFT)

    assert look() == ((3, "first"), [4, 5, 6, 7, 8, 1, 2, 3])
    assert server._lookup(r, 2) == ((3, "first"), [4, 5]), "a second look in the step"
    assert look(4, 5) == ((3, "on"), [6, 7, 8, 1, 2, 3, 4, 5]), "the copy from position 3 runs on: 3 + 2"
    assert look(9) == (None, []) and r.copied == (5, 2, "on"), "no match: the last copy stays"
    assert look(1, 2) == ((2, "moved"), [3, 4, 5, 9, 1, 2]), "copied from position 10, not 5 + 3"
    assert look(3) == ((3, "on"), [4, 5, 9, 1, 2, 3])
    server._lookup(r, 0)
    assert r.copied == (11, 6, "on")


def test_positions_no_draft_has_reached_are_read_no_likelier_than_the_deepest_reached(tiny):
    """untried: past the deepest position a length's drafts have reached, its rates are read as
    that position's where they are higher; a length no draft has reached keeps the prior. So a
    length whose first round was rejected at position 1 drafts one token, where the prior
    behind position 1 would have it draft three."""
    assert untried([0.9, 0.3, 0.85, 0.95], 2) == [0.9, 0.3, 0.3, 0.3]
    assert untried([0.9, 0.3, 0.85], 0) == [0.9, 0.3, 0.85] == untried([0.9, 0.3, 0.85], 3)
    assert untried([0.9, 0.95, 0.2, 0.6], 1) == [0.9, 0.9, 0.2, 0.6], "only what is above is lowered"
    # goodput of the plain pass 100 tokens/s, a row 2 ms: a draft row pays where its chance is above 0.2
    cost = CostTable((0.010,), row_seconds=0.002)
    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), cost=cost)
    server.submit(list(TEXTS[0].encode()), max_new=30)
    server.step()  # the prompt
    n, draft = lookup_match(server.running[0].prompt + server.running[0].out.tokens, MAX_DRAFT)
    assert n in MATCHES and len(draft) >= 3
    n = (n, "first")  # the request's first match
    rates = [0.3] + [PRIOR] * (MAX_DRAFT - 1)  # 0.3, 0.255, 0.217, 0.184: three rows pay on the prior
    server.pooled_matched[n].rates = list(rates)
    assert server._lanes()[0].rates == rates and choose_ks(server.policy, server._lanes(), cost) == [3]
    server.matched_depth[n] = 1  # its drafts have reached position 1 only
    lane = server._lanes()[0]
    assert lane.rates == [0.3] * MAX_DRAFT and choose_ks(server.policy, [lane], cost) == [1]
    assert server.pooled_matched[n].rates == rates, "the estimate itself is unchanged"


def test_explore_looks_again_only_where_the_state_moved(tiny):
    """A step looks its requests up once: _explore takes the lanes its choose_ks was given. Once
    the requests have moved on (every running request emits in every step), it looks again."""
    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), cost=CHEAP)
    for text in TEXTS[:3]:
        server.submit(list(text.encode()), max_new=60)
    looks = []
    look = server._lanes
    server._lanes = lambda: looks.append(server._state()) or look()
    for _ in range(3):
        before = len(looks)
        server.step()
        assert len(looks) == before + 1, "one look a step"
    assert len(server.running) == 3, "the same requests still run: only how far they have come moved"
    ks = [1] * len(server.running)
    server._explore(ks)  # no look since the last step moved every request: it must look again
    assert len(looks) == 4 and looks[-1] == server._state() != looks[-2]
    server._explore(ks)  # the same state: the lanes it just read
    assert len(looks) == 4


def test_a_request_whose_lookup_finds_nothing_drafts_nothing(tiny):
    """No match, no draft: the lane's cap is 0 whatever the estimates say."""
    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), cost=CHEAP)
    server.pooled.rates = [0.99] * MAX_DRAFT
    for m in MATCH_KEYS:
        server.pooled_matched[m].rates = [0.99] * MAX_DRAFT
    server.submit([5, 6], max_new=4)
    server._admit()
    server.running[0].out.tokens.append(4)  # as if its first round had emitted a token seen nowhere before
    assert lookup_match([5, 6, 4], MAX_DRAFT) == (0, [])
    lanes = server._lanes()
    assert lanes[0].cap == 0 and choose_ks(server.policy, lanes, server.cost) == [0]


def test_a_new_request_starts_from_the_pooled_estimate(tiny):
    """After traffic whose drafts failed, a new request starts pessimistic, not at the prior."""
    server = Server(tiny, tiny.new_pool(64, 16), Policy("static", 4), max_batch=1)
    server.submit(list(TEXTS[1].encode()), max_new=20)
    server.run()
    first = server.results[0].stats
    assert first.drafted > 0 and server.pooled.rates != [PRIOR] * MAX_DRAFT
    server.submit(list(TEXTS[3].encode()), max_new=4)
    server._admit()
    assert server.running[0].estimate.rates == server.pooled.rates
    assert server.running[0].estimate is not server.pooled


def spy_drafter(calls):
    def drafter(ctx, k):
        calls.append(k)
        return [ctx[-1]] * k
    return drafter


def test_adaptive_explores_one_free_row_after_quiet_rounds(tiny):
    """An estimate at 0 never drafts on its own; every EXPLORE quiet rounds it tries one token in
    a row the pass pays anyway, so it can see acceptance come back. Off and static never explore."""
    for policy, want in (("adaptive", [1, 1]), ("off", []), ("3", [3] * 12)):
        calls = []
        server = Server(tiny, tiny.new_pool(64, 16), Policy.parse(policy), max_batch=1, cost=COST,
                        drafter=spy_drafter(calls))
        server.pooled.rates = [0.0] * MAX_DRAFT
        server.submit(list(TEXTS[1].encode()), max_new=2 * EXPLORE + 8)
        ks = []
        for _ in range(2 * EXPLORE + 1):
            ks.append(server.step().ks.get(0, 0))
            if policy == "adaptive":
                server.running[0].estimate.rates = [0.0] * MAX_DRAFT
        assert calls[:len(want)] == want, policy
        if policy == "adaptive":
            assert [i for i, k in enumerate(ks) if k] == [EXPLORE - 1, 2 * EXPLORE - 1]


def test_exploring_never_adds_a_gemm(small):
    """Sixteen requests on sixteen slots leave no free row: no exploration, one gemm a step."""
    calls = []
    server = Server(small, small.new_pool(16 * 12, 4), Policy("adaptive"), max_batch=16, cost=COST,
                    drafter=spy_drafter(calls))
    server.pooled.rates = [0.0] * MAX_DRAFT
    for n in range(1, 17):
        server.submit([1] * n, max_new=2 * EXPLORE + 2)
    server.step()  # the prompts
    for _ in range(2 * EXPLORE):
        assert server.step().blocks == 1
    assert calls == []


def _looks_and_drafts(server, steps):
    """Each step's (requests looked up, requests drafting, whether it stood aside)."""
    out = []
    for _ in range(steps):
        report = server.step()
        out.append((server.looked_up, sum(k > 0 for k in report.ks.values()), server.aside))
    return out


def test_a_policy_whose_looks_do_not_pay_stands_aside_and_probes_ever_less_often(tiny):
    """Where what a look earns is below what the policy's own work on a request costs
    (``look_seconds``), once fifty looks are valued, the server runs plain decoding's step,
    nothing looked up and no draft, but for probes, which look every request up and measure
    again: one step in two, then in four, in eight, and from then on one in EXPLORE, while
    every probe finds looks still not paying. Where looks earn more, it never stands aside."""
    texts = [TEXTS[0] * 2, TEXTS[2] * 2]  # code and a tool call, each said twice: drafts that pay
    dear = dataclasses.replace(CHEAP, look_seconds=1.0)  # no draft earns a second a request
    for cost, stands in ((dear, True), (CHEAP, False)):
        server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), max_batch=2, cost=cost)
        for text in texts * 4:
            server.submit(list(text.encode()), max_new=6 * EXPLORE)
        steps = _looks_and_drafts(server, 6 * EXPLORE)
        aside = [i for i, (_, _, stood) in enumerate(steps) if stood]
        assert server.looks_valued >= 50
        if not stands:
            assert aside == [] and server.look_value > cost.look_seconds
            continue
        assert server.look_value < cost.look_seconds
        assert not server.idle()  # traffic for every step read: an idle step looks nothing up
        after = steps[aside[0]:aside[0] + 2 * EXPLORE]
        looking = [i for i, (looked, _, _) in enumerate(after) if looked]
        assert looking == [1, 1 + 4, 1 + 4 + 8, 1 + 4 + 8 + EXPLORE], after
        assert all(drafting == 0 for i, (_, drafting, _) in enumerate(after) if i not in looking)


def test_a_probe_scans_and_every_other_look_goes_through_the_index(tiny, monkeypatch):
    """A look the policy will make again next step goes through the request's index (a build
    costs three or four scans); a probe while the policy stands aside scans the context instead."""
    import tinyllm.serve as serve

    calls, match, scan = [], serve.MatchIndex.match, serve.lookup_match
    monkeypatch.setattr(serve.MatchIndex, "match", lambda self, ctx, k: calls.append("index") or match(self, ctx, k))
    monkeypatch.setattr(serve, "lookup_match", lambda ctx, k: calls.append("scan") or scan(ctx, k))
    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), max_batch=2,
                    cost=dataclasses.replace(CHEAP, look_seconds=1.0))  # no draft earns a second: it stands aside
    for text in [TEXTS[0] * 2, TEXTS[2] * 2] * 4:
        server.submit(list(text.encode()), max_new=4 * EXPLORE)
    looks = []
    for _ in range(6 * EXPLORE):
        calls.clear()
        server.step()
        if calls:
            looks.append((server._steps_aside > 0, set(calls)))
    probes = [kinds for probe, kinds in looks if probe]
    assert probes and all(kinds == {"scan"} for kinds in probes), looks
    assert all(kinds == {"index"} for probe, kinds in looks if not probe), looks


def test_the_drafter_finds_the_steps_lookup_whatever_sequence_it_is_handed(tiny, monkeypatch):
    """The step's drafter call finds the look the policy made, given the context as a list, a
    tuple or an array, and scans nothing again."""
    import numpy as np

    import tinyllm.serve as serve

    server = Server(tiny, tiny.new_pool(64, 16), Policy("adaptive"), cost=CHEAP)
    server.submit(list((TEXTS[0] * 2).encode()), max_new=8)
    server.step()
    server._lanes()  # this step's looks
    scans = []
    monkeypatch.setattr(serve, "lookup_match", lambda ctx, k: scans.append(k) or (0, []))
    ctx = server.running[0].prompt + server.running[0].out.tokens
    draft = server._looked_up_draft(ctx, 4)
    assert len(draft) == 4
    assert server._looked_up_draft(tuple(ctx), 4) == server._looked_up_draft(np.array(ctx), 4) == draft
    assert scans == []


def test_no_request_is_looked_up_where_no_draft_row_could_be_fed(small):
    """Sixteen requests on sixteen slots and an empty bank: every k is 0 whatever a lookup finds
    (no free row, no gemm to spend), so none is made."""
    server = Server(small, small.new_pool(16 * 12, 4), Policy("adaptive"), max_batch=16, cost=COST)
    for n in range(1, 17):
        server.submit([1] * n, max_new=2 * EXPLORE + 2)
    server.step()  # the prompts
    for looked, drafting, _ in _looks_and_drafts(server, EXPLORE):
        assert (looked, drafting) == (0, 0)
    server.bank.balance = 2.0  # a gemm to spend once the last pass is settled: now a draft may be fed
    assert server.step() and server.looked_up == 16


def test_bad_inputs_refused(small):
    pool = small.new_pool(4, 4)
    with pytest.raises(SpecError):
        Server(small, pool, Policy("adaptive"))
    server = Server(small, pool, Policy("off"))
    for bad in ({"prompt": []}, {"prompt": [1], "max_new": -1}, {"prompt": [1], "max_new": 16},
                {"prompt": [1], "seed": -1}):
        with pytest.raises(SpecError):
            server.submit(**{"max_new": 3, **bad})
    for text in ("", "fast", "16", "0"):
        with pytest.raises(SpecError):
            Policy.parse(text)


# --- the policy (sections 2.1 to 2.3) --------------------------------------------------------

def test_acceptance_update_sees_only_what_was_drafted():
    assert Acceptance().rates == [PRIOR] * MAX_DRAFT
    a = Acceptance([0.5] * MAX_DRAFT)
    a.update(0, 0)
    assert a.rates == [0.5] * MAX_DRAFT
    a.update(4, 2)  # positions 1, 2 accepted, 3 rejected, 4 not tried
    assert a.rates[:4] == [0.65, 0.65, 0.35, 0.5] and a.rates[4:] == [0.5] * (MAX_DRAFT - 4)
    a.update(2, 2)  # both accepted: position 3 not tried
    assert a.rates[:3] == [0.755, 0.755, 0.35]
    with pytest.raises(SpecError):
        a.update(2, 3)


def test_expected_tokens_hand_example():
    rates = [0.8, 0.5, 0.25]
    assert expected_tokens(rates, 0) == 1.0
    assert expected_tokens(rates, 1) == pytest.approx(1.8)
    assert expected_tokens(rates, 3) == pytest.approx(1 + 0.8 + 0.4 + 0.1)
    assert expected_tokens([0.6] * 15, 15) == pytest.approx((1 - 0.6 ** 16) / 0.4)


def test_gemm_blocks_count_the_fullest_slot():
    assert gemm_blocks([]) == 0
    assert gemm_blocks(list(range(16))) == 1
    assert gemm_blocks(list(range(5, 22))) == 2
    assert gemm_blocks([3, 19, 35, 4]) == 3


def brute_force(lanes, cost):
    """Every combination of ks: the best goodput."""
    return max(goodput(lanes, ks, cost) for ks in itertools.product(*[range(lane.cap + 1) for lane in lanes]))


@pytest.mark.parametrize("seed", range(12))
def test_adaptive_close_to_brute_force(seed):
    rnd = random.Random(seed)
    lanes = [Lane(rnd.randrange(64), 1, rnd.randint(0, 4), [rnd.choice([0.1, 0.5, 0.9])] * MAX_DRAFT)
             for _ in range(rnd.randint(1, 4))]
    ks = adaptive_ks(lanes, COST)
    assert all(0 <= k <= lane.cap for k, lane in zip(ks, lanes))
    assert goodput(lanes, ks, COST) >= 0.97 * brute_force(lanes, COST)
    assert goodput(lanes, ks, COST) >= goodput(lanes, [0] * len(lanes), COST)


def test_adaptive_drafts_into_free_slots_and_stops_at_a_new_gemm():
    """One request: 15 free slots, a long draft. Sixteen requests on sixteen slots: any draft
    costs a second gemm (twice the time) for at most 0.8 x 16 more tokens, so none drafts."""
    sure = [0.8] * MAX_DRAFT
    assert adaptive_ks([Lane(40, 1, 15, sure)], COST) == [15]
    full = [Lane(p, 1, 15, sure) for p in range(32, 48)]
    assert adaptive_ks(full, COST) == [0] * 16
    # Same acceptance, one request: an acceptance-only rule would draft the same at both loads.
    assert choose_ks(Policy("static", 4), full, COST) == [4] * 16


def test_adaptive_fills_a_gemm_the_pass_already_pays():
    """Two requests at one slot pay two gemms anyway: the second gemm's 15 other slots take drafts."""
    sure = [0.9] * MAX_DRAFT
    ks = adaptive_ks([Lane(3, 1, 15, sure), Lane(19, 1, 15, sure)], COST)
    assert sum(ks) >= 15 and ks[0] == 15


def test_policies_parse_and_caps():
    assert Policy.parse("4") == Policy("static", 4)
    lanes = [Lane(0, 1, 2, [0.5] * MAX_DRAFT), Lane(5, 3, 9, [0.5] * MAX_DRAFT)]
    assert choose_ks(Policy("static", 4), lanes, None) == [2, 4]
    assert choose_ks(Policy("off"), lanes, None) == [0, 0]


def test_profile_gives_a_usable_table(small):
    cost = profile(small, max_blocks=3, repeats=1)
    assert len(cost.block_seconds) == 3 and all(t > 0 for t in cost.block_seconds)
    assert list(cost.block_seconds) == sorted(cost.block_seconds)
    assert cost.row_seconds >= 0 and cost.request_seconds >= 0 and cost.draft_seconds > 0
    assert cost.blocks(5) >= cost.blocks(3)
    assert 0 <= cost.fit_error < float("inf")


def test_profile_prices_the_policys_work_or_0_before_it_is_written(small, monkeypatch):
    """``look_seconds`` is what the policy's own work on a request takes a step; on a learner's
    stubs (chapter 8 profiles before anything is written) the table comes back with it at 0."""
    import tinyllm.serve as serve

    assert profile(small, max_blocks=2, repeats=1).look_seconds > 0

    def unwritten(*args, **kwargs):
        raise NotImplementedError("serve.choose_ks (L10.10): not written yet")

    monkeypatch.setattr(serve, "choose_ks", unwritten)
    table = profile(small, max_blocks=2, repeats=1)
    assert table.look_seconds == 0.0 and table.block_seconds[0] > 0


def test_profile_refuses_a_context_its_spread_cannot_sit_around(small):
    with pytest.raises(SpecError, match="context must be at least 48.*got 40"):
        profile(small, context=40)


def _clocked_forward(monkeypatch, model, seconds, pool_factors=None, verify=None):
    """Make ``model.forward`` take ``seconds(gemms, rows, requests)`` on a fake CPU clock that
    nothing else advances: profile then sees those costs and nothing else. Given ``pool_factors``,
    the ``i``-th pool the forward meets runs ``pool_factors[i]`` times as long. Given ``verify``,
    ``verify_draft`` takes ``verify(first_after_a_pass, drafted, prompt)`` on that clock. Returns
    the pools met, in order (their ids)."""
    import numpy as np

    import tinyllm.serve as serve

    clock, pools, after_pass = [0.0], [], [False]
    real, real_verify = model.forward, serve.verify_draft

    def forward(pool, tables, positions, ids, write=None):
        if id(pool) not in pools:
            pools.append(id(pool))
        gemms = -(-len(ids) // 16) if model.rows_alone else int(np.bincount(np.asarray(positions) % 16).max())
        factor = 1.0 if pool_factors is None else pool_factors[pools.index(id(pool))]
        clock[0] += seconds(gemms, len(ids), len({id(t) for t in tables})) * factor
        after_pass[0] = True
        return real(pool, tables, positions, ids, write)

    def verify_draft(rows, draft, draft_probs, params, prompt, output, rng):
        clock[0] += verify(after_pass[0], len(draft), prompt)
        after_pass[0] = False
        return real_verify(rows, draft, draft_probs, params, prompt, output, rng)

    monkeypatch.setattr(model, "forward", forward)
    if verify is not None:
        monkeypatch.setattr(serve, "verify_draft", verify_draft)
    monkeypatch.setattr(serve.time, "process_time", lambda: clock[0])
    return pools


@pytest.mark.parametrize("rows_alone", [False, True])
def test_profile_fits_a_linear_cost_exactly(small, monkeypatch, rows_alone):
    """A forward costing 5 ms + 2 ms a further gemm + 0.3 ms a row + 0.7 ms a request: the fit
    over the profiled passes gives back those terms, with nothing left over, whether the model
    counts its gemms by the fullest slot or by 16 rows fed alone (and the table says which)."""
    monkeypatch.setattr(TinyLlama, "rows_alone", property(lambda self: rows_alone))
    _clocked_forward(monkeypatch, small, lambda g, rows, reqs: 5e-3 + 2e-3 * (g - 1) + 3e-4 * rows + 7e-4 * reqs)
    cost = profile(small, max_blocks=4, repeats=2)
    assert cost.rows_alone == rows_alone
    assert cost.block_seconds == pytest.approx((5e-3, 7e-3, 9e-3, 11e-3), rel=1e-6)
    assert (cost.row_seconds, cost.request_seconds) == pytest.approx((3e-4, 7e-4), rel=1e-6)
    assert cost.fit_error < 1e-6


def test_profile_prices_a_steps_cold_verification_once(small, monkeypatch):
    """Verification timed as a step runs it: where the first verification after the passes takes
    80 us and each one after it 20 us (and 10 us a drafted token), a request is priced 20 us of it
    and the pass the other 60 us, once; every verification reads a prompt of the profiled context,
    as a request's sampler does at every token. Timed alone, the cold 80 us priced every request."""
    prompts = []

    def verify(after_pass, drafted, prompt):
        prompts.append(len(prompt))
        return (80e-6 if after_pass else 20e-6) + 10e-6 * drafted

    monkeypatch.setattr(TinyLlama, "rows_alone", property(lambda self: False))
    _clocked_forward(monkeypatch, small, lambda g, rows, reqs: 5e-3 + 2e-3 * (g - 1) + 3e-4 * rows + 7e-4 * reqs,
                     verify=verify)
    cost = profile(small, max_blocks=4, repeats=2, context=100)
    assert set(prompts) == {100}
    assert cost.block_seconds == pytest.approx((5.06e-3, 7.06e-3, 9.06e-3, 11.06e-3), rel=1e-6)
    assert (cost.row_seconds, cost.request_seconds) == pytest.approx((3.1e-4, 7.2e-4), rel=1e-6)


def test_profile_keeps_each_pass_at_its_median_pool(small, monkeypatch):
    """Every pass runs on three pools: where the first is half as slow again as the second and the third a quarter
    faster, the table is the middle pool's, the linear cost given back exactly."""
    import tinyllm.serve as serve

    assert serve.PROFILE_POOLS == 3
    monkeypatch.setattr(TinyLlama, "rows_alone", property(lambda self: False))
    pools = _clocked_forward(monkeypatch, small, lambda g, rows, reqs: 5e-3 + 2e-3 * (g - 1) + 3e-4 * rows + 7e-4 * reqs,
                             pool_factors=(1.5, 1.0, 0.75))
    cost = profile(small, max_blocks=4, repeats=2)
    assert len(pools) == 3
    assert cost.block_seconds == pytest.approx((5e-3, 7e-3, 9e-3, 11e-3), rel=1e-6)
    assert (cost.row_seconds, cost.request_seconds) == pytest.approx((3e-4, 7e-4), rel=1e-6)


def test_profile_prices_a_curved_row_cost_over_the_whole_range(small, monkeypatch):
    """Rows cheaper than linear up to 16 and dearer past it (as SmolLM2's passes are): one
    difference of two passes would price a row from one end; the fit stays within a quarter of
    every profiled pass and reports how far it strayed."""
    def curved(g, rows, reqs):
        return 20e-3 + (2e-3 * rows if rows <= 16 else 32e-3 + 3.5e-3 * (rows - 16)) + 4e-3 * reqs

    _clocked_forward(monkeypatch, small, curved)
    cost = profile(small, max_blocks=4, repeats=1)
    assert 0.01 < cost.fit_error < 0.25
    for rows, reqs in ((1, 1), (4, 4), (16, 16), (64, 4)):
        g = -(-rows // 16)
        assert cost.step_seconds(g, rows, reqs) == pytest.approx(curved(g, rows, reqs), rel=cost.fit_error + 1e-9)
