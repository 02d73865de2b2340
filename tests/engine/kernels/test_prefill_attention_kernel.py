"""Variable-length prefill attention: the Triton kernel against the torch reference, and the
reference against textbook causal attention per prompt over contiguous K/V (float64).

Each case is a list of prompts (cached prefix tokens, new tokens); a prompt's whole context
sits in a NaN-poisoned paged pool in shuffled block order, so only slots inside a context hold
numbers. Sizes are tiny: the Triton interpreter is slow.
"""
import math

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st

from engine.kernels import prefill_attention, prefill_attention_ref  # noqa: E402
from tests.helpers.kernel_checks import DEVICE, TOLERANCE, needs_triton, poisoned_pool  # noqa: E402


class PrefillCase:
    def __init__(self, prompts, num_heads, num_kv_heads, head_dim, block_size, dtype, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.prompts = list(prompts)  # (cached, new)
        contexts = [c + n for c, n in prompts]
        blocks_per_prompt = [math.ceil(c / block_size) for c in contexts]
        num_blocks = sum(blocks_per_prompt) + 2
        max_blocks = max(blocks_per_prompt) + 1  # a spare column of padding

        def randn(*shape):
            return torch.randn(*shape, generator=gen).to(dtype)

        self.query = randn(sum(n for _, n in prompts), num_heads, head_dim)
        self.keys = [randn(c, num_kv_heads, head_dim) for c in contexts]
        self.values = [randn(c, num_kv_heads, head_dim) for c in contexts]
        self.key_cache, self.value_cache, self.block_tables = poisoned_pool(
            self.keys, self.values, block_size, num_blocks, max_blocks, dtype, gen)
        ends = [0]
        for _, n in prompts:
            ends.append(ends[-1] + n)
        self.cu_seqlens = torch.tensor(ends, dtype=torch.int32)
        self.context_lens = torch.tensor(contexts, dtype=torch.int32)
        self.scale = 1.0 / math.sqrt(head_dim)
        for name in ("query", "key_cache", "value_cache", "block_tables", "cu_seqlens", "context_lens"):
            setattr(self, name, getattr(self, name).to(DEVICE))

    def args(self):
        return (self.query, self.key_cache, self.value_cache, self.block_tables, self.cu_seqlens,
                self.context_lens, self.scale)

    def dense(self):
        """Textbook causal attention in float64, prompt by prompt, over the contiguous K/V."""
        group = self.query.shape[1] // self.key_cache.shape[2]
        query, outputs, start = self.query.cpu().double(), [], 0
        for p, (cached, new) in enumerate(self.prompts):
            q = query[start:start + new]
            k = self.keys[p].double().repeat_interleave(group, dim=1)  # [ctx, heads, dim]
            v = self.values[p].double().repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,thd->hqt", q, k) * self.scale
            position = torch.arange(cached, cached + new)[:, None]
            scores = scores.masked_fill(torch.arange(cached + new)[None, :] > position, float("-inf"))
            outputs.append(torch.einsum("hqt,thd->qhd", torch.softmax(scores, dim=-1), v))
            start += new
        return torch.cat(outputs)


# (prompts as (cached, new), num_heads, num_kv_heads, head_dim, block_size)
CASES = {
    "one_prompt": ([(0, 20)], 2, 2, 16, 8),
    "mixed_lengths": ([(0, 5), (0, 33), (0, 1), (0, 17)], 2, 2, 16, 8),
    "cached_prefixes": ([(8, 3), (0, 9), (16, 1), (4, 20)], 2, 2, 16, 4),
    "gqa_4_over_2": ([(8, 12), (0, 7)], 4, 2, 16, 16),
    "gqa_4_over_1_d32": ([(0, 18), (5, 2)], 4, 1, 32, 8),
    "gqa_8_over_2": ([(4, 9), (0, 13)], 8, 2, 16, 4),  # group 4 over several KV heads, over a cached prefix
    "multi_tile": ([(70, 70), (0, 3)], 1, 1, 16, 16),
    "head_dim_24": ([(3, 9), (0, 4)], 2, 1, 24, 4),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_reference_matches_dense_attention(case, dtype):
    prefill = PrefillCase(*case, dtype=dtype)
    out = prefill_attention_ref(*prefill.args())
    assert out.dtype == dtype and out.shape == prefill.query.shape
    torch.testing.assert_close(out.cpu().double(), prefill.dense(), **TOLERANCE[dtype], check_dtype=False)


def run_triton_poisoned(prefill):
    from engine.kernels.varlen_prefill import prefill_attention_triton

    out = torch.full_like(prefill.query, float("nan"))
    max_query_len = max(n for _, n in prefill.prompts)
    return prefill_attention_triton(*prefill.args(), max_query_len, out=out)


# The interpreter's tl.dot is wrong on bf16 (see paged_attention.py): bf16 is checked compiled only.
TRITON_DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])


@needs_triton
@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
@pytest.mark.parametrize("dtype", TRITON_DTYPES, ids=str)
def test_triton_matches_reference(case, dtype):
    prefill = PrefillCase(*case, dtype=dtype, seed=1)
    expected = prefill_attention_ref(*prefill.args())
    # Poisoned output, launched without max_context: every row is written, tiles sized from the table.
    torch.testing.assert_close(run_triton_poisoned(prefill), expected, **TOLERANCE[dtype])
    public = prefill_attention(*prefill.args(), backend="triton")
    torch.testing.assert_close(public, expected, **TOLERANCE[dtype])


@needs_triton
@settings(max_examples=10, deadline=None, derandomize=True)
@given(
    prompts=st.lists(st.tuples(st.integers(0, 24), st.integers(1, 24)), min_size=1, max_size=3),
    kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2]),
    block_size=st.sampled_from([4, 8, 16]),
)
def test_triton_matches_reference_random_shapes(prompts, kv_heads, group, block_size):
    prefill = PrefillCase(prompts, kv_heads * group, kv_heads, 16, block_size, torch.float32,
                          seed=len(prompts))
    expected = prefill_attention_ref(*prefill.args())
    torch.testing.assert_close(run_triton_poisoned(prefill), expected, **TOLERANCE[torch.float32])


@needs_triton
def test_triton_reads_strided_query():
    # The model slices q out of a fused qkv projection: rows are not contiguous.
    prefill = PrefillCase([(4, 6), (0, 5)], 2, 2, 16, 4, torch.float32, seed=2)
    qkv = torch.randn(11, 3 * 2, 16, device=DEVICE)
    prefill.query = qkv[:, :2]
    assert not prefill.query.is_contiguous()
    expected = prefill_attention_ref(*prefill.args())
    torch.testing.assert_close(prefill_attention(*prefill.args(), backend="triton"), expected,
                               **TOLERANCE[torch.float32])


def test_auto_and_unchecked_calls_match_reference():
    prefill = PrefillCase([(4, 3), (0, 6)], 2, 1, 16, 4, torch.float32, seed=3)
    expected = prefill_attention_ref(*prefill.args())
    torch.testing.assert_close(prefill_attention(*prefill.args()), expected)
    unchecked = prefill_attention(*prefill.args(), backend="torch", check_bounds=False, max_query_len=6)
    torch.testing.assert_close(unchecked, expected)


def test_one_call_equals_prompt_by_prompt_calls():
    # Batching prompts changes nothing a prompt sees: the varlen call is k single-prompt calls.
    prefill = PrefillCase([(8, 3), (0, 9), (4, 5)], 2, 2, 16, 4, torch.float32, seed=4)
    whole = prefill_attention(*prefill.args())
    for p, (start, end) in enumerate(zip(prefill.cu_seqlens[:-1].tolist(), prefill.cu_seqlens[1:].tolist())):
        single = prefill_attention(prefill.query[start:end], prefill.key_cache, prefill.value_cache,
                                   prefill.block_tables[p:p + 1],
                                   torch.tensor([0, end - start], dtype=torch.int32, device=DEVICE),
                                   prefill.context_lens[p:p + 1], prefill.scale)
        torch.testing.assert_close(whole[start:end], single, **TOLERANCE[torch.float32])


@pytest.mark.parametrize("change, message", [
    (dict(cu_seqlens=[0, 3, 10]), "from 0 to the 9 query tokens"),
    (dict(cu_seqlens=[0, 3]), "needs one more"),
    (dict(context_lens=[2, 6]), "3 query tokens in a context of 2"),
    (dict(context_lens=[7, 600]), "exceeds block_tables capacity"),
])
def test_bad_metadata_is_rejected(change, message):
    prefill = PrefillCase([(4, 3), (0, 6)], 2, 1, 16, 4, torch.float32)
    for name, values in change.items():
        setattr(prefill, name, torch.tensor(values, dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError, match=message):
        prefill_attention(*prefill.args())


def test_unchecked_call_needs_max_query_len():
    prefill = PrefillCase([(0, 3)], 2, 1, 16, 4, torch.float32)
    with pytest.raises(ValueError, match="needs max_query_len"):
        prefill_attention(*prefill.args(), check_bounds=False)


@needs_triton
@pytest.mark.parametrize("tiles", [(16, 16, 4), (32, 16, 4), (16, 32, 2)], ids=str)
def test_triton_tile_overrides_match_reference(tiles):
    # Benchmarks sweep (BLOCK_M, BLOCK_N, num_warps): every choice gives the same attention.
    from engine.kernels.varlen_prefill import prefill_attention_triton

    prefill = PrefillCase([(20, 30), (0, 9), (7, 1)], 2, 1, 16, 8, torch.float32, seed=8)
    expected = prefill_attention_ref(*prefill.args())
    out = prefill_attention_triton(*prefill.args(), 30, tiles=tiles)
    torch.testing.assert_close(out, expected, **TOLERANCE[torch.float32])


@pytest.mark.parametrize("dtype, head_p2, expected", [
    (torch.float16, 128, (64, 64, 4)), (torch.bfloat16, 256, (64, 32, 4)),
    (torch.float32, 128, (32, 32, 4)), (torch.float32, 256, (16, 16, 4)),
])
def test_tile_config_stays_within_what_builds_without_spills(dtype, head_p2, expected):
    pytest.importorskip("triton")
    from engine.kernels.varlen_prefill import tile_config

    assert tile_config(dtype, head_p2, 4096, 4096) == expected
    assert tile_config(dtype, head_p2, 5, 9)[:2] == (16, 16), "short prompts: the smallest dot tile"
