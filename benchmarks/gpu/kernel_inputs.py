"""The attention kernels' benchmark inputs: K/V in a paged pool of shuffled blocks, as a serving pool holds them,
and the same K/V laid out densely for scaled_dot_product_attention, the side each kernel is timed against."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.core.blocks import blocks_for
from engine.kernels.paged_attention_ref import gather_tokens, token_rows


def shuffled_pool(num_seqs, tokens, heads, head_dim, block_size, dtype, device, gen):
    """num_seqs sequences of `tokens` random K/V each, in a paged pool in shuffled block order: the caches,
    the block tables and the context lengths."""
    blocks_per_seq = blocks_for(tokens, block_size)
    shape = (num_seqs * blocks_per_seq, block_size, heads, head_dim)
    key_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    value_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    order = torch.randperm(shape[0], generator=gen, device=device)
    block_tables = order.to(torch.int32).reshape(num_seqs, blocks_per_seq)
    context_lens = torch.full((num_seqs,), tokens, dtype=torch.int32, device=device)
    return key_cache, value_cache, block_tables, context_lens


def dense_kv(key_cache, value_cache, block_tables, context_lens, block_size, tokens):
    """The same K/V laid out densely for SDPA: [sequences, heads, tokens, dim] each."""
    block_ids, rows, _ = token_rows(block_tables, context_lens, block_size, tokens)
    return gather_tokens(key_cache, block_ids, rows), gather_tokens(value_cache, block_ids, rows)


def build_decode(batch, context, heads, head_dim, block_size, dtype, device, seed):
    """A paged pool in shuffled block order, plus the same K/V laid out densely for SDPA."""
    gen = torch.Generator(device=device).manual_seed(seed)
    key_cache, value_cache, block_tables, context_lens = shuffled_pool(
        batch, context, heads, head_dim, block_size, dtype, device, gen)
    query = torch.randn(batch, heads, head_dim, generator=gen, device=device, dtype=dtype)
    dense_k, dense_v = dense_kv(key_cache, value_cache, block_tables, context_lens, block_size, context)
    paged = (query, key_cache, value_cache, block_tables, context_lens, head_dim ** -0.5)
    return paged, (query[:, :, None, :], dense_k, dense_v)


def dense_attention(query, keys, values, scale):
    return F.scaled_dot_product_attention(query, keys, values, scale=scale)[:, :, 0, :]
