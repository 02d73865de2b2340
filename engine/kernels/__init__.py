"""Paged KV-cache kernels (Triton) and the torch references they are tested against.

Cache writes and block copies; paged decode attention (one pass, or flash-decoding); varlen
prefill attention (all of an iteration's prompts in one call); speculative decoding's rejection
sampling. See docs/kernels.md.

Triton is optional: the Triton modules are imported on first use, so this package imports on a
machine with torch alone, where backend="auto" runs the torch references.
backend="auto" runs Triton for CUDA tensors, or for any tensors when TRITON_INTERPRET=1.
"""
from engine.kernels.backend import resolve_backend, triton_available
from engine.kernels.cache import copy_blocks, write_kv_cache
from engine.kernels.cache_ops_ref import copy_blocks_ref, write_kv_cache_ref
from engine.kernels.decode import paged_attention_decode
from engine.kernels.paged_attention_ref import paged_attention_decode_ref
from engine.kernels.prefill import prefill_attention
from engine.kernels.rejection import rejection_sample, rejection_sample_greedy
from engine.kernels.rejection_ref import rejection_sample_greedy_ref, rejection_sample_ref
from engine.kernels.swap import allocate_cpu_cache, swap_blocks
from engine.kernels.varlen_prefill_ref import prefill_attention_ref

__all__ = [
    "allocate_cpu_cache",
    "copy_blocks",
    "copy_blocks_ref",
    "paged_attention_decode",
    "paged_attention_decode_ref",
    "prefill_attention",
    "prefill_attention_ref",
    "rejection_sample",
    "rejection_sample_greedy",
    "rejection_sample_greedy_ref",
    "rejection_sample_ref",
    "resolve_backend",
    "swap_blocks",
    "triton_available",
    "write_kv_cache",
    "write_kv_cache_ref",
]
