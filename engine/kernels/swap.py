"""Swapping blocks between a GPU pool and a CPU pool (either direction), and the CPU pool itself.

A swap is a device copy, not compute, so it is plain torch: no kernel to write or test.
"""
from __future__ import annotations

import torch

from engine.kernels import checks


def allocate_cpu_cache(shape, dtype: torch.dtype, pin: bool | None = None) -> torch.Tensor:
    """A zeroed host cache; pinned (page-locked) by default when CUDA is present, so swaps
    can run asynchronously on the stream instead of staging through pageable memory."""
    if pin is None:
        pin = torch.cuda.is_available()
    return torch.zeros(tuple(shape), dtype=dtype, device="cpu", pin_memory=bool(pin))


def check_swap_inputs(src_cache, dst_cache, block_mapping) -> None:
    checks.require_rank("src_cache", src_cache, 4, "[num_blocks, block_size, num_kv_heads, head_dim]")
    checks.require_rank("dst_cache", dst_cache, 4, "[num_blocks, block_size, num_kv_heads, head_dim]")
    checks.require_same_dtype(src_cache=src_cache, dst_cache=dst_cache)
    if tuple(src_cache.shape[1:]) != tuple(dst_cache.shape[1:]):
        raise ValueError(f"src_cache blocks {tuple(src_cache.shape[1:])} differ from "
                         f"dst_cache blocks {tuple(dst_cache.shape[1:])}")
    checks.require_block_mapping("block_mapping", block_mapping)
    if block_mapping.shape[0] == 0:
        return
    mapping = block_mapping.cpu()
    for column, name, cache in ((0, "source", src_cache), (1, "destination", dst_cache)):
        low, high = int(mapping[:, column].min()), int(mapping[:, column].max())
        if low < 0 or high >= cache.shape[0]:
            bad = low if low < 0 else high
            raise ValueError(f"block_mapping {name} block {bad} is outside 0..{cache.shape[0] - 1}")
    if mapping[:, 1].unique().numel() != mapping.shape[0]:
        raise ValueError("block_mapping names a destination block more than once")


def contiguous_runs(pairs: list) -> list:
    """Group (src, dst) pairs into (src_start, dst_start, length) runs where both ids advance by
    one, so a swap of neighbouring blocks is one copy instead of one per block."""
    runs = []
    for src, dst in pairs:
        if runs and src == runs[-1][0] + runs[-1][2] and dst == runs[-1][1] + runs[-1][2]:
            runs[-1][2] += 1
        else:
            runs.append([src, dst, 1])
    return [tuple(run) for run in runs]


def swap_blocks(src_cache: torch.Tensor, dst_cache: torch.Tensor,
                block_mapping: torch.Tensor) -> None:
    """Copy blocks src_cache[src] -> dst_cache[dst] for each (src, dst) row of block_mapping.

    Across devices the copies are asynchronous when the host side is pinned: they are ordered
    on the current CUDA stream, so later kernels on that stream see them, but the host must
    synchronize before it reads a swapped-out block itself.
    """
    check_swap_inputs(src_cache, dst_cache, block_mapping)
    if block_mapping.shape[0] == 0:
        return
    if src_cache.device == dst_cache.device:
        mapping = block_mapping.to(src_cache.device, torch.int64)
        dst_cache.index_copy_(0, mapping[:, 1], src_cache.index_select(0, mapping[:, 0]))
        return
    host = src_cache if src_cache.device.type == "cpu" else dst_cache
    non_blocking = host.is_pinned()
    for src, dst, length in contiguous_runs(block_mapping.cpu().tolist()):
        dst_cache[dst:dst + length].copy_(src_cache[src:src + length], non_blocking=non_blocking)
