"""How much KV cache a deployment has, per GPU: the paper-era memory rule, or an explicit size. A config's sizing
from its model, GPU and number formats, not a cost: the simulator reads it, calibration never does."""
from __future__ import annotations

import math
from dataclasses import dataclass

from calibrate.hardware.hardware import GIB, HardwareSpec
from calibrate.hardware.precision import Precision
from calibrate.work.expert_parallel import ExpertParallel
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


@dataclass(frozen=True)
class ProposerMemory:
    """A speculating system's proposer on each GPU (sim/experiment/proposer_memory.py): its weights, and its KV
    bytes in each block of the pool."""

    weight_bytes: int
    block_bytes: int


def as_precision(precision: Precision | int) -> Precision:
    """A Precision, or the legacy dtype_bytes integer (every byte count that many)."""
    return precision if isinstance(precision, Precision) else Precision.uniform(precision)


def block_bytes(model: ModelSpec, block_size: int, tp: int, precision: Precision | int) -> int:
    """One KV block's bytes per GPU, at the KV cache's format."""
    return model.kv_bytes_per_token(as_precision(precision).kv_bytes) * block_size // tp


def weight_bytes_per_gpu(model: ModelSpec, precision: Precision | int, tp: int,
                         expert_parallel: ExpertParallel | None = None) -> int:
    """The weights one GPU holds, at their formats: 1/tp of all of them; under expert parallelism 1/tp of the rest
    (attention, routers, norms, embedding and head: every data-parallel rank holds its own copy, split over its
    GPUs) and its num_experts / EP experts whole."""
    precision = as_precision(precision)
    total = precision.weight_memory_bytes(model)
    if expert_parallel is None or not model.is_moe:
        return total // tp
    experts = math.ceil(model.num_layers * model.num_experts * model.expert_params() * precision.weight_bytes)
    return (total - experts) // tp + experts // expert_parallel.degree


def max_activation_bytes(model: ModelSpec, max_num_batched_tokens: int, tp: int, dtype_bytes: int) -> int:
    """Peak activation of one forward, as the authors' memory analyzer estimated it."""
    h = model.hidden_size
    qkv = (model.q_dim + 2 * model.kv_dim) // tp
    ffn = model.ffn_dim // tp
    per_token = max(2 * (max(qkv, ffn) + h), 2 * model.vocab_size)
    return per_token * max_num_batched_tokens * dtype_bytes


def kv_cache_bytes_by_rule(model: ModelSpec, hw: HardwareSpec, tp: int, precision: Precision | int,
                           max_num_batched_tokens: int = 2560, utilization: float = 0.95,
                           workspace_gib: float = 1.0, expert_parallel: ExpertParallel | None = None) -> int:
    """0.95 x memory - weights - peak activations - 1 GiB workspace, per GPU (paper-era code); the weights at
    their format (weight_bytes_per_gpu: under expert parallelism a GPU's own experts), the activations 16-bit."""
    precision = as_precision(precision)
    weights = weight_bytes_per_gpu(model, precision, tp, expert_parallel)
    activations = max_activation_bytes(model, max_num_batched_tokens, tp, precision.activation_bytes)
    return int(utilization * hw.memory_bytes - weights - activations - workspace_gib * GIB)


def kv_pool(model: ModelSpec, hw: HardwareSpec, tp: int, precision: Precision | int, block_size: int,
            kv_cache_gib: float | None, swap_space_gib: float, expert_parallel: ExpertParallel | None = None,
            proposer: ProposerMemory | None = None) -> KVPool:
    """KV cache per GPU; kv_cache_gib (per GPU: Table 1's total / tp) overrides the rule. Blocks at the KV
    cache's format: an FP8 cache holds twice the blocks of a 16-bit one in the same bytes. Under expert
    parallelism (`expert_parallel`) every data-parallel rank keeps its own pool beside its share of the experts.
    proposer (speculative decoding with a draft model or an EAGLE or MTP head, sim/experiment/proposer_memory.py):
    as vLLM sizes it, the proposer's weights come out of the rule's memory too, and each block holds the
    proposer's KV of its tokens beside the target's, so the pool has fewer blocks."""
    per_block = block_bytes(model, block_size, tp, precision)
    if proposer is not None:
        per_block += proposer.block_bytes
    if kv_cache_gib is not None:
        kv_bytes = int(kv_cache_gib * GIB)
    else:
        kv_bytes = kv_cache_bytes_by_rule(model, hw, tp, precision, expert_parallel=expert_parallel)
        if proposer is not None:
            kv_bytes -= proposer.weight_bytes
    return KVPool(max(kv_bytes, 0) // per_block, int(swap_space_gib * GIB) // per_block, block_size, per_block)
