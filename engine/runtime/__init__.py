"""The real data plane: a decoder with a paged KV cache, its runner, and the engine.

Importing this package does not import torch; `records` (the replay schema) is torch-free.
The torch-backed classes load on first use.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "Engine": "engine.runtime.engine",
    "ModelRunner": "engine.runtime.runner",
    "Decoder": "engine.runtime.model",
    "build_decoder": "engine.runtime.model",
    "PagedKVCache": "engine.runtime.cache",
    "kv_pool_blocks_that_fit": "engine.runtime.cache",
    "SamplingParams": "engine.runtime.sampler",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine.runtime' has no attribute {name!r}")
