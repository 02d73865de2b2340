"""Torch references for the cache writes: new K/V into slots, and block copies."""
from __future__ import annotations

import torch


def write_kv_cache_ref(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                       value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Same contract as `write_kv_cache`; inputs are assumed already validated."""
    block_size = key_cache.shape[1]
    keep = slot_mapping >= 0  # negative slots are padding tokens
    slots = slot_mapping[keep]
    # A (block, row) index pair works whatever the cache's strides are.
    where = (torch.div(slots, block_size, rounding_mode="floor"), slots % block_size)
    key_cache.index_put_(where, key[keep])
    value_cache.index_put_(where, value[keep])


def copy_blocks_ref(key_caches: list, value_caches: list, block_mapping: torch.Tensor) -> None:
    """Same contract as `copy_blocks`; inputs are assumed already validated."""
    for key_cache, value_cache in zip(key_caches, value_caches):
        mapping = block_mapping.to(key_cache.device, torch.int64)
        src, dst = mapping[:, 0], mapping[:, 1]
        # index_select gathers every source first, so a block is never read after it is written.
        key_cache.index_copy_(0, dst, key_cache.index_select(0, src))
        value_cache.index_copy_(0, dst, value_cache.index_select(0, src))
