"""Torch reference for variable-length prefill attention over the paged cache.

Same contract as the Triton kernel: all of an iteration's prompts in one call, their new tokens
concatenated (cu_seqlens marks each prompt's run), every key and value, cached prefix and new
tokens alike, read from the paged cache through the prompt's block table.

Inside the call it attends prompt by prompt: gather the prompt's context through its table, one
`scaled_dot_product_attention` (causal, offset by the cached prefix). Padding all prompts to the
longest would batch them, but would cost prompts x longest^2 where prompt by prompt costs the
sum of each one's own; on a CPU, where this reference is the kernel the engine runs, the cost of
an iteration then keeps the shape of its prompts, and a Python loop over a few prompts is cheap
next to their attention.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels.paged_attention_ref import gather_tokens, token_rows


def prompt_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                     block_table: torch.Tensor, context_len: int, scale: float) -> torch.Tensor:
    """One prompt: query [L, H, D] at positions context_len - L .. context_len - 1 attends causally
    over its context's K/V gathered through block_table [max_blocks] -> [L, H, D]."""
    length, num_heads, _ = query.shape
    cached = context_len - length
    context = torch.full((1,), context_len, dtype=torch.int32, device=query.device)
    block_ids, rows, _ = token_rows(block_table[None, :], context, key_cache.shape[1], context_len)
    keys = gather_tokens(key_cache, block_ids, rows)[0]  # [kv_heads, context, head_dim]
    values = gather_tokens(value_cache, block_ids, rows)[0]
    # 4-d [1, heads, tokens, head_dim]: on a CPU, 3-d inputs fall back to SDPA's unfused math
    # path, about twice as slow.
    q, keys, values = query.transpose(0, 1)[None], keys[None], values[None]
    gqa = num_heads != keys.shape[1]
    if cached == 0:  # square: the plain causal mask, which SDPA need not build
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=True, scale=scale, enable_gqa=gqa)
    else:
        key = torch.arange(context_len, device=query.device)
        visible = key[None, :] <= key[cached:, None]  # [L, context]: causal, offset by the prefix
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible, scale=scale, enable_gqa=gqa)
    return out[0].transpose(0, 1)


def prefill_attention_ref(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                          block_tables: torch.Tensor, cu_seqlens: torch.Tensor,
                          context_lens: torch.Tensor, scale: float, *,
                          host_lens: tuple[list[int], list[int]] | None = None) -> torch.Tensor:
    """Same contract as `prefill_attention`; inputs are assumed already validated.

    `host_lens` (each prompt's query tokens and context, as host lists) spares reading
    cu_seqlens and context_lens back from the device.
    """
    if host_lens is None:
        bounds = cu_seqlens.tolist()
        host_lens = ([end - start for start, end in zip(bounds, bounds[1:])], context_lens.tolist())
    out = torch.empty_like(query)
    start = 0
    for prompt, (length, context_len) in enumerate(zip(*host_lens)):
        out[start:start + length] = prompt_attention(query[start:start + length], key_cache,
                                                     value_cache, block_tables[prompt],
                                                     context_len, scale)
        start += length
    return out
