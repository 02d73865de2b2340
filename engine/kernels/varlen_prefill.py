"""Triton variable-length causal prefill attention: all of an iteration's prompts in one launch.

The prompts' new tokens arrive concatenated; cu_seqlens marks each prompt's run. Every key and
value, a cached prefix's and the new tokens' own (written to the cache just before), is read
from the paged cache through the prompt's block table, so a prompt with a cached prefix and one
without are the same case. One program per (prompt, tile of BLOCK_M queries, query head): it
walks the keys its tile can see in tiles of BLOCK_N tokens, gathering each token's physical row
through the block table, with one online softmax (flash attention). Programs whose tile starts
past their prompt's length return at once: the grid is sized by the longest prompt.

Imported lazily (triton is optional), and only after TRITON_INTERPRET is settled.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from engine.kernels.online_softmax import load_value_tile, softmax_tile

_MAX_TILE = 64


@triton.jit
def _prefill_kernel(
    out_ptr, query_ptr, key_cache_ptr, value_cache_ptr, block_tables_ptr, cu_seqlens_ptr,
    context_lens_ptr, scale_log2e,
    stride_qt, stride_qh, stride_qd,
    stride_ot, stride_oh, stride_od,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd,
    stride_bs, stride_bb,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    HEAD_P2: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    prompt = tl.program_id(0).to(tl.int64)
    m_tile = tl.program_id(1)
    head = tl.program_id(2).to(tl.int64)
    q_start = tl.load(cu_seqlens_ptr + prompt).to(tl.int64)
    query_len = tl.load(cu_seqlens_ptr + prompt + 1).to(tl.int64) - q_start
    if m_tile * BLOCK_M >= query_len:
        return
    context_len = tl.load(context_lens_ptr + prompt).to(tl.int64)
    first_pos = context_len - query_len  # the new tokens follow the cached prefix
    kv_head = head // GROUP

    m = m_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    m_valid = m < query_len
    q_pos = first_pos + m
    d = tl.arange(0, HEAD_P2)
    d_valid = d < HEAD_DIM
    q_offsets = (q_start + m)[:, None] * stride_qt + head * stride_qh + d[None, :] * stride_qd
    q = tl.load(query_ptr + q_offsets, mask=m_valid[:, None] & d_valid[None, :], other=0.0)

    running_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_P2], tl.float32)
    table_row = block_tables_ptr + prompt * stride_bs
    # Keys past the tile's last query are never visible: stop there.
    kv_end = tl.minimum(context_len, first_pos + (m_tile + 1) * BLOCK_M)
    n_in_tile = tl.arange(0, BLOCK_N)
    for tile_start in range(0, kv_end, BLOCK_N):
        t = tile_start + n_in_tile
        t_valid = t < kv_end
        # int64 before the multiply: block id * block stride can pass 2**31.
        block_id = tl.load(table_row + (t // BLOCK_SIZE) * stride_bb, mask=t_valid, other=0)
        block_id = block_id.to(tl.int64)
        row = t % BLOCK_SIZE
        k_offsets = (block_id[None, :] * stride_kb + row[None, :] * stride_kt
                     + kv_head * stride_kh + d[:, None] * stride_kd)
        k = tl.load(key_cache_ptr + k_offsets, mask=d_valid[:, None] & t_valid[None, :], other=0.0)
        scores = tl.dot(q, k, input_precision=DOT_PRECISION) * scale_log2e  # [BLOCK_M, BLOCK_N]
        visible = (t[None, :] <= q_pos[:, None]) & t_valid[None, :]
        scores = tl.where(visible, scores, float("-inf"))
        # Key 0 is visible to every row (padding rows included), so after the first tile every
        # running max is finite.
        probs, rescale, new_max, running_sum = softmax_tile(scores, running_max, running_sum)
        v = load_value_tile(value_cache_ptr, block_id, row, kv_head, d, t_valid[:, None] & d_valid[None, :],
                            stride_vb, stride_vt, stride_vh, stride_vd)
        acc = acc * rescale[:, None] + tl.dot(probs.to(v.dtype), v, input_precision=DOT_PRECISION)
        running_max = new_max

    out = acc / running_sum[:, None]
    o_offsets = (q_start + m)[:, None] * stride_ot + head * stride_oh + d[None, :] * stride_od
    tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty),
             mask=m_valid[:, None] & d_valid[None, :])


def tile_config(dtype: torch.dtype, head_p2: int, max_query_len: int, max_context: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps), shrunk to the longest prompt and context (tl.dot needs 16).

    Sized so that an sm_90 build does not spill (ptxas -v, benchmarks/gpu/kernel_registers.py):
    fp16/bf16 64 x 64 at head_dim <= 128 (64 x 32 above); fp32, whose exact dot runs without
    tensor cores, 32 x 32 (16 x 16 above head_dim 128).
    """
    if dtype == torch.float32:
        block_m = block_n = 32 if head_p2 <= 128 else 16
    else:
        block_m, block_n = _MAX_TILE, (_MAX_TILE if head_p2 <= 128 else _MAX_TILE // 2)
    block_m = min(block_m, max(16, triton.next_power_of_2(max_query_len)))
    return block_m, min(block_n, max(16, triton.next_power_of_2(max_context))), 4


def prefill_attention_triton(query: torch.Tensor, key_cache: torch.Tensor,
                             value_cache: torch.Tensor, block_tables: torch.Tensor,
                             cu_seqlens: torch.Tensor, context_lens: torch.Tensor, scale: float,
                             max_query_len: int, max_context: int | None = None,
                             out: torch.Tensor | None = None,
                             tiles: tuple[int, int, int] | None = None) -> torch.Tensor:
    """Launcher; inputs are assumed validated (see `prefill.prefill_attention`).

    `max_query_len` sizes the grid (the host knows it: no sync). `max_context` only shrinks the
    key tile; without it the block table's width bounds it. `out` lets tests poison the output.
    `tiles` = (BLOCK_M, BLOCK_N, num_warps) overrides `tile_config` (benchmarks sweep it).
    """
    num_tokens, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    out = torch.empty_like(query) if out is None else out
    num_prompts = context_lens.shape[0]
    if num_tokens == 0 or num_prompts == 0:
        return out
    head_p2 = max(16, triton.next_power_of_2(head_dim))
    bound = max_context if max_context is not None else block_tables.shape[1] * block_size
    block_m, block_n, num_warps = tiles or tile_config(query.dtype, head_p2, max_query_len, bound)
    grid = (num_prompts, triton.cdiv(max_query_len, block_m), num_heads)
    _prefill_kernel[grid](
        out, query, key_cache, value_cache, block_tables, cu_seqlens, context_lens,
        scale * math.log2(math.e),
        *query.stride(), *out.stride(), *key_cache.stride(), *value_cache.stride(),
        *block_tables.stride(),
        BLOCK_SIZE=block_size, GROUP=num_heads // num_kv_heads, HEAD_DIM=head_dim,
        HEAD_P2=head_p2, BLOCK_M=block_m, BLOCK_N=block_n,
        DOT_PRECISION="ieee" if query.dtype == torch.float32 else "tf32",
        num_warps=num_warps,
    )
    return out
