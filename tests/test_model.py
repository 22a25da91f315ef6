"""The tiny llama: shapes, seeded weights, save/load, and bitwise batch invariance."""

import numpy as np
import pytest

from tinyllm.model import GEMM_ROWS, LlamaConfig, TinyLlama, aligned_copy, gemm_rows, matmul

CONFIG = LlamaConfig()
IDS = [int(t) for t in np.random.default_rng(7).integers(0, 256, 45)]


@pytest.fixture(scope="module")
def model() -> TinyLlama:
    return TinyLlama.random(CONFIG, seed=3)


def one_at_a_time(model: TinyLlama, ids: list[int], block_tokens: int = 8) -> np.ndarray:
    pool = model.new_pool(16, block_tokens)
    table = list(range(16))
    return np.stack([model.forward(pool, [table], [p], [t])[0] for p, t in enumerate(ids)])


def test_forward_returns_one_float32_row_per_id(model):
    pool = model.new_pool(4, 8)
    out = model.forward(pool, [[0, 1]] * 3, [0, 1, 2], [10, 20, 30])
    assert out.shape == (3, CONFIG.vocab)
    assert out.dtype == np.float32
    assert np.isfinite(out).all()
    assert pool.k.shape == (CONFIG.n_layers, 4, 8, CONFIG.n_kv_heads, CONFIG.head_dim)
    assert np.abs(pool.k[:, 0, :3]).sum() > 0 and np.abs(pool.k[:, 0, 3:]).sum() == 0


def test_random_weights_are_seeded():
    a, b, c = (TinyLlama.random(CONFIG, seed=s) for s in (5, 5, 6))
    for name in a.weights:
        assert np.array_equal(a.weights[name], b.weights[name]), name
    assert not np.array_equal(a.weights["tok_emb"], c.weights["tok_emb"])


def test_save_load_round_trip(model, tmp_path):
    path = tmp_path / "m.npz"
    model.save(path)
    loaded = TinyLlama.load(path)
    assert loaded.config == model.config
    assert np.array_equal(one_at_a_time(loaded, IDS[:10]), one_at_a_time(model, IDS[:10]))


def test_untied_head_round_trip(tmp_path):
    config = LlamaConfig(n_layers=1, tied=False)
    model = TinyLlama.random(config, seed=1)
    model.save(tmp_path / "u.npz")
    assert "output" in TinyLlama.load(tmp_path / "u.npz").weights


def test_one_batch_equals_one_token_at_a_time(model):
    alone = one_at_a_time(model, IDS)
    pool = model.new_pool(16, 8)
    table = list(range(15, -1, -1))
    batched = model.forward(pool, [table] * len(IDS), list(range(len(IDS))), IDS)
    assert np.array_equal(batched, alone)


def test_uneven_chunks_and_mixed_sequences_equal_one_at_a_time(model):
    alone_a, alone_b = one_at_a_time(model, IDS), one_at_a_time(model, IDS[::-1])
    pool = model.new_pool(16, 8)
    ta, tb = list(range(8)), list(range(8, 16))
    rows_a, rows_b, p = [], [], 0
    for n in (1, 7, 2, 17, 3, 15):
        out = model.forward(pool, [ta] * n + [tb] * n, list(range(p, p + n)) * 2,
                            IDS[p:p + n] + IDS[::-1][p:p + n])
        rows_a.append(out[:n])
        rows_b.append(out[n:])
        p += n
    assert np.array_equal(np.concatenate(rows_a), alone_a[:p])
    assert np.array_equal(np.concatenate(rows_b), alone_b[:p])


def test_grouped_heads_and_head_per_kv_both_work():
    config = LlamaConfig(n_heads=4, n_kv_heads=4, n_layers=1)
    model = TinyLlama.random(config, seed=2)
    assert one_at_a_time(model, IDS[:20]).shape == (20, 256)


def test_gemm_rows_put_a_row_at_its_slot_and_clashing_rows_in_later_gemms():
    assert gemm_rows([3, 4, 3, 0, 3]).tolist() == [3, 4, 3 + GEMM_ROWS, 0, 3 + 2 * GEMM_ROWS]


def test_matmul_row_at_its_slot_does_not_depend_on_the_batch():
    # Every slot is checked: OpenBLAS's Haswell kernel sums rows 0-5, 6-11 and 12-15 of a gemm
    # in three different orders, so a row moved to another slot would change in its last bits.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((100, 64)).astype(np.float32)
    b = aligned_copy(rng.standard_normal((64, 344)).astype(np.float32))
    slots = [(i + 5) % GEMM_ROWS for i in range(100)]
    whole = matmul(a, b, gemm_rows(slots))
    assert np.allclose(whole, a @ b, atol=1e-4)
    for i in range(100):
        assert np.array_equal(matmul(a[i:i + 1], b, gemm_rows([slots[i]]))[0], whole[i]), i


@pytest.mark.parametrize("tables, positions, ids, message", [
    ([[0]], [8], [1], "needs 2 blocks"),
    ([[0]], [0], [256], "token ids"),
    ([[0]], [-1], [1], "positions"),
    ([[0], [0]], [0], [1], "one length"),
    ([[9]], [0], [1], "block ids"),
])
def test_bad_rows_are_refused(model, tables, positions, ids, message):
    with pytest.raises(ValueError, match=message):
        model.forward(model.new_pool(4, 8), tables, positions, ids)


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="n_kv_heads"):
        LlamaConfig(n_heads=4, n_kv_heads=3)
