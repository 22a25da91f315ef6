"""RunnerTarget: the tiny llama behind spec's ``Target`` protocol (given code, L10.8 section 4).

The engine's runner returns one logits row per sequence, so ``extend`` feeds every id as its own
one-token sequence at its own position over the request's blocks, all in one forward; the model's
batch invariance (see :mod:`tinyllm.model`) makes each row bitwise equal to a fresh run of its
prefix, which is what keeps greedy speculative output token for token plain greedy output.

With ``prefix_cache`` on, ``truncate`` registers the full blocks inside the kept length in the
pool's prefix index (a block a rejected draft filled is never full inside the kept length, so it
never enters), and the first ``extend`` shares indexed full blocks of the prompt instead of
allocating its own. Their K/V is not rewritten; their rows are still computed, one per id.
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

    def cached(self) -> int:
        return len(self._ids)

    def extend(self, ids: Sequence[int]) -> list[np.ndarray]:
        """Append ``ids`` in one forward; row ``j`` scores the token after ``ids[j]``."""
        ids = [int(t) for t in ids]
        vocab = self.model.config.vocab
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise SpecError(f"token id {bad[0]} is outside the vocabulary [0, {vocab})")
        if not ids:
            return []
        start = len(self._ids)
        shared = self._share_prefix(ids) if start == 0 and self.prefix_cache else 0
        bt = self.pool.block_tokens
        positions = list(range(start, start + len(ids)))
        try:
            while len(self.table) < blocks_for(start + len(ids), bt):
                self.table.append(self.pool.allocate())
            logits = self.model.forward(self.pool, [self.table] * len(ids), positions, ids,
                                        [p >= shared for p in positions])
        except (PoolError, ValueError) as err:
            rollback(self.pool, self.table, start)
            self._offered = min(self._offered, start // bt)
            raise SpecError(f"extend by {len(ids)} ids at position {start}: {err}") from err
        self._ids.extend(ids)
        for i in range(max(start, shared) // bt, len(self.table)):
            self.pool.set_fill(self.table[i], min(bt, len(self._ids) - i * bt))
        return list(logits)

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
        full = length // self.pool.block_tokens
        self._offered = min(self._offered, full)
        if self.prefix_cache:
            bt = self.pool.block_tokens
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
