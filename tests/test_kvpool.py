"""KvPool (L10.1): allocation, reference counts, fills, the prefix index, the K/V storage."""

import numpy as np
import pytest

from tinyllm.kvpool import KvPool, PoolError


def test_allocate_hands_out_the_lowest_free_block_with_one_owner_and_no_fill():
    pool = KvPool(3, 4)
    assert [pool.allocate(), pool.allocate()] == [0, 1]
    assert pool.refcount(0) == 1 and pool.fill(0) == 0
    assert pool.num_free() == 1


def test_an_exhausted_pool_says_so():
    pool = KvPool(2, 4)
    pool.allocate(), pool.allocate()
    with pytest.raises(PoolError, match="exhausted: all 2 blocks"):
        pool.allocate()


def test_release_frees_at_refcount_zero_and_the_block_comes_back():
    pool = KvPool(2, 4)
    b = pool.allocate()
    pool.retain(b)
    pool.set_fill(b, 3)
    pool.release(b)
    assert pool.refcount(b) == 1 and pool.fill(b) == 3 and pool.num_free() == 1
    pool.release(b)
    assert pool.refcount(b) == 0 and pool.num_free() == 2
    again = pool.allocate()
    assert again == b and pool.fill(again) == 0


def test_touching_a_free_block_is_an_error():
    pool = KvPool(2, 4)
    for touch in (pool.release, pool.retain, pool.fill, lambda b: pool.set_fill(b, 1)):
        with pytest.raises(PoolError, match="block 1 is free"):
            touch(1)


@pytest.mark.parametrize("block", [-1, 2, 1.0, True])
def test_blocks_that_do_not_exist_are_named(block):
    pool = KvPool(2, 4)
    with pytest.raises(PoolError, match="does not exist"):
        pool.refcount(block)
    with pytest.raises(PoolError, match="does not exist"):
        pool.release(block)


@pytest.mark.parametrize("fill", [-1, 5, 2.0])
def test_fill_stays_within_the_block(fill):
    pool = KvPool(1, 4)
    b = pool.allocate()
    with pytest.raises(PoolError, match=r"fill of block 0 must be in \[0, 4\]"):
        pool.set_fill(b, fill)


@pytest.mark.parametrize("args", [(0, 4), (4, 0), (2.0, 4), (True, 4)])
def test_pool_shape_must_be_positive_integers(args):
    with pytest.raises(PoolError):
        KvPool(*args)


def test_only_full_blocks_enter_the_prefix_index_and_the_first_registration_wins():
    pool = KvPool(4, 2)
    a, b = pool.allocate(), pool.allocate()
    pool.set_fill(a, 1)
    with pytest.raises(PoolError, match="only full blocks"):
        pool.register([5, 6], a)
    pool.set_fill(a, 2)
    with pytest.raises(PoolError, match="whole number of blocks"):
        pool.register([5, 6, 7], a)
    assert pool.register([5, 6], a) == a
    assert pool.lookup([5, 6]) == a and pool.is_registered(a)
    pool.set_fill(b, 2)
    assert pool.register([5, 6], b) == a
    assert not pool.is_registered(b)
    assert pool.lookup([5, 7]) is None
    with pytest.raises(PoolError, match="already indexed"):
        pool.register([1, 2, 3, 4], a)


def test_the_index_keys_on_the_whole_prefix_not_the_block_alone():
    pool = KvPool(4, 2)
    first, second = pool.allocate(), pool.allocate()
    pool.set_fill(first, 2), pool.set_fill(second, 2)
    pool.register([1, 2], first)
    pool.register([1, 2, 3, 4], second)
    assert pool.lookup([3, 4]) is None
    assert pool.lookup([1, 2, 3, 4]) == second


def test_a_freed_block_leaves_the_index_but_a_shared_one_stays():
    pool = KvPool(2, 2)
    b = pool.allocate()
    pool.set_fill(b, 2)
    pool.register([9, 9], b)
    pool.retain(b)
    pool.release(b)
    assert pool.lookup([9, 9]) == b
    pool.release(b)
    assert pool.lookup([9, 9]) is None and not pool.is_registered(b)
    c = pool.allocate()
    pool.set_fill(c, 2)
    assert pool.register([9, 9], c) == c


def test_seeded_churn_keeps_the_books_balanced():
    gen = np.random.default_rng(5)
    pool = KvPool(8, 4)
    owners: dict[int, int] = {}
    for _ in range(2000):
        action = gen.integers(3)
        if action == 0 and pool.num_free():
            b = pool.allocate()
            owners[b] = 1
        elif action == 1 and owners:
            b = int(gen.choice(sorted(owners)))
            pool.retain(b)
            owners[b] += 1
        elif action == 2 and owners:
            b = int(gen.choice(sorted(owners)))
            pool.release(b)
            owners[b] -= 1
            if owners[b] == 0:
                del owners[b]
        assert pool.num_free() == 8 - len(owners)
        assert all(pool.refcount(b) == n for b, n in owners.items())


def test_kv_storage_is_float32_by_layer_block_slot_head():
    pool = KvPool(3, 4, layers=2, kv_heads=1, head_dim=8)
    assert pool.k.shape == pool.v.shape == (2, 3, 4, 1, 8)
    assert pool.k.dtype == pool.v.dtype == np.float32
    assert not pool.k.any()
    bookkeeping = KvPool(3, 4)
    assert bookkeeping.k.size == 0
