"""A tiny llama in numpy float32, its K/V kept in KvPool blocks (given code, L7.9).

One layer: ``x += attention(rmsnorm(x))`` then ``x += swiglu(rmsnorm(x))``; rotary positions on
queries and keys; ``n_kv_heads`` K/V heads each shared by ``n_heads / n_kv_heads`` query heads.
Position ``p`` of a sequence keeps its K/V in block ``table[p // B]`` at slot ``p % B``.

Batch invariance. :meth:`TinyLlama.forward` scores many (table, position, id) rows at once, and
row ``j`` is bitwise the row a forward of that token alone would give, whatever else is in the
batch. Three choices make it so:

- every matmul runs as gemms of exactly 16 rows (zero-padded), the row of position ``p`` always
  at row ``p % 16`` of its gemm, its operands in 64-byte-aligned buffers. A BLAS chooses its
  kernel, and so the order in which it sums each output, from the shape of the whole call
  (OpenBLAS switches kernels around a million multiply-adds); a kernel may also sum the rows of
  one call in different orders (OpenBLAS's Haswell sgemm, which it also runs on AMD Zen, sums
  rows 0-5, 6-11 and 12-15 of a 16-row gemm three different ways). With the shape, the row's
  place and the alignment fixed, the row is computed as in the forward of its token alone. A
  weight matmul runs one such gemm per 32-column block of the weight (:class:`Weight`): every
  block the same shape, and small enough that the BLAS reads it where it lies. One exception,
  probed rather than assumed: where the BLAS is seen to sum a block gemm's rows alike whatever
  their number and place (:func:`rows_free`: OpenBLAS on AVX-512 CPUs), the weight matmuls run
  over the batch's own rows, unpadded, so a pass feeding 4 tokens does not pay for 16;
- attention is computed per group of rows sharing a block table and a block count, over all the
  slots of those blocks (their count rounded up to a multiple of four, :func:`attention_span`)
  with later positions masked out: a row's reductions run over the same slots whoever shares its
  group; in its score and mix gemms the ``h``-th of the ``group`` query
  heads reading one K/V head sits at row ``(p * group + h) % 16``. Where the BLAS is seen to
  compute those rows alike whatever their number and place (:func:`attention_rows_free`), a
  group's rows run packed instead, so a request feeding one token pays for its query heads' rows,
  not for 16. Groups of one rounded block count run as one stack, each gemm a batch entry of its own;
- rotary angles come from a table built in fixed chunks of positions, never from the batch.

:meth:`TinyLlama.forward_tree` (L10.9) keeps the claim for a token tree: node ``j`` at depth ``d``
is computed as the row of its root-to-node chain would be, at position ``start + d``.

``tests/test_model.py`` checks the claim bitwise. It rests only on the BLAS computing one row of a
gemm from that row's values, whatever the other rows hold, once shape, place and alignment are the
same: no BLAS branches on the data.
"""

import functools
import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .kvpool import KvPool

_ROPE_CHUNK = 1024
GEMM_ROWS = 16
GEMM_COLS = 32  # the width of a weight's column block (:class:`Weight`)
GEMM_DEPTH = 576  # the most rows of a weight one block gemm reads (:class:`Weight`)
SPAN_BLOCKS = 4  # attention reads a table in runs of this many blocks (:func:`attention_span`)
_ALIGN = 64  # bytes: a cache line, and the widest vector load


@dataclass(frozen=True)
class LlamaConfig:
    """Shapes of the model. ``tied`` means the output head is the embedding matrix transposed."""

    vocab: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    hidden: int = 172
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tied: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab", "dim", "n_layers", "n_heads", "n_kv_heads", "hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LlamaConfig.{name} must be an integer >= 1, got {value!r}")
        if self.dim % self.n_heads or (self.dim // self.n_heads) % 2:
            raise ValueError(f"dim {self.dim} must split into {self.n_heads} heads of even size")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if not self.rope_theta > 0 or not self.norm_eps > 0:
            raise ValueError("rope_theta and norm_eps must be > 0")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight's name and shape. Matrices are stored (in, out): ``y = x @ w``."""
        c, hd = self, self.head_dim
        out = {"tok_emb": (c.vocab, c.dim), "norm": (c.dim,)}
        if not c.tied:
            out["output"] = (c.dim, c.vocab)
        for i in range(c.n_layers):
            out |= {
                f"layers.{i}.attn_norm": (c.dim,),
                f"layers.{i}.wq": (c.dim, c.n_heads * hd),
                f"layers.{i}.wk": (c.dim, c.n_kv_heads * hd),
                f"layers.{i}.wv": (c.dim, c.n_kv_heads * hd),
                f"layers.{i}.wo": (c.n_heads * hd, c.dim),
                f"layers.{i}.mlp_norm": (c.dim,),
                f"layers.{i}.w_gate": (c.dim, c.hidden),
                f"layers.{i}.w_up": (c.dim, c.hidden),
                f"layers.{i}.w_down": (c.hidden, c.dim),
            }
        return out


def gemm_rows(slots: Sequence[int]) -> np.ndarray:
    """Where :func:`matmul` puts each row: row ``slots[j]`` of the first gemm whose slot is still free.

    Rows asking for the same slot go to successive gemms, so a batch of consecutive positions
    (slots ``p % GEMM_ROWS``) fills one gemm per ``GEMM_ROWS`` rows.
    """
    taken = [0] * GEMM_ROWS
    rows = []
    for slot in slots:
        rows.append(taken[slot] * GEMM_ROWS + slot)
        taken[slot] += 1
    return np.array(rows, dtype=np.int64)


def matmul(a: np.ndarray, b: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``a @ b`` as gemms of exactly ``GEMM_ROWS`` rows, row ``j`` of ``a`` at stacked row ``rows[j]``.

    ``rows`` comes from :func:`gemm_rows`; the free rows are zeros. ``b`` must be a view of an
    ``_ALIGN``-aligned buffer (:func:`aligned_copy`) laid out the same for every batch, as ``a``'s
    padded copy is: a row at a given slot then meets the same kernel, summing in the same order,
    whatever else is in the batch (see the module docstring).
    """
    gemms = int(rows.max()) // GEMM_ROWS + 1
    padded = _aligned_zeros(a.shape[:-2] + (gemms * GEMM_ROWS, a.shape[-1]))
    padded[..., rows, :] = a
    chunks = padded.reshape(a.shape[:-2] + (gemms, GEMM_ROWS, a.shape[-1]))
    out = chunks @ b[..., None, :, :]
    return out.reshape(out.shape[:-3] + (gemms * GEMM_ROWS, b.shape[-1])).take(rows, axis=-2)


class Weight:
    """A weight matrix ``(in, out)`` stored for both kinds of matmul.

    ``matrix`` serves plain gemms. ``blocks`` holds the same matrix cut into ``GEMM_COLS``-wide
    column blocks, the last one zero-padded, and, when ``in`` exceeds ``GEMM_DEPTH``, into equal
    slices of its rows: ``blocks[s]`` is ``(count, depth, GEMM_COLS)``, each block contiguous and
    aligned. :meth:`blocks_matmul` runs one small gemm per block and adds the slices' products in
    order. OpenBLAS runs a gemm that small straight from its operands, near the core's peak; a
    16-row gemm over all the columns it runs by first copying the whole weight into its own
    layout, then with a kernel that is slow at 16 rows (``bench/README.md``, issue 22). Every block
    is the same shape, so each output column is summed the same way in every pass. The engine sets
    no ``OPENBLAS_CORETYPE``: forcing OpenBLAS's Haswell kernels on this AVX-512 CPU speeds up a
    16-row gemm over a whole weight, but they have no direct kernel, and these blocks then cost
    about 1.7 times as much (measured, ``bench/README.md``).

    ``free_rows``: this BLAS computes each row of a block gemm the same whatever the gemm's row
    count (2 to ``GEMM_ROWS``) and the row's place in it (:func:`rows_free`, probed once per
    depth). Then a batch of ``n`` rows runs as gemms of its own rows, ``GEMM_ROWS`` at a time, and
    a pass over 4 rows costs about a quarter of the arithmetic of a 16-row one; otherwise every
    row sits at its slot of zero-padded 16-row gemms (:func:`matmul`), which any BLAS keeps.
    """

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = aligned_copy(matrix)
        k, n = matrix.shape
        count = -(-n // GEMM_COLS)
        padded = np.zeros((k, count * GEMM_COLS), dtype=np.float32)
        padded[:, :n] = matrix
        columns = padded.reshape(k, count, GEMM_COLS).transpose(1, 0, 2)
        cuts = np.linspace(0, k, -(-k // GEMM_DEPTH) + 1).astype(int).tolist()
        self.slices = list(zip(cuts[:-1], cuts[1:]))
        self.blocks = [aligned_copy(columns[:, lo:hi]) for lo, hi in self.slices]
        self.free_rows = all(rows_free(hi - lo) for lo, hi in self.slices)

    def blocks_matmul(self, a: np.ndarray, rows: np.ndarray, threads: int = 1,
                      workers: ThreadPoolExecutor | None = None) -> np.ndarray:
        """``a @ matrix``, one gemm per column block (per row slice), every row of ``a`` computed
        as it would be alone. With ``free_rows`` the rows run in their order, in as few gemms as
        hold them, all of one height (17 rows: two of 9, the last row zero), so that one stacked
        call runs every gemm of a block while the block is in cache and the weights are read once
        a pass; a lone row gets a zero row beside it (numpy hands a one-row product to gemv, which
        sums differently). Otherwise row ``j`` of ``a`` sits at stacked row ``rows[j]`` of 16-row
        gemms, as :func:`matmul` places it. With ``threads > 1``, ``workers`` run that many shares
        of the blocks."""
        count, _, cols = self.blocks[0].shape
        n, k = a.shape
        if self.free_rows:
            gemms = -(-n // GEMM_ROWS)
            m = max(2, -(-n // gemms))
            height = gemms * m
            x = _aligned_zeros((height, k))
            x[:n] = a
        else:
            height = (int(rows.max()) // GEMM_ROWS + 1) * GEMM_ROWS
            m = GEMM_ROWS
            x = _aligned_zeros((height, k))
            x[rows] = a
        # each block's gemm writes its columns of the (rows, columns) result in place: no copies after
        result = _aligned_zeros((height, count * cols))
        partial = _aligned_zeros((height, count * cols)) if len(self.blocks) > 1 else None
        for s, ((lo, hi), blocks) in enumerate(zip(self.slices, self.blocks)):
            into = result if s == 0 else partial
            xs = x[:, lo:hi].reshape(1, height // m, m, hi - lo)
            out = into.reshape(1, height // m, m, count, cols).transpose(3, 0, 1, 2, 4)[:, 0]
            _block_gemms(xs, blocks, out, threads, workers)
            if s:
                result += partial
        result = result[:, :self.matrix.shape[1]]
        return result[:n] if self.free_rows else result[rows]


def _block_gemms(x: np.ndarray, blocks: np.ndarray, out: np.ndarray, threads: int = 1,
                 workers: ThreadPoolExecutor | None = None) -> None:
    """``out[b, g] = x[0, g] @ blocks[b]`` for every block ``b`` and gemm ``g``: blocks outermost,
    so a block stays in cache while every gemm of the pass uses it; ``threads`` share the blocks."""
    if threads == 1:
        np.matmul(x, blocks[:, None], out=out)
        return
    cuts = np.linspace(0, blocks.shape[0], threads + 1).astype(int).tolist()
    list(workers.map(lambda lo, hi: np.matmul(x, blocks[lo:hi, None], out=out[lo:hi]), cuts[:-1], cuts[1:]))


@functools.cache
def rows_free(depth: int) -> bool:
    """Does this BLAS sum each row of a block gemm ``(m, depth) @ (depth, GEMM_COLS)`` the same
    whatever ``m`` in ``2..GEMM_ROWS`` and the row's place? Probed on seeded data against a
    ``GEMM_ROWS``-row gemm, in every place, as :meth:`Weight.blocks_matmul` calls it.

    OpenBLAS with AVX-512 says yes: it runs gemms this small with its "direct" kernel, which sums
    every output in one fused multiply-add chain over ``depth``, whatever the shape
    (``GEMM_DEPTH`` keeps every block under the size where it would switch kernels, with one thread
    or several). Its other kernels, like other BLASes, may say no; the answer rests, as the rest of
    batch invariance does, on no BLAS choosing its kernel by the data.
    """
    rng = np.random.default_rng(0)
    a = aligned_copy(rng.standard_normal((GEMM_ROWS, depth)).astype(np.float32))
    blocks = aligned_copy(rng.standard_normal((2, depth, GEMM_COLS)).astype(np.float32))
    whole = _aligned_zeros((2, 1, GEMM_ROWS, GEMM_COLS))
    _block_gemms(a.reshape(1, 1, GEMM_ROWS, depth), blocks, whole)
    for m in range(2, GEMM_ROWS):
        for start in range(GEMM_ROWS - m + 1):
            part = _aligned_zeros((2, 1, m, GEMM_COLS))
            _block_gemms(aligned_copy(a[start:start + m]).reshape(1, 1, m, depth), blocks, part)
            if not np.array_equal(part[:, 0], whole[:, 0, start:start + m]):
                return False
    return True


def _aligned_zeros(shape: tuple[int, ...]) -> np.ndarray:
    """float32 zeros starting on an ``_ALIGN``-byte boundary: a BLAS may pick its path by alignment."""
    size = math.prod(shape)
    raw = np.zeros(size + _ALIGN // 4, dtype=np.float32)
    start = -raw.ctypes.data % _ALIGN // 4
    return raw[start:start + size].reshape(shape)


def aligned_copy(x: np.ndarray) -> np.ndarray:
    """A C-contiguous float32 copy of ``x`` starting on an ``_ALIGN``-byte boundary."""
    out = _aligned_zeros(x.shape)
    out[...] = x
    return out


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    scale = np.float32(1.0) / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))
    return x * scale * weight


def silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x < -88: silu is then -0
        return x / (np.float32(1.0) + np.exp(-x))


class TinyLlama:
    """The model: a config and float32 weights named as in :meth:`LlamaConfig.shapes`."""

    def __init__(self, config: LlamaConfig, weights: dict[str, np.ndarray]) -> None:
        expected = config.shapes()
        # False: every matmul is one plain gemm over exactly the batch's rows. Faster for a
        # single row, but a row's bits then depend on the batch; benchmarks use it as the
        # fastest plain decoding, never with speculation.
        self.batch_invariant = True
        # Threads sharing out each batch-invariant weight matmul's column blocks (numpy's matmul
        # lets go of the GIL); every block is still the same gemm, so the bits do not change.
        self.threads = 1
        self._workers: tuple[int, ThreadPoolExecutor | None] = (1, None)
        self._scratch = _Scratch()
        missing = sorted(set(expected) - set(weights))
        extra = sorted(set(weights) - set(expected))
        if missing or extra:
            raise ValueError(f"weights do not fit the config: missing {missing}, unexpected {extra}")
        self.config = config
        self.weights = {}
        for name, shape in expected.items():
            w = np.ascontiguousarray(weights[name], dtype=np.float32)
            if w.shape != shape:
                raise ValueError(f"weight {name} has shape {w.shape}, expected {shape}")
            self.weights[name] = w
        # One matmul per projection group reads the weights once for all rows; each is kept as one
        # (in, out) matrix for plain gemms and cut into column blocks for batch-invariant ones.
        self._layers = []
        for i in range(config.n_layers):
            w = {key.split(".", 2)[2]: self.weights[key] for key in expected if key.startswith(f"layers.{i}.")}
            self._layers.append({"attn_norm": w["attn_norm"], "mlp_norm": w["mlp_norm"]} | {
                name: Weight(np.concatenate(parts, axis=1)) for name, parts in (
                    ("wqkv", [w["wq"], w["wk"], w["wv"]]), ("wo", [w["wo"]]),
                    ("w_gate_up", [w["w_gate"], w["w_up"]]), ("w_down", [w["w_down"]]))})
        self._head = Weight(self.weights["tok_emb"].T if config.tied else self.weights["output"])
        half = config.head_dim // 2
        self._inv_freq = config.rope_theta ** (-np.arange(half, dtype=np.float64) / half)
        self._cos = np.zeros((0, half), dtype=np.float32)
        self._sin = np.zeros((0, half), dtype=np.float32)

    @property
    def rows_alone(self) -> bool:
        """Whether every weight matmul runs over the pass's own rows (:attr:`Weight.free_rows`): a pass
        of ``n`` rows then runs ``ceil(n / 16)`` gemms wherever its rows sit, where otherwise it runs
        as many as its fullest slot ``p % 16`` holds rows."""
        weights = [w for layer in self._layers for w in layer.values() if isinstance(w, Weight)] + [self._head]
        return self.batch_invariant and all(w.free_rows for w in weights)

    @staticmethod
    def random(config: LlamaConfig, seed: int) -> "TinyLlama":
        """Seeded weights: normal with std ``1/sqrt(fan_in)``, norms 1, embeddings std 1."""
        rng = np.random.default_rng(seed)
        weights = {}
        for name, shape in config.shapes().items():
            if len(shape) == 1:
                weights[name] = np.ones(shape, dtype=np.float32)
            else:
                std = 1.0 if name == "tok_emb" else shape[0] ** -0.5
                weights[name] = (rng.standard_normal(shape) * std).astype(np.float32)
        return TinyLlama(config, weights)

    @staticmethod
    def load(path: str | Path) -> "TinyLlama":
        with np.load(path, allow_pickle=False) as data:
            config = LlamaConfig(**json.loads(str(data["config_json"])))
            weights = {name: data[name] for name in data.files if name != "config_json"}
        return TinyLlama(config, weights)

    def save(self, path: str | Path) -> None:
        """An ``.npz`` holding every weight and the config as JSON under ``config_json``."""
        np.savez(path, config_json=np.array(json.dumps(asdict(self.config))), **self.weights)

    def new_pool(self, num_blocks: int, block_tokens: int) -> KvPool:
        """A pool for this model, its K/V stored as attention reads them. ``pool.k`` and ``pool.v``
        are views with the pool's axes (layer, block, slot, K/V head, head dim), so every index
        reads and writes what it would in any pool; in memory, a layer's keys hold (K/V head, head
        dim, block, slot) and its values (K/V head, block, slot, head dim). The score gemm
        takes one K/V head's keys as (head dim, slots) and the mix gemm its values as (slots, head
        dim): a stack's keys are then gathered, in runs of a block's slots, into one array the
        score gemm reads in place, and its values straight into the mix gemm's operand
        (:class:`_Stored`): one copy each a layer. A pool whose arrays cannot be replaced keeps
        its own, and attention lays them out itself."""
        c = self.config
        pool = KvPool(num_blocks, block_tokens, c.n_layers, c.n_kv_heads, c.head_dim)
        keys = np.zeros((c.n_layers, c.n_kv_heads, c.head_dim, num_blocks, block_tokens), dtype=np.float32)
        values = np.zeros((c.n_layers, c.n_kv_heads, num_blocks, block_tokens, c.head_dim), dtype=np.float32)
        try:
            pool.k, pool.v = keys.transpose(0, 3, 4, 1, 2), values.transpose(0, 2, 3, 1, 4)
        except AttributeError:
            pass
        return pool

    def _rope_tables(self, top: int) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin for positions ``0..top``, grown a fixed chunk at a time."""
        while self._cos.shape[0] <= top:
            start = self._cos.shape[0]
            angles = np.arange(start, start + _ROPE_CHUNK, dtype=np.float64)[:, None] * self._inv_freq
            self._cos = np.concatenate([self._cos, np.cos(angles).astype(np.float32)])
            self._sin = np.concatenate([self._sin, np.sin(angles).astype(np.float32)])
        return self._cos, self._sin

    def forward(self, pool: KvPool, tables: Sequence[Sequence[int]], positions: Sequence[int],
                ids: Sequence[int], write: Sequence[bool] | None = None) -> np.ndarray:
        """Score ``len(ids)`` rows in one pass; returns float32 logits of shape ``(len(ids), vocab)``.

        Row ``j`` is token ``ids[j]`` at position ``positions[j]`` of the sequence whose block table
        is ``tables[j]``: its K/V is written to that position's slot (unless ``write[j]`` is False,
        for a slot already holding it) and it attends to positions ``0..positions[j]`` of the table.
        """
        c = self.config
        n = len(ids)
        if not (len(tables) == len(positions) == n) or (write is not None and len(write) != n):
            raise ValueError(f"tables, positions, ids (and write) must have one length, got "
                             f"{len(tables)}, {len(positions)}, {n}"
                             + ("" if write is None else f", {len(write)}"))
        if n == 0:
            return np.zeros((0, c.vocab), dtype=np.float32)
        if pool.k.shape[0] != c.n_layers or pool.k.shape[3:] != (c.n_kv_heads, c.head_dim):
            raise ValueError(f"pool storage {pool.k.shape} does not fit this model; use model.new_pool")
        ids_arr = np.asarray(ids, dtype=np.int64)
        pos = np.asarray(positions, dtype=np.int64)
        if ids_arr.min() < 0 or ids_arr.max() >= c.vocab:
            raise ValueError(f"token ids must be in [0, {c.vocab}), got {ids_arr.min()}..{ids_arr.max()}")
        if pos.min() < 0:
            raise ValueError(f"positions must be >= 0, got {pos.min()}")
        bt = pool.block_tokens
        as_tuple: dict[int, tuple[int, ...]] = {}  # rows of one request share one table object
        groups: dict[tuple[int, ...], list[int]] = {}
        for j in range(n):
            nb = int(pos[j]) // bt + 1
            if nb > len(tables[j]):
                raise ValueError(f"row {j}: position {pos[j]} needs {nb} blocks, its table has {len(tables[j])}")
            if id(tables[j]) not in as_tuple:
                as_tuple[id(tables[j])] = tuple(int(b) for b in tables[j])
            groups.setdefault(as_tuple[id(tables[j])][:nb], []).append(j)
        blocks = np.array([b for table in groups for b in table], dtype=np.int64)
        if blocks.min() < 0 or blocks.max() >= pool.num_blocks:
            raise ValueError(f"block ids must be in [0, {pool.num_blocks}), got {blocks.min()}..{blocks.max()}")
        blocks = np.array([tables[j][int(pos[j]) // bt] for j in range(n)], dtype=np.int64)
        slots = pos % bt
        keep = np.ones(n, dtype=bool) if write is None else np.asarray(write, dtype=bool)
        group = c.n_heads // c.n_kv_heads
        none = np.zeros(0, dtype=np.int64)
        plan = [(np.array(rows), list(table), none, none, none, _attention_rows(pos[rows], group))
                for table, rows in groups.items()]
        return self._run(pool, ids_arr, pos, blocks[keep], slots[keep], keep, plan)

    def forward_tree(self, pool: KvPool, table: Sequence[int], start: int, ids: Sequence[int],
                     positions: Sequence[int], mask) -> np.ndarray:
        """Score a token tree after ``start`` cached positions in one pass (L10.9, given code).

        Node ``j`` is token ``ids[j]`` at RoPE position ``positions[j]``, which must be ``start`` plus
        its depth; its K/V goes to storage slot ``start + j`` of ``table``. ``mask[j, i]`` is True iff
        ``i == j`` or node ``i`` is an ancestor of node ``j``; node 0 is the root. Node ``j`` attends
        to positions ``0..start-1`` and to its ancestors. Returns float32 ``(n, vocab)`` logits.

        Row ``j`` is bitwise the row :meth:`forward` gives for the chain of cached positions plus
        the root-to-``j`` path: each row keeps its chain position's gemm slot, and its attention
        reads a copy of the table's blocks with the path's K/V moved to the path's positions, the
        same span the chain reads (the slots past the row's position are masked out either way).
        """
        c = self.config
        ids_arr, parents, depth = self._check_tree(pool, table, start, ids, positions, mask)
        n = ids_arr.shape[0]
        if n == 0:
            return np.zeros((0, c.vocab), dtype=np.float32)
        table = [int(b) for b in table]
        bt = pool.block_tokens
        pos = start + depth
        stored = start + np.arange(n)
        group = c.n_heads // c.n_kv_heads
        # Rows share an attention group when they lie on one root-to-leaf path and need the same
        # number of blocks: one gathered copy of the K/V then serves them all.
        groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
        placed = [False] * n
        parent_of = parents.tolist()
        for leaf in range(n - 1, -1, -1):
            if placed[leaf]:
                continue
            path = _path_to(parent_of, leaf)
            for j in path:
                if not placed[j]:
                    placed[j] = True
                    groups.setdefault((int(pos[j]) // bt + 1, tuple(path)), []).append(j)
        blocks = np.array(table, dtype=np.int64)[stored // bt]
        plan = []
        for (nb, path), rows in groups.items():
            rows_arr = np.array(sorted(rows))
            inside = [j for j in path if pos[j] < nb * bt]  # the span's positions the path fills
            plan.append((rows_arr, table[:nb], pos[inside], blocks[inside], stored[inside] % bt,
                         _attention_rows(pos[rows_arr], group)))
        return self._run(pool, ids_arr, pos, blocks, stored % bt, np.ones(n, dtype=bool), plan)

    def _check_tree(self, pool: KvPool, table: Sequence[int], start: int, ids: Sequence[int],
                    positions: Sequence[int], mask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Validate a tree pass; return the ids, every node's parent and its depth."""
        c = self.config
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
            raise ValueError(f"start must be an integer >= 0, got {start!r}")
        ids_arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        n = ids_arr.shape[0]
        if len(positions) != n:
            raise ValueError(f"{len(positions)} positions for {n} ids")
        mask = np.asarray(mask)
        if mask.shape != (n, n) or mask.dtype != bool:
            raise ValueError(f"mask must be a bool array of shape ({n}, {n}), got {mask.dtype} {mask.shape}")
        if n == 0:
            return ids_arr, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if pool.k.shape[0] != c.n_layers or pool.k.shape[3:] != (c.n_kv_heads, c.head_dim):
            raise ValueError(f"pool storage {pool.k.shape} does not fit this model; use model.new_pool")
        if ids_arr.min() < 0 or ids_arr.max() >= c.vocab:
            raise ValueError(f"token ids must be in [0, {c.vocab}), got {ids_arr.min()}..{ids_arr.max()}")
        need = -(-(start + n) // pool.block_tokens)
        if len(table) < need:
            raise ValueError(f"the table has {len(table)} blocks; {start} cached positions and {n} nodes "
                             f"need {need} blocks of {pool.block_tokens}")
        bad = [b for b in table[:need] if not 0 <= int(b) < pool.num_blocks]
        if bad:
            raise ValueError(f"block ids must be in [0, {pool.num_blocks}), got {bad[0]}")
        if not mask.diagonal().all():
            j = int(np.flatnonzero(~mask.diagonal())[0])
            raise ValueError(f"mask[{j}, {j}] is False: every node sees itself")
        later = np.argwhere(np.triu(mask, 1))
        if later.size:
            j, i = (int(v) for v in later[0])
            raise ValueError(f"mask[{j}, {i}] is True: node {j} cannot see node {i}, which comes after it "
                             "(an ancestor comes before its descendants)")
        parents = _parents(mask)
        if (parents[1:] < 0).any():
            j = int(np.flatnonzero(parents[1:] < 0)[0]) + 1
            raise ValueError(f"node {j} sees no earlier node: only node 0 is a root")
        # a tree's row j is its parent's row plus j itself
        expect = mask[np.maximum(parents, 0)]
        expect[np.arange(n), np.maximum(parents, 0)] = True
        expect |= np.eye(n, dtype=bool)
        expect[0] = np.eye(n, dtype=bool)[0]
        if not np.array_equal(expect, mask):
            j, i = (int(v) for v in np.argwhere(expect != mask)[0])
            raise ValueError(f"mask row {j} is not a tree's: its parent is node {parents[j]}, "
                             f"so mask[{j}, {i}] should be {bool(expect[j, i])}")
        depth = mask.sum(axis=1) - 1
        wrong = np.flatnonzero(np.asarray(positions, dtype=np.int64) != start + depth)
        if wrong.size:
            j = int(wrong[0])
            raise ValueError(f"positions[{j}] is {positions[j]!r}; node {j} has depth {depth[j]} after "
                             f"{start} cached positions, so its position is {start + depth[j]}")
        return ids_arr, parents, depth

    def _run(self, pool: KvPool, ids: np.ndarray, pos: np.ndarray, blocks: np.ndarray,
             slots: np.ndarray, keep: np.ndarray, plan: list) -> np.ndarray:
        """The layers over rows at RoPE positions ``pos``, K/V of the ``keep`` rows written to
        ``(blocks, slots)``; ``plan`` lists the attention groups (see :meth:`_attend`)."""
        c = self.config
        n = ids.shape[0]
        cos, sin = self._rope_tables(int(pos.max()))
        cos, sin = cos[pos][:, None, :], sin[pos][:, None, :]
        hd, nh, nkv = c.head_dim, c.n_heads, c.n_kv_heads
        at = gemm_rows((pos % GEMM_ROWS).tolist())
        stored = _Stored.of(pool)
        self._scratch.reset()
        stacks = self._attention_stacks(pool, pos, plan, gather_values=stored is None)
        x = self.weights["tok_emb"][ids]
        for layer, w in enumerate(self._layers):
            qkv = self._matmul(rmsnorm(x, w["attn_norm"], c.norm_eps), w["wqkv"], at)
            q = _rotate(qkv[:, :nh * hd].reshape(n, nh, hd), cos, sin)
            k = _rotate(qkv[:, nh * hd:(nh + nkv) * hd].reshape(n, nkv, hd), cos, sin)
            v = qkv[:, (nh + nkv) * hd:].reshape(n, nkv, hd)
            pool.k[layer, blocks, slots] = k[keep]
            pool.v[layer, blocks, slots] = v[keep]
            q = q * np.float32(hd ** -0.5)
            att = np.empty((n, nh * hd), dtype=np.float32)
            for stack in stacks:
                att[stack.rows] = self._attend(pool, layer, q[stack.rows], stack, stored)
            x = x + self._matmul(att, w["wo"], at)
            gate_up = self._matmul(rmsnorm(x, w["mlp_norm"], c.norm_eps), w["w_gate_up"], at)
            x = x + self._matmul(silu(gate_up[:, :c.hidden]) * gate_up[:, c.hidden:], w["w_down"], at)
        return self._matmul(rmsnorm(x, self.weights["norm"], c.norm_eps), self._head, at)

    def _matmul(self, a: np.ndarray, b: "np.ndarray | Weight", rows: np.ndarray) -> np.ndarray:
        if isinstance(b, Weight):
            if not self.batch_invariant:
                return a @ b.matrix
            if self.threads > 1 and self._workers[0] != self.threads:
                self._workers = (self.threads, ThreadPoolExecutor(self.threads))
            return b.blocks_matmul(a, rows, self.threads, self._workers[1])
        return matmul(a, b, rows) if self.batch_invariant else a @ b

    def _attention_stacks(self, pool: KvPool, pos: np.ndarray, plan: list,
                          gather_values: bool) -> list["_Stack"]:
        """The pass's attention groups, those of one span stacked to run as one (tree groups,
        which move K/V, alone; where rows run packed, one-row groups and groups filling more
        gemms in stacks of their own), each with its gemm layout and buffers, carved once a pass
        from the model's :class:`_Scratch`: every layer refills them.

        A stacked group's gemms are batch entries of their own, of one shape: where the rows are
        not free, every group keeps its slots, groups needing as many gemms stack together and a
        stack has the gemms its groups need; where they are, a group's rows run packed in the
        stack's gemms, whose height is the largest any group needs (:func:`attention_rows_free`:
        the height does not matter).
        ``gather_values``: the keys and values are gathered into buffers of their own first, then
        copied into the gemms' operands (a pool that :meth:`new_pool` did not lay out,
        :class:`_Stored`)."""
        c = self.config
        nkv, hd, group = c.n_kv_heads, c.head_dim, c.n_heads // c.n_kv_heads
        bt = pool.block_tokens
        by_key: dict[tuple[int, int, bool], list] = {}
        stacks = []
        for entry in plan:
            table = list(entry[1])
            entry = (entry[0], table + table[-1:] * (attention_span(len(table)) - len(table)), *entry[2:])
            if entry[2].size:
                stacks.append([entry])
                continue
            rows, span = len(entry[0]), len(entry[1])
            if self.batch_invariant and attention_rows_free(nkv, hd, span * bt):
                # A stack's gemms are as tall as its tallest group's: a request decoding one row
                # would pay for a neighbour's whole draft (1.9x the rows' work under the adaptive
                # policy at B = 32 on the tiny llama), so one-row groups stack apart, and groups
                # filling more gemms apart from fewer. The height does not change a row's bits.
                key = (span, -(-rows * group // GEMM_ROWS), rows == 1)
            else:
                # Each group keeps its 16-row slots, and a stack runs the most gemms any of its
                # groups needs: groups needing fewer stack apart, or a decoding row pays for a
                # neighbour's draft (the gemms are batch entries of their own: no bit changes).
                key = (span, int(entry[5].max()) // GEMM_ROWS + 1, False)
            by_key.setdefault(key, []).append(entry)
        stacks += list(by_key.values())
        out = []
        for members in stacks:
            span = len(members[0][1]) * bt
            counts = [len(rows) * group for rows, *_ in members]
            if not self.batch_invariant:
                gemms, size = 1, max(counts)
                places = [np.arange(n) for n in counts]
            elif attention_rows_free(nkv, hd, span):
                gemms = -(-max(counts) // GEMM_ROWS)
                size = max(max(2, -(-n // -(-n // GEMM_ROWS))) for n in counts)
                places = [np.arange(n) for n in counts]
            else:
                gemms, size = max(int(at.max()) // GEMM_ROWS + 1 for *_, at in members), GEMM_ROWS
                places = [at for *_, at in members]
            per, g = gemms * size, len(members)
            rows = np.concatenate([m[0] for m in members])
            # each (row, query head): its group in the stack and its gemm row there
            member, place = np.repeat(np.arange(g), counts), np.concatenate(places)
            at = member * per + place
            # The slots past each (row, query head)'s position, in the order of their gemm rows ``at``.
            seen = np.arange(span)[None, :] > np.repeat(pos[rows], group)[:, None]
            if 2 * len(at) > g * per:  # at most half the rows padding: the softmax runs on them all
                # padding rows see every slot (their scores are zeros: no -inf row, no NaN)
                future, softmax_rows = np.zeros((g * per, span), dtype=bool), None
                future[at] = seen
            else:
                future, softmax_rows = seen, at
            _, table, moved_to, from_blocks, from_slots, _ = members[0]
            carve = self._scratch.carve
            queries = carve((nkv, g, gemms, size, hd))
            queries.fill(0)  # the rows no (row, query head) sits at stay zero
            out.append(_Stack(rows, np.array([m[1] for m in members], dtype=np.int64).ravel(),
                              (moved_to, from_blocks, from_slots), at, softmax_rows, future, queries,
                              carve((g * len(table), bt, nkv, hd)),
                              carve((g * len(table), bt, nkv, hd)) if gather_values else None,
                              carve((nkv, g, 1, hd, span)) if gather_values else None, carve((nkv, g, 1, span, hd)),
                              carve((nkv, g, gemms, size, span)),
                              None if softmax_rows is None else carve((nkv, len(at), span)),
                              carve((nkv, g, gemms, size, hd))))
        return out

    def _attend(self, pool: KvPool, layer: int, q: np.ndarray, st: "_Stack",
                stored: "_Stored | None") -> np.ndarray:
        """Causal attention of the ``n`` rows of a stack of groups, each group over every slot of
        its table's blocks.

        ``st.moves = (to, blocks, slots)`` (a stack of one group): the K/V stored at
        ``(blocks[i], slots[i])`` is read as if it sat at position ``to[i]`` (a tree path's nodes
        at their positions). Each (row, query head in group) sits at gemm row ``st.at`` of the
        stack's score and mix gemms, whose other operand is one K/V head of its group,
        ``keys`` (hd, span), ``values`` (span, hd), each with unit stride along its rows.
        ``stored``: the pool's K/V in the layout :meth:`new_pool` gives them, or None; either way
        the gemms get the same operands.
        """
        c = self.config
        n, nkv, hd = q.shape[0], c.n_kv_heads, c.head_dim
        group = c.n_heads // nkv
        bt = pool.block_tokens
        g, span = st.values.shape[1], st.values.shape[-2]
        to, blocks, slots = st.moves
        # the tables' ids were checked when the pass was planned: clip never clips
        if stored is None:
            k, v = st.k, st.v
            pool.k[layer].take(st.tables, axis=0, out=k, mode="clip")
            pool.v[layer].take(st.tables, axis=0, out=v, mode="clip")
            if to.size:
                k[to // bt, to % bt] = pool.k[layer, blocks, slots]
                v[to // bt, to % bt] = pool.v[layer, blocks, slots]
            np.copyto(st.keys[:, :, 0], k.reshape(g, span, nkv, hd).transpose(2, 0, 3, 1))
            keys = st.keys
            np.copyto(st.values[:, :, 0], v.reshape(g, span, nkv, hd).transpose(2, 0, 1, 3))
        else:
            k, v = st.k.reshape(nkv, hd, -1, bt), st.values.reshape(nkv, -1, bt, hd)
            stored.keys[layer].take(st.tables, axis=2, out=k, mode="clip")
            stored.values[layer].take(st.tables, axis=1, out=v, mode="clip")
            if to.size:
                k[:, :, to // bt, to % bt] = pool.k[layer, blocks, slots].transpose(1, 2, 0)
                v[:, to // bt, to % bt] = pool.v[layer, blocks, slots].transpose(1, 0, 2)
            # each group's keys (head dim, slots) are a view whose rows sit g spans apart: the
            # score gemm reads them in place, as from their own array (a gemm packs its operands)
            keys = k.reshape(nkv, hd, g, 1, span).transpose(0, 2, 3, 1, 4)
        # Query head h reads K/V head h // group; rows of one K/V head are (row, head in group).
        rows = st.q.reshape(nkv, -1, hd)
        rows[:, st.at] = q.reshape(n, nkv, group, hd).transpose(1, 0, 2, 3).reshape(nkv, n * group, hd)
        _attention(st.q, keys, st.values, st.future, st.softmax_rows, st.scores, st.real, st.out)
        out = st.out.reshape(nkv, -1, hd)[:, st.at]
        return out.reshape(nkv, n, group, hd).transpose(1, 0, 2, 3).reshape(n, nkv * group * hd)


class _Scratch:
    """The attention stacks' buffers, carved from one aligned array kept from pass to pass: once it
    has grown to a pass's size, a pass allocates nothing, and its buffers sit where the last pass's
    did (pages mapped, often in cache). Every buffer but the queries, which are zeroed, is written
    whole before it is read, and none outlives its pass (:meth:`TinyLlama._attend` returns a copy)."""

    def __init__(self) -> None:
        self.array = _aligned_zeros((0,))
        self.used = 0

    def reset(self) -> None:
        """A new pass: the last pass's buffers are free again."""
        self.used = 0

    def carve(self, shape: tuple[int, ...]) -> np.ndarray:
        """An uninitialised float32 buffer of ``shape`` starting on an ``_ALIGN``-byte boundary. An
        array too small for the pass is replaced by one twice as large; what was carved from the
        old one stays valid (it keeps the old array alive)."""
        size, step = math.prod(shape), _ALIGN // 4
        start = -(-self.used // step) * step
        if start + size > self.array.size:
            self.array, start = _aligned_zeros((2 * (start + size),)), 0
        self.used = start + size
        return self.array[start:start + size].reshape(shape)


@dataclass
class _Stored:
    """A pool's K/V as :meth:`TinyLlama.new_pool` stores them: ``keys`` (layer, K/V head, head
    dim, block, slot) and ``values`` (layer, K/V head, block, slot, head dim), each the array its
    view ``pool.k`` / ``pool.v`` was made from."""

    keys: np.ndarray
    values: np.ndarray

    @staticmethod
    def of(pool: KvPool) -> "_Stored | None":
        """The pool's stores, where ``new_pool`` made its ``k`` and ``v`` (and nothing replaced them since)."""
        keys, values = _viewed(pool.k, (0, 3, 4, 1, 2)), _viewed(pool.v, (0, 2, 3, 1, 4))
        return None if keys is None or values is None else _Stored(keys, values)


def _viewed(view: np.ndarray, axes: tuple[int, ...]) -> np.ndarray | None:
    """The C-contiguous array ``view`` is ``store.transpose(axes)`` of, or None."""
    store = view.base  # None, another array, or a buffer (bytes: an array unpickled from them)
    if not isinstance(store, np.ndarray) or store.ndim != len(axes) or not store.flags.c_contiguous:
        return None
    as_view = store.transpose(axes)
    same = (as_view.shape == view.shape and as_view.strides == view.strides
            and as_view.__array_interface__["data"][0] == view.__array_interface__["data"][0])
    return store if same else None


@dataclass
class _Stack:
    """Attention groups of one span run as one (:meth:`TinyLlama._attention_stacks`)."""

    rows: np.ndarray
    tables: np.ndarray
    moves: tuple
    at: np.ndarray
    softmax_rows: np.ndarray | None
    future: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray | None
    keys: np.ndarray | None  # the score gemm's keys, copied out of a pool new_pool did not lay out
    values: np.ndarray
    scores: np.ndarray
    real: np.ndarray | None
    out: np.ndarray


def _attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, future: np.ndarray, at: np.ndarray | None,
               scores: np.ndarray, real: np.ndarray | None, out: np.ndarray) -> None:
    """``out = softmax(q @ keys, slots past each row's position masked) @ values``, in place: the
    score gemm, the mask (``future``: the slots each score row masks), the softmax along each row,
    the mix gemm. Given ``at``, the mask and the softmax run on those score rows alone, gathered
    into ``real``: the other rows of a gemm are padding (zero queries), and a gemm's output row
    reads only its own input row, so they need no softmax; in 16-row slots most rows are padding
    (plain decoding fills 2 of 16). A row's softmax is the same bits either way."""
    np.matmul(q, keys, out=scores)
    flat = scores.reshape(scores.shape[0], -1, scores.shape[-1])
    rows = flat if at is None else np.take(flat, at, axis=1, out=real)
    np.copyto(rows, np.float32(-np.inf), where=future)
    rows -= rows.max(axis=-1, keepdims=True)
    np.exp(rows, out=rows)
    rows /= rows.sum(axis=-1, keepdims=True)
    if at is not None:
        flat[:, at] = rows
    np.matmul(scores, values, out=out)


@functools.cache
def attention_rows_free(heads: int, head_dim: int, span: int) -> bool:
    """Does this BLAS compute each row of :func:`_attention` over ``span`` slots the same whatever
    the number of rows (2 to ``GEMM_ROWS``) and the row's place? Probed on seeded data as
    :func:`rows_free` probes a weight's block gemm. Where it does, a group's (row, query head)
    pairs run packed, ``GEMM_ROWS`` at a time, so a request feeding one row pays for the
    ``group`` rows its query heads fill, not for 16. OpenBLAS on AVX-512 says yes while a 16-row
    gemm stays under about a million multiply-adds (with a head of 64, spans up to 976 slots); past
    that its kernel for 16 rows is no longer the one it runs for fewer, and the rows keep their
    16-row slots."""
    rng = np.random.default_rng(0)

    def run(q: np.ndarray, future: np.ndarray) -> np.ndarray:
        m = q.shape[2]
        scores, out = _aligned_zeros((heads, 1, m, span)), _aligned_zeros((heads, 1, m, head_dim))
        _attention(aligned_copy(q), keys, values, future, None, scores, None, out)
        return out

    keys = aligned_copy(rng.standard_normal((heads, 1, head_dim, span)).astype(np.float32))
    values = aligned_copy(rng.standard_normal((heads, 1, span, head_dim)).astype(np.float32))
    q = rng.standard_normal((heads, 1, GEMM_ROWS, head_dim)).astype(np.float32)
    future = np.arange(span)[None, :] > rng.integers(0, span, (GEMM_ROWS, 1))
    whole = run(q, future)
    for m in range(2, GEMM_ROWS):
        for start in range(GEMM_ROWS - m + 1):
            part = run(q[:, :, start:start + m], future[start:start + m])
            if not np.array_equal(part, whole[:, :, start:start + m]):
                return False
    return True


def attention_span(blocks: int) -> int:
    """The blocks a row's attention reads: its table's first ``blocks``, rounded up to a multiple
    of ``SPAN_BLOCKS`` with the last block read again (its slots sit past the row's position, so
    the mask hides them). Groups stack by span (:meth:`TinyLlama._attention_stacks`), and each
    stack pays its numpy calls a layer: sixteen requests decoding at contexts a few blocks apart
    ran in eight or nine stacks, and run in two or three (the tiny llama's pass 13% faster at 245
    slots of context). The rounding depends on the row's own block count alone, so the row's bits
    are the same alone, batched or in a tree."""
    return -(-blocks // SPAN_BLOCKS) * SPAN_BLOCKS


def _attention_rows(positions: np.ndarray, group: int) -> np.ndarray:
    """Attention's gemm rows: query head ``h`` of the row at position ``p`` at slot ``p * group + h``."""
    return gemm_rows([(p * group + h) % GEMM_ROWS for p in positions.tolist() for h in range(group)])


def _parents(mask: np.ndarray) -> np.ndarray:
    """Each node's parent under a tree mask: its latest earlier visible node (-1 for none)."""
    n = mask.shape[0]
    below = np.tril(mask, -1)
    latest = n - 1 - np.argmax(below[:, ::-1], axis=1)
    return np.where(below.any(axis=1), latest, -1)


def _path_to(parents: list[int], j: int) -> list[int]:
    """Nodes from the root to ``j``."""
    path = [j]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotary positions, half-split pairing: dimension ``i`` turns with ``i + head_dim/2``."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
