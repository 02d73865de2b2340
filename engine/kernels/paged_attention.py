"""Triton paged decode attention: one query token per sequence, K/V read through the block table.

One program per (sequence, kv head) serves every query head of that kv head's group, so K/V
are read from memory once per group (grouped-query attention). It walks the context in tiles
of tokens, gathering each token's physical row through the block table, and keeps one online
softmax (running max and sum) across all tiles: a single pass, one global softmax.

Scores are an elementwise product and a sum rather than `tl.dot`: with one query token there is
no matrix to multiply, and the Triton interpreter computes `tl.dot` on bf16 wrongly.
Imported lazily (triton is optional), and only after TRITON_INTERPRET is settled.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

# Bound on the [group, tile, head_dim] product one program holds in registers: at twice this,
# sm_90 builds spill (ptxas resource usage); at this size, with 8 warps, they do not.
_TILE_ELEMENTS = 8192
_MAX_TILE = 64


@triton.jit
def _paged_decode_kernel(
    out_ptr, query_ptr, key_cache_ptr, value_cache_ptr, block_tables_ptr, context_lens_ptr,
    scale_log2e,
    stride_qs, stride_qh, stride_qd,
    stride_os, stride_oh, stride_od,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd,
    stride_bs, stride_bb,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, GROUP_P2: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_P2: tl.constexpr, TILE: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    context_len = tl.load(context_lens_ptr + seq)

    g = tl.arange(0, GROUP_P2)
    d = tl.arange(0, HEAD_P2)
    head_mask = (g[:, None] < GROUP) & (d[None, :] < HEAD_DIM)
    heads = kv_head * GROUP + g
    q_offsets = seq * stride_qs + heads[:, None] * stride_qh + d[None, :] * stride_qd
    # Fold the softmax scale and log2(e) into q once, so the loop can use exp2.
    q = tl.load(query_ptr + q_offsets, mask=head_mask, other=0.0).to(tl.float32) * scale_log2e

    running_max = tl.full([GROUP_P2], float("-inf"), tl.float32)
    running_sum = tl.zeros([GROUP_P2], tl.float32)
    acc = tl.zeros([GROUP_P2, HEAD_P2], tl.float32)
    table_row = block_tables_ptr + seq * stride_bs
    t_in_tile = tl.arange(0, TILE)

    for tile_start in range(0, context_len, TILE):
        t = tile_start + t_in_tile
        t_valid = t < context_len
        # int64 before the multiply: block id * block stride can pass 2**31.
        block_id = tl.load(table_row + (t // BLOCK_SIZE) * stride_bb, mask=t_valid, other=0)
        block_id = block_id.to(tl.int64)
        row = t % BLOCK_SIZE
        kv_mask = t_valid[:, None] & (d[None, :] < HEAD_DIM)
        k_offsets = (block_id[:, None] * stride_kb + row[:, None] * stride_kt
                     + kv_head * stride_kh + d[None, :] * stride_kd)
        k = tl.load(key_cache_ptr + k_offsets, mask=kv_mask, other=0.0).to(tl.float32)

        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # [GROUP_P2, TILE]
        scores = tl.where(t_valid[None, :], scores, float("-inf"))
        # The first token of every tile is valid, so new_max is finite: no -inf - -inf.
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        rescale = tl.exp2(running_max - new_max)
        probs = tl.exp2(scores - new_max[:, None])
        running_sum = running_sum * rescale + tl.sum(probs, axis=1)

        v_offsets = (block_id[:, None] * stride_vb + row[:, None] * stride_vt
                     + kv_head * stride_vh + d[None, :] * stride_vd)
        v = tl.load(value_cache_ptr + v_offsets, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * rescale[:, None] + tl.sum(probs[:, :, None] * v[None, :, :], axis=1)
        running_max = new_max

    # Context 0 leaves the sum at 0: write zeros instead of 0/0.
    out = acc / tl.where(running_sum > 0, running_sum, 1.0)[:, None]
    o_offsets = seq * stride_os + heads[:, None] * stride_oh + d[None, :] * stride_od
    tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty), mask=head_mask)


def _tile_tokens(group_p2: int, head_p2: int, max_context: int | None) -> int:
    tile = min(_MAX_TILE, max(16, _TILE_ELEMENTS // (group_p2 * head_p2)))
    if max_context is None:  # unknown without a device sync: size for registers alone
        return tile
    # Short contexts need no more than one small tile (and the interpreter runs faster).
    return min(tile, max(16, triton.next_power_of_2(max_context)))


def paged_attention_decode_triton(query: torch.Tensor, key_cache: torch.Tensor,
                                  value_cache: torch.Tensor, block_tables: torch.Tensor,
                                  context_lens: torch.Tensor, scale: float,
                                  max_context: int | None = None,
                                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Launcher; inputs are assumed validated (see `decode.paged_attention_decode`).

    `out` (shaped and typed like query) lets a caller reuse a buffer, and lets tests poison it.
    """
    num_seqs, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    group = num_heads // num_kv_heads
    out = torch.empty_like(query) if out is None else out
    if num_seqs == 0:
        return out
    group_p2 = triton.next_power_of_2(group)
    head_p2 = triton.next_power_of_2(head_dim)
    tile = _tile_tokens(group_p2, head_p2, max_context)
    _paged_decode_kernel[(num_seqs, num_kv_heads)](
        out, query, key_cache, value_cache, block_tables, context_lens,
        scale * math.log2(math.e),
        *query.stride(), *out.stride(), *key_cache.stride(), *value_cache.stride(),
        *block_tables.stride(),
        BLOCK_SIZE=block_size, GROUP=group, GROUP_P2=group_p2,
        HEAD_DIM=head_dim, HEAD_P2=head_p2,
        TILE=tile, num_warps=8 if group_p2 * tile * head_p2 >= _TILE_ELEMENTS else 4,
    )
    return out
