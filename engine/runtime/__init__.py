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

__all__ = sorted(_LAZY) + ["require_torch"]

# torch is pinned by hand so that an unpinned resolve never pulls a multi-GB CUDA build (pyproject.toml)
INSTALL_ENGINE = "install servesim[engine] (pip install torch==2.13.0 'servesim[engine]')"


def require_torch(command: str) -> None:
    """`command` runs the real engine: without torch, say how to get it, before anything runs, rather
    than fail on an import halfway through."""
    try:
        import torch  # noqa: F401
    except ImportError:
        from engine.errors import SpecError

        raise SpecError(command, "", f"needs the real engine, and torch is not installed: {INSTALL_ENGINE}") from None


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine.runtime' has no attribute {name!r}")
