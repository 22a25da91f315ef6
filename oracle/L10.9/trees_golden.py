"""Write fixtures/L10.9/trees_golden.json from the reference package (solutions/tinyllm).

    python oracle/L10.9/trees_golden.py --out fixtures/L10.9/trees_golden.json

Four lists of cases, each answered by the reference:
  shape        60 random trees flattened by depth, each {name, start, parents, expect: {depths,
               positions, paths, mask}}, the mask as rows of 0/1.
  suffix_tree  90 calls of SuffixTreeDrafter(k, width, max_ngram, min_ngram).propose(ctx, pending,
               k), each {name, ctx, pending, k, width, max_ngram, min_ngram, expect: {tokens,
               parents}}: periodic and repetitive texts with diverging continuations, no match,
               short contexts.
  verify       120 calls of verify_tree, each {name, tree: {tokens, parents, probs}, rows, params,
               prompt, output, seed, expect: {tokens, path, logprobs, next_u32}}: float32 logits as
               the hex of their little-endian bytes, draft distributions likewise as float64 (None
               for a deterministic node); children that are often the argmax of their parent's row;
               greedy, penalties and sampled; "chain-" rounds are chains, "iid-" rounds have
               children drawn from one q.
  generate     48 calls of generate_tree on course/tests/tree_fakes.py's TreeTableTarget, each
               {name, target: {vocab, seed, order, scale}, prompt, drafter: {kind, k, ...}, params,
               seed, max_new, eos, expect: {tokens, logprobs, drafted, accepted, target_calls,
               cached}}: prompt lookup and suffix-tree drafters, greedy and sampled.
Each list comes from a seeded numpy generator of its own, and the JSON is written with sorted keys
and a fixed layout, so a second run writes the same bytes."""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(ROOT / "oracle"))

from tinyllm.sampling import SamplingParams, stream  # noqa: E402
from tinyllm.trees import (DraftTree, PromptLookupDrafter, SuffixTreeDrafter, generate_tree,  # noqa: E402
                           tree_depths, tree_mask, tree_paths, tree_positions, verify_tree)

sys.path.append(str(ROOT / "course" / "tests"))
from tree_fakes import TreeTableTarget  # noqa: E402

from golden import write_main  # noqa: E402

SEED = 20261130
KNOBS = [
    {"temperature": 1.0},
    {"temperature": 0.6},
    {"temperature": 1.5},
    {"temperature": 1.0, "top_k": 3},
    {"temperature": 0.8, "top_p": 0.8},
    {"temperature": 1.1, "min_p": 0.1},
    {"temperature": 1.0, "repetition_penalty": 1.4, "presence_penalty": 0.3},
    {"temperature": 0.9, "frequency_penalty": 0.5},
]
PENALTIES = {"repetition_penalty": 1.3, "frequency_penalty": 0.4}


def hexed(a: np.ndarray, dtype: str) -> str:
    return np.asarray(a, dtype=dtype).tobytes().hex()


def random_parents(rng: np.random.Generator, n: int) -> list[int]:
    """A random tree of n nodes flattened by depth: each node's parent is one of the nodes of the
    previous depth."""
    depth_of = [0]
    parents = [-1]
    while len(parents) < n:
        last = max(depth_of)
        layer = [i for i, d in enumerate(depth_of) if d == last]
        for _ in range(int(rng.integers(1, 4))):
            if len(parents) == n:
                break
            parents.append(int(rng.choice(layer)))
            depth_of.append(last + 1)
    order = sorted(range(n), key=lambda i: (depth_of[i], parents[i], i))  # children grouped under their parent
    index = {old: new for new, old in enumerate(order)}
    return [-1] + [index[parents[i]] for i in order[1:]]


def shape_cases() -> list[dict]:
    rng = np.random.default_rng(SEED)
    cases = []
    for i in range(60):
        parents = random_parents(rng, int(rng.integers(1, 13)))
        start = int(rng.integers(0, 40))
        cases.append({"name": f"shape-{i:03d}", "start": start, "parents": parents, "expect": {
            "depths": tree_depths(parents), "positions": tree_positions(start, parents),
            "paths": tree_paths(parents), "mask": tree_mask(parents).astype(int).tolist()}})
    return cases


def suffix_cases() -> list[dict]:
    rng = np.random.default_rng(SEED + 1)
    cases = []
    for i in range(90):
        kind = ["periodic", "branching", "noise", "short"][i % 4]
        if kind == "periodic":
            period = rng.integers(0, 9, size=int(rng.integers(2, 6))).tolist()
            text = (period * 8)[:int(rng.integers(6, 30))]
        elif kind == "branching":
            stem = rng.integers(0, 9, size=int(rng.integers(1, 4))).tolist()
            text = []
            for _ in range(int(rng.integers(2, 6))):
                text += stem + rng.integers(0, 9, size=int(rng.integers(1, 4))).tolist()
            text += stem
        elif kind == "noise":
            text = rng.integers(0, 9, size=int(rng.integers(4, 25))).tolist()
        else:
            text = rng.integers(0, 3, size=int(rng.integers(1, 4))).tolist()
        k, width = int(rng.integers(0, 11)), int(rng.integers(1, 6))
        max_ngram = int(rng.integers(1, 4))
        min_ngram = int(rng.integers(1, max_ngram + 1))
        tree = SuffixTreeDrafter(k, width, max_ngram, min_ngram).propose(text[:-1], text[-1], k)
        cases.append({"name": f"suffix-{kind}-{i:03d}", "ctx": text[:-1], "pending": text[-1], "k": k,
                      "width": width, "max_ngram": max_ngram, "min_ngram": min_ngram,
                      "expect": {"tokens": tree.tokens, "parents": tree.parents}})
    return cases


def verify_cases() -> list[dict]:
    rng = np.random.default_rng(SEED + 2)
    vocab = 8
    cases = []
    for i in range(120):
        kind = ["greedy", "penalty", "sampled", "chain", "iid"][i % 5]
        n = int(rng.integers(1, 9))
        parents = list(range(-1, n - 1)) if kind == "chain" else random_parents(rng, n)
        rows = (2.0 * rng.standard_normal((n, vocab))).astype(np.float32)
        params = {"greedy": {}, "penalty": PENALTIES}.get(kind, KNOBS[i % len(KNOBS)])
        tokens = [int(rng.integers(0, vocab))]
        probs: list[np.ndarray | None] = [None]
        shared_q = {}
        for j in range(1, n):
            p = parents[j]
            if kind == "iid":
                q = shared_q.setdefault(p, rng.dirichlet(np.ones(vocab)))
            else:
                q = rng.dirichlet(np.ones(vocab)) if kind != "greedy" and rng.random() < 0.5 else None
            if q is not None:
                token = int(np.searchsorted(np.cumsum(q), rng.random(), side="right").clip(0, vocab - 1))
                if q[token] == 0.0:
                    token = int(np.argmax(q))
            elif rng.random() < 0.6:
                token = int(np.argmax(rows[p]))
            else:
                token = int(rng.integers(0, vocab))
            tokens.append(token)
            probs.append(q)
        has_q = any(q is not None for q in probs)
        tree = DraftTree(tokens, parents, probs if has_q else None)
        prompt = rng.integers(0, vocab, size=int(rng.integers(0, 5))).tolist()
        output = rng.integers(0, vocab, size=int(rng.integers(0, 4))).tolist()
        seed = int(rng.integers(0, 2**64, dtype=np.uint64))
        gen = stream(seed)
        v = verify_tree(list(rows), tree, SamplingParams(**params), prompt, output, gen)
        cases.append({"name": f"{kind}-{i:03d}", "rows": [hexed(r, "<f4") for r in rows],
                      "tree": {"tokens": tokens, "parents": parents,
                               "probs": None if not has_q else [None if q is None else hexed(q, "<f8") for q in probs]},
                      "params": params, "prompt": prompt, "output": output, "seed": seed,
                      "expect": {"tokens": v.tokens, "path": v.path, "logprobs": v.logprobs,
                                 "next_u32": gen.next_u32()}})
    return cases


def drafter_of(spec: dict):
    if spec["kind"] == "prompt_lookup":
        return PromptLookupDrafter(spec["k"])
    return SuffixTreeDrafter(spec["k"], spec["width"])


def generate_cases() -> list[dict]:
    rng = np.random.default_rng(SEED + 3)
    cases = []
    for i in range(48):
        target = {"vocab": 6, "seed": int(rng.integers(0, 1000)), "order": int(rng.integers(1, 3)), "scale": 3.0}
        period = rng.integers(0, 6, size=int(rng.integers(2, 5))).tolist()
        prompt = (period * 6)[:int(rng.integers(3, 16))]
        drafter = {"kind": "prompt_lookup", "k": int(rng.integers(1, 7))} if i % 3 == 0 else \
            {"kind": "suffix_tree", "k": int(rng.integers(1, 11)), "width": int(rng.integers(1, 5))}
        params = {} if i % 4 == 0 else PENALTIES if i % 4 == 1 else KNOBS[i % len(KNOBS)]
        eos = [int(rng.integers(0, 6))] if i % 5 == 4 else []
        seed, max_new = int(rng.integers(0, 2**64, dtype=np.uint64)), int(rng.integers(0, 25))
        fake = TreeTableTarget(**target)
        g = generate_tree(fake, drafter_of(drafter), prompt, SamplingParams(**params), seed, max_new, eos)
        cases.append({"name": f"gen-{drafter['kind']}-{i:03d}", "target": target, "prompt": prompt,
                      "drafter": drafter, "params": params, "seed": seed, "max_new": max_new, "eos": eos,
                      "expect": {"tokens": g.tokens, "logprobs": g.logprobs, "drafted": g.stats.drafted,
                                 "accepted": g.stats.accepted, "target_calls": g.stats.target_calls,
                                 "cached": fake.cached()}})
    return cases


def build() -> dict:
    return {"shape": shape_cases(), "suffix_tree": suffix_cases(), "verify": verify_cases(),
            "generate": generate_cases()}


if __name__ == "__main__":
    write_main(__doc__, build)
