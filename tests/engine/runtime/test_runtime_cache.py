"""The paged KV cache: sizing against free memory, and moving blocks between pools."""
import pytest

torch = pytest.importorskip("torch")

from engine.runtime.cache import PagedKVCache, kv_block_bytes, kv_pool_blocks_that_fit  # noqa: E402


def test_block_bytes_follow_the_kv_formula(spec):
    # 2 (K and V) x layers x kv_heads x head_dim x dtype bytes, per token
    per_token = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 4
    assert kv_block_bytes(spec, 16, torch.float32) == 16 * per_token


def test_blocks_that_fit_a_cpu_budget(opt_tiny):
    block = kv_block_bytes(opt_tiny, 8, torch.float32)
    assert kv_pool_blocks_that_fit(opt_tiny, 8, torch.float32, "cpu", cpu_budget_bytes=10 * block + 1,
                                   memory_fraction=1.0) == 10
    assert kv_pool_blocks_that_fit(opt_tiny, 8, torch.float32, "cpu", cpu_budget_bytes=10 * block,
                                   memory_fraction=0.5) == 5


def test_pool_larger_than_free_memory_fails_before_allocating(opt_tiny, monkeypatch):
    block = kv_block_bytes(opt_tiny, 8, torch.float32)
    allocated = []
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: allocated.append(a) or None)
    with pytest.raises(ValueError, match="at most 10 blocks fit"):
        PagedKVCache(opt_tiny, 11, 0, 8, "cpu", torch.float32, cpu_budget_bytes=10 * block)
    assert not allocated
    with pytest.raises(ValueError, match="num_gpu_blocks must be a positive integer"):
        PagedKVCache(opt_tiny, 0, 0, 8, "cpu", torch.float32)


def test_swap_out_and_in_round_trips_blocks(opt_tiny):
    cache = PagedKVCache(opt_tiny, 6, 3, 4, "cpu", torch.float32)
    for layer in cache.layers:
        layer.key.normal_()
        layer.value.normal_()
    original = [(layer.key.clone(), layer.value.clone()) for layer in cache.layers]
    cache.swap_out([(1, 0), (4, 2)])
    for layer in cache.layers:
        layer.key.zero_()
        layer.value.zero_()
    cache.swap_in([(0, 5), (2, 3)])
    cache.copy([(5, 0)])
    for layer, (key, value) in zip(cache.layers, original):
        for src, dst in ((1, 5), (4, 3), (1, 0)):
            assert torch.equal(layer.key[dst], key[src]) and torch.equal(layer.value[dst], value[src])


def test_block_plans_out_of_range_are_named(opt_tiny):
    cache = PagedKVCache(opt_tiny, 6, 3, 4, "cpu", torch.float32)
    with pytest.raises(ValueError, match=r"blocks_to_swap_out has pair \(6, 0\)"):
        cache.check_block_plans([(6, 0)], [], [])
    with pytest.raises(ValueError, match=r"blocks_to_copy has pair \(0, -1\)"):
        cache.check_block_plans([], [], [(0, -1)])
