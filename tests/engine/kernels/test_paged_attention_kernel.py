"""Paged decode attention: the Triton kernel against the torch reference, and the reference
against plain dense attention over contiguous K/V."""
import math

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st

from engine.kernels import paged_attention_decode, paged_attention_decode_ref  # noqa: E402
from tests.helpers.kernel_checks import DEVICE, TOLERANCE, TRITON_RUNNABLE, needs_triton, poisoned_pool  # noqa: E402


class PagedCase:
    """Random contiguous K/V per sequence, scattered into a NaN-poisoned paged pool through a
    randomly permuted block table, so only slots inside a context hold numbers."""

    def __init__(self, context_lens, num_heads, num_kv_heads, head_dim, block_size, dtype,
                 seed=0, spare_blocks=3):
        gen = torch.Generator().manual_seed(seed)
        self.context_lens_list = list(context_lens)
        self.block_size = block_size
        blocks_per_seq = [math.ceil(c / block_size) for c in context_lens]
        max_blocks = max(max(blocks_per_seq), 1) + 1  # a spare column of padding
        num_blocks = sum(blocks_per_seq) + spare_blocks
        num_seqs = len(context_lens)

        def randn(*shape):
            return torch.randn(*shape, generator=gen).to(dtype)

        self.query = randn(num_seqs, num_heads, head_dim)
        self.keys = [randn(c, num_kv_heads, head_dim) for c in context_lens]
        self.values = [randn(c, num_kv_heads, head_dim) for c in context_lens]
        self.key_cache, self.value_cache, self.block_tables = poisoned_pool(
            self.keys, self.values, block_size, num_blocks, max_blocks, dtype, gen)
        self.context_lens = torch.tensor(context_lens, dtype=torch.int32)
        self.scale = 1.0 / math.sqrt(head_dim)
        self.to(DEVICE)

    def to(self, device):
        for name in ("query", "key_cache", "value_cache", "block_tables", "context_lens"):
            setattr(self, name, getattr(self, name).to(device))

    def args(self):
        return (self.query, self.key_cache, self.value_cache, self.block_tables,
                self.context_lens, self.scale)

    def dense(self):
        """Textbook attention in float64, per sequence, over the contiguous K/V."""
        group = self.query.shape[1] // self.key_cache.shape[2]
        outputs = []
        for seq, context_len in enumerate(self.context_lens_list):
            q = self.query[seq].cpu().double()
            if context_len == 0:
                outputs.append(torch.zeros_like(q))
                continue
            k = self.keys[seq].double().repeat_interleave(group, dim=1)  # [ctx, heads, dim]
            v = self.values[seq].double().repeat_interleave(group, dim=1)
            scores = torch.einsum("hd,thd->ht", q, k) * self.scale
            outputs.append(torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v))
        return torch.stack(outputs)


# (context_lens, num_heads, num_kv_heads, head_dim, block_size)
CASES = {
    "ragged": ([5, 33, 17], 4, 4, 64, 16),
    "block_boundary": ([16, 8, 24], 2, 2, 64, 8),
    "context_1": ([1, 1], 4, 2, 64, 16),
    "gqa_4_over_2_d128": ([20, 40], 4, 2, 128, 16),
    "gqa_8_over_1": ([9, 70], 8, 1, 64, 8),
    "gqa_8_over_2": ([25, 3, 40], 8, 2, 64, 16),  # group 4 over several KV heads: head h reads KV head h // 4
    "multi_tile": ([150, 3], 2, 1, 64, 16),
    "head_dim_80": ([30, 7], 2, 2, 80, 16),
    "context_0_padding": ([0, 12], 2, 1, 64, 8),
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reference_matches_dense_attention(case, dtype):
    paged = PagedCase(*case, dtype=dtype)
    out = paged_attention_decode_ref(*paged.args())
    assert out.dtype == dtype and out.shape == paged.query.shape
    torch.testing.assert_close(out.cpu().double(), paged.dense(),
                               **TOLERANCE[dtype], check_dtype=False)


def run_triton_poisoned(paged):
    from engine.kernels.paged_attention import paged_attention_decode_triton

    out = torch.full_like(paged.query, float("nan"))
    max_context = max(paged.context_lens_list)
    return paged_attention_decode_triton(*paged.args(), max_context, out=out)


@needs_triton
@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_matches_reference(case, dtype):
    paged = PagedCase(*case, dtype=dtype, seed=1)
    expected = paged_attention_decode_ref(*paged.args())
    poisoned = run_triton_poisoned(paged)
    public = paged_attention_decode(*paged.args(), backend="triton")
    assert public.dtype == dtype and public.shape == paged.query.shape
    torch.testing.assert_close(poisoned, expected, **TOLERANCE[dtype])
    torch.testing.assert_close(public, expected, **TOLERANCE[dtype])


@needs_triton
@pytest.mark.parametrize("case", [CASES["ragged"], CASES["gqa_8_over_1"]], ids=["ragged", "gqa"])
def test_triton_without_bounds_check(case):
    # Unchecked calls skip the host sync, so the launcher sizes its tile without max_context.
    paged = PagedCase(*case, dtype=torch.float16, seed=4)
    expected = paged_attention_decode_ref(*paged.args())
    out = paged_attention_decode(*paged.args(), backend="triton", check_bounds=False)
    torch.testing.assert_close(out, expected, **TOLERANCE[torch.float16])


def interleave_with_junk(cache):
    """The same values, with NaN columns between kv heads (strided, still one row per head)."""
    return torch.stack([cache, torch.full_like(cache, float("nan"))], dim=3)[:, :, :, 0]


def head_major_blocks(cache):
    """The same values, each block stored [kv_head, slot, dim]: slots of a head are adjacent."""
    return cache.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)


@pytest.mark.parametrize("relayout", [interleave_with_junk, head_major_blocks])
def test_strided_caches(relayout):
    paged = PagedCase([13, 30], 4, 2, 64, 8, torch.float32, seed=5)
    paged.key_cache = relayout(paged.key_cache)
    paged.value_cache = relayout(paged.value_cache)
    assert not paged.key_cache.is_contiguous()
    out = paged_attention_decode_ref(*paged.args())
    torch.testing.assert_close(out.cpu().double(), paged.dense(), check_dtype=False,
                               **TOLERANCE[torch.float32])
    if TRITON_RUNNABLE:
        torch.testing.assert_close(paged_attention_decode(*paged.args(), backend="triton"), out,
                                   **TOLERANCE[torch.float32])


@needs_triton
def test_triton_reads_strided_query():
    # The runner slices q out of a fused qkv projection: rows are not contiguous.
    paged = PagedCase([11, 26], 4, 2, 64, 8, torch.float16, seed=2)
    qkv = torch.randn(2, 3 * 4, 64, dtype=torch.float16, device=DEVICE)
    paged.query = qkv[:, :4]
    assert not paged.query.is_contiguous()
    expected = paged_attention_decode_ref(*paged.args())
    out = paged_attention_decode(*paged.args(), backend="triton")
    torch.testing.assert_close(out, expected, **TOLERANCE[torch.float16])


@needs_triton
@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    context_lens=st.lists(st.integers(1, 48), min_size=1, max_size=3),
    kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([32, 64]),
    block_size=st.sampled_from([8, 16]),
)
def test_triton_matches_reference_random_shapes(context_lens, kv_heads, group, head_dim,
                                                block_size):
    paged = PagedCase(context_lens, kv_heads * group, kv_heads, head_dim, block_size,
                      torch.float32, seed=len(context_lens))
    expected = paged_attention_decode_ref(*paged.args())
    torch.testing.assert_close(run_triton_poisoned(paged), expected, **TOLERANCE[torch.float32])


def test_auto_backend_matches_reference():
    paged = PagedCase([13, 4], 4, 2, 64, 8, torch.float32, seed=3)
    expected = paged_attention_decode_ref(*paged.args())
    torch.testing.assert_close(paged_attention_decode(*paged.args()), expected,
                               **TOLERANCE[torch.float32])
    torch.testing.assert_close(paged_attention_decode(*paged.args(), backend="torch"), expected)


def test_empty_batch():
    paged = PagedCase([3], 2, 2, 64, 8, torch.float32)
    out = paged_attention_decode(paged.query[:0], paged.key_cache, paged.value_cache,
                                 paged.block_tables[:0], paged.context_lens[:0], paged.scale)
    assert out.shape == (0, 2, 64)


@pytest.mark.skipif(DEVICE != "cuda", reason="needs a GPU with 10+ GiB free")
def test_triton_offsets_past_int32():
    # One pool row past 2**31 elements: a 32-bit offset would wrap and read the wrong block.
    block_size, num_kv_heads, head_dim = 16, 8, 128
    per_block = block_size * num_kv_heads * head_dim
    num_blocks = (2**31) // per_block + 8
    if torch.cuda.mem_get_info()[0] < 2.5 * num_blocks * per_block * 2:
        pytest.skip("not enough free GPU memory")
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.zeros(shape, dtype=torch.float16, device=DEVICE)
    value_cache = torch.zeros(shape, dtype=torch.float16, device=DEVICE)
    last = torch.arange(num_blocks - 4, num_blocks, dtype=torch.int32, device=DEVICE)
    key_cache[last.long()] = torch.randn(4, *shape[1:], dtype=torch.float16, device=DEVICE)
    value_cache[last.long()] = torch.randn(4, *shape[1:], dtype=torch.float16, device=DEVICE)
    query = torch.randn(2, 16, head_dim, dtype=torch.float16, device=DEVICE)
    block_tables = last.reshape(2, 2)
    context_lens = torch.tensor([32, 20], dtype=torch.int32, device=DEVICE)
    args = (query, key_cache, value_cache, block_tables, context_lens, 0.088)
    expected = paged_attention_decode_ref(*args)
    torch.testing.assert_close(paged_attention_decode(*args, backend="triton"), expected,
                               **TOLERANCE[torch.float16])


# --- flash-decoding: contexts split across programs, then one reduce --------------------------

# (context_lens, num_heads, num_kv_heads, head_dim, block_size, partition_size)
SPLIT_CASES = {
    "not_multiple_of_partition": ([37, 70, 5], 4, 2, 64, 8, 16),
    "one_partition": ([12, 16], 2, 2, 32, 8, 16),
    "partition_not_multiple_of_tile": ([45, 9], 2, 1, 32, 4, 24),
    "gqa_8_over_1_many_parts": ([130, 1], 8, 1, 32, 16, 16),
    "gqa_8_over_2": ([50, 17], 8, 2, 32, 8, 16),
    "context_0_padding": ([0, 33], 2, 1, 32, 8, 16),
}


@needs_triton
@pytest.mark.parametrize("case", SPLIT_CASES.values(), ids=list(SPLIT_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_flash_decoding_matches_reference(case, dtype):
    from engine.kernels.paged_attention import paged_attention_decode_triton

    *shape, partition = case
    paged = PagedCase(*shape, dtype=dtype, seed=6)
    expected = paged_attention_decode_ref(*paged.args())
    out = torch.full_like(paged.query, float("nan"))
    # No max_context: partitions sized against the block table's width, as the runner calls it.
    split = paged_attention_decode_triton(*paged.args(), out=out, partition_size=partition)
    torch.testing.assert_close(split, expected, **TOLERANCE[dtype])
    public = paged_attention_decode(*paged.args(), backend="triton", partition_size=partition)
    torch.testing.assert_close(public, expected, **TOLERANCE[dtype])


@needs_triton
def test_flash_decoding_chosen_automatically_matches_reference():
    from engine.kernels import paged_attention as kernel

    # 2 sequences x 1 kv head are far fewer programs than a GPU's SMs: "auto" splits.
    paged = PagedCase([150, 61], 4, 1, 32, 16, torch.float32, seed=7)
    assert kernel.choose_partition(2, 1, 150, 64, 4 * kernel.streaming_multiprocessors(None)) is not None
    expected = paged_attention_decode_ref(*paged.args())
    torch.testing.assert_close(paged_attention_decode(*paged.args(), backend="triton"), expected,
                               **TOLERANCE[torch.float32])


@pytest.mark.parametrize("num_seqs, kv_heads, bound, tile, target, expected", [
    (32, 40, 256, 64, 528, None),  # batch 32 x 40 heads fills the GPU, short walks: one pass
    (8, 40, 256, 64, 528, 128),  # 320 programs: 2 partitions of 128 reach the target
    (8, 40, 64, 64, 528, None),  # one tile of context: nothing to split
    (1, 40, 2048, 64, 528, 256),  # 14 partitions wanted: 2048 / 14 -> 147 -> 256 tokens
    (128, 40, 2048, 64, 528, 512),  # the GPU is full, but walks stay within 512 tokens
    (8, 40, 2048, 64, 528, 512),  # 2 partitions would fill it; 4 keep walks within 512
    (1, 1, 100_000, 64, 528, 2048),  # at most 64 partitions, however long the walk
    (2, 1, 100, 64, 528, 64),  # never below one tile: 64 + 36 tokens
])
def test_partition_choice(num_seqs, kv_heads, bound, tile, target, expected):
    pytest.importorskip("triton")
    from engine.kernels.paged_attention import choose_partition

    assert choose_partition(num_seqs, kv_heads, bound, tile, target) == expected


@pytest.mark.slow
@needs_triton
@settings(max_examples=10, deadline=None, derandomize=True)
@given(
    context_lens=st.lists(st.integers(0, 80), min_size=1, max_size=3),
    kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 4]),
    block_size=st.sampled_from([4, 8, 16]),
    partition=st.sampled_from([8, 16, 24, 40]),
)
def test_flash_decoding_matches_reference_random_shapes(context_lens, kv_heads, group, block_size, partition):
    from engine.kernels.paged_attention import paged_attention_decode_triton

    paged = PagedCase(context_lens, kv_heads * group, kv_heads, 32, block_size, torch.float32,
                      seed=len(context_lens))
    expected = paged_attention_decode_ref(*paged.args())
    out = torch.full_like(paged.query, float("nan"))
    split = paged_attention_decode_triton(*paged.args(), out=out, partition_size=partition)
    torch.testing.assert_close(split, expected, **TOLERANCE[torch.float32])


@needs_triton
@pytest.mark.parametrize("case", [CASES["ragged"], CASES["gqa_8_over_1"], CASES["context_0_padding"],
                                  CASES["head_dim_80"]], ids=["ragged", "gqa", "context_0", "head_dim_80"])
@pytest.mark.parametrize("partition_size", [None, 16], ids=["one_pass", "split"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_dot_tiles_match_reference(case, partition_size, dtype):
    # The tl.dot variant pads the query group to 16 rows; bf16 is left to compiled runs.
    from engine.kernels.paged_attention import paged_attention_decode_triton

    paged = PagedCase(*case, dtype=dtype, seed=9)
    expected = paged_attention_decode_ref(*paged.args())
    out = torch.full_like(paged.query, float("nan"))
    got = paged_attention_decode_triton(*paged.args(), out=out, partition_size=partition_size, use_dot=True)
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
