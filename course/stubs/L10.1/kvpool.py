"""KvPool (L10.1): fixed-size KV blocks with reference counts, fills and a prefix index.

A sequence owns a block table, a list of block ids; position ``i`` of the sequence lives in block
``table[i // block_tokens]`` at slot ``i % block_tokens``. Blocks are shared by reference count
(the prefix cache hands one full block to several sequences) and freed when the count reaches 0.
The pool also holds the K/V storage the model writes through block tables. The rules are in
``course/L10.1.md`` section 2.4.
"""

# You write this file; PoolError is given.

from typing import Sequence

import numpy as np


# --- 2.4 KvPool ------------------------------------------------------------------------------

class PoolError(Exception):
    """A misuse of the pool: exhausted, a free block touched, a bad fill or prefix."""


class KvPool:
    """``num_blocks`` blocks of ``block_tokens`` positions each.

    Keep ``num_blocks`` and ``block_tokens`` as attributes; either below 1 raises PoolError. ``k``
    and ``v`` are separate zeroed float32 arrays of shape ``(layers, num_blocks, block_tokens,
    kv_heads, head_dim)``: the given model writes K/V into them through block tables. With
    ``layers``, ``kv_heads`` or ``head_dim`` left at 0 they are empty and the pool only does the
    bookkeeping.
    """

    def __init__(self, num_blocks: int, block_tokens: int, layers: int = 0, kv_heads: int = 0,
                 head_dim: int = 0) -> None:
        raise NotImplementedError("kvpool.KvPool.__init__ (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def allocate(self) -> int:
        """Take a free block: refcount 1, fill 0. PoolError when none is free."""
        raise NotImplementedError("kvpool.KvPool.allocate (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def retain(self, b: int) -> None:
        """One more owner for a block in use; PoolError for a free or unknown block."""
        raise NotImplementedError("kvpool.KvPool.retain (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def release(self, b: int) -> None:
        """One owner fewer; at refcount 0 the block is free and leaves the prefix index.

        Releasing a free or unknown block raises PoolError and changes nothing.
        """
        raise NotImplementedError("kvpool.KvPool.release (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def refcount(self, b: int) -> int:
        """How many owners the block has (0 when free); PoolError for an unknown block."""
        raise NotImplementedError("kvpool.KvPool.refcount (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def fill(self, b: int) -> int:
        """How many of the block's positions hold KV; PoolError for a free block."""
        raise NotImplementedError("kvpool.KvPool.fill (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def set_fill(self, b: int, n: int) -> None:
        """Set the fill to ``n`` in ``[0, block_tokens]``; anything else raises PoolError."""
        raise NotImplementedError("kvpool.KvPool.set_fill (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def num_free(self) -> int:
        """How many blocks are free."""
        raise NotImplementedError("kvpool.KvPool.num_free (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def register(self, tokens: Sequence[int], b: int) -> int:
        """Index full block ``b`` under ``tokens``, every id from the sequence start to its end.

        ``tokens`` must be a whole, non-zero number of blocks and ``b`` full, else PoolError.
        Returns the block now indexed under that prefix: an earlier registration wins.
        """
        raise NotImplementedError("kvpool.KvPool.register (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def lookup(self, tokens: Sequence[int]) -> int | None:
        """The block indexed under this exact prefix, or None."""
        raise NotImplementedError("kvpool.KvPool.lookup (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")

    def is_registered(self, b: int) -> bool:
        """Whether block ``b`` is in the prefix index."""
        raise NotImplementedError("kvpool.KvPool.is_registered (L10.1): not written yet -- "
                                  "see course/L10.1.md section 2.4")
