"""Write fixtures/L10.8/spec_golden.json from the reference package (solutions/tinyllm).

    python oracle/L10.8/spec_golden.py --out fixtures/L10.8/spec_golden.json

Two lists of cases, each answered by the reference:
  verify         120 calls of verify_draft: float32 logits stored as the hex of their
                 little-endian bytes (draft distributions likewise as float64), the expected tokens,
                 logprobs, n_accepted and the generator's next u32 after the call.
  prompt_lookup  150 calls of prompt_lookup and the draft each returns.
Every choice comes from one seeded numpy generator, and the JSON is written with sorted keys and a
fixed layout, so a second run writes the same bytes.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "solutions"))

from tinyllm.sampling import SamplingParams, apply_penalties, distribution, stream  # noqa: E402
from tinyllm.spec import prompt_lookup, verify_draft  # noqa: E402

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
    for i in range(40):  # periodic text, sometimes with a broken period at the start
        period = rng.integers(0, 20, size=int(rng.integers(1, 8))).tolist()
        ctx = (context(rng, 20, int(rng.integers(0, 4))) + period * 12)[:int(rng.integers(2, 40))]
        contexts.append(("periodic", ctx))
    for i in range(50):  # long and repetitive: the first and the latest occurrence differ
        ctx = context(rng, int(rng.integers(2, 5)), int(rng.integers(40, 200)))
        contexts.append(("repetitive", ctx))
    for i in range(25):  # all different: nothing to copy
        contexts.append(("no-match", rng.permutation(64)[:int(rng.integers(1, 30))].tolist()))
    for i in range(15):  # no longer than the longest suffix tried
        contexts.append(("short", context(rng, 3, i % 5)))
    for i in range(20):  # phrases repeated at random places in noise
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


def build() -> dict:
    rng = np.random.default_rng(SEED)
    verify = greedy_cases(rng) + penalty_cases(rng) + sampled_cases(rng)
    return {"verify": verify, "prompt_lookup": lookup_cases(rng)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON")
    out = parser.parse_args().out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(build(), sort_keys=True, indent=1) + "\n")


if __name__ == "__main__":
    main()
