"""KvPool (L10.1): fixed-size KV blocks with reference counts, fills and a prefix index.

A sequence owns a block table, a list of block ids; position ``i`` of the sequence lives in block
``table[i // block_tokens]`` at slot ``i % block_tokens``. Blocks are shared by reference count
(the prefix cache hands one full block to several sequences) and freed when the count reaches 0.
The pool also holds the K/V storage the model writes through block tables. The rules are in
``course/L10.1.md`` section 2.4.
"""

# BEGIN PROMPT
# You write this file; PoolError is given.
# END PROMPT

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
        # BEGIN SOLUTION
        for name, value in (("num_blocks", num_blocks), ("block_tokens", block_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PoolError(f"{name} must be an integer >= 1, got {value!r}")
        self.num_blocks = num_blocks
        self.block_tokens = block_tokens
        self._refs = [0] * num_blocks
        self._fill = [0] * num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # pop() hands out the lowest id first
        self._index: dict[tuple[int, ...], int] = {}
        self._key_of: dict[int, tuple[int, ...]] = {}
        shape = (layers, num_blocks, block_tokens, kv_heads, head_dim)
        self.k = np.zeros(shape, dtype=np.float32)
        self.v = np.zeros(shape, dtype=np.float32)
        # END SOLUTION

    # BEGIN SOLUTION NO PROMPT
    def _check(self, b: int) -> None:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 0 <= b < self.num_blocks:
            raise PoolError(f"block {b!r} does not exist (the pool has blocks 0..{self.num_blocks - 1})")
        if self._refs[b] == 0:
            raise PoolError(f"block {b} is free")
    # END SOLUTION

    def allocate(self) -> int:
        """Take a free block: refcount 1, fill 0. PoolError when none is free."""
        # BEGIN SOLUTION
        if not self._free:
            raise PoolError(f"the pool is exhausted: all {self.num_blocks} blocks are in use")
        b = self._free.pop()
        self._refs[b] = 1
        self._fill[b] = 0
        return b
        # END SOLUTION

    def retain(self, b: int) -> None:
        """One more owner for a block in use; PoolError for a free or unknown block."""
        # BEGIN SOLUTION
        self._check(b)
        self._refs[b] += 1
        # END SOLUTION

    def release(self, b: int) -> None:
        """One owner fewer; at refcount 0 the block is free and leaves the prefix index.

        Releasing a free or unknown block raises PoolError and changes nothing.
        """
        # BEGIN SOLUTION
        self._check(b)
        self._refs[b] -= 1
        if self._refs[b] == 0:
            self._fill[b] = 0
            key = self._key_of.pop(b, None)
            if key is not None:
                del self._index[key]
            self._free.append(b)
        # END SOLUTION

    def refcount(self, b: int) -> int:
        """How many owners the block has (0 when free); PoolError for an unknown block."""
        # BEGIN SOLUTION
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 0 <= b < self.num_blocks:
            raise PoolError(f"block {b!r} does not exist (the pool has blocks 0..{self.num_blocks - 1})")
        return self._refs[b]
        # END SOLUTION

    def fill(self, b: int) -> int:
        """How many of the block's positions hold KV; PoolError for a free block."""
        # BEGIN SOLUTION
        self._check(b)
        return self._fill[b]
        # END SOLUTION

    def set_fill(self, b: int, n: int) -> None:
        """Set the fill to ``n`` in ``[0, block_tokens]``; anything else raises PoolError."""
        # BEGIN SOLUTION
        self._check(b)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.block_tokens:
            raise PoolError(f"fill of block {b} must be in [0, {self.block_tokens}], got {n!r}")
        self._fill[b] = n
        # END SOLUTION

    def num_free(self) -> int:
        """How many blocks are free."""
        # BEGIN SOLUTION
        return len(self._free)
        # END SOLUTION

    def register(self, tokens: Sequence[int], b: int) -> int:
        """Index full block ``b`` under ``tokens``, every id from the sequence start to its end.

        ``tokens`` must be a whole, non-zero number of blocks and ``b`` full, else PoolError.
        Returns the block now indexed under that prefix: an earlier registration wins.
        """
        # BEGIN SOLUTION
        self._check(b)
        key = tuple(int(t) for t in tokens)
        if not key or len(key) % self.block_tokens:
            raise PoolError(f"a prefix must be a whole number of blocks of {self.block_tokens} "
                            f"tokens, got {len(key)}")
        if self._fill[b] != self.block_tokens:
            raise PoolError(f"block {b} holds {self._fill[b]} of {self.block_tokens} positions; "
                            "only full blocks enter the prefix index")
        if key in self._index:
            return self._index[key]
        if b in self._key_of:
            raise PoolError(f"block {b} is already indexed under another prefix")
        self._index[key] = b
        self._key_of[b] = key
        return b
        # END SOLUTION

    def lookup(self, tokens: Sequence[int]) -> int | None:
        """The block indexed under this exact prefix, or None."""
        # BEGIN SOLUTION
        return self._index.get(tuple(int(t) for t in tokens))
        # END SOLUTION

    def is_registered(self, b: int) -> bool:
        """Whether block ``b`` is in the prefix index."""
        # BEGIN SOLUTION
        return b in self._key_of
        # END SOLUTION
