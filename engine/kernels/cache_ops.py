"""Triton cache writes: new tokens' K/V into their slots, and block copies for copy-on-write.

Imported lazily (triton is optional), and only after TRITON_INTERPRET is settled.
Swapping between GPU and CPU pools is a plain device copy and lives in `swap.py`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

_COPY_CHUNK = 1024


@triton.jit
def _write_kv_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    stride_kn, stride_kh, stride_kd,
    stride_vn, stride_vh, stride_vd,
    stride_kcb, stride_kct, stride_kch, stride_kcd,
    stride_vcb, stride_vct, stride_vch, stride_vcd,
    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_P2: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    d = tl.arange(0, HEAD_P2)
    # A negative slot is a padding token: no lane is live, nothing is read or written.
    # (Spelled as a lane limit: the interpreter rejects `vector_mask & scalar_mask`.)
    mask = d < tl.where(slot >= 0, HEAD_DIM, 0)
    block_id = slot // BLOCK_SIZE
    row = slot % BLOCK_SIZE

    k = tl.load(key_ptr + token * stride_kn + head * stride_kh + d * stride_kd, mask=mask)
    k_dst = block_id * stride_kcb + row * stride_kct + head * stride_kch + d * stride_kcd
    tl.store(key_cache_ptr + k_dst, k, mask=mask)
    v = tl.load(value_ptr + token * stride_vn + head * stride_vh + d * stride_vd, mask=mask)
    v_dst = block_id * stride_vcb + row * stride_vct + head * stride_vch + d * stride_vcd
    tl.store(value_cache_ptr + v_dst, v, mask=mask)


@triton.jit
def _copy_blocks_kernel(
    key_cache_ptr, value_cache_ptr, block_mapping_ptr,
    stride_kb, stride_vb, stride_map,
    BLOCK_NUMEL: tl.constexpr, CHUNK: tl.constexpr,
):
    pair = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    src = tl.load(block_mapping_ptr + pair * stride_map).to(tl.int64)
    dst = tl.load(block_mapping_ptr + pair * stride_map + 1).to(tl.int64)
    # Each block is one dense run of BLOCK_NUMEL elements (checked by the caller).
    offsets = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offsets < BLOCK_NUMEL
    k = tl.load(key_cache_ptr + src * stride_kb + offsets, mask=mask)
    tl.store(key_cache_ptr + dst * stride_kb + offsets, k, mask=mask)
    v = tl.load(value_cache_ptr + src * stride_vb + offsets, mask=mask)
    tl.store(value_cache_ptr + dst * stride_vb + offsets, v, mask=mask)


def write_kv_cache_triton(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                          value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Launcher; inputs are assumed validated (see `cache.write_kv_cache`)."""
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    _write_kv_kernel[(num_tokens, num_kv_heads)](
        key, value, key_cache, value_cache, slot_mapping,
        *key.stride(), *value.stride(), *key_cache.stride(), *value_cache.stride(),
        BLOCK_SIZE=key_cache.shape[1], HEAD_DIM=head_dim,
        HEAD_P2=triton.next_power_of_2(head_dim),
    )


def copy_blocks_triton(key_caches: list, value_caches: list,
                       block_mapping: torch.Tensor) -> None:
    """Launcher; inputs are assumed validated (see `cache.copy_blocks`).

    Copy-on-write is rare, so one launch per layer is cheap enough and keeps the kernel free
    of pointer tables.
    """
    if block_mapping.shape[0] == 0:
        return
    for key_cache, value_cache in zip(key_caches, value_caches):
        mapping = block_mapping.to(key_cache.device, torch.int64).contiguous()
        block_numel = key_cache[0].numel()
        grid = (mapping.shape[0], triton.cdiv(block_numel, _COPY_CHUNK))
        _copy_blocks_kernel[grid](
            key_cache, value_cache, mapping,
            key_cache.stride(0), value_cache.stride(0), mapping.stride(0),
            BLOCK_NUMEL=block_numel, CHUNK=_COPY_CHUNK,
        )
