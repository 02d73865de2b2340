"""Cache writes, block copies and swaps: Triton against the torch reference, and both against
what the slots should hold."""

import pytest

torch = pytest.importorskip("torch")

from engine.kernels import (  # noqa: E402
    allocate_cpu_cache,
    copy_blocks,
    copy_blocks_ref,
    swap_blocks,
    write_kv_cache,
    write_kv_cache_ref,
)
from engine.kernels.swap import contiguous_runs  # noqa: E402
from tests.helpers.kernel_checks import DEVICE, needs_triton  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def poisoned_cache(num_blocks, block_size, num_kv_heads, head_dim, dtype):
    return torch.full((num_blocks, block_size, num_kv_heads, head_dim), float("nan"),
                      dtype=dtype, device=DEVICE)


def random_cache(num_blocks, block_size, num_kv_heads, head_dim, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    return torch.randn(shape, generator=gen).to(dtype).to(DEVICE)


def exactly_equal(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def write_case(num_tokens, num_kv_heads, head_dim, block_size, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    num_blocks = 2 * num_tokens // block_size + 2
    key = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(DEVICE)
    value = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(DEVICE)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[::3] = -1  # padding tokens
    return key, value, slots.to(DEVICE), num_blocks


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_dim,block_size,num_kv_heads", [(64, 8, 2), (128, 16, 1), (80, 16, 3)])
def test_write_kv_cache_triton_matches_reference(dtype, head_dim, block_size, num_kv_heads):
    key, value, slots, num_blocks = write_case(10, num_kv_heads, head_dim, block_size, dtype)
    caches = [poisoned_cache(num_blocks, block_size, num_kv_heads, head_dim, dtype)
              for _ in range(4)]
    write_kv_cache(key, value, caches[0], caches[1], slots, backend="triton")
    write_kv_cache_ref(key, value, caches[2], caches[3], slots)
    exactly_equal(caches[0], caches[2])
    exactly_equal(caches[1], caches[3])
    # Independently of the reference: written slots hold the tokens, the rest is untouched.
    flat_keys = caches[0].reshape(-1, num_kv_heads, head_dim)
    kept = slots >= 0
    exactly_equal(flat_keys[slots[kept]], key[kept])
    untouched = torch.ones(flat_keys.shape[0], dtype=torch.bool, device=DEVICE)
    untouched[slots[kept]] = False
    assert flat_keys[untouched].isnan().all()


@needs_triton
def test_write_kv_cache_triton_reads_strided_key():
    # The runner slices k and v out of a fused qkv projection.
    qkv = torch.randn(6, 3 * 2, 64, device=DEVICE)
    key, value = qkv[:, 2:4], qkv[:, 4:6]
    slots = torch.tensor([3, -1, 0, 9, 15, 4], device=DEVICE)
    caches = [poisoned_cache(2, 8, 2, 64, torch.float32) for _ in range(4)]
    write_kv_cache(key, value, caches[0], caches[1], slots, backend="triton")
    write_kv_cache_ref(key, value, caches[2], caches[3], slots)
    exactly_equal(caches[0], caches[2])
    exactly_equal(caches[1], caches[3])


def test_write_kv_cache_auto_and_torch_backends():
    key, value, slots, num_blocks = write_case(7, 2, 64, 8, torch.float16, seed=4)
    for backend in ("auto", "torch"):
        caches = [poisoned_cache(num_blocks, 8, 2, 64, torch.float16) for _ in range(2)]
        write_kv_cache(key, value, caches[0], caches[1], slots, backend=backend)
        kept = slots >= 0
        exactly_equal(caches[1].reshape(-1, 2, 64)[slots[kept]], value[kept])


@pytest.mark.skipif(DEVICE != "cuda", reason="needs a GPU with 10+ GiB free")
def test_write_kv_cache_triton_offsets_past_int32():
    # Slots in the pool's last blocks sit past 2**31 elements: 32-bit offsets would wrap.
    block_size, num_kv_heads, head_dim = 16, 8, 128
    per_block = block_size * num_kv_heads * head_dim
    num_blocks = (2**31) // per_block + 8
    if torch.cuda.mem_get_info()[0] < 2.5 * num_blocks * per_block * 2:
        pytest.skip("not enough free GPU memory")
    caches = [torch.zeros(num_blocks, block_size, num_kv_heads, head_dim, dtype=torch.float16,
                          device=DEVICE) for _ in range(2)]
    key = torch.randn(5, num_kv_heads, head_dim, dtype=torch.float16, device=DEVICE)
    value = torch.randn_like(key)
    last_slot = num_blocks * block_size - 1
    slots = torch.tensor([last_slot, -1, last_slot - 17, 3, last_slot - 40], device=DEVICE)
    write_kv_cache(key, value, caches[0], caches[1], slots, backend="triton")
    kept = slots >= 0
    exactly_equal(caches[0].view(-1, num_kv_heads, head_dim)[slots[kept]], key[kept])
    exactly_equal(caches[1].view(-1, num_kv_heads, head_dim)[slots[kept]], value[kept])


def copy_case(dtype, num_layers=2):
    key_caches = [random_cache(12, 8, 2, 64, dtype, seed=layer) for layer in range(num_layers)]
    value_caches = [random_cache(12, 8, 2, 64, dtype, seed=10 + layer)
                    for layer in range(num_layers)]
    block_mapping = torch.tensor([[2, 7], [5, 0], [2, 11]], dtype=torch.int64)
    return key_caches, value_caches, block_mapping


@pytest.mark.parametrize("backend", [
    pytest.param("triton", marks=needs_triton), "torch", "auto"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_copy_blocks(backend, dtype):
    key_caches, value_caches, block_mapping = copy_case(dtype)
    expected_keys = [cache.clone() for cache in key_caches]
    expected_values = [cache.clone() for cache in value_caches]
    for src, dst in block_mapping.tolist():
        for cache, expected in zip(key_caches + value_caches, expected_keys + expected_values):
            expected[dst] = cache[src]
    copy_blocks(key_caches, value_caches, block_mapping, backend=backend)
    for actual, expected in zip(key_caches + value_caches, expected_keys + expected_values):
        exactly_equal(actual, expected)


@needs_triton
def test_copy_blocks_triton_matches_reference_with_device_mapping():
    key_caches, value_caches, block_mapping = copy_case(torch.bfloat16, num_layers=3)
    ref_keys = [cache.clone() for cache in key_caches]
    ref_values = [cache.clone() for cache in value_caches]
    copy_blocks(key_caches, value_caches, block_mapping.to(DEVICE), backend="triton")
    copy_blocks_ref(ref_keys, ref_values, block_mapping)
    for actual, expected in zip(key_caches + value_caches, ref_keys + ref_values):
        exactly_equal(actual, expected)


def test_copy_blocks_empty_mapping_is_a_no_op():
    key_caches, value_caches, _ = copy_case(torch.float32)
    before = [cache.clone() for cache in key_caches]
    copy_blocks(key_caches, value_caches, torch.empty(0, 2, dtype=torch.int64))
    for actual, expected in zip(key_caches, before):
        exactly_equal(actual, expected)


def test_swap_blocks_round_trip():
    device_pool = random_cache(10, 8, 2, 64, torch.float16, seed=5)
    original = device_pool.clone()
    host_pool = allocate_cpu_cache((6, 8, 2, 64), torch.float16)
    out_mapping = torch.tensor([[3, 0], [4, 1], [9, 5], [0, 2]])
    swap_blocks(device_pool, host_pool, out_mapping)
    if device_pool.is_cuda:
        torch.cuda.synchronize()  # the copy into pinned memory is asynchronous
    for src, dst in out_mapping.tolist():
        exactly_equal(host_pool[dst], original[src].cpu())
    assert not host_pool[[3, 4]].any()  # unmapped host blocks stay zero

    device_pool.fill_(float("nan"))
    back_mapping = torch.tensor([[0, 7], [1, 8], [5, 2], [2, 6]])
    swap_blocks(host_pool, device_pool, back_mapping)
    if device_pool.is_cuda:
        torch.cuda.synchronize()
    for (src, _), (_, dst) in zip(out_mapping.tolist(), back_mapping.tolist()):
        exactly_equal(device_pool[dst], original[src])
    assert device_pool[[0, 1, 3, 4, 5, 9]].isnan().all()


def test_contiguous_runs_merge_neighbouring_blocks():
    pairs = [(3, 0), (4, 1), (5, 2), (9, 3), (7, 8), (8, 9), (2, 2)]
    assert contiguous_runs(pairs) == [(3, 0, 3), (9, 3, 1), (7, 8, 2), (2, 2, 1)]
    assert contiguous_runs([]) == []


def test_allocate_cpu_cache():
    cache = allocate_cpu_cache([4, 16, 2, 64], torch.bfloat16, pin=False)
    assert cache.shape == (4, 16, 2, 64) and cache.dtype == torch.bfloat16
    assert cache.device.type == "cpu" and not cache.any()
    if torch.cuda.is_available():
        assert allocate_cpu_cache((2, 8, 1, 64), torch.float16).is_pinned()
