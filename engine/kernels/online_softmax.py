"""The steps the paged decode and the varlen prefill kernels share, as Triton device functions:
gathering a tile of values through the block table, and one tile of the online softmax.

Both kernels walk a context in tiles of tokens with one running max and sum per query row (the
exp2 domain: scores come pre-multiplied by log2(e)); these are inlined into each kernel.
Imported lazily (triton is optional), and only after TRITON_INTERPRET is settled.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def softmax_tile(scores, running_max, running_sum):
    """One tile of an online softmax: the tile's unnormalized probabilities, the factor that rescales
    what was accumulated before it, and the new running max and sum. Every row must see a finite
    score by this tile (callers guarantee it), so no -inf - -inf arises."""
    new_max = tl.maximum(running_max, tl.max(scores, axis=1))
    rescale = tl.exp2(running_max - new_max)
    probs = tl.exp2(scores - new_max[:, None])
    return probs, rescale, new_max, running_sum * rescale + tl.sum(probs, axis=1)


@triton.jit
def load_value_tile(value_cache_ptr, block_id, row, kv_head, d, mask, stride_vb, stride_vt, stride_vh, stride_vd):
    """[tokens, head_dim] values of one kv head, each token's row found through its block id."""
    v_offsets = (block_id[:, None] * stride_vb + row[:, None] * stride_vt
                 + kv_head * stride_vh + d[None, :] * stride_vd)
    return tl.load(value_cache_ptr + v_offsets, mask=mask, other=0.0)
