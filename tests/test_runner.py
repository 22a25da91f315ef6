"""RunnerTarget over the tiny llama: rows, rollback, the prefix cache, greedy speculation, token trees."""

import numpy as np
import pytest

from test_model import root_path, tree_depths, tree_mask
from tinyllm.model import LlamaConfig, TinyLlama
from tinyllm.runner import RunnerTarget
from tinyllm.sampling import SamplingParams
from tinyllm.spec import SpecConfig, SpecError, blocks_for, generate
from tinyllm.trees import ModelDrafter, PromptLookupDrafter, SuffixTreeDrafter, generate_tree

BT = 4


@pytest.fixture(scope="module")
def model() -> TinyLlama:
    return TinyLlama.random(LlamaConfig(), seed=11)


def fresh_rows(model: TinyLlama, ids: list[int]) -> np.ndarray:
    """Each prefix fed one id at a time into a new target: the reference rows."""
    target = RunnerTarget(model, model.new_pool(32, BT))
    return np.stack([target.extend([t])[0] for t in ids])


def assert_blocks_match(target: RunnerTarget) -> None:
    pool, n = target.pool, target.cached()
    assert len(target.table) == blocks_for(n, pool.block_tokens)
    for i, b in enumerate(target.table):
        assert pool.fill(b) == min(pool.block_tokens, n - i * pool.block_tokens)


def test_extend_returns_one_row_per_id_equal_to_a_fresh_run(model):
    ids = [5, 9, 9, 2, 7, 1, 3, 3, 8, 0, 4]
    target = RunnerTarget(model, model.new_pool(32, BT))
    rows = target.extend(ids[:6]) + target.extend(ids[6:])
    assert len(rows) == len(ids) and all(r.dtype == np.float32 for r in rows)
    assert np.array_equal(np.stack(rows), fresh_rows(model, ids))
    assert target.cached() == len(ids)
    assert_blocks_match(target)


def test_rows_after_rollbacks_equal_a_fresh_run(model):
    rng = np.random.default_rng(4)
    pool = model.new_pool(32, BT)
    target = RunnerTarget(model, pool)
    kept: list[int] = []
    for _ in range(25):
        fed = [int(t) for t in rng.integers(0, 256, int(rng.integers(1, 7)))]
        base = len(kept)
        rows = target.extend(fed)
        assert np.array_equal(rows[0], fresh_rows(model, kept + fed[:1])[-1])
        keep = int(rng.integers(base + 1, base + len(fed) + 1))
        target.truncate(keep)
        kept = (kept + fed)[:keep]
        assert_blocks_match(target)
        assert pool.num_free() == pool.num_blocks - len(target.table)
    final = target.extend([1])[0]
    assert np.array_equal(final, fresh_rows(model, kept + [1])[-1])
    target.release()
    assert pool.num_free() == pool.num_blocks and target.table == []


def test_prefix_cache_shares_full_blocks(model):
    pool = model.new_pool(32, BT)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    first = RunnerTarget(model, pool, prefix_cache=True)
    rows_first = first.extend(prompt)
    first.truncate(len(prompt))
    second = RunnerTarget(model, pool, prefix_cache=True)
    rows_second = second.extend(prompt)
    assert second.table[:2] == first.table[:2] and second.table[2] != first.table[2]
    assert [pool.refcount(b) for b in second.table] == [2, 2, 1]
    assert np.array_equal(np.stack(rows_second), np.stack(rows_first))
    assert np.array_equal(second.extend([7])[0], fresh_rows(model, prompt + [7])[-1])
    first.release()
    assert all(pool.refcount(b) == 1 for b in second.table)


def test_a_rejected_drafts_block_never_enters_the_index(model):
    pool = model.new_pool(32, BT)
    target = RunnerTarget(model, pool, prefix_cache=True)
    target.extend([1, 2, 3, 4, 5, 6])
    target.truncate(6)
    assert pool.lookup([1, 2, 3, 4]) == target.table[0]
    # pending 7 plus a draft of three: the draft fills block 1 and spills into block 2
    target.extend([7, 8, 9, 10])
    block1, block2 = target.table[1], target.table[2]
    target.truncate(7)  # every draft token rejected
    assert not pool.is_registered(block1)
    assert pool.lookup([1, 2, 3, 4, 5, 6, 7, 8]) is None
    assert pool.refcount(block2) == 0
    target.extend([11, 12])
    target.truncate(9)
    assert pool.lookup([1, 2, 3, 4, 5, 6, 7, 11]) == block1


def test_bad_calls_raise_spec_error(model):
    target = RunnerTarget(model, model.new_pool(2, BT))
    with pytest.raises(SpecError, match="vocabulary"):
        target.extend([256])
    with pytest.raises(SpecError, match="truncate to 1"):
        target.truncate(1)
    with pytest.raises(SpecError, match="exhausted"):
        target.extend(list(range(9)))
    assert target.table == [] and target.pool.num_free() == 2


PROMPTS = [
    [10, 20, 30, 40, 50, 10, 20, 30, 40, 50, 10, 20],
    list(b"def f(x): return x\ndef g(x): return x\ndef "),
    [7, 7, 7, 1, 2, 3, 7, 7, 7, 1],
]


@pytest.mark.parametrize("draft", ["ngram", "prompt_lookup"])
def test_greedy_speculation_equals_plain_greedy(model, draft):
    greedy = SamplingParams()
    for prompt in PROMPTS:
        plain = generate(RunnerTarget(model, model.new_pool(64, BT)), SpecConfig.parse("none", 1),
                         prompt, greedy, seed=1, max_new=40, eos=[])
        for k in (1, 4, 8):
            pool = model.new_pool(64, BT)
            target = RunnerTarget(model, pool, prefix_cache=True)
            spec = generate(target, SpecConfig.parse(draft, k), prompt, greedy, seed=1, max_new=40, eos=[])
            assert spec.tokens == plain.tokens, (draft, k, prompt)
            assert spec.stats.target_calls <= plain.stats.target_calls
            assert target.cached() == len(prompt) + len(spec.tokens) - 1
            assert_blocks_match(target)
    assert spec.stats.accepted > 0


# --- extend_tree / keep_path (L10.9) ---------------------------------------------------------

def tree_positions(start: int, parents: list[int]) -> list[int]:
    return [start + d for d in tree_depths(parents)]


def test_extend_tree_rows_equal_fresh_runs_of_each_path(model):
    prefix = [3, 1, 4, 1, 5, 9]
    ids, parents = [2, 6, 5, 3, 5, 8, 9], [-1, 0, 0, 1, 1, 2, 3]
    target = RunnerTarget(model, model.new_pool(32, BT))
    target.extend(prefix)
    rows = target.extend_tree(ids, tree_positions(6, parents), tree_mask(parents))
    assert len(rows) == len(ids) and target.cached() == len(prefix) + len(ids)
    assert_blocks_match(target)
    for j in range(len(ids)):
        path_ids = [ids[i] for i in root_path(parents, j)]
        assert np.array_equal(rows[j], fresh_rows(model, prefix + path_ids)[-1]), j


def test_tree_rounds_then_keep_path_equal_a_fresh_run(model):
    # 30 random rounds: feed a tree, keep a random root path, and the next row is the fresh run's
    rng = np.random.default_rng(9)
    pool = model.new_pool(40, BT)
    target = RunnerTarget(model, pool, prefix_cache=True)
    kept = [int(t) for t in rng.integers(0, 256, 5)]
    target.extend(kept[:-1])
    for _ in range(30):
        n = int(rng.integers(1, 10))
        parents = [-1] + [int(rng.integers(0, j)) for j in range(1, n)]
        ids = [kept[-1]] + [int(t) for t in rng.integers(0, 256, n - 1)]
        start = target.cached()
        rows = target.extend_tree(ids, tree_positions(start, parents), tree_mask(parents))
        leaf = int(rng.integers(0, n))
        path = root_path(parents, leaf)[:int(rng.integers(1, 5))]
        assert np.array_equal(rows[path[-1]], fresh_rows(model, kept[:-1] + [ids[j] for j in path])[-1])
        target.keep_path(start, path)
        kept = kept[:-1] + [ids[j] for j in path] + [int(rng.integers(0, 256))]
        assert target.cached() == len(kept) - 1
        assert_blocks_match(target)
        assert pool.num_free() == pool.num_blocks - len(target.table)
    assert np.array_equal(target.extend([kept[-1]])[0], fresh_rows(model, kept)[-1])
    # keep_path indexed the full blocks it kept: a second request reads their compacted K/V
    second = RunnerTarget(model, pool, prefix_cache=True)
    rows = second.extend(kept)
    assert second.table[:len(kept) // BT] == target.table[:len(kept) // BT]
    assert np.array_equal(np.stack(rows), fresh_rows(model, kept))
    second.release()
    target.release()
    assert pool.num_free() == pool.num_blocks


def test_bad_tree_calls_raise_spec_error_and_give_back_blocks(model):
    pool = model.new_pool(3, BT)
    target = RunnerTarget(model, pool)
    target.extend([1, 2, 3])
    with pytest.raises(SpecError, match="vocabulary"):
        target.extend_tree([4, 300], [3, 4], tree_mask([-1, 0]))
    with pytest.raises(SpecError, match=r"extend_tree by 2 nodes at position 3: positions\[1\] is 5"):
        target.extend_tree([4, 5], [3, 5], tree_mask([-1, 0]))
    with pytest.raises(SpecError, match="exhausted"):
        chain = [-1] + list(range(9))
        target.extend_tree(list(range(10)), tree_positions(3, chain), tree_mask(chain))
    assert target.cached() == 3 and len(target.table) == 1 and pool.num_free() == 2
    with pytest.raises(SpecError, match="no tree is pending"):
        target.keep_path(3, [0])
    target.extend_tree([4, 5, 6], [3, 4, 4], tree_mask([-1, 0, 0]))
    with pytest.raises(SpecError, match="the last tree was fed at 3"):
        target.keep_path(2, [0])
    for path, message in (([1], "must start at the root"), ([0, 1, 2], "node 2 is not a child of node 1"),
                          ([0, 3], "node 3 is not a child of node 0 in the tree of 3 nodes")):
        with pytest.raises(SpecError, match=message):
            target.keep_path(3, path)
    target.keep_path(3, [0, 2])
    assert target.cached() == 5
    assert np.array_equal(target.extend([7])[0], fresh_rows(model, [1, 2, 3, 4, 6, 7])[-1])


@pytest.mark.parametrize("drafter", ["prompt_lookup", "suffix_tree", "model", "model_branching"])
def test_greedy_trees_equal_plain_greedy(model, drafter):
    # the draft model is a different random llama: it mostly guesses wrong, and must change nothing
    draft_model = TinyLlama.random(LlamaConfig(dim=32, n_layers=1, n_heads=2, n_kv_heads=1, hidden=64), seed=5)
    greedy = SamplingParams()
    accepted = 0
    for prompt in PROMPTS:
        plain = generate(RunnerTarget(model, model.new_pool(64, BT)), SpecConfig.parse("none", 1),
                         prompt, greedy, seed=1, max_new=40, eos=[])
        for k in (1, 4, 8):
            make = {"prompt_lookup": lambda: PromptLookupDrafter(k=k),
                    "suffix_tree": lambda: SuffixTreeDrafter(k=k, width=3),
                    "model": lambda: ModelDrafter(draft_model, greedy, k=k),
                    "model_branching": lambda: ModelDrafter(draft_model, greedy, k=k, branch=3)}[drafter]
            pool = model.new_pool(64, BT)
            target = RunnerTarget(model, pool, prefix_cache=True)
            spec = generate_tree(target, make(), prompt, greedy, seed=1, max_new=40, stop_ids=[])
            assert spec.tokens == plain.tokens, (drafter, k, prompt)
            assert target.cached() == len(prompt) + len(spec.tokens) - 1
            assert_blocks_match(target)
            target.release()
            assert pool.num_free() == pool.num_blocks
            accepted += spec.stats.accepted
    assert accepted > 0
