"""How much KV cache a deployment has: the paper-era memory rule, or an explicit size."""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.hardware import GIB, HardwareSpec
from engine.core.spec import ModelSpec


@dataclass(frozen=True)
class KVPool:
    num_gpu_blocks: int
    num_cpu_blocks: int
    block_size: int
    block_bytes: int  # per GPU (a tensor-parallel shard)

    @property
    def num_slots(self) -> int:
        return self.num_gpu_blocks * self.block_size


def block_bytes(model: ModelSpec, block_size: int, tp: int, dtype_bytes: int) -> int:
    return model.kv_bytes_per_token(dtype_bytes) * block_size // tp


def max_activation_bytes(model: ModelSpec, max_num_batched_tokens: int, tp: int, dtype_bytes: int) -> int:
    """Peak activation of one forward, as the authors' memory analyzer estimated it."""
    h = model.hidden_size
    qkv = (h + 2 * model.kv_dim) // tp
    ffn = model.ffn_dim // tp
    per_token = max(2 * (max(qkv, ffn) + h), 2 * model.vocab_size)
    return per_token * max_num_batched_tokens * dtype_bytes


def kv_cache_bytes_by_rule(model: ModelSpec, hw: HardwareSpec, tp: int, dtype_bytes: int,
                           max_num_batched_tokens: int = 2560, utilization: float = 0.95,
                           workspace_gib: float = 1.0) -> int:
    """0.95 x memory - weights - peak activations - 1 GiB workspace, per GPU (paper-era code)."""
    weights = model.weight_bytes(dtype_bytes) // tp
    activations = max_activation_bytes(model, max_num_batched_tokens, tp, dtype_bytes)
    return int(utilization * hw.memory_bytes - weights - activations - workspace_gib * GIB)


def kv_pool(model: ModelSpec, hw: HardwareSpec, tp: int, dtype_bytes: int, block_size: int,
            kv_cache_gib: float | None, swap_space_gib: float) -> KVPool:
    """KV cache per GPU; kv_cache_gib (per GPU: Table 1's total / tp) overrides the rule."""
    per_block = block_bytes(model, block_size, tp, dtype_bytes)
    if kv_cache_gib is not None:
        kv_bytes = int(kv_cache_gib * GIB)
    else:
        kv_bytes = kv_cache_bytes_by_rule(model, hw, tp, dtype_bytes)
    return KVPool(max(kv_bytes, 0) // per_block, int(swap_space_gib * GIB) // per_block, block_size, per_block)
