"""A request's prompt KV from one paged cache into another: what a split fleet's link carries.

Both caches hold [num_blocks, block_size, num_kv_heads, head_dim] pools per layer (engine/runtime/cache.py),
and a block id means the same tokens in every layer, so a prompt moves as the same block pairs, layer by layer,
K and V. Its last block may be partial: it goes whole, and the slots past the prompt are the decode side's to
write (its first decode step writes the first token's KV into the slot after the prompt).
"""
from __future__ import annotations

import time

import torch

from engine.core.blocks import blocks_for
from engine.runtime.cache import PagedKVCache


def check_compatible(src: PagedKVCache, dst: PagedKVCache) -> None:
    """Two caches a block can be copied between: the same model's layers, blocks, dtype and device."""
    same = (src.spec.num_layers == dst.spec.num_layers and src.block_size == dst.block_size
            and src.dtype == dst.dtype and src.device == dst.device
            and src.layers[0].key.shape[1:] == dst.layers[0].key.shape[1:])
    if not same:
        raise ValueError("the prefill and decode caches differ (layers, block size, heads, dtype or device): "
                         "a split fleet's two engines serve one model the same way")


def copy_prompt_kv(src: PagedKVCache, src_blocks: list[int], dst: PagedKVCache, dst_blocks: list[int],
                   num_tokens: int) -> float:
    """Copy the KV of a prompt of num_tokens tokens from src's blocks to dst's (block tables, in logical
    order); returns the copy's wall seconds, the device's work finished."""
    needed = blocks_for(num_tokens, src.block_size)
    if len(src_blocks) < needed or len(dst_blocks) < needed:
        raise ValueError(f"a prompt of {num_tokens} tokens spans {needed} blocks of {src.block_size}, but the "
                         f"source table holds {len(src_blocks)} and the destination's {len(dst_blocks)}")
    started = time.perf_counter()
    src_index = torch.tensor(src_blocks[:needed], dtype=torch.int64, device=src.device)
    dst_index = torch.tensor(dst_blocks[:needed], dtype=torch.int64, device=dst.device)
    with torch.inference_mode():
        for src_layer, dst_layer in zip(src.layers, dst.layers):
            dst_layer.key.index_copy_(0, dst_index, src_layer.key.index_select(0, src_index))
            dst_layer.value.index_copy_(0, dst_index, src_layer.value.index_select(0, src_index))
    if src.device.type == "cuda":
        torch.cuda.synchronize(src.device)  # the copy's time is the device's, not the launches'
    return time.perf_counter() - started
