"""Torch reference for variable-length prefill attention over the paged cache.

All of an iteration's prompts in one call: their new tokens arrive concatenated (cu_seqlens
marks where each prompt's run starts), and every prompt's keys and values, cached prefix and
new tokens alike, are read from the paged cache through its block table. The prompts are padded
to the longest into one batch and attended by one masked `scaled_dot_product_attention`, so the
real engine on a CPU (where this is the kernel that runs) makes one call per layer too.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels.paged_attention_ref import gather_tokens, token_rows


def query_rows(cu_seqlens: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt, row within the prompt) of every concatenated query token; no device sync."""
    starts = cu_seqlens[:-1].long()
    query_lens = cu_seqlens[1:].long() - starts
    prompt = torch.repeat_interleave(torch.arange(len(starts), device=cu_seqlens.device),
                                     query_lens, output_size=num_tokens)
    return prompt, torch.arange(num_tokens, device=cu_seqlens.device) - starts[prompt]


def visible_keys(cu_seqlens: torch.Tensor, context_lens: torch.Tensor, max_query_len: int,
                 max_context: int) -> torch.Tensor:
    """[prompts, max_query_len, max_context] bool: query row i of a prompt sits at position
    context - query_len + i (after its cached prefix) and sees every key at or before it.
    Padding rows past a prompt's own queries see its whole context, so no row is all-masked."""
    query_lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    first = context_lens.long() - query_lens  # position of each prompt's first new token
    position = first[:, None] + torch.arange(max_query_len, device=cu_seqlens.device)[None, :]
    key = torch.arange(max_context, device=cu_seqlens.device)
    in_context = key[None, :] < context_lens.long()[:, None]
    return (key[None, None, :] <= position[:, :, None]) & in_context[:, None, :]


def prefill_attention_ref(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                          block_tables: torch.Tensor, cu_seqlens: torch.Tensor,
                          context_lens: torch.Tensor, scale: float, *,
                          max_query_len: int | None = None,
                          max_context: int | None = None) -> torch.Tensor:
    """Same contract as `prefill_attention`; inputs are assumed already validated.

    `max_query_len` and `max_context` (host-side maxima) may be passed to skip device syncs.
    """
    num_tokens, num_heads, head_dim = query.shape
    num_prompts = context_lens.shape[0]
    if num_tokens == 0 or num_prompts == 0:
        return torch.zeros_like(query)
    if max_query_len is None:
        max_query_len = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    if max_context is None:
        max_context = int(context_lens.max())
    prompt, row = query_rows(cu_seqlens, num_tokens)
    padded = query.new_zeros(num_prompts, max_query_len, num_heads, head_dim)
    padded[prompt, row] = query

    block_ids, rows, valid = token_rows(block_tables, context_lens, key_cache.shape[1], max_context)
    keys = gather_tokens(key_cache, block_ids, rows)  # [prompts, kv_heads, tokens, head_dim]
    values = gather_tokens(value_cache, block_ids, rows)
    # Slots past a context may hold anything, NaN included, and a masked score times NaN is NaN.
    padded_prompt, padded_token = (~valid).nonzero(as_tuple=True)
    keys[padded_prompt, :, padded_token] = 0.0
    values[padded_prompt, :, padded_token] = 0.0

    mask = visible_keys(cu_seqlens, context_lens, max_query_len, max_context)[:, None]
    out = F.scaled_dot_product_attention(padded.transpose(1, 2), keys, values, attn_mask=mask,
                                         scale=scale, enable_gqa=num_heads != keys.shape[1])
    return out.transpose(1, 2)[prompt, row]
