"""A fake target that scores token trees, for the graded tests of L10.9.

Like ``fakes.TableTarget``, its logits are a fixed function of a node's context: the cached ids,
then the ids of the nodes the mask lets it see. Its cache is a real ``KvPool`` with storage: every
position's K and V, in every layer, hold that position's id (tagged by layer and by K or V), and
every call reads the cached ids back from the pool and checks that all layers and V agree. So a
compaction that forgets a layer, forgets V, or leaves a sibling's KV in place changes what the
target answers, or stops it with :class:`KvCorrupt`. A node's row also turns with its position, as
RoPE does: fed at the wrong position, a node gets another row.
"""

import operator
from typing import Sequence

import numpy as np

from tinyllm.kvpool import KvPool
from tinyllm.spec import SpecError, blocks_for, rollback
from tinyllm.trees import compact

LAYER_TAG = 1000


class KvCorrupt(Exception):
    """The pool's K/V disagree between layers or between K and V, or blocks and fills are wrong."""


class TreeTableTarget:
    """Logits from a seeded table, keyed by the last ``order`` ids of a node's context.

    ``keep_path`` compacts the pool with ``compact``: the code under test's, but the reference's
    where the judge works out a drawn request's expected answer, which no code under test may touch.
    """

    def __init__(self, vocab: int, seed: int, order: int = 2, scale: float = 3.0, num_blocks: int = 64,
                 block_tokens: int = 4, layers: int = 2, compact=compact) -> None:
        rng = np.random.default_rng(seed)
        shape = (vocab + 1,) * (order - 1) + (vocab, vocab)
        self.table = (scale * rng.standard_normal(shape)).astype(np.float32)
        self.vocab, self.order = vocab, order
        self.pool = KvPool(num_blocks, block_tokens, layers, 1, 1)
        self.blocks: list[int] = []
        self.length = 0
        self.calls = 0
        self.max_slot = -1              # the highest cache slot ever written
        self.tree_sizes: list[int] = []  # nodes fed by each extend_tree
        self._tree_at: int | None = None
        self._compact = compact

    def _logits_at(self, context: Sequence[int]) -> np.ndarray:
        """The row a fresh run of ``context`` gives at its last position."""
        recent = [self.vocab] * self.order + [int(t) for t in context]
        return self.table[tuple(recent[-self.order:])].copy()

    def cached(self) -> int:
        return self.length

    def _cached_ids(self) -> list[int]:
        """The ids the pool holds at positions ``0..cached()-1``, checked across layers and K/V.

        Every call reads the whole cache, so it is read in one gather; where that finds anything
        amiss (or the table holds what no gather takes), position by position, for the message."""
        bt, n = self.pool.block_tokens, self.length
        table = self.blocks[: -(-n // bt)]
        if len(table) * bt >= n and all(isinstance(b, (int, np.integer)) and not isinstance(b, bool)
                                          and 0 <= b < self.pool.k.shape[1] for b in table):
            at = np.arange(n)
            blocks, slots = np.asarray(table, dtype=np.int64)[at // bt], at % bt
            k, v = self.pool.k[:, blocks, slots, 0, 0], self.pool.v[:, blocks, slots, 0, 0]
            if (np.abs(k) < 2.0 ** 31).all():   # False for NaN too: no cast of a value no id has
                ids = k[0].astype(np.int64) - 1
                tagged = ids + 1 + np.arange(k.shape[0])[:, None] * LAYER_TAG
                if np.array_equal(k, tagged) and np.array_equal(v, -tagged):
                    return ids.tolist()
        return [self._read(p) for p in range(n)]

    def extend(self, ids: Sequence[int]) -> list[np.ndarray]:
        ids = self._ids(ids)
        self.calls += 1
        self._tree_at = None
        context = self._cached_ids()
        rows = []
        for t in ids:
            self._write(self.length, t)
            self.length += 1
            context.append(t)
            rows.append(self._logits_at(context))
        return rows

    def extend_tree(self, ids: Sequence[int], positions: Sequence[int], mask) -> list[np.ndarray]:
        ids, positions = self._ids(ids), [int(p) for p in positions]
        n = len(ids)
        mask = np.asarray(mask)
        if mask.shape != (n, n) or mask.dtype != bool or len(positions) != n:
            raise SpecError(f"a tree of {n} nodes needs positions of length {n} and a ({n}, {n}) bool mask, "
                            f"got {len(positions)} positions and a {mask.dtype} mask of shape {mask.shape}")
        self.calls += 1
        start = self.length
        cached = self._cached_ids()
        for j, t in enumerate(ids):
            self._write(start + j, t)
        self.length += n
        self._tree_at = start
        self.tree_sizes.append(n)
        rows = []
        for j in range(n):
            seen = np.flatnonzero(mask[j])
            row = self._logits_at(cached + [ids[i] for i in seen])
            # The row turns with the position, as RoPE does: the right one is start + (visible nodes) - 1.
            rows.append(np.roll(row, int(positions[j]) - (start + len(seen) - 1)))
        return rows

    def keep_path(self, start: int, path: Sequence[int]) -> None:
        start, path = operator.index(start), [int(i) for i in path]
        if self._tree_at != start:
            raise SpecError(f"keep_path(start={start}) without a tree fed at {start}")
        self._tree_at = None
        self._compact(self.pool, self.blocks, start, path)
        self.length = start + len(path)
        self._check_blocks()

    def truncate(self, length: int) -> None:
        length = operator.index(length)
        if not 0 <= length <= self.length:
            raise SpecError(f"truncate to {length} with {self.length} positions cached")
        rollback(self.pool, self.blocks, length)
        self.length = length
        self._tree_at = None

    def release(self) -> None:
        self.truncate(0)

    def _check_blocks(self) -> None:
        """The table holds exactly the blocks the cached positions need, filled to them."""
        bt = self.pool.block_tokens
        want = [min(bt, self.length - i * bt) for i in range(blocks_for(self.length, bt))]
        fills = [self.pool.fill(b) for b in self.blocks]
        if fills != want:
            raise KvCorrupt(f"{self.length} cached positions in blocks of {bt} need fills {want}; "
                            f"the table holds {fills}")
        in_use = self.pool.num_blocks - self.pool.num_free()
        if in_use != len(self.blocks):
            raise KvCorrupt(f"{in_use} blocks in use for a table of {len(self.blocks)}: blocks leaked")

    def _ids(self, ids: Sequence[int]) -> list[int]:
        ids = [int(t) for t in ids]
        if not ids:
            raise SpecError("feed at least one id")
        bad = [t for t in ids if not 0 <= t < self.vocab]
        if bad:
            raise SpecError(f"id {bad[0]} is outside the vocabulary [0, {self.vocab})")
        return ids

    def _slot(self, position: int) -> tuple[int, int]:
        bt = self.pool.block_tokens
        return self.blocks[position // bt], position % bt

    def _write(self, position: int, token: int) -> None:
        bt = self.pool.block_tokens
        while len(self.blocks) <= position // bt:
            self.blocks.append(self.pool.allocate())
        b, s = self._slot(position)
        tags = np.arange(self.pool.k.shape[0]) * LAYER_TAG
        self.pool.k[:, b, s, 0, 0] = token + 1 + tags
        self.pool.v[:, b, s, 0, 0] = -(token + 1 + tags)
        self.pool.set_fill(b, max(self.pool.fill(b), s + 1))
        self.max_slot = max(self.max_slot, position)

    def _read(self, position: int) -> int:
        b, s = self._slot(position)
        k, v = self.pool.k[:, b, s, 0, 0], self.pool.v[:, b, s, 0, 0]
        token = int(k[0]) - 1
        tags = np.arange(k.shape[0]) * LAYER_TAG
        if not (np.array_equal(k, token + 1 + tags) and np.array_equal(v, -(token + 1 + tags))):
            raise KvCorrupt(f"position {position} holds K {k.tolist()} and V {v.tolist()} across the layers: "
                            f"they disagree (a layer or V not moved)")
        return token


class TreeCycleTarget(TreeTableTarget):
    """A tree target whose greedy answer after token ``a`` is ``succ[a]``: text that repeats."""

    def __init__(self, succ: Sequence[int], seed: int = 0, margin: float = 8.0, **kwargs) -> None:
        super().__init__(len(succ), seed, order=1, scale=1.0, **kwargs)
        for a, b in enumerate(succ):
            self.table[a, b] = self.table[a].max() + margin


class Script:
    """A generator that hands out the given floats in order, for rounds worked by hand.

    ``verify_tree(..., Script([0.7, 0.1, 0.9, 0.5]))`` draws exactly those ``u`` values; ``used``
    counts the draws, and a draw past the end raises ``IndexError`` naming how many were scripted.
    """

    def __init__(self, values: Sequence[float]) -> None:
        self.values = list(values)
        self.used = 0

    def next_f64(self) -> float:
        if self.used >= len(self.values):
            raise IndexError(f"draw {self.used + 1} asked of a script of {len(self.values)} values")
        self.used += 1
        return self.values[self.used - 1]
