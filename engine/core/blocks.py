"""KV block arithmetic shared by the control plane, the runtime and the cost models."""
from __future__ import annotations


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks of `block_size` slots that hold `num_tokens` tokens: the ceiling of the quotient."""
    return -(-num_tokens // block_size)
