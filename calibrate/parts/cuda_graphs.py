"""The batch sizes a CUDA-graph engine captures, and the size an iteration runs at.

vLLM 0.19 (its default FULL_AND_PIECEWISE mode) replays a captured graph for every iteration of at most the
largest capture size in tokens: a decode-only batch as one full graph, any other batch as piecewise graphs around
an eager attention. A graph runs at the smallest captured size that holds the batch, so the linear layers compute
padding rows up to it; attention reads only the real requests' KV, and logits are computed for the real requests
after the graph. Capture sizes (`VllmConfig._set_cudagraph_sizes`, vllm/config/vllm.py at 0.19.0): 1, 2, 4, every
multiple of 8 below 256, then every multiple of 16, up to min(2 x max_num_seqs, 512, max_num_batched_tokens).
"""
from __future__ import annotations

import bisect

LARGEST_CAPTURE = 512  # vLLM's max_cudagraph_capture_size cap


def vllm_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int | None) -> tuple[int, ...]:
    """The sizes vLLM captures for a scheduler of these limits (without speculative decoding)."""
    largest = min(2 * max_num_seqs, LARGEST_CAPTURE, max_num_batched_tokens or LARGEST_CAPTURE)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, LARGEST_CAPTURE + 1, 16)]
    return tuple(size for size in sizes if size <= largest)


def padded_tokens(num_tokens: int, sizes: tuple[int, ...]) -> int:
    """The tokens an iteration of num_tokens runs its linear layers on: the smallest captured size that holds
    them, or num_tokens itself beyond the largest (such an iteration runs eager)."""
    if not sizes or num_tokens > sizes[-1] or num_tokens <= 0:
        return num_tokens
    return sizes[bisect.bisect_left(sizes, num_tokens)]
