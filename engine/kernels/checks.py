"""Input validation shared by the kernels and their references.

Every check runs before anything is launched: a Triton kernel fed a wrong shape or an
out-of-range block id does not fail, it reads or writes someone else's memory.
"""
from __future__ import annotations

import numbers

import torch

CACHE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def require_tensor(name: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")


def require_rank(name: str, tensor: torch.Tensor, rank: int, layout: str) -> None:
    require_tensor(name, tensor)
    if tensor.dim() != rank:
        raise ValueError(f"{name} must have shape {layout} ({rank} dims), got {tuple(tensor.shape)}")


def require_dtype(name: str, tensor: torch.Tensor, dtypes: tuple) -> None:
    if tensor.dtype not in dtypes:
        valid = ", ".join(str(d) for d in dtypes)
        raise ValueError(f"{name} must have dtype {valid}, got {tensor.dtype}")


def require_same_dtype(**tensors: torch.Tensor) -> None:
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{name}={d}" for name, d in dtypes.items())
        raise ValueError(f"mismatched dtypes: {listed}")


def require_same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {d}" for name, d in devices.items())
        raise ValueError(f"mismatched devices: {listed}")


def require_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name}={s}" for name, s in shapes.items())
        raise ValueError(f"mismatched shapes: {listed}")


def require_scale(scale) -> float:
    if isinstance(scale, (bool, torch.Tensor)) or not isinstance(scale, numbers.Real):
        raise ValueError(f"scale must be a Python float, got {type(scale).__name__}")
    value = float(scale)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"scale must be finite, got {value}")
    return value


def require_block_mapping(name: str, mapping: torch.Tensor) -> None:
    require_rank(name, mapping, 2, "[n, 2] of (src, dst)")
    if mapping.shape[1] != 2:
        raise ValueError(f"{name} must have shape [n, 2] of (src, dst), got {tuple(mapping.shape)}")
    require_dtype(name, mapping, (torch.int64, torch.int32))


def require_cache_pair(key_cache: torch.Tensor, value_cache: torch.Tensor, where: str = "") -> None:
    """K and V caches of one layer: [num_blocks, block_size, num_kv_heads, head_dim]."""
    layout = "[num_blocks, block_size, num_kv_heads, head_dim]"
    require_rank(f"key_cache{where}", key_cache, 4, layout)
    require_rank(f"value_cache{where}", value_cache, 4, layout)
    require_dtype(f"key_cache{where}", key_cache, CACHE_DTYPES)
    require_same_shape(**{f"key_cache{where}": key_cache, f"value_cache{where}": value_cache})
    require_same_dtype(**{f"key_cache{where}": key_cache, f"value_cache{where}": value_cache})
    require_same_device(**{f"key_cache{where}": key_cache, f"value_cache{where}": value_cache})
