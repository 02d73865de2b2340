"""Prefix-cache keys from a real run's token ids: two requests share a cached block exactly when their token ids
agree up to that full block's end, as vLLM's own prefix cache keys its blocks (a hash chained over full blocks).

Key i is made from key i - 1's digest and block i's token ids (little-endian int64) by BLAKE2b: the same on every
machine, Python and hash seed. It is kept to 63 bits (the control plane's keys are plain integers); two different
prefixes collide with a probability of about 2^-63 a pair. Only the prompt is keyed: the tokens a run generated
are not recorded (a bench workload's output_tok_ids are its generator's, and the bench pinned only their count),
so no later prompt can be known to repeat them, and a request's output blocks stay its own.
"""
from __future__ import annotations

import hashlib

import numpy as np

DIGEST_BYTES = 16  # chained; a key keeps 63 bits of it


def prompt_block_keys(token_ids: np.ndarray, block_size: int) -> tuple[int, ...]:
    """Keys of the full blocks of a prompt's token ids (a trailing partial block has none)."""
    ids = np.ascontiguousarray(token_ids, dtype="<i8")
    keys, digest = [], b""
    for end in range(block_size, len(ids) + 1, block_size):
        digest = hashlib.blake2b(digest + ids[end - block_size:end].tobytes(), digest_size=DIGEST_BYTES).digest()
        keys.append(int.from_bytes(digest[:8], "little") >> 1)
    return tuple(keys)
