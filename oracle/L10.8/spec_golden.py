"""Write fixtures/L10.8/spec_golden.json from the reference package (solutions/tinyllm).

    python oracle/L10.8/spec_golden.py --out fixtures/L10.8/spec_golden.json

Four lists of cases, each answered by the reference:
  verify         142 calls of verify_draft, each {name, rows, draft, draft_probs, params, prompt,
                 output, seed, expect: {tokens, logprobs, n_accepted, next_u32}}: float32 logits
                 stored as the hex of their little-endian bytes (draft distributions likewise as
                 float64), next_u32 the generator's next draw after the call. 120 greedy, penalty and
                 sampled rounds; then "tie-" (16 greedy rounds, params {}, whose row has a tied
                 maximum and whose draft offers a tied id there, the lowest or a higher one) and
                 "zero-p-" (6 sampled rounds whose draft offers a token top-k filtered out).
  prompt_lookup  206 calls of prompt_lookup, each {name, ctx, k, max_ngram, min_ngram, draft}: 150
                 periodic, repetitive, no-match, short and phrase contexts; then "edge-" (contexts of
                 exactly max_ngram + 1 tokens, and constant runs of 1 to 8 tokens).
  ngram          130 calls of ngram_draft, each {name, ctx, k, n, draft}: periodic, repetitive,
                 runs of one token, no-match, short, phrases in noise, followers tied.
  generate       56 calls of generate on course/tests/fakes.py's TableTarget, each {name, target:
                 {vocab, seed, order, scale}, prompt, draft, k, params, seed, max_new, eos, expect:
                 {tokens, logprobs, drafted, accepted, target_calls, cached}}, cached being the
                 target's cached() after the call: every draft kind, greedy and sampled, k from 1 to
                 8; "gen-eos-" cases end at an EOS inside an accepted run.
The first two lists' original cases come from one seeded numpy generator, each later section from
a seeded generator of its own, and the JSON is written with sorted keys and a fixed layout, so a
second run writes the same bytes."""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(ROOT / "oracle"))

from tinyllm.sampling import SamplingParams, apply_penalties, distribution, stream  # noqa: E402
from tinyllm.spec import Draft, SpecConfig, generate, ngram_draft, prompt_lookup, verify_draft  # noqa: E402

# The fake target the graded generation tests use; it imports tinyllm.*, found in solutions/ above.
sys.path.append(str(ROOT / "course" / "tests"))
from fakes import TableTarget  # noqa: E402

from golden import write_main  # noqa: E402

SEED = 20261129

# The sampling knobs of the sampled cases, each alone and in a few combinations.
KNOBS = [
    {"temperature": 1.0},
    {"temperature": 0.5},
    {"temperature": 1.7},
    {"temperature": 1.0, "top_k": 3},
    {"temperature": 0.8, "top_p": 0.7},
    {"temperature": 1.2, "min_p": 0.1},
    {"temperature": 1.0, "repetition_penalty": 1.4},
    {"temperature": 1.0, "presence_penalty": 0.6},
    {"temperature": 0.9, "frequency_penalty": 0.4},
    {"temperature": 0.7, "top_k": 5, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.2,
     "presence_penalty": 0.3, "frequency_penalty": 0.2},
]


def hex32(row: np.ndarray) -> str:
    return np.asarray(row, dtype="<f4").tobytes().hex()


def hex64(row: np.ndarray) -> str:
    return np.asarray(row, dtype="<f8").tobytes().hex()


def seed64(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**64, dtype=np.uint64))


def draft_distribution(rng: np.random.Generator, vocab: int, token: int) -> np.ndarray:
    """A random distribution that gives ``token`` a good share of the mass."""
    q = rng.dirichlet(np.full(vocab, 0.5))
    q = 0.5 * q + 0.5 * np.eye(vocab)[token] * rng.uniform(0.2, 1.0)
    return q / q.sum()


def agreeing_draft(rng, rows, params, prompt, output, agree: int, with_probs: bool):
    """A draft that follows the target's most likely token for ``agree`` positions, then strays."""
    draft, probs, seen = [], [], list(output)
    vocab = rows[0].shape[0]
    for i in range(len(rows) - 1):
        p = distribution(rows[i], params, prompt, seen)
        token = int(np.argmax(p)) if i < agree else int(rng.integers(0, vocab))
        draft.append(token)
        seen.append(token)
        if with_probs:
            probs.append(draft_distribution(rng, vocab, token))
    return draft, (probs if with_probs else None)


def answer(name, rows, draft, probs, params: dict, prompt, output, seed) -> dict:
    rng = stream(seed)
    v = verify_draft(rows, draft, probs, SamplingParams(**params), prompt, output, rng)
    return {
        "name": name,
        "rows": [hex32(r) for r in rows],
        "draft": [int(t) for t in draft],
        "draft_probs": None if probs is None else [hex64(q) for q in probs],
        "params": params,
        "prompt": [int(t) for t in prompt],
        "output": [int(t) for t in output],
        "seed": seed,
        "expect": {"tokens": [int(t) for t in v.tokens], "logprobs": [float(x) for x in v.logprobs],
                   "n_accepted": v.n_accepted, "next_u32": rng.next_u32()},
    }


def random_rows(rng, vocab: int, count: int, scale: float) -> list[np.ndarray]:
    return [(scale * rng.standard_normal(vocab)).astype(np.float32) for _ in range(count)]


def context(rng, vocab: int, length: int) -> list[int]:
    return rng.integers(0, vocab, size=length).tolist()


def greedy_cases(rng) -> list[dict]:
    cases = []
    for i in range(28):
        vocab = int(rng.choice([4, 8, 16, 32]))
        m = int(rng.integers(0, 7))
        rows = random_rows(rng, vocab, m + 1, 2.0)
        if i % 7 == 0:  # ties: the lowest id must win
            top = float(rows[0].max())
            rows[0][rng.choice(vocab, size=2, replace=False)] = top
        prompt, output = context(rng, vocab, int(rng.integers(1, 6))), context(rng, vocab, i % 3)
        draft, probs = agreeing_draft(rng, rows, SamplingParams(), prompt, output,
                                      int(rng.integers(0, m + 1)), i % 2 == 1)
        seed = [0, 2**64 - 1][i] if i < 2 else seed64(rng)
        cases.append(answer(f"greedy-{i:03d}", rows, draft, probs, {}, prompt, output, seed))
    return cases


PENALTIES = [{"presence_penalty": 0.8}, {"frequency_penalty": 0.7}, {"repetition_penalty": 1.6},
             {"presence_penalty": 0.3, "frequency_penalty": 0.4, "repetition_penalty": 1.2}]


def penalty_cases(rng) -> list[dict]:
    """Greedy rounds where a token accepted this round is penalized and loses the next argmax."""
    cases = []
    for i in range(20):
        vocab = int(rng.choice([6, 12, 24]))
        params = PENALTIES[i % len(PENALTIES)]
        a, b = (int(t) for t in rng.choice(vocab, size=2, replace=False))
        rows = random_rows(rng, vocab, 4, 1.0)
        rows[0][a] = 4.0
        rows[1][a], rows[1][b] = 3.0, 2.9  # a leads b by less than any penalty takes off a
        prompt = [t for t in context(rng, vocab, 4) if t not in (a, b)]
        prm = SamplingParams(**params)
        # Draft a, then b (the penalized argmax) or a again (the unpenalized one).
        second = b if i % 2 == 0 else a
        draft = [a, second]
        seen = [a, second]
        third = int(np.argmax(apply_penalties(rows[2], prm, prompt, seen)))
        draft.append(third if i % 4 < 2 else int((third + 1) % vocab))
        probs = [draft_distribution(rng, vocab, t) for t in draft] if i % 3 == 0 else None
        cases.append(answer(f"greedy-penalty-{i:03d}", rows, draft, probs, params, prompt, [],
                            seed64(rng)))
    return cases


def sampled_cases(rng) -> list[dict]:
    cases = []
    for i in range(72):
        vocab = int(rng.choice([3, 5, 8, 16, 32, 50]))
        m = int(rng.integers(0, 6)) if i % 9 else 0
        params = KNOBS[i % len(KNOBS)]
        rows = random_rows(rng, vocab, m + 1, float(rng.choice([1.0, 2.5, 4.0])))
        prompt, output = context(rng, vocab, int(rng.integers(1, 6))), context(rng, vocab, i % 4)
        draft, probs = agreeing_draft(rng, rows, SamplingParams(**params), prompt, output,
                                      int(rng.integers(0, m + 1)), (i // 2) % 2 == 0)
        cases.append(answer(f"sampled-{i:03d}", rows, draft, probs, params, prompt, output,
                            seed64(rng)))
    return cases


def lookup_cases(rng) -> list[dict]:
    contexts = []
    for _ in range(40):  # periodic text, sometimes with a broken period at the start
        period = rng.integers(0, 20, size=int(rng.integers(1, 8))).tolist()
        ctx = (context(rng, 20, int(rng.integers(0, 4))) + period * 12)[:int(rng.integers(2, 40))]
        contexts.append(("periodic", ctx))
    for _ in range(50):  # long and repetitive: the first and the latest occurrence differ
        ctx = context(rng, int(rng.integers(2, 5)), int(rng.integers(40, 200)))
        contexts.append(("repetitive", ctx))
    for _ in range(25):  # all different: nothing to copy
        contexts.append(("no-match", rng.permutation(64)[:int(rng.integers(1, 30))].tolist()))
    for i in range(15):  # no longer than the longest suffix tried
        contexts.append(("short", context(rng, 3, i % 5)))
    for _ in range(20):  # phrases repeated at random places in noise
        phrases = [context(rng, 50, int(rng.integers(2, 6))) for _ in range(3)]
        ctx = []
        while len(ctx) < 60:
            ctx += phrases[int(rng.integers(0, 3))] if rng.random() < 0.6 else context(rng, 50, 2)
        contexts.append(("phrases", ctx))
    cases = []
    for i, (kind, ctx) in enumerate(contexts):
        max_ngram = int(rng.integers(1, 6))
        min_ngram = int(rng.integers(1, max_ngram + 1)) if i % 3 == 0 else 1
        k = int(rng.integers(1, 11))
        cases.append({"name": f"{kind}-{i:03d}", "ctx": ctx, "k": k, "max_ngram": max_ngram,
                      "min_ngram": min_ngram, "draft": prompt_lookup(ctx, k, max_ngram, min_ngram)})
    return cases


def lookup_edge_cases(rng) -> list[dict]:
    """Contexts of exactly n + 1 tokens (one candidate start) and constant runs."""
    contexts = []
    for n in range(1, 7):
        for j in range(4):
            ctx = [int(rng.integers(0, 9))] * (n + 1) if j == 0 else context(rng, 2 + j % 2, n + 1)
            contexts.append((ctx, n, 1 if j < 3 else n))
    for length in range(1, 9):
        for max_ngram in (1, 2, 3, 4):
            contexts.append(([int(rng.integers(0, 9))] * length, max_ngram, 1 if max_ngram < 4 else 2))
    cases = []
    for i, (ctx, max_ngram, min_ngram) in enumerate(contexts):
        k = int(rng.integers(1, 9))
        cases.append({"name": f"edge-{i:03d}", "ctx": ctx, "k": k, "max_ngram": max_ngram,
                      "min_ngram": min_ngram, "draft": prompt_lookup(ctx, k, max_ngram, min_ngram)})
    return cases


def tie_cases(rng) -> list[dict]:
    """Greedy rounds whose row ``j`` has a tied maximum: the draft offers a tied id there, the lowest
    (kept) or a higher one (rejected: the lowest tied id is emitted). ``j == m`` ties the bonus row."""
    cases = []
    for i in range(16):
        vocab = int(rng.choice([4, 8, 16]))
        m = int(rng.integers(1, 5))
        rows = random_rows(rng, vocab, m + 1, 2.0)
        j = int(rng.integers(0, m + 1)) if i % 4 == 3 else int(rng.integers(0, m))
        tied = np.sort(rng.choice(vocab, size=2 + i % 2, replace=False))
        rows[j][tied] = np.float32(rows[j].max() + 1.0)
        draft = [int(np.argmax(r)) for r in rows[:m]]
        if j < m:
            draft[j] = int(tied[0] if i % 4 == 2 else tied[-1])
        prompt, output = context(rng, vocab, int(rng.integers(1, 5))), context(rng, vocab, i % 3)
        cases.append(answer(f"tie-{i:03d}", rows, draft, None, {}, prompt, output, seed64(rng)))
    return cases


ZERO_P_KNOBS = [{"temperature": 1.0, "top_k": 2}, {"temperature": 0.7, "top_k": 1},
                {"temperature": 1.3, "top_k": 3, "top_p": 0.9}]


def zero_p_cases(rng) -> list[dict]:
    """Sampled rounds whose draft offers, at some position, a token top-k filtered out (p(x) = 0):
    never accepted, and the residual is then p itself."""
    cases = []
    for i in range(6):
        vocab = int(rng.choice([5, 8, 12]))
        m = int(rng.integers(1, 4))
        params = ZERO_P_KNOBS[i % len(ZERO_P_KNOBS)]
        rows = random_rows(rng, vocab, m + 1, 2.0)
        prompt = context(rng, vocab, 3)
        prm = SamplingParams(**params)
        draft, seen = [], []
        for r in rows[:m]:
            p = distribution(r, prm, prompt, seen)
            token = int(rng.choice(np.flatnonzero(p == 0.0)))
            draft.append(token)
            seen.append(token)
        probs = [draft_distribution(rng, vocab, t) for t in draft] if i % 2 else None
        cases.append(answer(f"zero-p-{i:03d}", rows, draft, probs, params, prompt, [], seed64(rng)))
    return cases


def ngram_cases(rng) -> list[dict]:
    contexts = []
    for _ in range(25):  # periodic text, sometimes with a broken period at the start
        period = rng.integers(0, 12, size=int(rng.integers(1, 6))).tolist()
        contexts.append(("periodic", (context(rng, 12, int(rng.integers(0, 4))) + period * 10)
                         [:int(rng.integers(3, 30))]))
    for _ in range(30):  # repetitive over a small vocabulary: counts and ties decide
        contexts.append(("repetitive", context(rng, int(rng.integers(2, 5)), int(rng.integers(6, 60)))))
    for i in range(15):  # a run of one repeated token, after a short head or none
        head = context(rng, 6, int(rng.integers(0, 4))) if i % 2 else []
        contexts.append(("run", head + [int(rng.integers(0, 6))] * int(rng.integers(1, 9))))
    for _ in range(15):  # all different: nothing to count
        contexts.append(("no-match", rng.permutation(40)[:int(rng.integers(1, 20))].tolist()))
    for i in range(10):  # no longer than the longest context tried
        contexts.append(("short", context(rng, 3, i % 4)))
    for _ in range(15):  # phrases repeated at random places in noise
        phrases = [context(rng, 30, int(rng.integers(2, 5))) for _ in range(3)]
        ctx = []
        while len(ctx) < 40:
            ctx += phrases[int(rng.integers(0, 3))] if rng.random() < 0.6 else context(rng, 30, 2)
        contexts.append(("phrases", ctx))
    for i in range(20):  # the suffix was followed by two tokens equally often
        a, b, c = (int(t) for t in rng.choice(10, size=3, replace=False))
        first, second = (a, b) if i % 2 else (b, a)
        ctx = [c, first] + context(rng, 10, 2) + [c, second] + context(rng, 10, int(rng.integers(0, 3))) + [c]
        contexts.append(("ties", ctx))
    cases = []
    for i, (kind, ctx) in enumerate(contexts):
        n = int(rng.integers(2, 6)) if i % 10 else 1
        k = int(rng.integers(1, 9))
        cases.append({"name": f"{kind}-{i:03d}", "ctx": ctx, "k": k, "n": n,
                      "draft": ngram_draft(ctx, k, n)})
    return cases


GEN_KNOBS = [
    {"temperature": 1.0},
    {"temperature": 0.7},
    {"temperature": 0.5, "top_k": 3},
    {"temperature": 1.2, "repetition_penalty": 1.2},
    {"temperature": 0.9, "presence_penalty": 0.3, "frequency_penalty": 0.2},
    {"temperature": 0.8, "top_p": 0.9},
    {"temperature": 1.0, "min_p": 0.05},
]
GREEDY_KNOBS = [{}, {}, {"repetition_penalty": 1.3, "frequency_penalty": 0.2}]


def own_text(target: TableTarget, start: int, length: int) -> list[int]:
    """``length`` tokens the target continues greedily from ``start``."""
    text = [start]
    while len(text) < length:
        text.append(int(np.argmax(target._logits_at(text))))
    return text


def trace(name: str, spec: dict, prompt: list[int], draft: Draft, k: int, params: dict, seed: int,
          max_new: int, eos: list[int]) -> dict:
    target = TableTarget(spec["vocab"], spec["seed"], spec["order"], spec["scale"])
    g = generate(target, SpecConfig(draft, k), prompt, SamplingParams(**params), seed, max_new, eos)
    return {
        "name": name, "target": spec, "prompt": prompt, "draft": draft.value, "k": k, "params": params,
        "seed": seed, "max_new": max_new, "eos": eos,
        "expect": {"tokens": [int(t) for t in g.tokens], "logprobs": [float(x) for x in g.logprobs],
                   "drafted": g.stats.drafted, "accepted": g.stats.accepted,
                   "target_calls": g.stats.target_calls, "cached": target.cached()},
    }


def generation_cases(rng) -> list[dict]:
    """Whole requests on TableTarget: peaked tables make repetitive text, so drafts are often kept
    and often rejected; the stats and the target's cached length are recorded with the tokens."""
    cases = []
    for i in range(48):
        draft = list(Draft)[i % 3]
        sampled = i % 4 != 0
        params = GEN_KNOBS[(i // 4 * 3 + i % 4) % len(GEN_KNOBS)] if sampled else GREEDY_KNOBS[i // 4 % 3]
        vocab = int(rng.integers(6, 13))
        spec = {"vocab": vocab, "seed": int(rng.integers(0, 10_000)), "order": int(rng.choice([1, 2])),
                "scale": float(rng.choice([3.0, 4.0, 6.0]))}
        if i % 2:
            prompt = (context(rng, vocab, int(rng.integers(2, 5))) * 8)[:int(rng.integers(3, 17))]
        else:  # text the target writes itself greedily: its drafts are mostly kept
            prompt = own_text(TableTarget(**spec), int(rng.integers(0, vocab)), int(rng.integers(3, 17)))
        k = 1 + i % 8
        seed = seed64(rng) if i % 3 == 1 else int(rng.integers(0, 1000))
        max_new = int(rng.integers(8, 41))
        eos = [int(rng.integers(0, vocab))] if i % 5 == 2 else [prompt[-2]] if i % 7 == 3 else []
        name = f"gen-{i:03d}-{draft.value}-{'sampled' if sampled else 'greedy'}"
        cases.append(trace(name, spec, prompt, draft, k, params, seed, max_new, eos))
    for i in range(8):
        # The EOS is the third token of the target's own continuation, so it arrives inside an
        # accepted run: the draft tokens after it are accepted (and counted) but never emitted.
        draft = [Draft.PROMPT_LOOKUP, Draft.NGRAM][i % 2]
        params = [{}, {"temperature": 0.5}][i // 2 % 2]
        while True:
            spec = {"vocab": int(rng.integers(5, 8)), "seed": int(rng.integers(0, 10_000)), "order": 1,
                    "scale": 6.0}
            text = own_text(TableTarget(**spec), int(rng.integers(0, spec["vocab"])), 19)
            prompt, ahead = text[:16], text[16:]
            if ahead[2] not in ahead[:2] and ahead[2] in prompt:
                break
        cases.append(trace(f"gen-eos-{i:03d}-{draft.value}-{'sampled' if params else 'greedy'}", spec, prompt,
                           draft, 8, params, seed64(rng), int(rng.integers(10, 30)), [ahead[2]]))
    return cases


def build() -> dict:
    rng = np.random.default_rng(SEED)
    verify = greedy_cases(rng) + penalty_cases(rng) + sampled_cases(rng)
    lookup = lookup_cases(rng)
    # The sections added later draw from generators of their own, so the first ones keep their bytes.
    verify += tie_cases(np.random.default_rng(SEED + 1)) + zero_p_cases(np.random.default_rng(SEED + 2))
    lookup += lookup_edge_cases(np.random.default_rng(SEED + 3))
    return {"verify": verify, "prompt_lookup": lookup,
            "ngram": ngram_cases(np.random.default_rng(SEED + 4)),
            "generate": generation_cases(np.random.default_rng(SEED + 5))}


if __name__ == "__main__":
    write_main(__doc__, build)
