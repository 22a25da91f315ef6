"""Fake targets for the graded generation tests.

A fake target's logits are a fixed function of the ids it has cached, like a real model's: row
``j`` of ``extend`` depends on the cached ids up to and including the ``j``-th fed id. So a target
that keeps a rejected draft's KV answers differently later, and every fed position is recorded so
a write past a request's budget shows.
"""

import operator
from typing import Sequence

import numpy as np

from tinyllm.kvpool import KvPool
from tinyllm.spec import SpecError, rollback


class TableTarget:
    """Logits looked up in a seeded random table by the last ``order`` cached ids.

    Ids before the start of the context read as the padding id ``vocab``. With a ``pool`` the
    target also keeps a block table on it, allocating blocks as positions are written and giving
    them back through :func:`tinyllm.spec.rollback` on ``truncate``.
    """

    def __init__(self, vocab: int, seed: int, order: int = 2, scale: float = 3.0,
                 pool: KvPool | None = None) -> None:
        rng = np.random.default_rng(seed)
        shape = (vocab + 1,) * (order - 1) + (vocab, vocab)
        self.table = (scale * rng.standard_normal(shape)).astype(np.float32)
        self.vocab = vocab
        self.order = order
        self.ids: list[int] = []
        self.fed_positions: list[int] = []
        self.calls = 0
        self.pool = pool
        self.blocks: list[int] = []

    def _logits_at(self, context: Sequence[int]) -> np.ndarray:
        """The row a fresh run of ``context`` gives at its last position."""
        recent = [self.vocab] * self.order + [int(t) for t in context]
        return self.table[tuple(recent[-self.order:])].copy()

    def cached(self) -> int:
        return len(self.ids)

    def extend(self, ids: Sequence[int]) -> list[np.ndarray]:
        ids = [int(t) for t in ids]  # read once: a sequence of the code under test could answer twice differently
        if len(ids) == 0:
            raise SpecError("extend needs at least one id")
        for t in ids:
            if not 0 <= t < self.vocab:
                raise SpecError(f"id {t!r} is outside the vocabulary [0, {self.vocab})")
        self.calls += 1
        rows = []
        for t in ids:
            self.fed_positions.append(len(self.ids))
            self.ids.append(int(t))
            self._write_position()
            rows.append(self._logits_at(self.ids))
        return rows

    def truncate(self, length: int) -> None:
        length = operator.index(length)
        if not 0 <= length <= len(self.ids):
            raise SpecError(f"truncate to {length} with {len(self.ids)} positions cached")
        del self.ids[length:]
        if self.pool is not None:
            rollback(self.pool, self.blocks, length)

    def release(self) -> None:
        """Give every block back (the request is over)."""
        if self.pool is not None:
            rollback(self.pool, self.blocks, 0)
        self.ids.clear()

    def _write_position(self) -> None:
        if self.pool is None:
            return
        slot = (len(self.ids) - 1) % self.pool.block_tokens
        if slot == 0:
            self.blocks.append(self.pool.allocate())
        self.pool.set_fill(self.blocks[-1], slot + 1)


class CycleTarget(TableTarget):
    """A target whose greedy answer after token ``a`` is ``succ[a]``: text that repeats itself.

    The runner-up logits come from the random table, so sampling and penalties still see a full
    distribution.
    """

    def __init__(self, succ: Sequence[int], seed: int = 0, margin: float = 8.0) -> None:
        super().__init__(len(succ), seed, order=1, scale=1.0)
        for a, b in enumerate(succ):
            self.table[a, b] = self.table[a].max() + margin
