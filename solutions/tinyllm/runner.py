"""RunnerTarget: the tiny llama behind spec's ``Target`` protocol (given code, L10.8 section 4).

The engine's runner returns one logits row per sequence, so ``extend`` feeds every id as its own
one-token sequence at its own position over the request's blocks, all in one forward; the model's
batch invariance (see :mod:`tinyllm.model`) makes each row bitwise equal to a fresh run of its
prefix, which is what keeps greedy speculative output token for token plain greedy output.

With ``prefix_cache`` on, ``truncate`` registers the full blocks inside the kept length in the
pool's prefix index (a block a rejected draft filled is never full inside the kept length, so it
never enters), and the first ``extend`` shares indexed full blocks of the prompt instead of
allocating its own. Their K/V is not rewritten; their rows are still computed, one per id.

Token trees (L10.9): ``extend_tree`` feeds a tree of nodes after the cached positions in one
:meth:`TinyLlama.forward_tree`, node ``j`` cached at slot ``start + j``; ``keep_path`` then keeps
one root-to-node path through the learner's ``tinyllm.trees.compact``, as ``truncate`` keeps a
prefix through ``rollback``.
"""

from typing import Sequence

import numpy as np

from .kvpool import KvPool, PoolError
from .model import TinyLlama
from .spec import SpecError, blocks_for, rollback


class RunnerTarget:
    """One request's view of the model: its block table, its fed ids and how many are cached."""

    def __init__(self, model: TinyLlama, pool: KvPool, prefix_cache: bool = False) -> None:
        self.model = model
        self.pool = pool
        self.prefix_cache = prefix_cache
        self.table: list[int] = []
        self._ids: list[int] = []
        self._offered = 0  # leading full blocks already offered to the prefix index
        self._tree: tuple[int, np.ndarray] | None = None  # (start, mask) of the last tree fed

    def cached(self) -> int:
        return len(self._ids)

    def extend(self, ids: Sequence[int]) -> list[np.ndarray]:
        """Append ``ids`` in one forward; row ``j`` scores the token after ``ids[j]``."""
        ids = self._checked(ids)
        if not ids:
            return []
        start = len(self._ids)
        shared = self._share_prefix(ids) if start == 0 and self.prefix_cache else 0
        positions = list(range(start, start + len(ids)))
        logits = self._grown(start, len(ids), f"extend by {len(ids)} ids", lambda: self.model.forward(
            self.pool, [self.table] * len(ids), positions, ids, [p >= shared for p in positions]))
        self._ids.extend(ids)
        self._tree = None
        self._set_fills(max(start, shared))
        return list(logits)

    def extend_tree(self, ids: Sequence[int], positions: Sequence[int], mask) -> list[np.ndarray]:
        """Feed a token tree after the cached positions in one forward; row ``j`` scores the token
        after node ``j`` on its root-to-node path (L10.9 section 4).

        ``positions`` and ``mask`` follow the tree rule (position = cached + depth; ``mask[j, i]``
        iff ``i`` is ``j`` or an ancestor of ``j``). ``cached()`` grows by ``len(ids)``: node ``j``
        sits at cache slot ``start + j`` until :meth:`keep_path` or :meth:`truncate`.
        """
        ids = self._checked(ids)
        if not ids:
            return []
        start = len(self._ids)
        logits = self._grown(start, len(ids), f"extend_tree by {len(ids)} nodes", lambda: (
            self.model.forward_tree(self.pool, self.table, start, ids, positions, mask)))
        self._ids.extend(ids)
        self._tree = (start, np.array(mask, dtype=bool))
        self._set_fills(start)
        return list(logits)

    def _checked(self, ids: Sequence[int]) -> list[int]:
        ids = [int(t) for t in ids]
        vocab = self.model.config.vocab
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise SpecError(f"token id {bad[0]} is outside the vocabulary [0, {vocab})")
        return ids

    def _grown(self, start: int, n: int, what: str, forward) -> np.ndarray:
        """Blocks for ``n`` more positions, then ``forward()``; on failure give back what was taken."""
        try:
            while len(self.table) < blocks_for(start + n, self.pool.block_tokens):
                self.table.append(self.pool.allocate())
            return forward()
        except (PoolError, ValueError) as err:
            rollback(self.pool, self.table, start)
            self._offered = min(self._offered, start // self.pool.block_tokens)
            raise SpecError(f"{what} at position {start}: {err}") from err

    def keep_path(self, start: int, path: Sequence[int]) -> None:
        """After a tree fed at ``start``, keep the nodes ``path`` (root first) as positions
        ``start..start+len(path)-1``: the learner's ``compact`` moves their K/V into place and
        gives back the blocks the other nodes used. ``cached()`` becomes ``start + len(path)``.
        """
        from .trees import compact  # the learner's, in L10.9; L10.8's workspace has no trees.py

        path = self._check_path(start, path)
        nodes = self._ids[start:]
        compact(self.pool, self.table, start, path)
        keep = start + len(path)
        need = blocks_for(keep, self.pool.block_tokens)
        if len(self.table) != need:
            raise SpecError(f"compact(start={start}, path={path}) left {len(self.table)} blocks in the table; "
                            f"{keep} positions need {need}")
        self._ids[start:] = [nodes[j] for j in path]
        self._tree = None
        self._offered = min(self._offered, start // self.pool.block_tokens)
        self._offer_full_blocks()

    def _check_path(self, start: int, path: Sequence[int]) -> list[int]:
        if self._tree is None or self._tree[0] != start:
            fed = "no tree is pending" if self._tree is None else f"the last tree was fed at {self._tree[0]}"
            raise SpecError(f"keep_path(start={start!r}): {fed}; call it right after extend_tree")
        mask = self._tree[1]
        path = [int(j) for j in path]
        if not path or path[0] != 0:
            raise SpecError(f"path {path} must start at the root, node 0")
        for d in range(1, len(path)):
            j, parent = path[d], path[d - 1]
            if not parent < j < len(mask) or mask[j].sum() != d + 1 or not mask[j, parent]:
                raise SpecError(f"path {path}: node {j} is not a child of node {parent} in the tree of "
                                f"{len(mask)} nodes")
        return path

    def _set_fills(self, start: int) -> None:
        """Every block from the one holding position ``start`` on is filled up to ``cached()``."""
        bt = self.pool.block_tokens
        for i in range(start // bt, len(self.table)):
            self.pool.set_fill(self.table[i], min(bt, len(self._ids) - i * bt))

    def _share_prefix(self, ids: list[int]) -> int:
        """Take the indexed full blocks that hold a prefix of ``ids``; return the positions covered."""
        bt = self.pool.block_tokens
        for i in range(len(ids) // bt):
            b = self.pool.lookup(ids[:(i + 1) * bt])
            if b is None:
                break
            self.pool.retain(b)
            self.table.append(b)
        self._offered = len(self.table)
        return len(self.table) * bt

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` cached positions; give back the blocks the rest needed."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.cached():
            raise SpecError(f"truncate to {length!r}: the target caches {self.cached()} positions")
        rollback(self.pool, self.table, length)
        del self._ids[length:]
        self._tree = None
        self._offered = min(self._offered, length // self.pool.block_tokens)
        self._offer_full_blocks()

    def _offer_full_blocks(self) -> None:
        """With the prefix cache on, index the full blocks of the cache not offered yet."""
        bt = self.pool.block_tokens
        full = len(self._ids) // bt
        if self.prefix_cache:
            for i in range(self._offered, full):
                self.pool.register(self._ids[:(i + 1) * bt], self.table[i])
            self._offered = full

    def release(self) -> None:
        """Give every block back (one reference each) and forget the cache."""
        for b in self.table:
            self.pool.release(b)
        self.table.clear()
        self._ids.clear()
        self._offered = 0
        self._tree = None
