"""Public cache writes: validate, pick a backend, run."""
from __future__ import annotations

import torch

from engine.kernels import checks
from engine.kernels.backend import resolve_backend
from engine.kernels.cache_ops_ref import copy_blocks_ref, write_kv_cache_ref


def check_write_inputs(key, value, key_cache, value_cache, slot_mapping) -> None:
    layout = "[num_tokens, num_kv_heads, head_dim]"
    checks.require_rank("key", key, 3, layout)
    checks.require_rank("value", value, 3, layout)
    checks.require_cache_pair(key_cache, value_cache)
    checks.require_rank("slot_mapping", slot_mapping, 1, "[num_tokens]")
    checks.require_dtype("slot_mapping", slot_mapping, (torch.int64,))
    checks.require_same_shape(key=key, value=value)
    checks.require_same_dtype(key=key, value=value, key_cache=key_cache)
    checks.require_same_device(key=key, value=value, key_cache=key_cache,
                               slot_mapping=slot_mapping)
    if tuple(key.shape[1:]) != tuple(key_cache.shape[2:]):
        raise ValueError(f"key is [num_tokens, num_kv_heads, head_dim] = {tuple(key.shape)} but "
                         f"key_cache holds [.., .., {key_cache.shape[2]}, {key_cache.shape[3]}]")
    if slot_mapping.shape[0] != key.shape[0]:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} slots for {key.shape[0]} tokens")


def check_slot_bounds(key_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """One device sync: an out-of-range slot would write outside the cache."""
    if slot_mapping.numel() == 0:
        return
    num_slots = key_cache.shape[0] * key_cache.shape[1]
    highest = int(slot_mapping.max())
    if highest >= num_slots:
        raise ValueError(f"slot_mapping holds slot {highest}, outside the cache's "
                         f"{key_cache.shape[0]} blocks x {key_cache.shape[1]} = {num_slots} slots")


def write_kv_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                   value_cache: torch.Tensor, slot_mapping: torch.Tensor,
                   backend: str = "auto", *, check_bounds: bool = True) -> None:
    """Write each token's K/V into its slot, in place.

    key / value [num_tokens, num_kv_heads, head_dim]; slot_mapping int64 [num_tokens] with
    slot = block_id * block_size + offset; a negative slot skips that token (padding).
    `check_bounds` range-checks the slots at the cost of one device sync; a caller that
    checked them on the host may pass False. Two tokens sharing a slot is a caller bug.
    """
    check_write_inputs(key, value, key_cache, value_cache, slot_mapping)
    chosen = resolve_backend(backend, key.device)
    if check_bounds:
        check_slot_bounds(key_cache, slot_mapping)
    if chosen == "torch":
        write_kv_cache_ref(key, value, key_cache, value_cache, slot_mapping)
        return
    from engine.kernels.cache_ops import write_kv_cache_triton

    write_kv_cache_triton(key, value, key_cache, value_cache, slot_mapping)


def check_copy_inputs(key_caches, value_caches, block_mapping) -> None:
    if not isinstance(key_caches, (list, tuple)) or not isinstance(value_caches, (list, tuple)):
        raise ValueError("key_caches and value_caches must be lists of per-layer caches")
    if len(key_caches) != len(value_caches):
        raise ValueError(f"{len(key_caches)} key caches but {len(value_caches)} value caches")
    for layer, (key_cache, value_cache) in enumerate(zip(key_caches, value_caches)):
        checks.require_cache_pair(key_cache, value_cache, where=f"[{layer}]")
    checks.require_block_mapping("block_mapping", block_mapping)
    if block_mapping.shape[0] == 0 or not key_caches:
        return
    mapping = block_mapping.cpu()
    src, dst = mapping[:, 0], mapping[:, 1]
    num_blocks = min(cache.shape[0] for cache in key_caches)
    low, high = int(mapping.min()), int(mapping.max())
    if low < 0 or high >= num_blocks:
        bad = low if low < 0 else high
        raise ValueError(f"block_mapping holds block id {bad}, outside the caches' 0..{num_blocks - 1}")
    # The kernel copies pairs in parallel: a block written twice, or read after being written,
    # would give an answer that depends on scheduling.
    if dst.unique().numel() != dst.numel():
        raise ValueError("block_mapping names a destination block more than once")
    if torch.isin(dst, src).any():
        raise ValueError("block_mapping uses a block as both source and destination")


def blocks_dense(cache: torch.Tensor) -> bool:
    """Whether each block is one contiguous run of memory, as the Triton copy needs."""
    return cache.shape[0] == 0 or cache[0].is_contiguous()


def copy_blocks(key_caches: list, value_caches: list, block_mapping: torch.Tensor,
                backend: str = "auto") -> None:
    """Copy whole blocks within each layer's pool (copy-on-write), for every layer, in place.

    block_mapping int64 [n, 2] of (src, dst) block ids; it may live on the host.
    """
    check_copy_inputs(key_caches, value_caches, block_mapping)
    if not key_caches:
        return
    chosen = resolve_backend(backend, key_caches[0].device)
    caches = list(key_caches) + list(value_caches)
    checks.require_same_device(**{f"key_caches[{i}]": c for i, c in enumerate(key_caches)})
    if chosen == "triton" and not all(blocks_dense(c) for c in caches):
        if backend == "triton":
            raise ValueError("copy_blocks with backend='triton' needs each block stored densely "
                             "(cache[i] contiguous); use backend='torch'")
        chosen = "torch"
    if chosen == "torch":
        copy_blocks_ref(key_caches, value_caches, block_mapping)
        return
    from engine.kernels.cache_ops import copy_blocks_triton

    copy_blocks_triton(key_caches, value_caches, block_mapping)
