"""Public paged decode attention: validate, pick a backend, run."""
from __future__ import annotations

import torch

from engine.kernels import checks
from engine.kernels.backend import resolve_backend
from engine.kernels.paged_attention_ref import paged_attention_decode_ref


def check_decode_shapes(query, key_cache, value_cache, block_tables, context_lens) -> None:
    """Ranks, dtypes, devices and sizes: metadata only, no device sync."""
    checks.require_rank("query", query, 3, "[num_seqs, num_heads, head_dim]")
    checks.require_cache_pair(key_cache, value_cache)
    checks.require_rank("block_tables", block_tables, 2, "[num_seqs, max_blocks_per_seq]")
    checks.require_rank("context_lens", context_lens, 1, "[num_seqs]")
    checks.require_dtype("block_tables", block_tables, (torch.int32,))
    checks.require_dtype("context_lens", context_lens, (torch.int32,))
    checks.require_same_dtype(query=query, key_cache=key_cache)
    checks.require_same_device(query=query, key_cache=key_cache, block_tables=block_tables,
                               context_lens=context_lens)
    num_seqs, num_heads, head_dim = query.shape
    _, _, num_kv_heads, cache_head_dim = key_cache.shape
    if head_dim != cache_head_dim:
        raise ValueError(f"query head_dim {head_dim} != key_cache head_dim {cache_head_dim}")
    if num_kv_heads == 0 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    for name, tensor in (("block_tables", block_tables), ("context_lens", context_lens)):
        if tensor.shape[0] != num_seqs:
            raise ValueError(f"{name} has {tensor.shape[0]} rows but query has {num_seqs} sequences")


def check_decode_bounds(key_cache, block_tables, context_lens) -> int:
    """Host-side range checks (one device sync). Returns the longest context."""
    num_blocks, block_size = key_cache.shape[:2]
    capacity = block_tables.shape[1] * block_size
    blocks_needed = (context_lens.long() + block_size - 1) // block_size
    column = torch.arange(block_tables.shape[1], device=block_tables.device)
    used = torch.where(column[None, :] < blocks_needed[:, None], block_tables.long(), 0)
    used = torch.cat([used.flatten(), used.new_zeros(1)])  # never empty: min/max defined
    stats = torch.stack([context_lens.long().min(), context_lens.long().max(),
                         used.min(), used.max()]).tolist()
    shortest, longest, lowest_block, highest_block = stats
    if shortest < 0:
        raise ValueError(f"context_lens must be >= 0, got {shortest}")
    if longest > capacity:
        raise ValueError(
            f"context_lens max {longest} exceeds block_tables capacity "
            f"{block_tables.shape[1]} blocks x block_size {block_size} = {capacity} tokens")
    if longest > 0 and (lowest_block < 0 or highest_block >= num_blocks):
        bad = lowest_block if lowest_block < 0 else highest_block
        raise ValueError(f"block_tables holds block id {bad} within a context, "
                         f"outside the cache's 0..{num_blocks - 1}")
    return int(longest)


def paged_attention_decode(query: torch.Tensor, key_cache: torch.Tensor,
                           value_cache: torch.Tensor, block_tables: torch.Tensor,
                           context_lens: torch.Tensor, scale: float,
                           backend: str = "auto", *, check_bounds: bool = True,
                           partition_size: int | str | None = "auto") -> torch.Tensor:
    """Attention of one new query token per sequence over its paged K/V.

    query [num_seqs, num_heads, head_dim]; key_cache / value_cache [num_blocks, block_size,
    num_kv_heads, head_dim]; block_tables int32 [num_seqs, max_blocks_per_seq]; context_lens
    int32 [num_seqs], counting the query's own token, whose K/V is already in the cache.
    Returns [num_seqs, num_heads, head_dim] in query's dtype; context 0 gives zeros.

    `check_bounds` range-checks context_lens and the block ids they reach, which costs one
    device sync per call. A caller that checked its metadata on the host before building these
    tensors (the runner, once per step rather than once per layer) may pass False.
    `partition_size` (Triton only): "auto" splits long contexts across programs (flash-decoding)
    when one pass would leave the GPU underfilled; None forces one pass; an int forces
    partitions of that many tokens. The torch reference has one path.
    """
    check_decode_shapes(query, key_cache, value_cache, block_tables, context_lens)
    scale = checks.require_scale(scale)
    chosen = resolve_backend(backend, query.device)
    if query.shape[0] == 0:
        return torch.empty_like(query)
    max_context = (check_decode_bounds(key_cache, block_tables, context_lens)
                   if check_bounds else None)
    if chosen == "torch":
        return paged_attention_decode_ref(query, key_cache, value_cache, block_tables,
                                          context_lens, scale, max_context=max_context)
    from engine.kernels.paged_attention import paged_attention_decode_triton

    return paged_attention_decode_triton(query, key_cache, value_cache, block_tables,
                                         context_lens, scale, max_context,
                                         partition_size=partition_size)
