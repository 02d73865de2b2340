"""Torch reference for paged decode attention.

Gathers each sequence's K/V through its block table into a tensor padded to the longest
context, then runs one masked softmax for the whole batch. The real engine uses it on CPU, so
it is batched tensor ops throughout, never a loop over tokens or sequences.
"""
from __future__ import annotations

import torch


def token_rows(block_tables: torch.Tensor, context_lens: torch.Tensor, block_size: int,
               max_context: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(block id, row in block, valid) for every [seq, token] up to max_context."""
    token = torch.arange(max_context, device=block_tables.device)
    valid = token[None, :] < context_lens[:, None].long()
    block_ids = block_tables[:, token // block_size].long()
    # Columns past a sequence's own blocks may hold padding (-1, stale ids): point them at
    # block 0 so indexing stays in range; the softmax mask hides whatever they read.
    block_ids = torch.where(valid, block_ids, 0)
    return block_ids, (token % block_size).expand_as(block_ids), valid


def gather_tokens(cache: torch.Tensor, block_ids: torch.Tensor,
                  rows: torch.Tensor) -> torch.Tensor:
    """[num_seqs, num_kv_heads, tokens, head_dim], gathered straight into the layout the batched
    matmuls read without another copy: (seq, head) batch dims merge, each [tokens, head_dim]
    matrix is dense."""
    _, block_size, num_kv_heads, head_dim = cache.shape
    heads = torch.arange(num_kv_heads, device=cache.device)[None, :, None]
    try:
        flat = cache.view(-1, head_dim)  # one row per (slot, kv head)
    except RuntimeError:  # blocks not laid out densely: slower, but any strides work
        return cache[block_ids[:, None, :], rows[:, None, :], heads]
    # index_select of whole rows runs at copy speed; advanced indexing is several times slower.
    index = (block_ids * block_size + rows)[:, None, :] * num_kv_heads + heads
    return flat.index_select(0, index.flatten()).view(*index.shape, head_dim)


def paged_attention_decode_ref(query: torch.Tensor, key_cache: torch.Tensor,
                               value_cache: torch.Tensor, block_tables: torch.Tensor,
                               context_lens: torch.Tensor, scale: float, *,
                               max_context: int | None = None) -> torch.Tensor:
    """Same contract as `paged_attention_decode`; inputs are assumed already validated.

    `max_context` (the host-side `context_lens.max()`) may be passed to skip a device sync.
    A sequence with context 0 gets an all-zero output.
    """
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    if max_context is None:
        max_context = int(context_lens.max()) if num_seqs else 0
    if max_context == 0:
        return torch.zeros_like(query)
    block_ids, rows, valid = token_rows(block_tables, context_lens, key_cache.shape[1],
                                        max_context)
    keys = gather_tokens(key_cache, block_ids, rows).float()
    values = gather_tokens(value_cache, block_ids, rows).float()
    # Masked-out slots may hold anything, NaN included: zero V there so 0 * NaN cannot leak.
    # In place, on the fresh gathered tensor, touching only the padded tail.
    padded_seq, padded_token = (~valid).nonzero(as_tuple=True)
    values[padded_seq, :, padded_token] = 0.0

    # Query head h = kv_head * group + g, so heads sharing a kv head are adjacent.
    q = query.float().reshape(num_seqs, num_kv_heads, group, head_dim) * scale
    scores = torch.matmul(q, keys.transpose(-1, -2))  # [seqs, kv_heads, group, tokens]
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = probs.masked_fill((context_lens == 0)[:, None, None, None], 0.0)
    out = torch.matmul(probs, values)  # [seqs, kv_heads, group, head_dim]
    return out.reshape(num_seqs, num_heads, head_dim).to(query.dtype)
