"""What the kernel tests share: where they run, whether Triton can, and how close a kernel must land.

Import after `pytest.importorskip("torch")`: a machine without torch skips those tests cleanly."""
import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TRITON_RUNNABLE = DEVICE == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
needs_triton = pytest.mark.skipif(not TRITON_RUNNABLE, reason="needs CUDA or TRITON_INTERPRET=1")

# fp16/bf16 outputs are rounded from fp32 accumulators: a unit or so in the last place apart.
TOLERANCE = {
    torch.float32: dict(atol=2e-5, rtol=1e-4),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
}


def poisoned_pool(keys, values, block_size: int, num_blocks: int, max_blocks: int, dtype, gen):
    """Each sequence's K/V ([tokens, kv_heads, head_dim] each) scattered through a randomly permuted block
    table into a NaN-filled paged pool: (key_cache, value_cache, block_tables). Only slots inside a context
    hold numbers, and padding past a sequence's blocks is an id no cache holds, so a kernel that reads
    outside a context fails."""
    num_kv_heads, head_dim = keys[0].shape[1:] if keys else (1, 1)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.full(shape, float("nan"), dtype=dtype)
    value_cache = torch.full(shape, float("nan"), dtype=dtype)
    block_tables = torch.full((len(keys), max_blocks), 10**6, dtype=torch.int32)
    physical = torch.randperm(num_blocks, generator=gen).tolist()
    for seq, (seq_keys, seq_values) in enumerate(zip(keys, values)):
        context = len(seq_keys)
        for logical in range(-(-context // block_size)):
            block = physical.pop()
            block_tables[seq, logical] = block
            rows = slice(logical * block_size, min((logical + 1) * block_size, context))
            filled = rows.stop - rows.start
            key_cache[block, :filled] = seq_keys[rows]
            value_cache[block, :filled] = seq_values[rows]
    return key_cache, value_cache, block_tables
