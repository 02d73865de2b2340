"""Triton paged decode attention: one query token per sequence, K/V read through the block table.

One program per (sequence, kv head) serves every query head of that kv head's group, so K/V
are read from memory once per group (grouped-query attention). It walks the context in tiles
of tokens, gathering each token's physical row through the block table, and keeps one online
softmax (running max and sum) across all tiles: a single pass, one global softmax.

Flash-decoding: when num_seqs x num_kv_heads programs are too few to fill the GPU (small batches,
long contexts), each context is split into partitions, one program per (sequence, kv head,
partition) writes its partial max, sum and unnormalized output, and a second kernel merges them
per (sequence, head) into the same global softmax. `choose_partition` decides, from shapes alone.

Scores are an elementwise product and a sum rather than `tl.dot`: with one query token there is
no matrix to multiply, and the Triton interpreter computes `tl.dot` on bf16 wrongly.
Imported lazily (triton is optional), and only after TRITON_INTERPRET is settled.
"""
from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from engine.kernels.online_softmax import load_value_tile, softmax_tile

# Bound on the [group, tile, head_dim] product one program holds in registers: at twice this,
# sm_90 builds spill (ptxas resource usage); at this size, with 8 warps, they do not.
_TILE_ELEMENTS = 8192
_MAX_TILE = 64
# Flash-decoding's trigger: split contexts when one pass has fewer programs than this many per SM.
_PROGRAMS_PER_SM = 4
_DEFAULT_SMS = 132
_MAX_PARTITIONS = 64
# ... and keep each program's walk within this many tokens (vLLM's partition size), since one
# pass measured 2.3-3.0x dense SDPA at contexts 512-2048 on an H200 even at batch 128.
_MAX_WALK = 512
# Tiles through tl.dot (see paged_attention_decode_triton's use_dot): off until a GPU shows it faster.
USE_DOT = False


@triton.jit
def _attend_range(
    q, key_cache_ptr, value_cache_ptr, table_row, kv_head, start, end, scale_log2e,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd, stride_bb,
    BLOCK_SIZE: tl.constexpr, GROUP_P2: tl.constexpr, HEAD_DIM: tl.constexpr,
    HEAD_P2: tl.constexpr, TILE: tl.constexpr, USE_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Online softmax of q over the tokens [start, end) of one sequence: (running max, running
    sum, unnormalized output), in the exp2 domain. Elementwise, q comes pre-scaled by
    scale * log2(e) in fp32; with USE_DOT it comes in the cache's dtype, GROUP_P2 >= 16 rows
    (padding rows are zeros), and scores and outputs are tl.dot products."""
    d = tl.arange(0, HEAD_P2)
    running_max = tl.full([GROUP_P2], float("-inf"), tl.float32)
    running_sum = tl.zeros([GROUP_P2], tl.float32)
    acc = tl.zeros([GROUP_P2, HEAD_P2], tl.float32)
    t_in_tile = tl.arange(0, TILE)
    for tile_start in range(start, end, TILE):
        t = tile_start + t_in_tile
        t_valid = t < end
        # int64 before the multiply: block id * block stride can pass 2**31.
        block_id = tl.load(table_row + (t // BLOCK_SIZE) * stride_bb, mask=t_valid, other=0)
        block_id = block_id.to(tl.int64)
        row = t % BLOCK_SIZE
        kv_mask = t_valid[:, None] & (d[None, :] < HEAD_DIM)
        k_offsets = (block_id[:, None] * stride_kb + row[:, None] * stride_kt
                     + kv_head * stride_kh + d[None, :] * stride_kd)
        k = tl.load(key_cache_ptr + k_offsets, mask=kv_mask, other=0.0)
        if USE_DOT:
            scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2e
        else:
            scores = tl.sum(q[:, None, :] * k.to(tl.float32)[None, :, :], axis=2)  # [GROUP_P2, TILE]
        scores = tl.where(t_valid[None, :], scores, float("-inf"))
        # The first token of every tile is valid, so the new running max is finite.
        probs, rescale, new_max, running_sum = softmax_tile(scores, running_max, running_sum)
        v = load_value_tile(value_cache_ptr, block_id, row, kv_head, d, kv_mask,
                            stride_vb, stride_vt, stride_vh, stride_vd)
        if USE_DOT:
            acc = acc * rescale[:, None] + tl.dot(probs.to(v.dtype), v, input_precision=DOT_PRECISION)
        else:
            acc = acc * rescale[:, None] + tl.sum(probs[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
        running_max = new_max
    return running_max, running_sum, acc


@triton.jit
def _load_group_query(query_ptr, seq, kv_head, scale_log2e, stride_qs, stride_qh, stride_qd,
                      GROUP: tl.constexpr, GROUP_P2: tl.constexpr, HEAD_DIM: tl.constexpr,
                      HEAD_P2: tl.constexpr, USE_DOT: tl.constexpr):
    g = tl.arange(0, GROUP_P2)
    d = tl.arange(0, HEAD_P2)
    head_mask = (g[:, None] < GROUP) & (d[None, :] < HEAD_DIM)
    heads = kv_head * GROUP + g
    q_offsets = seq * stride_qs + heads[:, None] * stride_qh + d[None, :] * stride_qd
    q = tl.load(query_ptr + q_offsets, mask=head_mask, other=0.0)
    # Fold the softmax scale and log2(e) into q once, so the loop can use exp2 (tl.dot takes q
    # in its own dtype instead: the scale goes on its scores). One return: its type is static.
    if not USE_DOT:
        q = q.to(tl.float32) * scale_log2e
    return q


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
    USE_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """One pass: one program per (sequence, kv head) walks the whole context."""
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    context_len = tl.load(context_lens_ptr + seq)
    q = _load_group_query(query_ptr, seq, kv_head, scale_log2e, stride_qs, stride_qh, stride_qd,
                          GROUP, GROUP_P2, HEAD_DIM, HEAD_P2, USE_DOT)
    _, running_sum, acc = _attend_range(
        q, key_cache_ptr, value_cache_ptr, block_tables_ptr + seq * stride_bs, kv_head, 0, context_len, scale_log2e,
        stride_kb, stride_kt, stride_kh, stride_kd, stride_vb, stride_vt, stride_vh, stride_vd,
        stride_bb, BLOCK_SIZE, GROUP_P2, HEAD_DIM, HEAD_P2, TILE, USE_DOT, DOT_PRECISION)

    # Context 0 leaves the sum at 0: write zeros instead of 0/0.
    out = acc / tl.where(running_sum > 0, running_sum, 1.0)[:, None]
    g = tl.arange(0, GROUP_P2)
    d = tl.arange(0, HEAD_P2)
    heads = kv_head * GROUP + g
    o_offsets = seq * stride_os + heads[:, None] * stride_oh + d[None, :] * stride_od
    tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty),
             mask=(g[:, None] < GROUP) & (d[None, :] < HEAD_DIM))


@triton.jit
def _paged_decode_partition_kernel(
    max_ptr, sum_ptr, acc_ptr, query_ptr, key_cache_ptr, value_cache_ptr, block_tables_ptr,
    context_lens_ptr, scale_log2e, max_parts,
    stride_qs, stride_qh, stride_qd,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd,
    stride_bs, stride_bb,
    NUM_HEADS: tl.constexpr, PARTITION: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, GROUP_P2: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_P2: tl.constexpr, TILE: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Flash-decoding, first half: one program per (sequence, kv head, partition of PARTITION
    tokens) writes its partial max, sum and unnormalized output for every head of the group."""
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    part = tl.program_id(2).to(tl.int64)
    context_len = tl.load(context_lens_ptr + seq).to(tl.int64)
    start = part * PARTITION
    if start >= context_len:  # past this sequence's context: the reduce never reads it
        return
    end = tl.minimum(start + PARTITION, context_len)
    q = _load_group_query(query_ptr, seq, kv_head, scale_log2e, stride_qs, stride_qh, stride_qd,
                          GROUP, GROUP_P2, HEAD_DIM, HEAD_P2, USE_DOT)
    running_max, running_sum, acc = _attend_range(
        q, key_cache_ptr, value_cache_ptr, block_tables_ptr + seq * stride_bs, kv_head, start, end, scale_log2e,
        stride_kb, stride_kt, stride_kh, stride_kd, stride_vb, stride_vt, stride_vh, stride_vd,
        stride_bb, BLOCK_SIZE, GROUP_P2, HEAD_DIM, HEAD_P2, TILE, USE_DOT, DOT_PRECISION)

    g = tl.arange(0, GROUP_P2)
    d = tl.arange(0, HEAD_P2)
    heads = kv_head * GROUP + g
    slot = (seq * NUM_HEADS + heads) * max_parts + part  # [GROUP_P2]: partials are [seq, head, part]
    tl.store(max_ptr + slot, running_max, mask=g < GROUP)
    tl.store(sum_ptr + slot, running_sum, mask=g < GROUP)
    tl.store(acc_ptr + slot[:, None] * HEAD_DIM + d[None, :], acc,
             mask=(g[:, None] < GROUP) & (d[None, :] < HEAD_DIM))


@triton.jit
def _paged_decode_reduce_kernel(
    out_ptr, max_ptr, sum_ptr, acc_ptr, context_lens_ptr, max_parts,
    stride_os, stride_oh, stride_od,
    NUM_HEADS: tl.constexpr, PARTS_P2: tl.constexpr,
    PARTITION: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_P2: tl.constexpr,
):
    """Flash-decoding, second half: one program per (sequence, head) rescales the partitions'
    partials to their common max and sums them: the same global softmax as one pass."""
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    context_len = tl.load(context_lens_ptr + seq)
    num_parts = tl.cdiv(context_len, PARTITION)
    p = tl.arange(0, PARTS_P2)
    d = tl.arange(0, HEAD_P2)
    p_valid = p < num_parts
    slot = (seq * NUM_HEADS + head) * max_parts + p
    maxes = tl.load(max_ptr + slot, mask=p_valid, other=float("-inf"))
    # Context 0 has no partition: a finite stand-in max keeps every weight at exp2(-inf) = 0.
    global_max = tl.maximum(tl.max(maxes, axis=0), -1e30)
    weights = tl.exp2(maxes - global_max)
    sums = tl.load(sum_ptr + slot, mask=p_valid, other=0.0)
    accs = tl.load(acc_ptr + slot[:, None] * HEAD_DIM + d[None, :],
                   mask=p_valid[:, None] & (d[None, :] < HEAD_DIM), other=0.0)
    total = tl.sum(weights * sums, axis=0)
    out = tl.sum(weights[:, None] * accs, axis=0) / tl.where(total > 0, total, 1.0)
    o_offsets = seq * stride_os + head * stride_oh + d * stride_od
    tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)


def _tile_tokens(group_p2: int, head_p2: int, max_context: int | None) -> int:
    tile = min(_MAX_TILE, max(16, _TILE_ELEMENTS // (group_p2 * head_p2)))
    if max_context is None:  # unknown without a device sync: size for registers alone
        return tile
    # Short contexts need no more than one small tile (and the interpreter runs faster).
    return min(tile, max(16, triton.next_power_of_2(max_context)))


@functools.cache
def streaming_multiprocessors(device_index: int | None) -> int:
    """SMs of the CUDA device (None: no CUDA device, as under the interpreter: an H100/H200's)."""
    if device_index is None:
        return _DEFAULT_SMS
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def choose_partition(num_seqs: int, num_kv_heads: int, context_bound: int, tile: int,
                     target_programs: int) -> int | None:
    """Tokens per partition for flash-decoding, or None for one pass.

    One pass runs num_seqs x num_kv_heads programs, each walking its whole context. When that is
    too few to fill the GPU (target_programs), or a walk would pass _MAX_WALK tokens, each
    context is split into partitions of a power-of-two multiple of the tile: enough of them to
    reach the target, none longer than _MAX_WALK, at most _MAX_PARTITIONS. A second kernel
    merges the partitions' softmaxes. Sizing from `context_bound` (the longest context, or the
    block table's width) keeps the choice free of a device sync.
    """
    programs = num_seqs * num_kv_heads
    if context_bound <= tile or (programs >= target_programs and context_bound <= _MAX_WALK):
        return None
    wanted = 1 if programs >= target_programs else -(-target_programs // programs)
    size = triton.next_power_of_2(-(-context_bound // min(wanted, _MAX_PARTITIONS)))
    size = max(tile, min(size, _MAX_WALK), triton.next_power_of_2(-(-context_bound // _MAX_PARTITIONS)))
    return size if size < context_bound else None


def paged_attention_decode_triton(query: torch.Tensor, key_cache: torch.Tensor,
                                  value_cache: torch.Tensor, block_tables: torch.Tensor,
                                  context_lens: torch.Tensor, scale: float,
                                  max_context: int | None = None,
                                  out: torch.Tensor | None = None,
                                  partition_size: int | str | None = "auto",
                                  use_dot: bool | None = None) -> torch.Tensor:
    """Launcher; inputs are assumed validated (see `decode.paged_attention_decode`).

    `out` (shaped and typed like query) lets a caller reuse a buffer, and lets tests poison it.
    `partition_size`: "auto" picks one pass or flash-decoding (`choose_partition`); None forces
    one pass; a number of tokens forces flash-decoding with partitions of that size.
    `use_dot` (None: USE_DOT) computes each tile with tl.dot, the query group padded to 16 rows:
    wasted multiply-adds, but Triton software-pipelines the K/V loads that feed a dot, which a
    memory-bound kernel may want more (the one-pass kernel read K/V at a third of dense SDPA's
    rate on the H200). benchmarks/gpu/gpu_check.py times both.
    """
    num_seqs, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    group = num_heads // num_kv_heads
    out = torch.empty_like(query) if out is None else out
    if num_seqs == 0:
        return out
    use_dot = USE_DOT if use_dot is None else use_dot
    group_p2 = triton.next_power_of_2(group)
    head_p2 = triton.next_power_of_2(head_dim)
    tile = _tile_tokens(group_p2, head_p2, max_context)
    if use_dot:  # tl.dot needs 16 rows and columns; its tile is sized for the dot, not the product
        group_p2, head_p2 = max(16, group_p2), max(16, head_p2)
        tile = _MAX_TILE if max_context is None else min(_MAX_TILE, max(16, triton.next_power_of_2(max_context)))
    context_bound = max_context if max_context is not None else block_tables.shape[1] * block_size
    if partition_size == "auto":
        sms = streaming_multiprocessors(query.device.index if query.device.type == "cuda" else None)
        partition_size = choose_partition(num_seqs, num_kv_heads, context_bound, tile,
                                          _PROGRAMS_PER_SM * sms)
    common = dict(BLOCK_SIZE=block_size, GROUP=group, GROUP_P2=group_p2, HEAD_DIM=head_dim,
                  HEAD_P2=head_p2, TILE=tile, USE_DOT=use_dot,
                  DOT_PRECISION="ieee" if query.dtype == torch.float32 else "tf32",
                  num_warps=4 if use_dot or group_p2 * tile * head_p2 < _TILE_ELEMENTS else 8)
    strides = (*key_cache.stride(), *value_cache.stride(), *block_tables.stride())
    if partition_size is None:
        _paged_decode_kernel[(num_seqs, num_kv_heads)](
            out, query, key_cache, value_cache, block_tables, context_lens,
            scale * math.log2(math.e), *query.stride(), *out.stride(), *strides, **common)
        return out
    if not isinstance(partition_size, int) or partition_size < 1:
        raise ValueError(f"partition_size must be 'auto', None or a positive int, got {partition_size!r}")
    max_parts = triton.cdiv(context_bound, partition_size)
    # One allocation, three dense [seq, head, part(, dim)] arrays: the kernels index them flat.
    slots = num_seqs * num_heads * max_parts
    partials = torch.empty(slots * (head_dim + 2), dtype=torch.float32, device=query.device)
    acc, maxes, sums = partials[:slots * head_dim], partials[-2 * slots:-slots], partials[-slots:]
    _paged_decode_partition_kernel[(num_seqs, num_kv_heads, max_parts)](
        maxes, sums, acc, query, key_cache, value_cache, block_tables, context_lens,
        scale * math.log2(math.e), max_parts, *query.stride(), *strides,
        NUM_HEADS=num_heads, PARTITION=partition_size, **common)
    _paged_decode_reduce_kernel[(num_seqs, num_heads)](
        out, maxes, sums, acc, context_lens, max_parts, *out.stride(),
        NUM_HEADS=num_heads, PARTS_P2=triton.next_power_of_2(max_parts),
        PARTITION=partition_size, HEAD_DIM=head_dim, HEAD_P2=head_p2)
    return out
