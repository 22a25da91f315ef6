"""Token trees (L10.9): compaction conserves blocks over many random rounds; chains are L10.8's rounds.

The fuzz keeps several sequences on one pool, feeds each a random tree, keeps a random root path
through ``compact``, and after every round checks, from its own record of what each position
should hold, that the table has exactly the blocks the kept positions need, that the fills are
right, that every kept position holds its token in every layer's K and V, and that the pool has
no block in use that no table holds.
"""

import sys
from pathlib import Path

import numpy as np

from tinyllm.kvpool import KvPool
from tinyllm.sampling import SamplingParams
from tinyllm.spec import Draft, SpecConfig, blocks_for, generate, rollback
from tinyllm.trees import PromptLookupDrafter, compact, generate_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "course" / "tests"))
from fakes import TableTarget  # noqa: E402
from tree_fakes import TreeTableTarget  # noqa: E402

ROUNDS = 10_000
LAYERS = 3
TAG = 1000  # layer l stores token + 1 + TAG * l in K, its negation in V


def random_parents(rng: np.random.Generator, n: int) -> list[int]:
    """A tree of ``n`` nodes flattened by depth: each node hangs from a node of the previous depth."""
    parents, depth = [-1], [0]
    while len(parents) < n:
        layer = [i for i, d in enumerate(depth) if d == depth[-1]]
        for p in sorted(rng.choice(layer, size=min(n - len(parents), int(rng.integers(1, 4))))):
            parents.append(int(p))
            depth.append(depth[p] + 1)
    return parents


class Sequence:
    def __init__(self) -> None:
        self.table: list[int] = []
        self.truth: list[int] = []   # the token each cached position must hold


def write(pool: KvPool, seq: Sequence, position: int, token: int) -> None:
    bt = pool.block_tokens
    while len(seq.table) <= position // bt:
        seq.table.append(pool.allocate())
    b, s = seq.table[position // bt], position % bt
    values = token + 1 + TAG * np.arange(LAYERS)
    pool.k[:, b, s, 0, 0] = values
    pool.v[:, b, s, 0, 0] = -values
    pool.set_fill(b, max(pool.fill(b), s + 1))


def problems(pool: KvPool, seq: Sequence) -> str | None:
    bt, n = pool.block_tokens, len(seq.truth)
    if len(seq.table) != blocks_for(n, bt):
        return f"{len(seq.table)} blocks for {n} positions"
    fills = [pool.fill(b) for b in seq.table]
    if fills != [min(bt, n - i * bt) for i in range(len(seq.table))]:
        return f"fills {fills} for {n} positions"
    for p, token in enumerate(seq.truth):
        b, s = seq.table[p // bt], p % bt
        values = token + 1 + TAG * np.arange(LAYERS)
        if not (np.array_equal(pool.k[:, b, s, 0, 0], values) and np.array_equal(pool.v[:, b, s, 0, 0], -values)):
            return (f"position {p} holds K {pool.k[:, b, s, 0, 0].tolist()} and V {pool.v[:, b, s, 0, 0].tolist()} "
                    f"across the layers, not token {token}'s")
    return None


def test_blocks_are_conserved_over_ten_thousand_random_tree_rounds():
    rng = np.random.default_rng(13)
    pool = KvPool(96, 4, LAYERS, 1, 1)
    seqs = [Sequence() for _ in range(4)]
    kept_nodes = released = 0
    for round_ in range(ROUNDS):
        seq = seqs[int(rng.integers(len(seqs)))]
        n = int(rng.integers(1, 13))
        if len(seq.truth) + n > 90 or rng.random() < 0.01:   # the request ends: everything goes back
            released += rollback(pool, seq.table, 0)
            seq.truth.clear()
        start = len(seq.truth)
        parents = random_parents(rng, n)
        tokens = rng.integers(0, 50, size=n).tolist()
        for j, token in enumerate(tokens):
            write(pool, seq, start + j, token)
        path = [int(rng.integers(n))]
        while parents[path[-1]] != -1:
            path.append(parents[path[-1]])
        path = path[::-1][:int(rng.integers(1, len(path) + 1))]
        released += compact(pool, seq.table, start, path)
        seq.truth += [tokens[j] for j in path]
        kept_nodes += len(path)
        wrong = problems(pool, seq)
        assert wrong is None, f"round {round_}, tree {parents} at {start}, path {path}: {wrong}"
        in_use = pool.num_blocks - pool.num_free()
        assert in_use == sum(len(s.table) for s in seqs), f"round {round_}: {in_use} blocks in use"
    for seq in seqs:
        rollback(pool, seq.table, 0)
    assert pool.num_free() == pool.num_blocks, f"{pool.num_blocks - pool.num_free()} blocks leaked"
    assert released > ROUNDS // 4 and kept_nodes > ROUNDS, (released, kept_nodes)


def test_a_chain_drafter_generates_what_l10_8_generates():
    """Prompt lookup as chain trees emits L10.8's tokens, logprobs and counters, greedy and sampled
    (the tree loop has one pass more: the prefill)."""
    rng = np.random.default_rng(7)
    for request in range(40):
        prompt = (rng.integers(0, 6, size=int(rng.integers(2, 5))).tolist() * 4)[:int(rng.integers(2, 14))]
        params = SamplingParams(temperature=[0.0, 0.7, 1.2][request % 3], top_k=[0, 4][request % 2])
        k, max_new, seed = int(rng.integers(1, 7)), int(rng.integers(1, 20)), int(rng.integers(0, 2**63))
        chain = generate(TableTarget(6, request), SpecConfig(Draft.PROMPT_LOOKUP, k), prompt, params, seed, max_new, [])
        tree = generate_tree(TreeTableTarget(6, request), PromptLookupDrafter(k), prompt, params, seed, max_new, [])
        assert tree.tokens == chain.tokens and np.allclose(tree.logprobs, chain.logprobs, rtol=0, atol=1e-12), request
        assert (tree.stats.drafted, tree.stats.accepted) == (chain.stats.drafted, chain.stats.accepted), request
        assert tree.stats.target_calls == chain.stats.target_calls + 1, request
