"""Public variable-length prefill attention: validate, pick a backend, run."""
from __future__ import annotations

import torch

from engine.kernels import checks
from engine.kernels.backend import resolve_backend
from engine.kernels.decode import check_decode_bounds
from engine.kernels.varlen_prefill_ref import prefill_attention_ref


def check_prefill_shapes(query, key_cache, value_cache, block_tables, cu_seqlens, context_lens) -> None:
    """Ranks, dtypes, devices and sizes: metadata only, no device sync."""
    checks.require_rank("query", query, 3, "[num_tokens, num_heads, head_dim]")
    checks.require_cache_pair(key_cache, value_cache)
    checks.require_rank("block_tables", block_tables, 2, "[num_prompts, max_blocks_per_prompt]")
    checks.require_rank("cu_seqlens", cu_seqlens, 1, "[num_prompts + 1]")
    checks.require_rank("context_lens", context_lens, 1, "[num_prompts]")
    for name, tensor in (("block_tables", block_tables), ("cu_seqlens", cu_seqlens),
                         ("context_lens", context_lens)):
        checks.require_dtype(name, tensor, (torch.int32,))
    checks.require_same_dtype(query=query, key_cache=key_cache)
    checks.require_same_device(query=query, key_cache=key_cache, block_tables=block_tables,
                               cu_seqlens=cu_seqlens, context_lens=context_lens)
    num_heads, head_dim = query.shape[1:]
    num_kv_heads, cache_head_dim = key_cache.shape[2:]
    if head_dim != cache_head_dim:
        raise ValueError(f"query head_dim {head_dim} != key_cache head_dim {cache_head_dim}")
    if num_kv_heads == 0 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    num_prompts = context_lens.shape[0]
    if block_tables.shape[0] != num_prompts:
        raise ValueError(f"block_tables has {block_tables.shape[0]} rows for {num_prompts} prompts")
    if cu_seqlens.shape[0] != num_prompts + 1:
        raise ValueError(f"cu_seqlens has {cu_seqlens.shape[0]} entries for {num_prompts} prompts "
                         "(needs one more: 0, then each prompt's end)")


def check_prefill_bounds(query, key_cache, block_tables, cu_seqlens, context_lens) -> tuple[int, int]:
    """Host-side range checks (device syncs). Returns (longest query run, longest context)."""
    bounds = cu_seqlens.long().tolist()
    if bounds[0] != 0 or bounds[-1] != query.shape[0]:
        raise ValueError(f"cu_seqlens must run from 0 to the {query.shape[0]} query tokens, "
                         f"got {bounds[0]}..{bounds[-1]}")
    query_lens = [end - start for start, end in zip(bounds, bounds[1:])]
    contexts = context_lens.long().tolist()
    for prompt, (length, context) in enumerate(zip(query_lens, contexts)):
        if not 1 <= length <= context:
            raise ValueError(f"prompt {prompt}: {length} query tokens in a context of {context}; "
                             "needs 1 <= query tokens <= context")
    longest = check_decode_bounds(key_cache, block_tables, context_lens)
    return max(query_lens, default=0), longest


def prefill_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      block_tables: torch.Tensor, cu_seqlens: torch.Tensor,
                      context_lens: torch.Tensor, scale: float, backend: str = "auto", *,
                      max_query_len: int | None = None, max_context: int | None = None,
                      check_bounds: bool = True,
                      host_lens: tuple[list[int], list[int]] | None = None) -> torch.Tensor:
    """Causal attention for all of an iteration's prompts in one call, K/V read from the cache.

    query [num_tokens, num_heads, head_dim]: the prompts' new tokens back to back, prompt p's at
    rows cu_seqlens[p] .. cu_seqlens[p + 1] - 1 (cu_seqlens int32 [num_prompts + 1], from 0).
    context_lens int32 [num_prompts]: each prompt's whole context, cached prefix included; its
    new tokens are the last ones, so query row i of prompt p sits at position
    context_lens[p] - query_len + i. Every token's K/V, the new ones too, must already be in
    key_cache / value_cache [num_blocks, block_size, num_kv_heads, head_dim], reached through
    block_tables int32 [num_prompts, max_blocks]. Returns [num_tokens, num_heads, head_dim].

    `check_bounds` validates cu_seqlens, context_lens and the block ids (device syncs); a caller
    that checked them on the host passes False with max_query_len (and max_context) it knows,
    and may pass host_lens (each prompt's query tokens and context as lists), which the torch
    path loops over instead of reading the tensors back from the device.
    """
    check_prefill_shapes(query, key_cache, value_cache, block_tables, cu_seqlens, context_lens)
    scale = checks.require_scale(scale)
    chosen = resolve_backend(backend, query.device)
    if query.shape[0] == 0:
        return torch.empty_like(query)
    if check_bounds:
        max_query_len, max_context = check_prefill_bounds(query, key_cache, block_tables,
                                                          cu_seqlens, context_lens)
    elif max_query_len is None:
        raise ValueError("prefill_attention with check_bounds=False needs max_query_len")
    if chosen == "torch":
        return prefill_attention_ref(query, key_cache, value_cache, block_tables, cu_seqlens,
                                     context_lens, scale, host_lens=host_lens)
    from engine.kernels.varlen_prefill import prefill_attention_triton

    return prefill_attention_triton(query, key_cache, value_cache, block_tables, cu_seqlens,
                                    context_lens, scale, max_query_len, max_context)
