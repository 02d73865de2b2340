"""The real engine's side of prefix caching: block keys from token ids, and token ids from a workload's
token identities (a replayed trace's segments), so that equal identities are equal tokens.

Key i chains key i - 1 with the token ids of block i (Python's hash of a tuple of ints: the same on every
machine and run), so two prompts' keys agree on exactly the leading full blocks whose tokens agree. Only
the prompt is keyed: the engine does not know the tokens it will generate (engine.core.block_manager keys
the blocks it has when their sequence lets go of them only where the request carries keys for them).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def token_block_keys(tokens: list[int], block_size: int) -> tuple[int, ...]:
    """Keys of the full blocks of `tokens`."""
    keys, key = [], 0
    for end in range(block_size, len(tokens) + 1, block_size):
        key = hash((key, tuple(tokens[end - block_size:end])))
        keys.append(key)
    return tuple(keys)


def segment_token_ids(segments: Iterable[tuple[int, int, int]], vocab_size: int, seed: int,
                      num_tokens: int) -> list[int]:
    """The first num_tokens token ids of a stream of segments (segment id, first token, tokens): position p
    of segment s is the same id wherever it appears (drawn from a Generator seeded with the engine's seed
    and s)."""
    ids: list[int] = []
    for seg_id, start, length in segments:
        if len(ids) >= num_tokens:
            break
        rng = np.random.default_rng([seed, 7, seg_id & 0xFFFFFFFF, (seg_id >> 32) & 0xFFFFFFFF])
        ids.extend(rng.integers(0, vocab_size, start + length)[start:].tolist())
    return ids[:num_tokens]
