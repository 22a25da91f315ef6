"""Draft models and token trees (L10.9).

A drafter proposes a tree of continuations instead of a chain; the target scores every node in
one pass under a tree attention mask; the verifier keeps the longest accepted path (greedy) or
runs accept-or-resample over each node's children (sampled); the accepted path's KV is moved
into place and every other node's blocks are returned. Section numbers refer to the module card
(``course/L10.9.md``); the functions come in the order its section 2 lists them.
"""

# Given: DRAFT_STREAM, TreeError, DraftTree, TreeVerified, Drafter, ModelDrafter's constructor and
# its helpers _read, _feed, _runners_up and release, _check_round and TreeTarget. Yours: the
# fourteen functions that raise NotImplementedError, starting with tree_depths; write them in the
# order of the list at the top of the card's section 2, which describes each. ol tests L10.9 lists
# the tests, ol check L10.9 grades them.

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

# What this module uses from L10.1 and L10.8 (the card's "Needs" row).
from .kvpool import KvPool
from .pcg32 import Pcg32
from .sampling import (SamplingParams, apply_penalties, argmax, distribution, log_softmax_at, sample,
                       stream, walk)
from .spec import (Generated, SpecError, SpecStats, dense_distribution, prompt_lookup, residual,
                   rollback, sample_dense)

DRAFT_STREAM = 55  # the draft model's generator: Pcg32(seed, 55), apart from the request's stream 54


class TreeError(SpecError):
    """A malformed tree, round or path, named with the offending value."""


@dataclass
class DraftTree:
    """A draft flattened by depth: node 0 is the pending token, ``parents[0] == -1``.

    ``probs[i]`` is the distribution node ``i``'s token was drawn from, or None for a token chosen
    deterministically (its q is one-hot); ``probs`` None means every node is deterministic.
    """

    tokens: list[int]
    parents: list[int]
    probs: list[np.ndarray | None] | None = None


@dataclass
class TreeVerified:
    tokens: list[int]      # the accepted nodes' tokens, then one correction or bonus token
    path: list[int]        # the accepted nodes, root first: len(path) == len(tokens)
    logprobs: list[float]


# --- 2.1 The shape of a tree -----------------------------------------------------------------

def tree_depths(parents: Sequence[int]) -> list[int]:
    """Depth of every node: 0 for the root, one more than its parent's (section 2.1).

    Raises :class:`TreeError` unless ``parents[0] == -1``, every other parent comes before its
    child, and depths never decrease along the list (the tree is flattened by depth).
    """
    raise NotImplementedError("trees.tree_depths (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.1")


def tree_mask(parents: Sequence[int]) -> np.ndarray:
    """``mask[j, i]`` is True iff ``i == j`` or ``i`` is an ancestor of ``j`` (section 2.1).

    A node's row is its parent's row plus itself: parents come first, so one pass fills it.
    """
    raise NotImplementedError("trees.tree_mask (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.1")


def tree_positions(start: int, parents: Sequence[int]) -> list[int]:
    """RoPE positions ``start + depth``: siblings share a position (section 2.1)."""
    raise NotImplementedError("trees.tree_positions (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.1")


def tree_paths(parents: Sequence[int]) -> list[list[int]]:
    """Every root-to-leaf path as node indices, root first; leaves in node order (section 2.1)."""
    raise NotImplementedError("trees.tree_paths (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.1")


# --- 2.2 Drafters ----------------------------------------------------------------------------

class Drafter(Protocol):
    def propose(self, ctx: Sequence[int], pending: int, k: int) -> DraftTree:
        """A tree rooted at ``pending`` with at most ``k`` nodes besides the root; ``ctx`` is
        every token before ``pending``."""


def chain_tree(pending: int, draft: Sequence[int], probs: Sequence[np.ndarray] | None = None) -> DraftTree:
    """The chain ``pending, d1 .. dm`` as a tree: ``parents = [-1, 0, 1, .., m-1]`` (section 2.2)."""
    raise NotImplementedError("trees.chain_tree (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.2")


@dataclass
class PromptLookupDrafter:
    """L10.8's prompt lookup over ``ctx + [pending]``, as a chain (section 2.2)."""

    k: int = 4
    max_ngram: int = 3
    min_ngram: int = 1

    def propose(self, ctx: Sequence[int], pending: int, k: int) -> DraftTree:
        """``chain_tree(pending, prompt_lookup(ctx + [pending], min(self.k, k), max_ngram, min_ngram))``."""
        raise NotImplementedError("trees.PromptLookupDrafter.propose (L10.9): not written yet -- "
                                  "see course/L10.9.md section 2.2")


@dataclass
class SuffixTreeDrafter:
    """Continuations of several earlier occurrences of the longest matching suffix, merged (2.2).

    For ``n`` from ``max_ngram`` down to ``min_ngram``, the first ``n`` whose suffix occurred
    earlier decides: up to ``width`` occurrences, latest first, each continued by up to the
    budget ``min(self.k, k)`` tokens (running on into the suffix as prompt lookup does), are merged
    into a trie. A node's count is how many continuations pass through it; the budget's worth of
    nodes with the highest counts are kept (ties to the node created first: the latest text), and
    children are ordered the same way.
    """

    k: int = 8
    width: int = 8
    max_ngram: int = 8
    min_ngram: int = 1

    def propose(self, ctx: Sequence[int], pending: int, k: int) -> DraftTree:
        """The trie of the latest occurrences' continuations in ``ctx + [pending]``, at most
        ``min(self.k, k)`` nodes below the root; the root alone when no suffix occurred earlier."""
        raise NotImplementedError("trees.SuffixTreeDrafter.propose (L10.9): not written yet -- "
                                  "see course/L10.9.md section 2.2")


def trie_tree(root: int, continuations: Sequence[Sequence[int]], budget: int) -> DraftTree:
    """Merge continuations into a trie under ``root``; keep the ``budget`` best-supported nodes,
    flattened breadth-first (section 2.2)."""
    raise NotImplementedError("trees.trie_tree (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.2")


class ModelDrafter:
    """A small llama drafts a chain at the request's temperature and keeps each q (section 2.2).

    At temperature 0 each draft token is the draft's argmax (q one-hot, ``probs`` None); otherwise
    it is drawn from ``q = distribution(row, params, [], [])`` (temperature and filters, no
    penalties) with one ``next_f64`` of the drafter's own generator ``Pcg32(seed, 55)``. With
    ``branch > 1`` the root also gets the draft's next ``branch - 1`` most likely tokens as
    deterministic leaves (ranked by q, or by logit at temperature 0; ties to the lowest id). The
    draft model's own cache keeps what it has already read and is cut back to the common prefix.
    """

    def __init__(self, model, params: SamplingParams = SamplingParams(), k: int = 4, seed: int = 0,
                 branch: int = 1, num_blocks: int = 256, block_tokens: int = 16) -> None:
        from .runner import RunnerTarget  # runner imports this module (keep_path): import it late

        if branch < 1:
            raise TreeError(f"branch must be >= 1, got {branch!r}")
        self.params, self.k, self.branch = params, k, branch
        self.rng = Pcg32(seed, DRAFT_STREAM)
        self.target = RunnerTarget(model, model.new_pool(num_blocks, block_tokens))
        self.fed: list[int] = []
        self.passes = 0

    def propose(self, ctx: Sequence[int], pending: int, k: int) -> DraftTree:
        """A chain of ``min(self.k, k) - siblings`` drafted tokens under ``pending`` (node 1, then
        after the siblings), and ``siblings = min(branch - 1, budget - 1)`` runners-up of the first
        row as leaves of the root (nodes 2 ..); each drafted token's q in ``probs``."""
        raise NotImplementedError("trees.ModelDrafter.propose (L10.9): not written yet -- "
                                  "see course/L10.9.md section 2.2")

    def _read(self, text: list[int]) -> np.ndarray:
        """The draft's row after ``text``, feeding only what its cache does not hold yet."""
        same = 0
        while same < min(len(self.fed), len(text) - 1) and self.fed[same] == text[same]:
            same += 1
        self.target.truncate(same)
        del self.fed[same:]
        return self._feed(text[same:])

    def _feed(self, ids: list[int]) -> np.ndarray:
        self.passes += 1
        self.fed.extend(ids)
        return self.target.extend(ids)[-1]

    def _draw(self, row: np.ndarray) -> tuple[int, np.ndarray | None]:
        """One draft token from ``row`` and the q it was drawn from (None for the argmax at T = 0)."""
        raise NotImplementedError("trees.ModelDrafter._draw (L10.9): not written yet -- "
                                  "see course/L10.9.md section 2.2")

    def _runners_up(self, row: np.ndarray, first: int, m: int) -> list[int]:
        """The ``m`` likeliest ids of ``row`` other than ``first``: by q, or by logit at T = 0."""
        score = row.astype(np.float64) if self.params.temperature == 0.0 else distribution(row, self.params, [], [])
        order = np.lexsort((np.arange(score.shape[0]), -score))
        return [int(t) for t in order if t != first][:m]

    def release(self) -> None:
        """Give the draft model's blocks back."""
        self.target.release()
        self.fed.clear()


# --- 2.3 Verifying a tree --------------------------------------------------------------------

def _check_round(rows, tree: DraftTree) -> tuple[list[np.ndarray], int]:
    """The round's rows as arrays and the vocabulary size; :class:`TreeError` for a malformed tree,
    a row count other than one per node, bad rows, token ids outside the vocabulary, or a q that is
    not a distribution or gives its own token probability 0 (given code, section 2.3)."""
    tree_depths(tree.parents)
    n = len(tree.parents)
    if len(tree.tokens) != n:
        raise TreeError(f"{len(tree.tokens)} tokens for {n} parents")
    rows = [np.asarray(r) for r in rows]
    if len(rows) != n:
        raise TreeError(f"{len(rows)} rows of logits for a tree of {n} nodes: expected one per node")
    vocab = rows[0].shape[0] if rows[0].ndim == 1 else 0
    for i, r in enumerate(rows):
        if r.ndim != 1 or r.shape[0] != vocab or vocab == 0:
            raise TreeError(f"row {i} has shape {r.shape}; every row must be 1-D of length {vocab or '>0'}")
        if np.isnan(r).any() or np.isposinf(r).any() or not np.isfinite(r).any():
            raise TreeError(f"row {i} holds NaN or +inf, or no finite logit")
    for i, t in enumerate(tree.tokens):
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < vocab:
            raise TreeError(f"token {t!r} of node {i} is outside the vocabulary [0, {vocab})")
    if tree.probs is not None:
        if len(tree.probs) != n:
            raise TreeError(f"{len(tree.probs)} draft distributions for a tree of {n} nodes")
        for i, q in enumerate(tree.probs[1:], 1):
            if q is not None:
                q = np.asarray(q, dtype=np.float64)
                if q.shape != (vocab,) or not np.isfinite(q).all() or (q < 0).any() or abs(q.sum() - 1) > 1e-6:
                    raise TreeError(f"the draft distribution of node {i} is not a distribution over {vocab} ids")
                if q[tree.tokens[i]] <= 0.0:
                    raise TreeError(f"node {i}'s distribution gives its own token {tree.tokens[i]} probability 0")
    return rows, vocab


def draft_q(tree: DraftTree, node: int, vocab: int) -> np.ndarray:
    """The q node ``node``'s token was drawn from: ``probs[node]``, or one-hot when it is None."""
    raise NotImplementedError("trees.draft_q (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.3")


def verify_tree(rows, tree: DraftTree, params: SamplingParams, prompt: Sequence[int],
                output: Sequence[int], rng: Pcg32) -> TreeVerified:
    """Walk the tree from the root against one row per node (section 2.3).

    Greedy: at each node take the penalized argmax of its row; move to the first child holding
    it, or emit it and stop (a correction, or the bonus at a leaf). No draws.
    Sampled: at a node with children, ``p`` = its row's distribution; try the children in node
    order: draw ``u_a`` then ``u_r`` (both, always), accept child ``c`` when
    ``u_a < p(c) / q(c)``, else ``p <- residual(p, q)``; after the last child is rejected emit
    ``sample_dense(p, u_r)`` with that child's ``u_r``. At a leaf the bonus is L10.1's ``sample``
    (one draw). Penalties count ``output`` and the tokens emitted so far; logprobs as L10.8's.
    """
    raise NotImplementedError("trees.verify_tree (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.3")


# --- 2.4 Compaction --------------------------------------------------------------------------

def compact(pool: KvPool, table: list[int], start: int, path: Sequence[int]) -> int:
    """Move the kept nodes' K/V into place, then roll back; return the blocks released (2.4).

    Node ``path[d]`` was written at slot ``start + path[d]``; its K and V, every layer, move to
    slot ``start + d``. ``path`` rises strictly from 0, so no slot is overwritten before it is
    read. Then L10.8's ``rollback(pool, table, start + len(path))``.
    """
    raise NotImplementedError("trees.compact (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.4")


# --- 2.5 The generation loop -----------------------------------------------------------------

class TreeTarget(Protocol):
    """A target that scores a whole tree in one pass (``RunnerTarget`` is one)."""

    def cached(self) -> int: ...
    def extend(self, ids: Sequence[int]) -> list[np.ndarray]: ...
    def extend_tree(self, ids: Sequence[int], positions: Sequence[int], mask: np.ndarray) -> list[np.ndarray]: ...
    def keep_path(self, start: int, path: Sequence[int]) -> None: ...


def generate_tree(target: TreeTarget, drafter: Drafter, prompt: Sequence[int], params: SamplingParams,
                  seed: int, max_new: int, stop_ids: Sequence[int],
                  on_token: Callable[[int, float], bool] | None = None) -> Generated:
    """L10.8's loop with trees: one ``extend_tree`` per round, then ``keep_path`` (section 2.5).

    The prompt but its last token is fed first with ``extend`` (a pass of its own); every round
    then asks the drafter for a tree of at most ``max_new - len(emitted so far) - 1`` nodes below the
    pending token, feeds it, verifies it with the request's one generator ``stream(seed)``, hands
    the round's tokens to ``on_token`` (None: never stop), and keeps ``path[:e]``: the root and the
    first ``e - 1`` accepted nodes, ``e`` the tokens handed over in this round (fewer than the
    round's when a stop ends it). ``drafted`` counts nodes below the root, ``accepted`` the
    accepted path's.
    """
    raise NotImplementedError("trees.generate_tree (L10.9): not written yet -- "
                              "see course/L10.9.md section 2.5")
